// The purger: decides which free memory goes back to the kernel and when,
// and has it advised (adviser.h) with no allocator lock held.
//
// Policies (Opt::purge):
//   adaptive  free 2 MiB slots idle for decay_ms, and free units in partly
//             used slots idle for partial_decay_ms, are purged oldest first,
//             in batches of at most purge_batch bytes; hysteresis (policy.h)
//             lengthens the decay of slots that come back soon after a purge
//             and pins those that keep coming back, except when the whole
//             process has been idle for decay_ms;  memory then LAZY for
//             lazy_decay_ms is made CLEAN (the second stage, lazy_pass), with
//             the same hysteresis until the process has been idle for
//             kLazyIdleFactor x lazy_decay_ms;
//   decay     the same without hysteresis;
//   eager     every release is purged at once (like glibc's arenas);
//   never     nothing until purge_all() (malloc_trim, lazymalloc_purge).
// Pressure and limits (pressure.h) purge with MADV_DONTNEED under every
// policy but `never`, oldest RETAINED memory first, then LAZY memory.
// The purger takes its clock and its OS effects from a Platform, so tests
// drive it with a fake platform and a manual clock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "core/accounting.h"
#include "core/options.h"
#include "pal/lock.h"
#include "pal/pal.h"
#include "purge/adviser.h"
#include "purge/discard.h"
#include "purge/policy.h"
#include "purge/pressure.h"

namespace lazymalloc {

class BackgroundPurger;

// How the background thread sleeps and is woken.  `until` is the deadline
// it sleeps to, kRunning while it works (it plans again before sleeping), or
// kPlanning while it computes its next deadline.  Whoever creates work due at
// `due` calls poke(due): one atomic load when the thread will be awake by
// then; else (sleeping past `due`, or planning) one CAS and one futex wake,
// at most once per sleep.  The thread announces kPlanning before it reads
// the allocator's state and publishes its deadline by CAS from kPlanning, so
// work created meanwhile is either seen by that reading or makes the CAS fail
// (then it plans again).
struct Wakeup {
  static constexpr uint64_t kRunning = 0;
  static constexpr uint64_t kPlanning = ~uint64_t(0);
  std::atomic<uint32_t> seq{0};  // the futex word, bumped by every wake
  std::atomic<uint64_t> until{kRunning};

  void poke(const Platform* p, uint64_t due) {
    uint64_t u = until.load(std::memory_order_seq_cst);
    while (u > due) {
      if (until.compare_exchange_weak(u, kRunning, std::memory_order_seq_cst)) {
        seq.fetch_add(1, std::memory_order_release);
        p->wake(p->ctx, &seq);
        return;
      }
    }
  }
  void reset() {
    seq.store(0, std::memory_order_relaxed);
    until.store(kRunning, std::memory_order_relaxed);
  }
};

class Purger {
 public:
  // The lazy stage ignores hysteresis once the process has been idle this
  // many lazy_decay_ms (an idle process's Rss is back within about
  // decay_ms + kLazyIdleFactor x lazy_decay_ms whatever its history).
  static constexpr uint64_t kLazyIdleFactor = 4;
  // Free span records a decay pass keeps (not given back): at least
  // kMetaKeepRecords (64 KiB of records), and a quarter of those in use,
  // so that a heap whose spans come and go reuses resident records and
  // never faults them back in (hysteresis); malloc_trim keeps none.
  static constexpr size_t kMetaKeepRecords = 256;
  static size_t meta_keep(size_t live) { return live / 4 > kMetaKeepRecords ? live / 4 : kMetaKeepRecords; }
  static constexpr uint64_t kNever = kNoDeadline;

  constexpr Purger() = default;

