// A futex-based mutex (three-state: unlocked, locked, locked with waiters).
// Spins briefly before sleeping.  Constexpr-constructible, so global locks
// need no static initialisation; reset() re-initialises one in a fork child.
#pragma once

#include <atomic>
#include <cstdint>

#include "pal/pal.h"

namespace lazymalloc {

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
    if (state_.exchange(0, std::memory_order_release) == 2) pal::futex_wake(&state_, 1);
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
      __builtin_ia32_pause();
    }
    while (state_.exchange(2, std::memory_order_acquire) != 0) pal::futex_wait(&state_, 2, -1);
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
