// Discardable memory under concurrency: threads lock, verify and unlock
// blocks while another thread keeps discarding every unlocked one.  Checks
// that a locked block is never discarded (its bytes never change while
// locked), that every discard is reported (a block found intact holds its
// last contents byte for byte, never zeros), and that lock/unlock counts
// balance when several threads lock the same block.  Runs under TSan (the
// sanitizer builds use the prefixed API, which is all this test calls).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "alloc_shim.h"

#if LMT_HAVE_LAZYMALLOC
namespace {

using lmt::Rng;

// A thread that discards every unlocked block, over and over, until stopped.
class Discarder {
 public:
  Discarder()
      : thread_([this] {
          while (!stop_.load(std::memory_order_relaxed)) {
            lazymalloc_discardable_purge();
            std::this_thread::yield();
          }
        }) {}
  ~Discarder() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Each worker owns its blocks (contents are checked exactly); the discarder
// and the owners race on every lock.
TEST(StressDiscard, OwnedBlocksAgainstAConcurrentDiscarder) {
  constexpr unsigned kThreads = 3, kBlocks = 24;
  const size_t iters = lmt::Scaled(4000, 300);
  std::atomic<uint64_t> discarded_seen{0}, failures{0};
  Discarder discarder;
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      Rng rng(t + 1);
      void* block[kBlocks];
      size_t size[kBlocks];
      uint64_t version[kBlocks];
      for (unsigned i = 0; i < kBlocks; ++i) {
        size[i] = 1 + rng.Next() % (i % 4 == 0 ? 130000 : 12000);
        block[i] = lazymalloc_discardable_alloc(size[i]);
        version[i] = (uint64_t(t) << 48) | (uint64_t(i) << 32);
        lmt::FillPattern(block[i], size[i], version[i]);
        lazymalloc_discardable_unlock(block[i]);
      }
      for (size_t n = 0; n < iters; ++n) {
        unsigned i = unsigned(rng.Next() % kBlocks);
        int r = lazymalloc_discardable_lock(block[i]);
        if (r == LAZYMALLOC_DISCARDABLE_INTACT) {
          if (!lmt::CheckPattern(block[i], size[i], version[i])) failures++;
        } else if (r == LAZYMALLOC_DISCARDABLE_DISCARDED) {
          discarded_seen++;
          if (lmt::FindNonZero(block[i], size[i]) != SIZE_MAX) failures++;
        } else {
          failures++;
        }
        // Locked: nothing may take it while we write and re-check.
        version[i]++;
        lmt::FillPattern(block[i], size[i], version[i]);
        std::this_thread::yield();
        if (!lmt::CheckPattern(block[i], size[i], version[i])) failures++;
        if (lazymalloc_discardable_unlock(block[i]) != 0) failures++;
        if (rng.Next() % 64 == 0) {  // free and replace one now and then
          if (lazymalloc_discardable_free(block[i]) != 0) failures++;
          block[i] = lazymalloc_discardable_alloc(size[i]);
          lmt::FillPattern(block[i], size[i], version[i]);
          lazymalloc_discardable_unlock(block[i]);
        }
      }
      for (unsigned i = 0; i < kBlocks; ++i) {
        if (lazymalloc_discardable_free(block[i]) != 0) failures++;
      }
    });
  }
  for (auto& w : workers) w.join();
  discarder.Stop();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(discarded_seen.load(), 0u) << "the discarder never won a race: the test tests nothing";
}

// Several threads lock the same blocks (nested locks).  While a thread holds
// a lock it writes a value to its own word and checks it after a yield: a
// discard of a locked block would zero it.
TEST(StressDiscard, SharedBlocksNestedLocks) {
  constexpr unsigned kThreads = 4, kBlocks = 8;
  const size_t iters = lmt::Scaled(20000, 500);
  void* block[kBlocks];
  for (auto& b : block) {
    b = lazymalloc_discardable_alloc(4096);
    lazymalloc_discardable_unlock(b);
  }
  uint64_t hits0 = 0, misses0 = 0, hits1 = 0, misses1 = 0;
  lazymalloc_stat_get("discardable_lock_hits", &hits0);
  lazymalloc_stat_get("discardable_lock_misses", &misses0);
  std::atomic<uint64_t> failures{0};
  Discarder discarder;
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      Rng rng(100 + t);
      for (size_t n = 0; n < iters; ++n) {
        unsigned i = unsigned(rng.Next() % kBlocks);
        if (lazymalloc_discardable_lock(block[i]) < 0) failures++;
        auto* word = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(block[i]) + 64 * t);
        uint64_t v = (uint64_t(t + 1) << 40) | n;
        word->store(v, std::memory_order_relaxed);
        std::this_thread::yield();
        if (word->load(std::memory_order_relaxed) != v) failures++;
        if (lazymalloc_discardable_unlock(block[i]) != 0) failures++;
      }
    });
  }
  for (auto& w : workers) w.join();
  discarder.Stop();
  EXPECT_EQ(failures.load(), 0u);
  lazymalloc_stat_get("discardable_lock_hits", &hits1);
  lazymalloc_stat_get("discardable_lock_misses", &misses1);
  EXPECT_EQ((hits1 - hits0) + (misses1 - misses0), kThreads * iters) << "every lock counted once";
  for (void* b : block) {
    // Balanced: every block is unlocked exactly once more than it is locked.
    EXPECT_GE(lazymalloc_discardable_lock(b), 0);
    EXPECT_EQ(lazymalloc_discardable_unlock(b), 0);
    EXPECT_EQ(lazymalloc_discardable_unlock(b), -1);
    EXPECT_EQ(lazymalloc_discardable_free(b), 0);
  }
}

}  // namespace
#endif  // LMT_HAVE_LAZYMALLOC
