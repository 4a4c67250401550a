// Each thread's cache of freed large blocks (issue #16, frontend/large.cc):
// a freed block serves the thread's next large malloc that it fits, without
// the backend; the cache is bounded, its blocks go back when the thread is
// quiet or exits, and a second free of a cached block aborts.  Over the
// real backend through the lm_* entry points, background thread off.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/options.h"
#include "fixture.h"
#include "phases.h"
#include "frontend/heap.h"

namespace lazymalloc {
namespace {

const auto stat = test::lm_stat;
constexpr size_t kKiB = 1024;
constexpr uint64_t kSecond = 1000000000;

class LargeCache : public ::testing::Test {
 protected:
  void SetUp() override {
    option_set(unsigned(Opt::background), 0);
    option_set(unsigned(Opt::large_cache), 4 << 20);
    lm_init();
    lm_thread_collect();  // an empty cache to start from
  }
  void TearDown() override {
    lm_thread_collect();
    option_set(unsigned(Opt::large_cache), 4 << 20);
  }
};

TEST_F(LargeCache, AFreedBlockServesTheNextMallocThatFitsIt) {
  ASSERT_EQ(stat("large_cache_bytes"), 0u);
  char* p = static_cast<char*>(lm_malloc(512 * kKiB));
  ASSERT_NE(p, nullptr);
  memset(p, 0x11, 512 * kKiB);
  const uint64_t hits = stat("large_cache_hits");
  lm_free(p);
  EXPECT_EQ(stat("large_cache_bytes"), 512 * kKiB);
  // 400 KiB: the 512 KiB block fits it within 1.5x.
  char* q = static_cast<char*>(lm_malloc(400 * kKiB));
  EXPECT_EQ(q, p);
  EXPECT_EQ(stat("large_cache_hits"), hits + 1);
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  EXPECT_GE(lm_usable_size(q), 400 * kKiB);
  // calloc through the cache still gives zeros (the block is dirty).
  lm_free(q);
  char* z = static_cast<char*>(lm_calloc(1, 500 * kKiB));
  ASSERT_EQ(z, p);
  for (size_t i = 0; i < 500 * kKiB; i += 4096) ASSERT_EQ(z[i], 0) << i;
  lm_free(z);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST_F(LargeCache, ABlockMuchLargerThanTheRequestIsNotUsed) {
  char* big = static_cast<char*>(lm_malloc(1024 * kKiB));
  lm_free(big);
  const uint64_t hits = stat("large_cache_hits");
  char* small = static_cast<char*>(lm_malloc(300 * kKiB));  // 1 MiB > 1.5 x 300 KiB
  EXPECT_NE(small, big);
  EXPECT_EQ(stat("large_cache_hits"), hits);
  EXPECT_EQ(stat("large_cache_bytes"), 1024 * kKiB);
  lm_free(small);
}

TEST_F(LargeCache, HoldsAtMostEightBlocksAndTheOptionsBytes) {
  std::vector<void*> v;
  for (int i = 0; i < 12; ++i) v.push_back(lm_malloc(300 * kKiB));
  for (void* p : v) lm_free(p);
  // 320 KiB spans: 8 slots bind first (2.5 MiB), under the 4 MiB limit.
  EXPECT_EQ(stat("large_cache_bytes"), 8 * 320 * kKiB);
  lm_thread_collect();
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  option_set(unsigned(Opt::large_cache), 1 << 20);
  v.clear();
  for (int i = 0; i < 6; ++i) v.push_back(lm_malloc(300 * kKiB));
  for (void* p : v) lm_free(p);
  EXPECT_EQ(stat("large_cache_bytes"), 3 * 320 * kKiB);  // 1 MiB binds
  option_set(unsigned(Opt::large_cache), 0);
  lm_thread_collect();
  void* p = lm_malloc(300 * kKiB);
  lm_free(p);
  EXPECT_EQ(stat("large_cache_bytes"), 0u) << "large_cache=0 turns the cache off";
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST_F(LargeCache, ASecondFreeOfACachedBlockAborts) {
  void* p = lm_malloc(600 * kKiB);
  lm_free(p);
  EXPECT_DEATH(lm_free(p), "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  EXPECT_DEATH(lm_realloc(p, 700 * kKiB), "lazymalloc: realloc\\(\\): invalid pointer 0x[0-9a-f]+: double free");
}

// A worker frees large blocks and blocks: the collector gives them back
// once the heap has been quiet for the idle time, not before.  Another
// worker's exit gives its blocks back at once.
TEST_F(LargeCache, AQuietOrExitedThreadsBlocksGoBack) {
  lmt::Phases phases;
  std::thread worker([&] {
    std::vector<void*> v;
    for (int i = 0; i < 4; ++i) v.push_back(lm_malloc(700 * kKiB));
    for (void* p : v) lm_free(p);
    phases.set(1);
    phases.wait(2);
  });
  phases.wait(1);
  EXPECT_EQ(stat("large_cache_bytes"), 4 * 704 * kKiB);
  const uint64_t t0 = 5000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  lm_collect_idle_heaps(t0 + idle / 2, idle);
  EXPECT_EQ(stat("large_cache_bytes"), 4 * 704 * kKiB);
  lm_collect_idle_heaps(t0 + idle, idle);
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  phases.set(2);
  worker.join();

  std::thread([] {
    void* p = lm_malloc(700 * kKiB);
    lm_free(p);
    EXPECT_EQ(stat("large_cache_bytes"), 704 * kKiB);
  }).join();
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

}  // namespace
}  // namespace lazymalloc