  void init(Backend* backend, const Platform* platform, Stats* stats) {
    backend_ = backend;
    platform_ = platform;
    stats_ = stats;
    adviser_.init(platform, stats);
    backend->set_policy(&release_policy_instance());
  }
  // Unlocked discardable blocks are discarded by relieve(), purge_all() and
  // the discardable_limit (tick, or inline without a background thread).
  void attach(Discardable* discard) {
    discard_ = discard;
    discard->set_adviser(&adviser_);
  }
  // The frontend's collector of idle heaps (frontend/heap.h,
  // lm_collect_idle_heaps): each tick, before decay, heaps whose thread has
  // been quiet for `idle_ns` (decay_ms) give their remote frees and empty
  // spans back, so that decay can purge them; those quiet for
  // `span_idle_ns` (partial_decay_ms; 0 under `eager`, kNever under
  // `never`) also give back the free pages inside their spans, with the
  // advice decay uses, under per-span hysteresis until `hysteresis_until`
  // (when the process turns idle; 0: none); pages it gave MADV_FREE get
  // MADV_DONTNEED once LAZY for `span_lazy_ns` (lazy_decay_ms; kNever under
  // `never`), with the lazy stage's hysteresis until `lazy_until`.  It
  // returns when it wants to run again (kNever: no heap has anything to
  // give), a deadline of the background thread like the decay's.  The
  // purger only schedules it.
  using HeapCollector = uint64_t (*)(uint64_t now_ns, uint64_t idle_ns, uint64_t span_idle_ns,
                                     uint64_t hysteresis_until, uint64_t span_lazy_ns, uint64_t lazy_until);
  void set_heap_collector(HeapCollector fn) { heap_collector_ = fn; }
  // The releaser's in-flight bytes and workers (Releaser::init): the
  // deadlines poll while releases are in flight; the background thread
  // counts the workers among the process's threads that are ours.
  void watch_releases(const ReleaseAccounting* releases) { releases_ = releases; }
  // A thread returned objects to a heap with nothing pending (no lock
  // held): the collector is due within decay_ms of `now`; wakes the
  // background thread if it sleeps longer.
  void heap_work_arrived(uint64_t now);
  // Finds the pressure sources (reads /proc and cgroup files).  Called once
  // the background thread starts, not at start-up.
  void init_pressure() {
    pressure_.init(platform_, stats_, option(Opt::pressure) != 0);
    pressure_ready_.store(true, std::memory_order_release);
  }
  bool pressure_ready() const { return pressure_ready_.load(std::memory_order_acquire); }

  // Purges what the policy says has decayed by `now`.  Returns bytes purged.
  size_t decay_pass(uint64_t now);
  // The second stage: LAZY memory that has stayed LAZY for lazy_decay_ms
  // (hysteresis as for decay) gets MADV_DONTNEED.  Returns bytes purged.
  size_t lazy_pass(uint64_t now);
  // Purges every free byte: LAZY with MADV_FREE (dontneed == false), or
  // CLEAN with MADV_DONTNEED (also turning LAZY memory CLEAN); then discards
  // every unlocked discardable block.
  size_t purge_all(bool dontneed);
  // Purges up to `bytes` (~0: all) with MADV_DONTNEED, oldest RETAINED first,
  // then LAZY, then unlocked discardable blocks, least recently unlocked
  // first; counts it as pressure relief.  Returns bytes purged.
  size_t relieve(uint64_t bytes);
  // One background-thread round's work: pressure and limits (soft and
  // discardable) when their check is due (pressure_due), then both decay
  // stages.
  void tick(uint64_t now);
  // When tick() next has something to do, if nothing else happens: the
  // earliest decay or lazy-decay deadline, the next pressure check while
  // free memory is held, a poll while huge-block releases are in flight; or
  // kNever when no free memory is held (the background thread then exits).
  uint64_t next_due(uint64_t now);
  // Free memory the pressure checks could give back: RETAINED + LAZY (none
  // under `never`) + live discardable blocks.
  uint64_t held_free() const;
  // Interval of the pressure checks for `held` free bytes:
  // pressure_interval_ms x ceil(pressure_bytes / held).
  uint64_t pressure_interval_ns(uint64_t held) const;
  // Soonest a release can create work for the background thread: the
  // shortest decay of the policy, at least background_interval_ms.
  uint64_t min_due_ns() const;
  Wakeup& wakeup() { return wakeup_; }
  // Called (with no lock held) after memory was released to the backend.
  // Enforces the soft limit, runs eager purges, wakes the background thread
  // if it sleeps past the new work, or purges inline when there is none.
  void after_release(uint64_t now, bool background_running);

  // Bytes the allocator holds from the kernel's point of view (discarded
  // discardable blocks are active but not resident).
  uint64_t footprint() const {
    MemoryState m = backend_->memory_state();
    uint64_t held = m.active + m.retained + m.lazy;
    uint64_t gone = discard_ ? discard_->discarded_bytes() : 0;
    return held > gone ? held - gone : 0;
  }
  PressureMonitor& pressure() { return pressure_; }

  // The vectored madvise and its fallbacks (adviser.h), which the
  // releaser, the span purges and the discardable blocks share.
  Adviser& adviser() { return adviser_; }
  // The advice decay uses: MADV_DONTNEED with purge_advice=dontneed, or
  // with `auto` inside a memory-limited cgroup; else MADV_FREE.
  bool decay_uses_dontneed() const;
  // How a huge block freed now is treated (Backend::release_huge): the
  // RETAINED bytes it may stay within (huge_retain; 0 under the eager
  // policy, recent pressure or an exceeded soft limit; unlimited under
  // `never`), and whether its release uses MADV_DONTNEED.
  uint64_t huge_retain_budget(uint64_t now) const;
  bool release_dontneed(uint64_t now) const;

  void fork_prepare() { lock_.lock(); }
  void fork_parent() { lock_.unlock(); }
  void fork_child() {
    lock_.reset();
    wakeup_.reset();
  }

