// A futex-based mutex (three-state: unlocked, locked, locked with waiters).
// Spins briefly before sleeping; sleeps and hand-overs go through
// pal::lock_platform() (Platform::wait and wake_one).  Constexpr-constructible, so global locks
// need no static initialisation; reset() re-initialises one in a fork child.
// cpu_relax() is the pause of every spin-wait loop.
#pragma once

#include <atomic>
#include <cstdint>

#include "pal/pal.h"

namespace lazymalloc {

// One iteration of a spin-wait: tells the CPU that this thread is waiting
// (x86 `pause`: the sibling hyperthread gets the core and leaving the loop
// costs no memory-order mis-speculation; aarch64 `yield`, the same hint),
// and, on every target, a compiler barrier, so that the loop re-reads
// memory.  The one place that names an architecture's spin instruction.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("pause" ::: "memory");
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#else
  __asm__ volatile("" ::: "memory");
#endif
}

class Mutex {
 public:
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() {
    uint32_t expected = 0;
    if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return;
    lock_slow();
  }
  bool try_lock() {
    uint32_t expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
  }
  void unlock() {
    if (state_.exchange(0, std::memory_order_release) == 2) {
      const Platform& p = pal::lock_platform();
      p.wake_one(p.ctx, &state_);
    }
  }
  // Only in a fork child, where no other thread can hold the lock.
  void reset() { state_.store(0, std::memory_order_relaxed); }

 private:
  void lock_slow() {
    for (int i = 0; i < 100; ++i) {
      if (state_.load(std::memory_order_relaxed) == 0) {
        uint32_t expected = 0;
        if (state_.compare_exchange_weak(expected, 1, std::memory_order_acquire)) return;
      }
      cpu_relax();
    }
    const Platform& p = pal::lock_platform();
    while (state_.exchange(2, std::memory_order_acquire) != 0) p.wait(p.ctx, &state_, 2, -1);
  }

  std::atomic<uint32_t> state_{0};
};

class LockGuard {
 public:
  explicit LockGuard(Mutex& m) : m_(m) { m_.lock(); }
  ~LockGuard() { m_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& m_;
};

}  // namespace lazymalloc
