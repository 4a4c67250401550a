#include "purge/purger.h"

#include <errno.h>

#include "core/options.h"

namespace lazymalloc {

namespace {
constexpr uint64_t kMs = 1000000;
}

bool Purger::advise_batch(PurgeBatch* b, bool dontneed) {
  bool clean = dontneed || free_unsupported();
  bool failed = false;
  uint64_t t0 = platform_->now_ns(platform_->ctx);
  for (unsigned i = 0; i < b->nranges; ++i) {
    PurgeRange& r = b->ranges[i];
    int rc = platform_->advise(platform_->ctx, r.addr, r.len, clean ? Advice::kDontNeed : Advice::kFree);
    if (rc == EINVAL && !clean) {
      // Kernels before 4.5 (and some emulators) do not know MADV_FREE: fall
      // back to MADV_DONTNEED for good.  Ranges already given MADV_FREE are
      // settled as CLEAN too, which is safe: they are re-zeroed on reuse
      // where it matters (calloc) and otherwise merely counted as clean.
      free_unsupported_.store(true, std::memory_order_relaxed);
      stats_->set(Stat::purge_free_unsupported, 1);
      clean = true;
      for (unsigned j = 0; j < i; ++j) {
        platform_->advise(platform_->ctx, b->ranges[j].addr, b->ranges[j].len, Advice::kDontNeed);
      }
      rc = platform_->advise(platform_->ctx, r.addr, r.len, Advice::kDontNeed);
    }
    if (rc != 0) {
      failed = true;
      stats_->add(Stat::purge_failures, 1);
      continue;
    }
    stats_->add(clean ? Stat::purge_dontneed_calls : Stat::purge_lazy_calls, 1);
    stats_->add(clean ? Stat::purge_dontneed_bytes : Stat::purge_lazy_bytes, r.len);
  }
  stats_->add(Stat::purge_ns, platform_->now_ns(platform_->ctx) - t0);
  // A failed range is settled with the others as still RETAINED (failed ==
  // true keeps the whole batch's books as before): conservative, since
  // RETAINED memory is never assumed to be zero.
  backend_->purge_finish(b, clean, failed);
  return !failed;
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
  }
  sel.max_bytes = size_t(option(Opt::purge_batch));
  sel.max_range = sel.max_bytes;
  sel.include_lazy = false;
  bool dontneed = option(Opt::purge_advice) == kAdviceDontneed;
  LockGuard g(lock_);
  stats_->add(Stat::purge_passes, 1);
  size_t total = 0;
  PurgeBatch batch;
  for (;;) {
    backend_->purge_collect(sel, &batch);
    if (batch.nitems == 0) break;
    size_t bytes = batch.bytes;
    // A refused batch is back on the dirty list: retry on the next pass.
    if (!advise_batch(&batch, dontneed)) break;
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
  return total;
}

void Purger::after_release(uint64_t now, bool background_running) {
  int64_t policy = option(Opt::purge);
  if (policy == kPurgeNever) return;
  if (policy != kPurgeEager) {
    if (background_running) return;
    // No background thread: decay inline, at most once per interval.
    uint64_t interval = uint64_t(option(Opt::background_interval_ms)) * kMs;
    uint64_t last = last_inline_ns_.load(std::memory_order_relaxed);
    if (now - last < interval) return;
    if (!last_inline_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
    stats_->add(Stat::inline_purges, 1);
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
  if (!pal::start_thread(&BackgroundPurger::main, this)) {
    // Degrade to inline purging (after_release with background_running false).
    state_.store(kFailed, std::memory_order_release);
    return false;
  }
  state_.store(kRunning, std::memory_order_release);
  return true;
}

void* BackgroundPurger::main(void* arg) {
  auto* self = static_cast<BackgroundPurger*>(arg);
  self->stats_->add(Stat::background_threads, 1);
  for (;;) {
    int64_t interval = option(Opt::background_interval_ms) * int64_t(kMs);
    pal::futex_wait(&self->wake_, 0, interval);
    self->stats_->add(Stat::background_wakeups, 1);
    self->purger_->decay_pass(self->platform_->now_ns(self->platform_->ctx));
  }
  return nullptr;
}

}  // namespace lazymalloc
