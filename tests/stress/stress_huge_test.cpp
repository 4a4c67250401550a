// Huge blocks (over 1 MiB) under load: many threads freeing them at once
// while release workers give them back, realloc moving their pages, and
// fork() while releases are in flight.  Contents are verified on one word
// per page (touching every page, so releases have real work to do).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "alloc_shim.h"
#include "test_util.h"
#include "lazymalloc/lazymalloc.h"

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMiB = 1 << 20;

uint64_t Stat(const char* name) {
  uint64_t v = 0;
  EXPECT_EQ(lazymalloc_stat_get(name, &v), 0) << name;
  return v;
}

void Mark(void* p, size_t n, uint64_t id) {
  auto* c = static_cast<char*>(p);
  for (size_t off = 0; off + sizeof(uint64_t) <= n; off += kPage) {
    uint64_t v = lmt::Mix64(id * 1000003 + off);
    memcpy(c + off, &v, sizeof v);
  }
}

// Offset of the first page whose word is wrong, or SIZE_MAX.
size_t FirstBadPage(const void* p, size_t n, uint64_t id) {
  auto* c = static_cast<const char*>(p);
  for (size_t off = 0; off + sizeof(uint64_t) <= n; off += kPage) {
    uint64_t v;
    memcpy(&v, c + off, sizeof v);
    if (v != lmt::Mix64(id * 1000003 + off)) return off;
  }
  return SIZE_MAX;
}

// Every byte reserved is in exactly one state once nothing is in flight.
void ExpectStatesAddUp() {
  lazymalloc_memory_state m;
  lazymalloc_memory_state_get(&m);
  EXPECT_EQ(m.reserved, m.active + m.retained + m.lazy + m.clean);
  EXPECT_EQ(Stat("release_inflight_bytes"), 0u);
}

class HugeStress : public ::testing::Test {
 protected:
  void SetUp() override {
    lazymalloc_option_get("huge_retain", &retain_);
    lazymalloc_option_set("huge_retain", 0);  // every huge free goes to the workers
  }
  void TearDown() override { lazymalloc_option_set("huge_retain", retain_); }
  int64_t retain_ = 0;
};

