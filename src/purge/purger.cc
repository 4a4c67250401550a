#include "purge/purger.h"

#include "core/options.h"

namespace lazymalloc {

namespace {
constexpr uint64_t kMs = 1000000;
}

bool Purger::advise_batch(PurgeBatch* b, bool dontneed) {
  bool clean = false;
  int rc = adviser_.advise(b->ranges, b->nranges, b->bytes, dontneed, &clean);
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

namespace {

// The decay selection of `policy` at `now`.  `deadline`: for next_decay_ns
// (hysteresis as the policy says, until the process turns idle); else for a
// pass (hysteresis only while the process is busy).
PurgeSelect decay_select(int64_t policy, uint64_t now, uint64_t last_activity, bool deadline) {
  PurgeSelect sel{};
  sel.now_ns = now;
  if (policy != kPurgeEager) {
    sel.min_age_free_ns = uint64_t(option(Opt::decay_ms)) * kMs;
    sel.min_age_partial_ns = uint64_t(option(Opt::partial_decay_ms)) * kMs;
    // Hysteresis while the process is busy; an idle process gets back to
    // its live size after plain decay.
    sel.idle_ns = last_activity + sel.min_age_free_ns;
    bool idle = now > last_activity && now - last_activity >= sel.min_age_free_ns;
    sel.hysteresis = policy == kPurgeAdaptive && (deadline || !idle);
  }
  return sel;
}

// The same for the lazy stage.
PurgeSelect lazy_select(int64_t policy, uint64_t now, uint64_t last_activity, bool deadline) {
  PurgeSelect sel{};
  sel.now_ns = now;
  sel.lazy_stage = true;
  sel.min_age_lazy_ns = uint64_t(option(Opt::lazy_decay_ms)) * kMs;
  uint64_t idle_after = Purger::kLazyIdleFactor * sel.min_age_lazy_ns;
  sel.idle_ns = last_activity + idle_after;
  bool idle = now > last_activity && now - last_activity >= idle_after;
  sel.hysteresis = policy == kPurgeAdaptive && (deadline || !idle);
  return sel;
}

}  // namespace

size_t Purger::decay_pass(uint64_t now) {
  int64_t policy = option(Opt::purge);
  if (policy == kPurgeNever) return 0;
  PurgeSelect sel = decay_select(policy, now, backend_->last_activity_ns(), false);
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
  purge_metadata(meta_keep(backend_->span_records()));
  return total;
}

size_t Purger::purge_metadata(size_t keep) {
  size_t total = 0;
  MetaPurge p;
  for (;;) {
    backend_->meta_purge_collect(keep, &p);
    if (p.nranges == 0) break;
    bool clean = false;
    int rc = adviser_.advise(p.ranges, p.nranges, p.bytes, true, &clean);
    // Purged pages are handed out again as zero-filled records.
    bool ok = rc == 0 && clean;
    backend_->meta_purge_finish(p, ok);
    if (!ok) break;
    total += p.bytes;
  }
  return total;
}

size_t Purger::lazy_pass(uint64_t now) {
  int64_t policy = option(Opt::purge);
  if (policy == kPurgeNever) return 0;
  PurgeSelect sel = lazy_select(policy, now, backend_->last_activity_ns(), false);
  sel.max_bytes = size_t(option(Opt::purge_batch));
  sel.max_range = sel.max_bytes;
  LockGuard g(lock_);
  size_t total = 0;
  PurgeBatch batch;
  for (;;) {
    backend_->purge_collect_lazy(sel, &batch);
    if (batch.nitems == 0) break;
    size_t bytes = batch.bytes;
    if (!advise_batch(&batch, true) || bytes == 0) break;
    total += bytes;
  }
  if (total) {
    stats_->add(Stat::purge_passes, 1);
    stats_->add(Stat::lazy_decay_bytes, total);
  }
  return total;
}

size_t Purger::purge_all(bool dontneed) {
  PurgeSelect sel{};
  sel.now_ns = platform_->now_ns(platform_->ctx);
  sel.max_bytes = size_t(option(Opt::purge_batch));
  sel.max_range = sel.max_bytes;
  sel.include_lazy = dontneed;
  size_t total = 0;
  {
    LockGuard g(lock_);
    stats_->add(Stat::purge_passes, 1);
    PurgeCursor cursor;
    PurgeBatch batch;
    do {
      backend_->purge_collect_all(sel, &cursor, &batch);
      if (batch.nitems == 0) continue;
      size_t bytes = batch.bytes;
      if (advise_batch(&batch, dontneed)) total += bytes;
    } while (cursor.arena);
    purge_metadata(0);
    if (discard_) total += discard_->discard(~uint64_t(0), sel.max_range);
  }
  // LAZY memory now waits for the lazy stage (no lock held: this may start
  // the thread).
  BackgroundPurger* bg = background_.load(std::memory_order_acquire);
  if (!dontneed && bg && bg->ensure_started(this, platform_, stats_)) {
    wakeup_.poke(platform_, sel.now_ns + uint64_t(option(Opt::lazy_decay_ms)) * kMs);
  }
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

namespace {
bool checks_wanted() {
  return option(Opt::pressure) || option(Opt::memory_limit) || option(Opt::discardable_limit);
}
}  // namespace

uint64_t Purger::held_free() const {
  MemoryState m = backend_->memory_state();
  uint64_t held = option(Opt::purge) == kPurgeNever ? 0 : m.retained + m.lazy;
  if (discard_) held += discard_->live_bytes();
  return held;
}

uint64_t Purger::pressure_interval_ns(uint64_t held) const {
  uint64_t interval = uint64_t(option(Opt::pressure_interval_ms)) * kMs;
  uint64_t full = uint64_t(option(Opt::pressure_bytes));
  if (held == 0) return kNever;
  if (held >= full) return interval;
  uint64_t times = (full + held - 1) / held;
  return times > kNever / interval ? kNever : interval * times;
}

uint64_t Purger::min_due_ns() const {
  int64_t policy = option(Opt::purge);
  uint64_t ms;
  if (policy == kPurgeEager) {
    ms = uint64_t(option(Opt::lazy_decay_ms));
  } else {
    uint64_t d = uint64_t(option(Opt::decay_ms)), p = uint64_t(option(Opt::partial_decay_ms));
    ms = d < p ? d : p;
  }
  uint64_t floor = uint64_t(option(Opt::background_interval_ms));
  return (ms > floor ? ms : floor) * kMs;
}

uint64_t Purger::next_due(uint64_t now) {
  int64_t policy = option(Opt::purge);
  uint64_t due = kNever;
  if (policy != kPurgeNever) {
    uint64_t last = backend_->last_activity_ns();
    due = backend_->next_decay_ns(decay_select(policy, now, last, true));
    uint64_t lazy = backend_->next_lazy_ns(lazy_select(policy, now, last, true));
    if (lazy < due) due = lazy;
  }
  uint64_t heaps = ~heap_due_inv_.load(std::memory_order_relaxed);
  if (heaps < due) due = heaps;
  uint64_t held = held_free();
  if (held && checks_wanted()) {
    uint64_t interval = pressure_interval_ns(held);
    uint64_t last = last_check_ns_.load(std::memory_order_relaxed);
    uint64_t check = interval > kNever - last ? kNever : last + interval;
    if (check < due) due = check;
  }
  // Huge blocks being released settle as LAZY (or CLEAN) later: look again.
  if (releases_ && releases_->inflight_bytes.get()) {
    uint64_t again = now + uint64_t(option(Opt::background_interval_ms)) * kMs;
    if (again < due) due = again;
  }
  return due;
}

void Purger::tick(uint64_t now) {
  if (heap_collector_) {
    // Pages inside spans wait partial_decay_ms (a span that still holds
    // live objects is like a partly used slot); eager purges them as soon
    // as their heap is collected; never leaves them.  Hysteresis as decay's
    // while the process is busy.
    int64_t policy = option(Opt::purge);
    PurgeSelect sel = decay_select(policy, now, backend_->last_activity_ns(), true);
    uint64_t span_idle = policy == kPurgeNever ? kNever : sel.min_age_partial_ns;
    uint64_t until = sel.hysteresis ? sel.idle_ns : 0;
    // Their MADV_FREE pages then wait lazy_decay_ms, as the lazy stage's.
    PurgeSelect lazy = lazy_select(policy, now, backend_->last_activity_ns(), true);
    uint64_t span_lazy = policy == kPurgeNever ? kNever : lazy.min_age_lazy_ns;
    uint64_t lazy_until = lazy.hysteresis ? lazy.idle_ns : 0;
    heap_due_inv_.store(~heap_collector_(now, uint64_t(option(Opt::decay_ms)) * kMs, span_idle, until, span_lazy,
                                         lazy_until),
                        std::memory_order_relaxed);
  }
  uint64_t held = held_free();
  bool files = held && checks_wanted() &&
               now - last_check_ns_.load(std::memory_order_relaxed) >= pressure_interval_ns(held);
  uint64_t soft = uint64_t(option(Opt::memory_limit));
  // The soft limit costs no file read: on every wakeup (memory that huge
  // releases settle may exceed it between two frees).
  if (files || soft) {
    PressureRequest req = pressure_.check(now, soft ? footprint() : 0, soft, files);
    if (req.bytes) relieve(req.bytes);
  }
  if (files) {
    last_check_ns_.store(now, std::memory_order_relaxed);
    stats_->add(Stat::pressure_checks, 1);
    discard_excess();
  }
  decay_pass(now);
  lazy_pass(now);
}

void Purger::heap_work_arrived(uint64_t now) {
  uint64_t due = now + uint64_t(option(Opt::decay_ms)) * kMs;
  // Earlier deadlines are larger complemented.
  uint64_t cur = heap_due_inv_.load(std::memory_order_relaxed);
  while (~due > cur && !heap_due_inv_.compare_exchange_weak(cur, ~due, std::memory_order_relaxed)) {
  }
  wakeup_.poke(platform_, due);
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
  if (policy == kPurgeEager) decay_pass(now);
  if (background_running) {
    wakeup_.poke(platform_, now + min_due_ns());
    return;
  }
  // No background thread: both stages inline, at most once per interval.
  uint64_t interval = uint64_t(option(Opt::background_interval_ms)) * kMs;
  uint64_t last = last_inline_ns_.load(std::memory_order_relaxed);
  if (now - last < interval) return;
  if (!last_inline_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  stats_->add(Stat::inline_purges, 1);
  discard_excess();
  if (policy != kPurgeEager) decay_pass(now);
  lazy_pass(now);
}

bool BackgroundPurger::ensure_started(Purger* purger, const Platform* platform, Stats* stats) {
  uint32_t s = state_.load(std::memory_order_acquire);
  if (s == kRunning) return true;
  if (s != kNone || !option(Opt::background)) return false;
  if (!state_.compare_exchange_strong(s, kStarting, std::memory_order_acq_rel)) {
    return s == kRunning;
  }
  // Written only when they change (a test's platform): a thread on its way
  // out may still read them while a new one starts.
  if (purger_ != purger) purger_ = purger;
  if (platform_ != platform) platform_ = platform;
  if (stats_ != stats) stats_ = stats;
  if (purger->background_.load(std::memory_order_relaxed) != this) {
    purger->background_.store(this, std::memory_order_release);
  }
  // Running before the thread exists: its first round plans with whatever
  // the caller released.  The new thread has not looked at the threads yet.
  last_look_ns_.store(0, std::memory_order_relaxed);
  state_.store(kRunning, std::memory_order_seq_cst);
  stats->add(Stat::background_threads, 1);
  stats->add(Stat::background_starts, 1);
  if (!platform->start_thread(platform->ctx, &BackgroundPurger::main, this)) {
    // Degrade to inline purging (after_release with background_running
    // false) for the life of the process (a fork child tries again).
    stats->sub(Stat::background_threads, 1);
    stats->add(Stat::background_start_failures, 1);
    state_.store(kFailed, std::memory_order_release);
    return false;
  }
  return true;
}

void BackgroundPurger::thread_exited() {
  if (!running()) return;
  exit_seen_.store(true, std::memory_order_relaxed);
  uint64_t now = platform_->now_ns(platform_->ctx);
  purger_->wakeup().poke(platform_, exit_look_due(now, last_look_ns_.load(std::memory_order_relaxed)));
}

uint64_t BackgroundPurger::exit_look_due(uint64_t now, uint64_t last_look) {
  uint64_t delay = uint64_t(option(Opt::background_interval_ms)) * kMs;
  uint64_t at = now + (delay > kExitCheckDelayNs ? delay : kExitCheckDelayNs);
  uint64_t spaced = last_look + kThreadCheckNs / 10;
  return last_look && spaced > at ? spaced : at;
}

bool BackgroundPurger::last_thread() const {
  char text[2048];
  if (platform_->read_file(platform_->ctx, "/proc/self/status", text, sizeof text) <= 0) return false;
  uint64_t live = 0;
  // Release workers are ours too (they exit after a second without work).
  const ReleaseAccounting* rel = purger_->releases_;
  uint64_t ours = 1 + (rel ? rel->threads.get() : 0);
  return parse_status_live_threads(text, &live) && live <= ours;
}

void BackgroundPurger::note_exits(Round& r, uint64_t now) {
  if (!exit_seen_.exchange(false, std::memory_order_relaxed)) return;
  // A thread exited: look once it is gone, then a few times more while
  // other threads (release workers finishing, say) remain.
  r.check_due_ns = exit_look_due(now, r.last_check_ns);
  r.check_step = 0;
}

bool BackgroundPurger::threads_check(Round& r, uint64_t now) {
  note_exits(r, now);
  bool due = now >= r.check_due_ns || !r.last_check_ns || now - r.last_check_ns >= kThreadCheckNs;
  if (!due) return false;
  r.last_check_ns = now;
  last_look_ns_.store(now, std::memory_order_relaxed);
  if (last_thread()) return true;
  if (now >= r.check_due_ns) {
    r.check_due_ns = ++r.check_step <= 4 ? now + (kExitCheckDelayNs << (2 * r.check_step)) : kNoDeadline;
  }
  return false;
}

void BackgroundPurger::count_cpu(Round& r) {
  uint64_t cpu = platform_->thread_cpu_ns(platform_->ctx);
  if (cpu > r.cpu_seen_ns) stats_->add(Stat::background_cpu_ns, cpu - r.cpu_seen_ns);
  r.cpu_seen_ns = cpu;
}

bool BackgroundPurger::retire(Round& r, uint64_t now) {
  // Pokes now see a running thread and rely on the look below: a release
  // either sees state kNone (and starts a thread) or is seen here.
  purger_->wakeup_.until.store(Wakeup::kRunning, std::memory_order_seq_cst);
  state_.store(kNone, std::memory_order_seq_cst);
  if (purger_->next_due(now) != Purger::kNever) {
    uint32_t s = kNone;
    if (state_.compare_exchange_strong(s, kRunning, std::memory_order_seq_cst)) return true;
  }
  count_cpu(r);
  stats_->sub(Stat::background_threads, 1);
  return false;
}

bool BackgroundPurger::round(Round& r) {
  Purger* pu = purger_;
  const Platform* p = platform_;
  Wakeup& w = pu->wakeup_;
  uint64_t now = p->now_ns(p->ctx);
  w.until.store(Wakeup::kPlanning, std::memory_order_seq_cst);
  uint32_t seq = w.seq.load(std::memory_order_acquire);
  uint64_t due = pu->next_due(now);
  if (due == Purger::kNever) return retire(r, now);
  // (A thread may have exited before this thread first planned.)
  note_exits(r, now);
  // After a poke, look again within the shortest decay: a stream of
  // releases whose own deadlines are later wakes the thread at most once
  // per sleep.
  if (r.poked) {
    uint64_t soon = now + pu->min_due_ns();
    if (soon < due) due = soon;
  }
  if (r.check_due_ns < due) due = r.check_due_ns;
  uint64_t earliest = now + uint64_t(option(Opt::background_interval_ms)) * kMs;
  if (due < earliest) due = earliest;
  uint64_t planning = Wakeup::kPlanning;
  if (!w.until.compare_exchange_strong(planning, due, std::memory_order_seq_cst)) {
    r.poked = true;  // work arrived while planning: plan again
    return true;
  }
  p->wait(p->ctx, &w.seq, seq, int64_t(due - now));
  r.poked = w.until.exchange(Wakeup::kRunning, std::memory_order_seq_cst) == Wakeup::kRunning;
  stats_->add(Stat::background_wakeups, 1);
  now = p->now_ns(p->ctx);
  // A process whose last thread of its own ended with pthread_exit() ends
  // when no thread is left: ours must not keep it alive.  Returning makes
  // this the last thread to exit, so the process exits with status 0 as
  // POSIX prescribes.
  if (threads_check(r, now)) {
    w.until.store(Wakeup::kRunning, std::memory_order_seq_cst);
    state_.store(kNone, std::memory_order_release);
    count_cpu(r);
    stats_->sub(Stat::background_threads, 1);
    return false;
  }
  pu->tick(now);
  count_cpu(r);
  return true;
}

void* BackgroundPurger::main(void* arg) {
  auto* self = static_cast<BackgroundPurger*>(arg);
  if (!self->purger_->pressure_ready()) self->purger_->init_pressure();
  Round r;
  while (self->round(r)) {
  }
  return nullptr;
}

}  // namespace lazymalloc