 private:
  friend class BackgroundPurger;
  // REQUIRES: lock_ held.  Advises every range of the batch, then settles it.
  // Returns false if the kernel refused any range (the batch stays RETAINED).
  bool advise_batch(PurgeBatch* batch, bool dontneed);
  // REQUIRES: lock_ held.  Gives back the pages of free span records above
  // the lowest `keep` (Backend::meta_purge_collect) with MADV_DONTNEED.
  // Returns bytes given back.
  size_t purge_metadata(size_t keep);
  bool pressure_recent(uint64_t now) const;
  // Enforces Opt::discardable_limit.
  size_t discard_excess();

  Backend* backend_ = nullptr;
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
  Discardable* discard_ = nullptr;
  const ReleaseAccounting* releases_ = nullptr;
  HeapCollector heap_collector_ = nullptr;
  // The collector's next deadline, stored complemented so that "none"
  // (kNoDeadline) is 0: the process-wide allocator, of which the Purger is
  // part, stays zero-initialised (.bss, not 260 KB of .data).
  std::atomic<uint64_t> heap_due_inv_{0};
  Mutex lock_;  // one purge pass at a time
  PressureMonitor pressure_;
  Adviser adviser_;
  std::atomic<uint64_t> last_inline_ns_{0};
  std::atomic<uint64_t> last_pressure_ns_{0};  // last relieve() (pressure, limits, API)
  std::atomic<bool> pressure_ready_{false};
  // Last pressure check.  Written by the background thread; read also by one
  // that is retiring while a new one starts.
  std::atomic<uint64_t> last_check_ns_{0};
  std::atomic<BackgroundPurger*> background_{nullptr};  // set once a thread was asked for
  Wakeup wakeup_;
};

// The background purge thread: deadline-driven (see docs/design.md).  Each
// round plans the next deadline (Purger::next_due), sleeps to it with
// Platform::wait on the Wakeup word, and runs Purger::tick.  When no free
// memory is held (nothing to decay, no pressure worth watching) the thread
// exits; the next release starts it again.  ensure_started() is called with
// no allocator lock held; it creates the thread with all signals blocked.
//
// A process whose last own thread ends (pthread_exit) must end: ours must
// not keep it alive.  The thread reads /proc/self/status (live threads, less
// our release workers) when a thread with a heap exits (thread_exited():
// after 10 ms, then 40, 160, 640 and 2560 ms later while other threads
// remain), and on any wakeup at least 1 s after its last look; never on a
// timer of its own.  An idle process has no background thread at all.
class BackgroundPurger {
 public:
  // What one thread keeps between its rounds.
  struct Round {
    bool poked = false;            // the last wakeup was a poke, not a deadline
    uint64_t cpu_seen_ns = 0;      // thread CPU time counted so far
    uint64_t last_check_ns = 0;    // last /proc/self/status look (0: none)
    uint64_t check_due_ns = kNoDeadline;  // next look asked for by thread exits
    unsigned check_step = 0;
  };
  static constexpr uint64_t kThreadCheckNs = 1000000000;     // look at most this long apart on wakeups
  static constexpr uint64_t kExitCheckDelayNs = 10000000;    // first look after a thread exit

  constexpr BackgroundPurger() = default;
  // Returns true if the thread is running (or was started now).
  bool ensure_started(Purger* purger, const Platform* platform, Stats* stats);
  bool running() const { return state_.load(std::memory_order_acquire) == kRunning; }
  void fork_child() { state_.store(kNone, std::memory_order_relaxed); }
  // A thread with a heap is exiting (its pthread key destructor).
  void thread_exited();
  // One round of the thread; false when it has exited its loop (state
  // kNone).  Tests drive it directly with a fake platform.
  bool round(Round& r);

 private:
  static void* main(void* self);
  bool last_thread() const;  // true if this is the process's only thread
  // The /proc look, when due; true if the thread must end.
  bool threads_check(Round& r, uint64_t now);
  // Schedules the looks after a thread exit, if one was reported.
  void note_exits(Round& r, uint64_t now);
  // When the look asked for by a thread exit at `now` is due: kExitCheckDelayNs
  // later, or the shortest sleep (background_interval_ms) if longer, and not
  // sooner than a tenth of kThreadCheckNs after the last look (last_look; 0:
  // none).  thread_exited pokes for that moment, which the thread honours as
  // it is, so a stream of exits (a program that starts and ends threads all
  // the time) wakes it at most once per look, not once per exit.
  static uint64_t exit_look_due(uint64_t now, uint64_t last_look);
  // Nothing is held: state kNone unless work arrived meanwhile.  true: keep running.
  bool retire(Round& r, uint64_t now);
  void count_cpu(Round& r);
  enum : uint32_t { kNone = 0, kStarting = 1, kRunning = 2, kFailed = 3 };
  std::atomic<uint32_t> state_{kNone};
  std::atomic<bool> exit_seen_{false};
  std::atomic<uint64_t> last_look_ns_{0};  // Round::last_check_ns, for thread_exited
  Purger* purger_ = nullptr;
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
};

}  // namespace lazymalloc