TEST_F(HugeStress, ManyThreadsFreeHugeBlocksAtOnce) {
  const int kThreads = 4;
  const size_t rounds = lmt::Scaled(12, 3);
  uint64_t released_before = Stat("huge_released");
  std::atomic<bool> failed{false};
  std::string failure;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t rng = lmt::Mix64(t + 1) | 1;
      for (size_t i = 0; i < rounds && !failed; ++i) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t n = (2 + rng % 31) * kMiB + rng % kPage;  // 2-33 MiB, not page-sized
        uint64_t id = uint64_t(t) << 32 | i;
        void* p = lmt::Malloc(n);
        if (!p) {
          failed = true;
          continue;
        }
        Mark(p, n, id);
        if (i % 3 == 0) {
          // Grow: in place, by moving pages (mremap), or by copying.
          size_t bigger = n * 2 + kMiB;
          void* q = lmt::Realloc(p, bigger);
          if (!q || FirstBadPage(q, n, id) != SIZE_MAX) {
            failed = true;
            continue;
          }
          p = q;
          n = bigger;
          Mark(p, n, id);
        }
        if (FirstBadPage(p, n, id) != SIZE_MAX) failed = true;
        lmt::Free(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_FALSE(failed.load()) << "a huge block came back corrupted or an allocation failed";
  EXPECT_GE(Stat("huge_released") - released_before, kThreads * rounds);
  lazymalloc_purge(LAZYMALLOC_PURGE_LAZY);  // waits for releases in flight
  ExpectStatesAddUp();
}

TEST_F(HugeStress, ReallocMovesHugePagesInsteadOfCopying) {
  const size_t n = 64 * kMiB;
  // A block with a neighbour right after it cannot grow in place: realloc
  // must move it, and the move (the subject here) is done with mremap.  In a
  // fresh process the fence is the next block carved and the first try
  // moves.  In one that earlier tests left with holes, the fence may land in
  // a hole and the block grow in place instead (checked as such); the grown
  // block and its fence are kept, filling the gap, and the next pair is
  // tried until one moves.
  std::vector<void*> spare;
  char* a = nullptr;
  char* fence = nullptr;
  char* b = nullptr;
  uint64_t moves = 0;
  for (int i = 0; i < 8 && b == a; ++i) {
    if (b) spare.insert(spare.end(), {b, fence});
    a = static_cast<char*>(lmt::Malloc(n));
    ASSERT_NE(a, nullptr);
    fence = static_cast<char*>(lmt::Malloc(8 * kMiB));
    ASSERT_NE(fence, nullptr);
    Mark(a, n, 7);
    Mark(fence, 8 * kMiB, 8);
    moves = Stat("mremap_moves");
    uint64_t in_place = Stat("inplace_resizes");
    b = static_cast<char*>(lmt::Realloc(a, 4 * n));
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(FirstBadPage(b, n, 7), SIZE_MAX);
    EXPECT_EQ(FirstBadPage(fence, 8 * kMiB, 8), SIZE_MAX) << "realloc wrote over the next block";
    if (b == a) {
      EXPECT_NE(fence, a + n) << "grew in place over the fence";
      EXPECT_EQ(Stat("inplace_resizes"), in_place + 1);
      EXPECT_EQ(Stat("mremap_moves"), moves);
    }
  }
  ASSERT_NE(b, a) << "realloc grew in place 8 times: no move to check";
  memset(b + n, 0x5a, 3 * n);  // the new part is writable
  EXPECT_EQ(Stat("mremap_moves"), moves + 1) << "a moved huge block is moved by mremap";
  EXPECT_GE(Stat("mremap_bytes"), n);
  // The old range is reusable and reads as zero through calloc.
  char* c = static_cast<char*>(lmt::Calloc(1, n));
  ASSERT_NE(c, nullptr);
  for (size_t off = 0; off < n; off += kPage) ASSERT_EQ(c[off], 0) << off;
  lmt::Free(c);
  lmt::Free(b);
  lmt::Free(fence);
  for (void* p : spare) lmt::Free(p);
  lazymalloc_purge(LAZYMALLOC_PURGE_LAZY);
  ExpectStatesAddUp();
}

TEST_F(HugeStress, ForkWhileHugeReleasesAreInFlight) {
  for (int round = 0; round < 3; ++round) {
    const size_t n = 256 * kMiB;
    void* p = lmt::Malloc(n);
    ASSERT_NE(p, nullptr);
    Mark(p, n, 99);
    void* kept = lmt::Malloc(4 * kMiB);
    ASSERT_NE(kept, nullptr);
    Mark(kept, 4 * kMiB, 5);
    lmt::Free(p);  // released by the workers while we fork
    std::string failure = lmt::RunInChild([kept] {
      uint64_t inflight = 1;
      lazymalloc_stat_get("release_inflight_bytes", &inflight);
      LMT_CHILD_CHECK(inflight == 0);  // settled (as RETAINED) by the fork handler
      LMT_CHILD_CHECK(FirstBadPage(kept, 4 * kMiB, 5) == SIZE_MAX);
      for (int i = 0; i < 2; ++i) {
        void* q = lmt::Malloc(64 * kMiB);
        LMT_CHILD_CHECK(q != nullptr);
        Mark(q, 64 * kMiB, 1000 + i);
        LMT_CHILD_CHECK(FirstBadPage(q, 64 * kMiB, 1000 + i) == SIZE_MAX);
        lmt::Free(q);
      }
      lazymalloc_purge(LAZYMALLOC_PURGE_LAZY);
      lazymalloc_memory_state m;
      lazymalloc_memory_state_get(&m);
      LMT_CHILD_CHECK(m.reserved == m.active + m.retained + m.lazy + m.clean);
      return 0;
    }, 60);
    EXPECT_EQ(failure, "") << "round " << round;
    EXPECT_EQ(FirstBadPage(kept, 4 * kMiB, 5), SIZE_MAX);
    lmt::Free(kept);
  }
  lazymalloc_purge(LAZYMALLOC_PURGE_LAZY);
  ExpectStatesAddUp();
}

}  // namespace
