// The purger: decides which free memory goes back to the kernel and when,
// and performs the madvise calls with no allocator lock held.
//
// Policies (Opt::purge):
//   adaptive  free 2 MiB slots idle for decay_ms, and free units in partly
//             used slots idle for partial_decay_ms, are purged oldest first,
//             in batches of at most purge_batch bytes; hysteresis (backend.h)
//             lengthens the decay of slots that come back soon after a purge
//             and pins those that keep coming back, except when the whole
//             process has been idle for decay_ms;
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
#include "core/options.h"
#include "pal/lock.h"
#include "pal/pal.h"
#include "purge/discard.h"
#include "purge/pressure.h"

namespace lazymalloc {

class Purger {
 public:
  constexpr Purger() = default;

  void init(Backend* backend, const Platform* platform, Stats* stats) {
    backend_ = backend;
    platform_ = platform;
    stats_ = stats;
  }
  // Unlocked discardable blocks are discarded by relieve(), purge_all() and
  // the discardable_limit (tick, or inline without a background thread).
  void attach(Discardable* discard) {
    discard_ = discard;
    discard->set_purger(this);
  }
  // The frontend's collector of idle heaps (frontend/heap.h,
  // lm_collect_idle_heaps): each tick, before decay, heaps whose thread has
  // been quiet for decay_ms give their remote frees and empty spans back, so
  // that decay can purge them.  The purger only schedules it.
  using HeapCollector = size_t (*)(uint64_t now_ns, uint64_t idle_ns);
  void set_heap_collector(HeapCollector fn) { heap_collector_ = fn; }
  // Finds the pressure sources (reads /proc and cgroup files).  Called once
  // the background thread starts, not at start-up.
  void init_pressure() { pressure_.init(platform_, stats_, option(Opt::pressure) != 0); }

  // Purges what the policy says has decayed by `now`.  Returns bytes purged.
  size_t decay_pass(uint64_t now);
  // Purges every free byte: LAZY with MADV_FREE (dontneed == false), or
  // CLEAN with MADV_DONTNEED (also turning LAZY memory CLEAN); then discards
  // every unlocked discardable block.
  size_t purge_all(bool dontneed);
  // Purges up to `bytes` (~0: all) with MADV_DONTNEED, oldest RETAINED first,
  // then LAZY, then unlocked discardable blocks, least recently unlocked
  // first; counts it as pressure relief.  Returns bytes purged.
  size_t relieve(uint64_t bytes);
  // One background-thread tick: pressure, limits (discardable_limit too),
  // then decay.
  void tick(uint64_t now);
  // Called (with no lock held) after memory was released to the backend.
  // Enforces the soft limit, runs eager purges, or inline decay when there
  // is no background thread.
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

  // Advises every range of `batch`: MADV_FREE, or MADV_DONTNEED when
  // `dontneed` or when the kernel refuses MADV_FREE (then for good).  Counts
  // calls, bytes and time.  Returns 0 or the kernel's errno; *clean tells
  // which advice took effect, *ns (if given) the time it took.  Does not
  // settle the batch (purge_finish).  Safe from several threads at once.
  int advise(PurgeBatch* batch, bool dontneed, bool* clean, uint64_t* ns = nullptr);
  // One advice for the ranges of `batch`: one process_madvise(2) vector where
  // the kernel takes it (remembered when it does not), else madvise per range.
  // 0 or an errno value; *calls gets the system calls made.
  int advise_ranges(const PurgeBatch* batch, Advice advice, unsigned* calls);
  // How a huge block freed now is treated (Backend::release_huge): the
  // RETAINED bytes it may stay within (huge_retain; 0 under the eager
  // policy, recent pressure or an exceeded soft limit; unlimited under
  // `never`), and whether its release uses MADV_DONTNEED.
  uint64_t huge_retain_budget(uint64_t now) const;
  bool release_dontneed(uint64_t now) const;
  bool free_unsupported() const { return free_unsupported_.load(std::memory_order_relaxed); }
  bool vector_unsupported() const { return vector_refused_.load(std::memory_order_relaxed); }

  void fork_prepare() { lock_.lock(); }
  void fork_parent() { lock_.unlock(); }
  void fork_child() { lock_.reset(); }

 private:
  // REQUIRES: lock_ held.  Advises every range of the batch, then settles it.
  // Returns false if the kernel refused any range (the batch stays RETAINED).
  bool advise_batch(PurgeBatch* batch, bool dontneed);
  // Gives the kernel a batch's ranges: one process_madvise(2) where the
  // kernel takes it, else (for good once it refuses the call) one madvise
  // per range.  Returns 0 or an errno value; *calls gets the system calls.
  bool decay_uses_dontneed() const;
  bool pressure_recent(uint64_t now) const;
  // Enforces Opt::discardable_limit.
  size_t discard_excess();

  Backend* backend_ = nullptr;
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
  Discardable* discard_ = nullptr;
  HeapCollector heap_collector_ = nullptr;
  Mutex lock_;  // one purge pass at a time
  PressureMonitor pressure_;
  std::atomic<bool> free_unsupported_{false};
  std::atomic<bool> vector_refused_{false};
  std::atomic<uint64_t> last_inline_ns_{0};
  std::atomic<uint64_t> last_pressure_ns_{0};  // last relieve() (pressure, limits, API)
};

// The background purge thread.  ensure_started() is called with no allocator
// lock held; it creates the thread at most once per process (again after
// fork), with all signals blocked.
class BackgroundPurger {
 public:
  constexpr BackgroundPurger() = default;
  // Returns true if the thread is running (or was started now).
  bool ensure_started(Purger* purger, const Platform* platform, Stats* stats);
  bool running() const { return state_.load(std::memory_order_acquire) == kRunning; }
  void fork_child() { state_.store(kNone, std::memory_order_relaxed); }

 private:
  static void* main(void* self);
  bool last_thread() const;  // true if this is the process's only thread
  enum : uint32_t { kNone = 0, kStarting = 1, kRunning = 2, kFailed = 3 };
  std::atomic<uint32_t> state_{kNone};
  Purger* purger_ = nullptr;
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
};

}  // namespace lazymalloc
