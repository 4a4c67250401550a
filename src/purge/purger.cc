#include "purge/purger.h"

#include <errno.h>

#include "core/options.h"

namespace lazymalloc {

namespace {
constexpr uint64_t kMs = 1000000;
}

int Purger::advise_ranges(const PurgeBatch* b, Advice advice, unsigned* calls) {
  unsigned n = b->nranges;
  unsigned made = 0;
  if (n > 1 && !vector_unsupported()) {
    long r = platform_->advise_vector(platform_->ctx, b->ranges, n, advice);
    ++made;
    size_t want = 0;
    for (unsigned i = 0; i < n; ++i) want += b->ranges[i].len;
    if (r >= 0 && size_t(r) == want) {
      *calls = made;
      return 0;
    }
    // No such call (ENOSYS), advice not accepted there (EINVAL), not
    // allowed (EPERM), no pidfd (EBADF): madvise from now on.  Any other
    // failure, or a partial result, is finished range by range this time.
    if (r == -ENOSYS || r == -EINVAL || r == -EPERM || r == -EBADF) {
      vector_refused_.store(true, std::memory_order_relaxed);
      stats_->set(Stat::purge_vector_unsupported, 1);
    }
  }
  int rc = 0;
  for (unsigned i = 0; i < n; ++i) {
    ++made;
    int e = platform_->advise(platform_->ctx, b->ranges[i].addr, b->ranges[i].len, advice);
    if (e) {
      rc = e;
      if (e == EINVAL && advice == Advice::kFree) break;  // the caller retries with DONTNEED
    }
  }
  *calls = made;
  return rc;
}

int Purger::advise(PurgeBatch* b, bool dontneed, bool* clean_out, uint64_t* ns) {
  bool clean = dontneed || free_unsupported();
  uint64_t t0 = platform_->now_ns(platform_->ctx);
  unsigned calls = 0;
  int rc = advise_ranges(b, clean ? Advice::kDontNeed : Advice::kFree, &calls);
  if (rc == EINVAL && !clean) {
    // Kernels before 4.5 (and some emulators) do not know MADV_FREE: use
    // MADV_DONTNEED for good, on the whole batch again (ranges already given
    // MADV_FREE must read as zero once settled CLEAN).
    free_unsupported_.store(true, std::memory_order_relaxed);
    stats_->set(Stat::purge_free_unsupported, 1);
    clean = true;
    unsigned more = 0;
    rc = advise_ranges(b, Advice::kDontNeed, &more);
    calls += more;
  }
  uint64_t took = platform_->now_ns(platform_->ctx) - t0;
  stats_->add(Stat::purge_ns, took);
  if (ns) *ns = took;
  stats_->add(clean ? Stat::purge_dontneed_calls : Stat::purge_lazy_calls, calls);
  if (rc != 0) {
    // Settled as still RETAINED (the whole batch): conservative, since
    // RETAINED memory is never assumed to be zero.  Retried on a later pass.
    stats_->add(Stat::purge_failures, 1);
  } else {
    stats_->add(clean ? Stat::purge_dontneed_bytes : Stat::purge_lazy_bytes, b->bytes);
  }
  *clean_out = clean;
  return rc;
}

bool Purger::advise_batch(PurgeBatch* b, bool dontneed) {
  bool clean = false;
  int rc = advise(b, dontneed, &clean);
  backend_->purge_finish(b, clean, rc != 0);
  return rc == 0;
}

bool Purger::pressure_recent(uint64_t now) const {
  uint64_t last = last_pressure_ns_.load(std::memory_order_relaxed);
  return last && now - last < uint64_t(option(Opt::decay_ms)) * kMs;
}

uint64_t Purger::huge_retain_budget(uint64_t now) const {
  int64_t policy = option(Opt::purge);
  if (policy == kPurgeNever) return ~uint64_t(0);
  if (policy == kPurgeEager || pressure_recent(now)) return 0;
  uint64_t soft = uint64_t(option(Opt::memory_limit));
  if (soft && footprint() > soft) return 0;
  return uint64_t(option(Opt::huge_retain));
}

bool Purger::release_dontneed(uint64_t now) const {
  return decay_uses_dontneed() || pressure_recent(now) || option(Opt::memory_limit) != 0;
}

bool Purger::decay_uses_dontneed() const {
  int64_t advice = option(Opt::purge_advice);
  if (advice == kAdviceDontneed) return true;
  return advice == kAdviceAuto && pressure_.cgroup_limited();
}

size_t Purger::decay_pass(uint64_t now) {
  int64_t policy = option(Opt::purge);
  if (policy == kPurgeNever) return 0;
  PurgeSelect sel{};
  sel.now_ns = now;
  if (policy == kPurgeEager) {
    sel.min_age_free_ns = sel.min_age_partial_ns = 0;
  } else {
    sel.min_age_free_ns = uint64_t(option(Opt::decay_ms)) * kMs;
    sel.min_age_partial_ns = uint64_t(option(Opt::partial_decay_ms)) * kMs;
    // Hysteresis while the process is busy; an idle process gets back to
    // its live size after plain decay.
    uint64_t last = backend_->last_activity_ns();
    bool idle = now > last && now - last >= sel.min_age_free_ns;
    sel.hysteresis = policy == kPurgeAdaptive && !idle;
  }
  sel.max_bytes = size_t(option(Opt::purge_batch));
  sel.max_range = sel.max_bytes;
  sel.include_lazy = false;
  bool dontneed = decay_uses_dontneed();
  LockGuard g(lock_);
  stats_->add(Stat::purge_passes, 1);
  size_t total = 0;
  PurgeBatch batch;
  for (;;) {
    backend_->purge_collect(sel, &batch);
    if (batch.nitems == 0) break;
    size_t bytes = batch.bytes;
    // A refused batch is back on the dirty list: retry on the next pass.
    // An empty one means nothing more can be taken now.
    if (!advise_batch(&batch, dontneed) || bytes == 0) break;
    total += bytes;
  }
  return total;
}

size_t Purger::purge_all(bool dontneed) {
  PurgeSelect sel{};
  sel.now_ns = platform_->now_ns(platform_->ctx);
  sel.max_bytes = size_t(option(Opt::purge_batch));
  sel.max_range = sel.max_bytes;
  sel.include_lazy = dontneed;
  LockGuard g(lock_);
  stats_->add(Stat::purge_passes, 1);
  size_t total = 0;
  PurgeCursor cursor;
  PurgeBatch batch;
  do {
    backend_->purge_collect_all(sel, &cursor, &batch);
    if (batch.nitems == 0) continue;
    size_t bytes = batch.bytes;
    if (advise_batch(&batch, dontneed)) total += bytes;
  } while (cursor.arena);
  if (discard_) total += discard_->discard(~uint64_t(0), sel.max_range);
  return total;
}

size_t Purger::relieve(uint64_t bytes) {
  if (option(Opt::purge) == kPurgeNever || bytes == 0) return 0;
  PurgeSelect sel{};
  sel.now_ns = platform_->now_ns(platform_->ctx);
  sel.max_range = size_t(option(Opt::purge_batch));
  LockGuard g(lock_);
  stats_->add(Stat::purge_passes, 1);
  uint64_t total = 0;
  PurgeBatch batch;
  // Oldest RETAINED memory first (the dirty list, ages ignored)...
  while (total < bytes) {
    uint64_t left = bytes - total;
    sel.max_bytes = size_t(left < sel.max_range ? left : sel.max_range);
    backend_->purge_collect(sel, &batch);
    if (batch.nitems == 0) break;
    size_t got = batch.bytes;
    if (!advise_batch(&batch, true) || got == 0) break;
    total += got;
  }
  // ...then LAZY memory, which the kernel could take but has not.
  sel.include_lazy = true;
  PurgeCursor cursor;
  while (total < bytes) {
    uint64_t left = bytes - total;
    sel.max_bytes = size_t(left < sel.max_range ? left : sel.max_range);
    backend_->purge_collect_all(sel, &cursor, &batch);
    if (batch.nitems) {
      size_t got = batch.bytes;
      if (advise_batch(&batch, true)) total += got;
    }
    if (!cursor.arena) break;
  }
  // ...then unlocked discardable blocks, least recently unlocked first.
  if (discard_ && total < bytes) total += discard_->discard(bytes - total, sel.max_range);
  stats_->add(Stat::pressure_purged_bytes, total);
  last_pressure_ns_.store(sel.now_ns ? sel.now_ns : 1, std::memory_order_relaxed);
  return size_t(total);
}

void Purger::tick(uint64_t now) {
  if (heap_collector_) heap_collector_(now, uint64_t(option(Opt::decay_ms)) * kMs);
  uint64_t soft = uint64_t(option(Opt::memory_limit));
  PressureRequest req = pressure_.check(now, soft ? footprint() : 0, soft);
  if (req.bytes) relieve(req.bytes);
  discard_excess();
  decay_pass(now);
}

size_t Purger::discard_excess() {
  uint64_t limit = uint64_t(option(Opt::discardable_limit));
  if (!discard_ || !limit) return 0;
  return discard_->discard_down_to(limit, size_t(option(Opt::purge_batch)));
}

void Purger::after_release(uint64_t now, bool background_running) {
  int64_t policy = option(Opt::purge);
  if (policy == kPurgeNever) return;
  // The soft limit holds synchronously: free() gives back the excess.
  if (uint64_t soft = uint64_t(option(Opt::memory_limit))) {
    uint64_t held = footprint();
    if (held > soft) {
      stats_->add(Stat::pressure_events_limit, 1);
      relieve(held - soft);
    }
  }
  if (policy != kPurgeEager) {
    if (background_running) return;
    // No background thread: decay inline, at most once per interval.
    uint64_t interval = uint64_t(option(Opt::background_interval_ms)) * kMs;
    uint64_t last = last_inline_ns_.load(std::memory_order_relaxed);
    if (now - last < interval) return;
    if (!last_inline_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
    stats_->add(Stat::inline_purges, 1);
    discard_excess();
  }
  decay_pass(now);
}

bool BackgroundPurger::ensure_started(Purger* purger, const Platform* platform, Stats* stats) {
  uint32_t s = state_.load(std::memory_order_acquire);
  if (s == kRunning) return true;
  if (s != kNone || !option(Opt::background)) return false;
  if (!state_.compare_exchange_strong(s, kStarting, std::memory_order_acq_rel)) return false;
  purger_ = purger;
  platform_ = platform;
  stats_ = stats;
  if (!platform->start_thread(platform->ctx, &BackgroundPurger::main, this)) {
    // Degrade to inline purging (after_release with background_running
    // false) for the life of the process (a fork child tries again).
    stats->add(Stat::background_start_failures, 1);
    state_.store(kFailed, std::memory_order_release);
    return false;
  }
  state_.store(kRunning, std::memory_order_release);
  return true;
}

bool BackgroundPurger::last_thread() const {
  char text[2048];
  if (platform_->read_file(platform_->ctx, "/proc/self/status", text, sizeof text) <= 0) return false;
  uint64_t live = 0;
  return parse_status_live_threads(text, &live) && live == 1;
}

void* BackgroundPurger::main(void* arg) {
  auto* self = static_cast<BackgroundPurger*>(arg);
  self->stats_->add(Stat::background_threads, 1);
  self->purger_->init_pressure();
  for (;;) {
    int64_t interval = option(Opt::background_interval_ms) * int64_t(kMs);
    const Platform* p = self->platform_;
    p->sleep(p->ctx, interval);
    self->stats_->add(Stat::background_wakeups, 1);
    // A process whose last thread of its own ended with pthread_exit() ends
    // when no thread is left: ours must not keep it alive.  Returning here
    // makes this the last thread to exit, so the process exits with status 0
    // as POSIX prescribes.
    if (self->last_thread()) {
      self->stats_->sub(Stat::background_threads, 1);
      self->state_.store(kNone, std::memory_order_release);
      return nullptr;
    }
    self->purger_->tick(p->now_ns(p->ctx));
  }
}

}  // namespace lazymalloc
