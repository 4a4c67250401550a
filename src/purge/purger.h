// The purger: decides which free memory goes back to the kernel and when,
// and performs the madvise calls with no allocator lock held.
//
// This first engine implements the policies of Opt::purge:
//   adaptive / decay  free 2 MiB slots idle for decay_ms, and free units in
//                     partly used slots idle for partial_decay_ms, are given
//                     MADV_FREE (or MADV_DONTNEED per purge_advice), oldest
//                     first, in batches of at most purge_batch bytes;
//   eager             every release is purged at once (like glibc arenas);
//   never             nothing until purge_all() (malloc_trim).
// It takes its clock and its OS effects from a Platform, so tests drive it
// with a fake platform and a manual clock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "pal/lock.h"
#include "pal/pal.h"

namespace lazymalloc {

class Purger {
 public:
  constexpr Purger() = default;

  void init(Backend* backend, const Platform* platform, Stats* stats) {
    backend_ = backend;
    platform_ = platform;
    stats_ = stats;
  }

  // Purges what the policy says has decayed by `now`.  Returns bytes purged.
  size_t decay_pass(uint64_t now);
  // Purges every free byte: LAZY with MADV_FREE (dontneed == false), or
  // CLEAN with MADV_DONTNEED (also turning LAZY memory CLEAN).
  size_t purge_all(bool dontneed);
  // Called (with no lock held) after memory was released to the backend.
  // Runs eager purges, or inline decay when there is no background thread.
  void after_release(uint64_t now, bool background_running);

  bool free_unsupported() const { return free_unsupported_.load(std::memory_order_relaxed); }

  void fork_prepare() { lock_.lock(); }
  void fork_parent() { lock_.unlock(); }
  void fork_child() { lock_.reset(); }

 private:
  // REQUIRES: lock_ held.  Advises every range of the batch, then settles it.
  // Returns false if the kernel refused any range (the batch stays RETAINED).
  bool advise_batch(PurgeBatch* batch, bool dontneed);

  Backend* backend_ = nullptr;
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
  Mutex lock_;  // one purge pass at a time
  std::atomic<bool> free_unsupported_{false};
  std::atomic<uint64_t> last_inline_ns_{0};
};

// The background purge thread.  start() is called with no allocator lock
// held; it creates the thread at most once per process (again after fork).
class BackgroundPurger {
 public:
  constexpr BackgroundPurger() = default;
  // Returns true if the thread is running (or was started now).
  bool ensure_started(Purger* purger, const Platform* platform, Stats* stats);
  bool running() const { return state_.load(std::memory_order_acquire) == kRunning; }
  void fork_child() { state_.store(kNone, std::memory_order_relaxed); }

 private:
  static void* main(void* self);
  enum : uint32_t { kNone = 0, kStarting = 1, kRunning = 2, kFailed = 3 };
  std::atomic<uint32_t> state_{kNone};
  std::atomic<uint32_t> wake_{0};
  Purger* purger_ = nullptr;
  const Platform* platform_ = nullptr;
  Stats* stats_ = nullptr;
};

}  // namespace lazymalloc
