// Each thread's cache of freed large blocks (issue #16, frontend/large.cc):
// a freed block serves the thread's next large malloc that it fits, without
// the backend; the cache is bounded, its blocks go back when the thread is
// quiet or exits, and a second free of a cached block aborts.  Over the
// real backend through the lm_* entry points, background thread off.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/options.h"
#include "fixture.h"
#include "phases.h"
#include "frontend/heap.h"
#include "frontend/internal.h"

namespace lazymalloc {
namespace {

const auto stat = test::lm_stat;
constexpr size_t kKiB = 1024;
constexpr uint64_t kSecond = 1000000000;

// Pages of [p, p + len) resident (mincore), len a multiple of the page,
// from the page that holds p (a large block starts a few cache lines into
// its first page: large_lead).
size_t resident_pages(const void* p, size_t len) {
  std::vector<unsigned char> v(len / 4096);
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(4095));
  if (mincore(page, len, v.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char b : v) n += b & 1;
  return n;
}

// Large blocks start a few cache lines into their span where its last unit
// has room (large_lead): where these tests compare memory, they compare the
// span's start, and the end of the block (its usable size), which is the
// span's end.  A size that fills its units exactly starts at the span's
// start.
char* base(const void* p) { return detail::g.backend.span_of(p)->start; }
char* end(void* p) { return static_cast<char*>(p) + lm_usable_size(p); }
// Whether blocks a and b adjoin, either above the other.
bool adjoin(void* a, void* b) { return end(a) == base(b) || end(b) == base(a); }

// The arenas are advised MADV_HUGEPAGE (the heap of earlier tests reached
// hugepage_threshold): a cold free then leaves the block resident, as the
// advice would split the 2 MiB page it shares with other units.
bool hugepage_arenas() { return test::lm_stat("hugepage_advice") != 0; }

// The free of a 600 KiB block (640 KiB of units) at p, written whole, that
// left it RETAINED and resident: no MADV_DONTNEED (large_release_cold).
// (Given back, in a forked child, the child checks the other way.)
void expect_kept_resident(const char* p, uint64_t dontneed, uint64_t retained) {
  EXPECT_EQ(test::lm_stat("large_cold_dontneed_bytes"), dontneed);
  EXPECT_GE(test::lm_stat("retained_bytes"), retained + 640 * kKiB);
  EXPECT_EQ(resident_pages(p, 600 * kKiB), 150u);
}

// Warms the calling thread's cache (a large malloc after a large free:
// large_cache_put takes nothing before) and empties it, its peak back to its
// live bytes (lm_thread_collect).
void warm_cache() {
  lm_free(lm_malloc(300 * kKiB));
  lm_free(lm_malloc(300 * kKiB));
  lm_thread_collect();
}

// n blocks of `size` no two of which adjoin (a free joins a block to the
// cached blocks it adjoins, large_cache_put), each malloc followed by a live
// block of 256 KiB + 1 (320 KiB) in *apart; a block that lands beside one
// already taken (earlier tests leave the backend's free runs anywhere)
// stays live in *apart too.
std::vector<void*> apart_blocks(int n, size_t size, std::vector<void*>* apart) {
  std::vector<void*> v;
  while (int(v.size()) < n && apart->size() < 16 * size_t(n) + 64) {
    void* p = lm_malloc(size);
    bool beside = false;
    for (void* q : v) beside |= adjoin(p, q);
    (beside ? apart : &v)->push_back(p);
    apart->push_back(lm_malloc(256 * kKiB + 1));
  }
  return v;
}

// Two adjoining blocks of `size` in one slot (the cache joins only
// those), the lower one first: mallocs until a block lies right above or
// below one taken before in its slot (earlier tests leave the backend's
// free runs anywhere: the next two may not adjoin); the others stay live,
// in *live.  {nullptr, nullptr} if 16 mallocs found none.
std::pair<char*, char*> adjoining_blocks(size_t size, std::vector<void*>* live) {
  std::vector<char*> taken;
  for (int i = 0; i < 16; ++i) {
    char* p = static_cast<char*>(lm_malloc(size));
    for (size_t j = 0; p && j < taken.size(); ++j) {
      char* q = taken[j];
      const bool one_slot = reinterpret_cast<uintptr_t>(p) / kSlotSize == reinterpret_cast<uintptr_t>(q) / kSlotSize;
      if (!adjoin(p, q) || !one_slot) continue;
      taken.erase(taken.begin() + std::ptrdiff_t(j));
      live->insert(live->end(), taken.begin(), taken.end());
      return p < q ? std::pair{p, q} : std::pair{q, p};
    }
    taken.push_back(p);
  }
  live->insert(live->end(), taken.begin(), taken.end());
  return {nullptr, nullptr};
}

class LargeCache : public ::testing::Test {
 protected:
  void SetUp() override {
    option_set(unsigned(Opt::background), 0);
    option_set(unsigned(Opt::large_cache), 4 << 20);
    lm_init();
    warm_cache();  // a warm, empty cache to start from
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
  // 400 KiB: the 512 KiB block fits it within 2x.
  char* q = static_cast<char*>(lm_malloc(400 * kKiB));
  EXPECT_EQ(base(q), p);  // 512 KiB: a block that fills its units starts at its span's start
  EXPECT_EQ(end(q), p + 512 * kKiB);
  EXPECT_EQ(stat("large_cache_hits"), hits + 1);
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  EXPECT_GE(lm_usable_size(q), 400 * kKiB);
  // calloc through the cache still gives zeros (the block is dirty).
  lm_free(q);
  char* z = static_cast<char*>(lm_calloc(1, 500 * kKiB));
  ASSERT_EQ(base(z), p);
  for (size_t i = 0; i < 500 * kKiB; i += 4096) ASSERT_EQ(z[i], 0) << i;
  lm_free(z);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A cached block more than twice the request is cut (Backend::split_units,
// no backend lock): the request's units go, the rest stays cached, a large
// block that serves the next request it fits.  The thread's blocks and its
// cache together still hold what they did (its peak less its live bytes).
TEST_F(LargeCache, ABlockMoreThanTwiceTheRequestIsCutAndTheRestStaysCached) {
  char* big = static_cast<char*>(lm_malloc(1024 * kKiB));
  lm_free(big);
  const uint64_t hits = stat("large_cache_hits"), splits = stat("large_cache_splits");
  const uint64_t frees = stat("large_frees");
  char* small = static_cast<char*>(lm_malloc(300 * kKiB));  // 1 MiB > 2 x 300 KiB
  EXPECT_EQ(base(small), big);
  EXPECT_EQ(end(small), big + 320 * kKiB);
  EXPECT_EQ(stat("large_cache_hits"), hits + 1);
  EXPECT_EQ(stat("large_cache_splits"), splits + 1);
  EXPECT_EQ(stat("large_cache_bytes"), 704 * kKiB);
  EXPECT_EQ(lm_check_invariants(), nullptr);
  char* rest = static_cast<char*>(lm_malloc(600 * kKiB));  // 704 KiB serves it within 2x
  EXPECT_EQ(base(rest), big + 320 * kKiB);
  EXPECT_EQ(end(rest), big + 1024 * kKiB);
  EXPECT_EQ(stat("large_cache_hits"), hits + 2);
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  memset(small, 1, 300 * kKiB);
  memset(rest, 2, 600 * kKiB);
  EXPECT_EQ(lm_check_invariants(), nullptr);
  // Freed one after the other, the two join again in the cache: one block.
  const uint64_t joins = stat("large_cache_joins");
  lm_free(rest);
  lm_free(small);
  EXPECT_EQ(stat("large_cache_joins"), joins + 1);
  EXPECT_EQ(stat("large_cache_bytes"), 1024 * kKiB);
  EXPECT_EQ(stat("large_frees"), frees + 2);
  char* again = static_cast<char*>(lm_malloc(1000 * kKiB));
  EXPECT_EQ(base(again), big);
  EXPECT_EQ(end(again), big + 1024 * kKiB);
  lm_free(again);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Joins stop at a large block's size (kMaxLarge): two adjoining 1 MiB
// blocks stay two cached blocks.
TEST_F(LargeCache, AJoinMakesNoBlockLargerThanALargeBlock) {
  std::vector<void*> live;  // room under the peak and half the live bytes for 2 MiB
  for (int i = 0; i < 4; ++i) live.push_back(lm_malloc(1024 * kKiB));
  auto [x, y] = adjoining_blocks(1024 * kKiB, &live);
  ASSERT_NE(x, nullptr) << "no two adjoining 1 MiB blocks";
  const uint64_t joins = stat("large_cache_joins");
  lm_free(x);
  lm_free(y);
  EXPECT_EQ(stat("large_cache_joins"), joins);
  EXPECT_EQ(stat("large_cache_bytes"), 2048 * kKiB);
  EXPECT_EQ(detail::g.backend.span_of(x), detail::g.backend.span_of(x + 1023 * kKiB));
  EXPECT_NE(detail::g.backend.span_of(x), detail::g.backend.span_of(y));
  for (void* p : live) lm_free(p);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A cut leaves no block too small for a large malloc in the cache: a block
// with less than a large block's units (5) beyond the request is not cut.
TEST_F(LargeCache, ACutLeavesALargeBlock) {
  std::vector<void*> live;  // room under the peak for what follows
  for (int i = 0; i < 4; ++i) live.push_back(lm_malloc(1024 * kKiB));
  for (void* p : live) lm_free(p);
  lm_thread_collect();
  for (int i = 0; i < 4; ++i) live[i] = lm_malloc(1024 * kKiB);
  char* block = static_cast<char*>(lm_malloc(560 * kKiB));  // 576 KiB: 9 units
  lm_free(block);
  ASSERT_EQ(stat("large_cache_bytes"), 576 * kKiB);
  const uint64_t hits = stat("large_cache_hits"), splits = stat("large_cache_splits");
  // 270 KiB takes 5 units; 4 would be left: no cut, and 576 KiB > 2 x 270 KiB.
  void* p = lm_malloc(270 * kKiB);
  EXPECT_EQ(stat("large_cache_hits"), hits);
  EXPECT_EQ(stat("large_cache_splits"), splits);
  lm_free(p);
  for (void* q : live) lm_free(q);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The request uses at least half of a cached block: 1 MiB serves 520 KiB
// (of blocks of one size, the most recent; the older one waits evicted).
TEST_F(LargeCache, ABlockUpToTwiceTheRequestServesIt) {
  char* older = static_cast<char*>(lm_malloc(1024 * kKiB));
  char* big = static_cast<char*>(lm_malloc(1024 * kKiB));
  lm_free(older);
  lm_free(big);
  const uint64_t hits = stat("large_cache_hits");
  char* p = static_cast<char*>(lm_malloc(520 * kKiB));
  EXPECT_EQ(base(p), big);
  EXPECT_EQ(stat("large_cache_hits"), hits + 1);
  EXPECT_EQ(stat("large_cache_bytes"), 1024 * kKiB);
  lm_free(p);
}

// A malloc the cache serves and the free that fills it take nothing
// process-wide: no backend operation and no global counter (each would
// write a cache line that every thread's large mallocs and frees share,
// issue #16).  The statistics still count them, folded per heap.
TEST_F(LargeCache, AHitAndAPutWriteNoProcessWideState) {
  void* warm = lm_malloc(600 * kKiB);
  ASSERT_NE(warm, nullptr);
  lm_free(warm);
  const uint64_t hits = stat("large_cache_hits"), allocs = stat("large_allocs");
  const uint64_t frees = stat("large_frees"), blocks = stat("large_blocks");
  uint64_t before[kStatCount];
  for (unsigned i = 0; i < kStatCount; ++i) before[i] = detail::g.stats.v[i].load();
  constexpr int kRounds = 100;
  for (int i = 0; i < kRounds; ++i) {
    char* p = static_cast<char*>(lm_malloc(500 * kKiB + size_t(i) * kKiB));
    ASSERT_EQ(p, warm) << i;
    p[0] = char(i);
    lm_free(p);
  }
  for (unsigned i = 0; i < kStatCount; ++i) {
    EXPECT_EQ(detail::g.stats.v[i].load(), before[i]) << kStatInfo[i].name;
  }
  EXPECT_EQ(stat("large_cache_hits"), hits + kRounds);
  EXPECT_EQ(stat("large_allocs"), allocs + kRounds);
  EXPECT_EQ(stat("large_frees"), frees + kRounds);
  EXPECT_EQ(stat("large_blocks"), blocks);
  EXPECT_EQ(stat("large_cache_bytes"), 640 * kKiB);
}

// The gauges add up over heaps: a block one thread allocates and another
// frees counts +1 on the first heap and -1 on the second.
TEST_F(LargeCache, AGaugeSumsOverHeapsWhenAnotherThreadFrees) {
  // This thread gets its heap (and cache) and a peak of 704 KiB of large
  // blocks, the room its cache has for another's block.
  lm_free(lm_malloc(700 * kKiB));
  const uint64_t blocks = stat("large_blocks"), cached = stat("large_cache_bytes");
  void* p = nullptr;
  std::thread([&] { p = lm_malloc(700 * kKiB); }).join();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(stat("large_blocks"), blocks + 1);
  lm_free(p);  // into this thread's cache (its own block waits evicted)
  EXPECT_EQ(stat("large_blocks"), blocks);
  EXPECT_EQ(stat("large_cache_bytes"), cached + 704 * kKiB);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The cache holds at most 8 blocks and the option's bytes (with 5 MiB of
// large blocks live, half of which is more than either), plus the block it
// evicted last, which waits for the next miss (counted as cached).
TEST_F(LargeCache, HoldsAtMostEightBlocksAndTheOptionsBytes) {
  std::vector<void*> live;
  for (int i = 0; i < 16; ++i) live.push_back(lm_malloc(300 * kKiB));  // 16 x 320 KiB
  const uint64_t joins = stat("large_cache_joins");
  std::vector<void*> v = apart_blocks(12, 300 * kKiB, &live);
  for (void* p : v) lm_free(p);
  ASSERT_EQ(stat("large_cache_joins"), joins) << "blocks apart";
  // 320 KiB spans: 8 slots bind first (2.5 MiB), under the 4 MiB limit.
  EXPECT_EQ(stat("large_cache_bytes"), (8 + 1) * 320 * kKiB);
  lm_thread_collect();
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  option_set(unsigned(Opt::large_cache), 1 << 20);
  v = apart_blocks(6, 300 * kKiB, &live);
  for (void* p : v) lm_free(p);
  ASSERT_EQ(stat("large_cache_joins"), joins) << "blocks apart";
  EXPECT_EQ(stat("large_cache_bytes"), (3 + 1) * 320 * kKiB);  // 1 MiB binds
  option_set(unsigned(Opt::large_cache), 0);
  lm_thread_collect();
  void* p = lm_malloc(300 * kKiB);
  lm_free(p);
  EXPECT_EQ(stat("large_cache_bytes"), 0u) << "large_cache=0 turns the cache off";
  for (void* q : live) lm_free(q);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The cache's bytes scale with the thread's use: at most the large bytes it
// holds live (at least 1 MiB).  The block evicted last goes back with the
// next miss, in the same backend lock hold as its allocation.
TEST_F(LargeCache, HoldsAtMostTheThreadsLiveLargeBytes) {
  // On a thread of its own: its heap's large-block use starts from none
  // (a fresh heap, or a pooled one reset when its last thread exited), not
  // from what earlier tests left in the main thread's.
  std::thread([] {
    warm_cache();
    std::vector<void*> v;
    for (int i = 0; i < 4; ++i) v.push_back(lm_malloc(700 * kKiB));  // 704 KiB spans
    for (void* p : v) lm_free(p);
    // Nothing live any more: 1 MiB holds one block, the one before waits
    // (two adjoining 704 KiB blocks would be more than 1 MiB: no join).
    EXPECT_EQ(stat("large_cache_bytes"), 2 * 704 * kKiB);
    const uint64_t hits = stat("large_cache_hits");
    void* miss = lm_malloc(330 * kKiB);  // 704 KiB > 2 x 330 KiB, and 6 units leave 5: a cut
    ASSERT_NE(miss, nullptr);
    EXPECT_EQ(stat("large_cache_hits"), hits + 1);
    EXPECT_EQ(stat("large_cache_bytes"), 2 * 704 * kKiB - 384 * kKiB);
    lm_free(miss);
    const uint64_t releases_before = stat("large_frees");
    miss = lm_malloc(1000 * kKiB);  // larger than any cached block: a miss
    ASSERT_NE(miss, nullptr);
    EXPECT_EQ(stat("large_cache_hits"), hits + 1);
    EXPECT_EQ(stat("large_cache_bytes"), 0u) << "the evicted and the smaller blocks went back with the miss";
    EXPECT_EQ(stat("large_frees"), releases_before);
    EXPECT_EQ(lm_check_invariants(), nullptr);
    lm_free(miss);
    lm_thread_collect();
    EXPECT_EQ(stat("large_cache_bytes"), 0u);
    // With 4 blocks of 704 KiB live (2.75 MiB, a peak of 8), 4 freed ones
    // all stay: as many bytes as are live (half of them, 2 blocks, with the
    // evicted third waiting, before issue #16's ninth round).
    lm_thread_collect();
    std::vector<void*> live;
    for (int i = 0; i < 4; ++i) live.push_back(lm_malloc(700 * kKiB));
    v.clear();
    for (int i = 0; i < 4; ++i) v.push_back(lm_malloc(700 * kKiB));
    for (void* p : v) lm_free(p);
    EXPECT_EQ(stat("large_cache_bytes"), 4 * 704 * kKiB);
    // Two live ones freed: 2 blocks live, so 2 cached, and the block
    // evicted last waiting for the next miss (half: 1 MiB, one block).
    for (int i = 0; i < 2; ++i) {
      lm_free(live.back());
      live.pop_back();
    }
    EXPECT_EQ(stat("large_cache_bytes"), 3 * 704 * kKiB);
    for (void* p : live) lm_free(p);
    EXPECT_EQ(lm_check_invariants(), nullptr);
  }).join();
}

// A malloc takes the smallest cached block that fits it within 2x, not the
// most recent: the 1 MiB block stays for a request only it can serve.
TEST_F(LargeCache, TheSmallestBlockThatFitsServesAMalloc) {
  std::vector<void*> live;  // 8 MiB live: room for the cache (half of live, peak less live)
  for (int i = 0; i < 8; ++i) live.push_back(lm_malloc(1024 * kKiB));
  char* mid = static_cast<char*>(lm_malloc(600 * kKiB));   // 640 KiB
  live.push_back(lm_malloc(256 * kKiB + 1));               // apart
  char* big = static_cast<char*>(lm_malloc(1024 * kKiB));  // 1 MiB
  live.push_back(lm_malloc(256 * kKiB + 1));
  char* top = static_cast<char*>(lm_malloc(800 * kKiB));   // 832 KiB
  lm_free(mid);
  lm_free(big);
  lm_free(top);
  ASSERT_EQ(stat("large_cache_bytes"), (640 + 1024 + 832) * kKiB);
  const uint64_t hits = stat("large_cache_hits");
  char* p = static_cast<char*>(lm_malloc(520 * kKiB));  // all three fit within 2x
  // (A block reused from the same memory starts where it did: large_lead.)
  EXPECT_EQ(p, mid) << "the smallest block that fits, not the most recent (832 KiB)";
  char* q = static_cast<char*>(lm_malloc(900 * kKiB));
  EXPECT_EQ(base(q), big);
  char* r = static_cast<char*>(lm_malloc(700 * kKiB));
  EXPECT_EQ(r, top);
  EXPECT_EQ(stat("large_cache_hits"), hits + 3);
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  lm_free(p);
  lm_free(q);
  lm_free(r);
  for (void* b : live) lm_free(b);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A miss gives back the cached blocks smaller than its request (they could
// not serve it), with the evicted one, in its own backend lock hold.  (A
// block larger than the request serves it: within 2x, or cut.)
TEST_F(LargeCache, AMissGivesBackTheSmallerCachedBlocks) {
  std::vector<void*> live;
  for (int i = 0; i < 8; ++i) live.push_back(lm_malloc(1024 * kKiB));
  std::vector<void*> smaller = apart_blocks(9, 300 * kKiB, &live);  // 9 x 320 KiB
  for (void* p : smaller) lm_free(p);
  // 8 slots of 320 KiB blocks, one evicted (counted).
  ASSERT_EQ(stat("large_cache_bytes"), 9 * 320 * kKiB);
  const uint64_t hits = stat("large_cache_hits");
  void* miss = lm_malloc(500 * kKiB);  // 320 KiB < 500 KiB
  ASSERT_NE(miss, nullptr);
  EXPECT_EQ(stat("large_cache_hits"), hits);
  EXPECT_EQ(stat("large_cache_bytes"), 0u) << "the smaller blocks went back with the miss";
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_free(miss);
  for (void* b : live) lm_free(b);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The cache holds at most the thread's peak of live large bytes less those
// it holds live: with a 576 KiB and a 1 MiB block at the peak, the first
// freed is cached, and a miss for 270 KiB (a 320 KiB block; 576 KiB is more than
// twice that, and a cut would leave 4 units) gives it back (1 MiB + 320 KiB
// live leaves 256 KiB under the peak).  A thread that has held no large block since
// lm_thread_collect or since its heap's last thread exited caches none
// that another thread allocated.
TEST_F(LargeCache, HoldsAtMostThePeakLessTheLiveLargeBytes) {
  char* a = static_cast<char*>(lm_malloc(560 * kKiB));
  char* b = static_cast<char*>(lm_malloc(1024 * kKiB));
  lm_free(a);
  EXPECT_EQ(stat("large_cache_bytes"), 576 * kKiB);
  const uint64_t hits = stat("large_cache_hits");
  void* small = lm_malloc(270 * kKiB);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(stat("large_cache_hits"), hits);
  EXPECT_EQ(stat("large_cache_bytes"), 0u) << "576 KiB cached over 256 KiB of room";
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_free(small);
  lm_free(b);
  lm_thread_collect();  // the peak starts again from the live bytes (none)
  ASSERT_EQ(stat("large_cache_bytes"), 0u);
  void* p = nullptr;
  std::thread([&] { p = lm_malloc(700 * kKiB); }).join();
  ASSERT_NE(p, nullptr);
  // Freed by a thread of its own, whose heap (a pooled one, reset when its
  // last thread exited) holds no large block: main's may, from other tests.
  std::thread([&] {
    warm_cache();
    lm_free(p);
    EXPECT_EQ(stat("large_cache_bytes"), 0u) << "no room under a peak of 0";
  }).join();
  // An exiting thread's live bytes and peak start again too: the next
  // thread to adopt its heap (the pool's top) has no room for a block.
  void* left = nullptr;
  std::thread([&] { left = lm_malloc(700 * kKiB); }).join();  // live and peak 704 KiB
  ASSERT_NE(left, nullptr);
  std::thread([&] {
    lm_free(lm_malloc(16));  // adopts the exited thread's heap
    warm_cache();
    lm_free(left);
    EXPECT_EQ(stat("large_cache_bytes"), 0u) << "the adopted heap's use was reset at exit";
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A thread's cache takes freed blocks only once the thread has allocated a
// large block after freeing one (issue #16, fifth round): a block freed by a
// thread that allocates no other (a table built at start-up, a vector's
// prototype) goes back to the backend, retained, where any span reuses its
// units, instead of staying resident in the cache beside them.  The thread's
// next large malloc warms the cache, and its blocks are cached from then
// on; a thread that adopts the heap after an exit starts cold again.
TEST_F(LargeCache, TakesBlocksOnlyOnceTheThreadAllocatesAfterAFree) {
  const uint64_t cached = stat("large_cache_bytes");  // main's, empty (SetUp)
  ASSERT_EQ(cached, 0u);
  for (int round = 0; round < 2; ++round) {
    std::thread([&] {
      lm_free(lm_malloc(16));  // a heap (a fresh or pooled one: cold either way)
      char* p = static_cast<char*>(lm_malloc(600 * kKiB));  // 640 KiB
      ASSERT_NE(p, nullptr);
      memset(p, 1, 600 * kKiB);
      const uint64_t retained = stat("retained_bytes");
      const uint64_t dontneed = stat("large_cold_dontneed_bytes");
      lm_free(p);
      EXPECT_EQ(stat("large_cache_bytes"), 0u) << "round " << round << ": a cold cache takes nothing";
      // The thread's own block: back to the backend, RETAINED (the main
      // thread has a heap too: the block's pages stay for whichever thread
      // allocates next; alone, they would be given back: below).
      expect_kept_resident(p, dontneed, retained);
      const uint64_t hits = stat("large_cache_hits");
      char* q = static_cast<char*>(lm_malloc(600 * kKiB));  // a miss: warms the cache
      ASSERT_NE(q, nullptr);
      EXPECT_EQ(stat("large_cache_hits"), hits);
      lm_free(q);
      EXPECT_EQ(stat("large_cache_bytes"), 640 * kKiB) << "round " << round << ": warm";
      char* r = static_cast<char*>(lm_malloc(600 * kKiB));
      EXPECT_EQ(r, q);
      EXPECT_EQ(stat("large_cache_hits"), hits + 1);
      lm_free(r);
    }).join();  // the exit empties the cache and cools it
    EXPECT_EQ(stat("large_cache_bytes"), 0u);
  }
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A block freed while the thread's cache is cold goes back with its pages
// (MADV_DONTNEED, issue #16, sixth round) if the thread allocated it and is
// the one thread with a heap: a program's table built and dropped at
// start-up (random-size's vector prototype) otherwise stayed resident,
// RETAINED, while small spans reused its units and touched a few pages of
// each.  Where other threads have heaps the block stays RETAINED, resident,
// for whichever allocates next (a thread per request that allocates a
// buffer, frees it and exits is never warm: given back, each thread's free
// and its successor's faults cost 2-3x the thread); a thread that frees
// another thread's block (a consumer) leaves it RETAINED for the producer;
// and once the thread has reused a large block (its cache warm) a block its
// cache cannot hold goes back RETAINED as before.  (A block of an exited
// thread freed by the thread that adopted its heap counts as the adopter's
// own: Span::heap.)  The child of a fork from a fresh thread is such a
// one-heap process: fork_child pools every other thread's heap.
TEST_F(LargeCache, AColdFreeGivesBackTheThreadsOwnBlockOnlyInAForkedChildWithOneHeap) {
  char* theirs = nullptr;
  lmt::Phases phases;
  std::thread producer([&] {  // alive until the block is freed: its heap is not pooled
    theirs = static_cast<char*>(lm_malloc(600 * kKiB));  // 640 KiB
    memset(theirs, 2, 600 * kKiB);
    phases.set(1);
    phases.wait(2);
  });
  phases.wait(1);
  ASSERT_NE(theirs, nullptr);
  // Three heaps (main's, the producer's, this thread's): the thread's own
  // block, freed cold, stays RETAINED and resident, as does the producer's.
  std::thread([&] {
    lm_free(lm_malloc(16));  // a heap, its large cache cold
    char* mine = static_cast<char*>(lm_malloc(600 * kKiB));
    ASSERT_NE(mine, nullptr);
    memset(mine, 1, 600 * kKiB);
    const uint64_t dontneed = stat("large_cold_dontneed_bytes");
    const uint64_t retained = stat("retained_bytes");
    lm_free(theirs);  // not the thread's: resident for its next user
    expect_kept_resident(theirs, dontneed, retained);
    const uint64_t retained2 = stat("retained_bytes");
    lm_free(mine);
    expect_kept_resident(mine, dontneed, retained2);
  }).join();
  phases.set(2);
  producer.join();
  // Alone: a forked child's thread.  Its own block freed cold goes back
  // with its pages (resident where the arenas are on hugepages: the advice
  // would split a 2 MiB page); warm, a block its cache cannot hold goes
  // back RETAINED.  The child reports by its exit status.
  int status = -1;
  std::thread([&] {
    lm_free(lm_malloc(16));  // a heap, its large cache cold
    const pid_t pid = fork();
    if (pid == 0) {
      int bad = 0;
      const bool huge = hugepage_arenas();
      char* mine = static_cast<char*>(lm_malloc(600 * kKiB));
      if (!mine) _exit(100);
      memset(mine, 1, 600 * kKiB);
      const uint64_t dontneed = stat("large_cold_dontneed_bytes");
      const uint64_t clean = stat("clean_bytes");
      lm_free(mine);
      if (huge) {
        bad |= (stat("large_cold_dontneed_bytes") != dontneed) << 0;
        bad |= (resident_pages(mine, 600 * kKiB) != 150u) << 1;
      } else {
        bad |= (stat("large_cold_dontneed_bytes") != dontneed + 640 * kKiB) << 0;
        bad |= (stat("clean_bytes") < clean + 640 * kKiB) << 1;
        bad |= (resident_pages(mine, 640 * kKiB) != 0u) << 2;
      }
      // Warm (a large malloc after the free), with a 1 MiB peak: a block the
      // cache has no room for goes back RETAINED.
      const uint64_t after = stat("large_cold_dontneed_bytes");
      std::vector<void*> live;
      for (int i = 0; i < 4; ++i) live.push_back(lm_malloc(300 * kKiB));  // 320 KiB each
      const uint64_t cached = stat("large_cache_bytes");
      for (void* q : live) memset(q, 3, 300 * kKiB);
      for (void* q : live) lm_free(q);
      bad |= (stat("large_cache_bytes") <= cached) << 3;
      bad |= (stat("large_cold_dontneed_bytes") != after) << 4;
      bad |= (lm_check_invariants() != nullptr) << 5;
      _exit(bad);
    }
    ASSERT_GT(pid, 0);
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
  }).join();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 0 advised bytes, 1-2 pages / CLEAN bytes, 3 warm cache, "
                                       "4 warm advice, 5 invariants; 100 no block";
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST_F(LargeCache, ASecondFreeOfACachedBlockAborts) {
  void* p = lm_malloc(600 * kKiB);
  lm_free(p);
  EXPECT_DEATH(lm_free(p), "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  EXPECT_DEATH(lm_realloc(p, 700 * kKiB), "lazymalloc: realloc\\(\\): invalid pointer 0x[0-9a-f]+: double free");
}

// A block joined to the cached block below it lies inside that one: its
// second free is still reported as a double free.
TEST_F(LargeCache, ASecondFreeOfAJoinedBlockAborts) {
  char* big = static_cast<char*>(lm_malloc(1024 * kKiB));
  lm_free(big);
  char* a = static_cast<char*>(lm_malloc(300 * kKiB));  // cut from big
  char* b = static_cast<char*>(lm_malloc(300 * kKiB));  // cut from the rest
  ASSERT_EQ(base(a), big);
  ASSERT_EQ(base(b), big + 320 * kKiB);
  lm_free(a);
  lm_free(b);  // joins a
  EXPECT_DEATH(lm_free(b), "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  EXPECT_DEATH(lm_realloc(b, 700 * kKiB), "lazymalloc: realloc\\(\\): invalid pointer 0x[0-9a-f]+: double free");
}

// A worker frees large blocks and blocks: the collector gives them back
// once the heap has been quiet for the idle time, not before.  Another
// worker's exit gives its blocks back at once.
TEST_F(LargeCache, AQuietOrExitedThreadsBlocksGoBack) {
  lmt::Phases phases;
  std::thread worker([&] {
    warm_cache();
    std::vector<void*> live;  // so that the cache may hold the 4 (half the live bytes)
    for (int i = 0; i < 10; ++i) live.push_back(lm_malloc(700 * kKiB));
    std::vector<void*> v;
    for (int i = 0; i < 4; ++i) v.push_back(lm_malloc(700 * kKiB));
    for (void* p : v) lm_free(p);
    phases.set(1);
    phases.wait(2);
    for (void* p : live) lm_free(p);
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
    warm_cache();
    void* p = lm_malloc(700 * kKiB);
    lm_free(p);
    EXPECT_EQ(stat("large_cache_bytes"), 704 * kKiB);
  }).join();
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A thread that cuts its cached block for one request and frees it again,
// so that it joins the rest, runs from its cache alone: no backend
// operation, no process-wide counter, no span record from the pool (the
// join's record is kept for the next cut).
TEST_F(LargeCache, ACutAndAJoinWriteNoProcessWideState) {
  // Nothing that earlier tests freed is left due for a decay purge, which
  // a free may run inline (background off) and which would write the
  // counters below.
  lm_purge(true);
  std::vector<void*> live;
  for (int i = 0; i < 4; ++i) live.push_back(lm_malloc(1024 * kKiB));
  char* big = static_cast<char*>(lm_malloc(1024 * kKiB));
  lm_free(big);
  // A first round takes the record the joins then keep.
  lm_free(lm_malloc(300 * kKiB));
  uint64_t before[kStatCount];
  for (unsigned i = 0; i < kStatCount; ++i) before[i] = detail::g.stats.v[i].load();
  const size_t records = detail::g.backend.span_records();
  const uint64_t splits = stat("large_cache_splits"), joins = stat("large_cache_joins");
  constexpr int kRounds = 100;
  for (int i = 0; i < kRounds; ++i) {
    // The cut takes the record the last join kept (no pool lock), the
    // join keeps the record of the part that came back.
    Span* spare = detail::tl_heap->large_spare;
    ASSERT_NE(spare, nullptr) << i;
    char* p = static_cast<char*>(lm_malloc(260 * kKiB + size_t(i % 60) * kKiB));  // 5 units
    ASSERT_EQ(base(p), big) << i;
    EXPECT_EQ(detail::g.backend.span_of(big + 320 * kKiB), spare) << "the rest's record";
    EXPECT_EQ(detail::tl_heap->large_spare, nullptr);
    p[0] = char(i);
    lm_free(p);
  }
  for (unsigned i = 0; i < kStatCount; ++i) {
    EXPECT_EQ(detail::g.stats.v[i].load(), before[i]) << kStatInfo[i].name;
  }
  EXPECT_EQ(detail::g.backend.span_records(), records);
  EXPECT_EQ(stat("large_cache_splits"), splits + kRounds);
  EXPECT_EQ(stat("large_cache_joins"), joins + kRounds);
  EXPECT_EQ(stat("large_cache_bytes"), 1024 * kKiB);
  for (void* p : live) lm_free(p);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The cut and joined blocks go back like any cached block: at thread exit
// and when the thread has been quiet (lm_collect_idle_heaps), with the
// record a join kept.
TEST_F(LargeCache, CutAndJoinedBlocksGoBackWhenTheThreadExitsOrIsQuiet) {
  const size_t records = detail::g.backend.span_records();
  const uint64_t active = stat("active_bytes");
  for (int quiet = 0; quiet < 2; ++quiet) {
    lmt::Phases phases;
    std::thread worker([&] {
      warm_cache();
      std::vector<void*> live;
      for (int i = 0; i < 4; ++i) live.push_back(lm_malloc(1024 * kKiB));
      char* big = static_cast<char*>(lm_malloc(1024 * kKiB));
      lm_free(big);
      char* a = static_cast<char*>(lm_malloc(300 * kKiB));  // a cut
      char* b = static_cast<char*>(lm_malloc(300 * kKiB));  // another
      EXPECT_EQ(base(a), big);
      EXPECT_EQ(base(b), big + 320 * kKiB);
      lm_free(a);
      lm_free(b);  // joins both
      EXPECT_EQ(stat("large_cache_bytes"), 1024 * kKiB);
      for (void* p : live) lm_free(p);
      phases.set(1);
      phases.wait(2);
    });
    phases.wait(1);
    EXPECT_GT(stat("large_cache_bytes"), 0u);
    if (quiet) {
      const uint64_t t0 = 9000 * kSecond, idle = kSecond;
      lm_collect_idle_heaps(t0, idle);
      lm_collect_idle_heaps(t0 + idle, idle);
      EXPECT_EQ(stat("large_cache_bytes"), 0u) << "a quiet thread's cache goes back";
      EXPECT_EQ(detail::g.backend.span_records(), records + 0) << "with the kept record";
    }
    phases.set(2);
    worker.join();
    EXPECT_EQ(stat("large_cache_bytes"), 0u);
    EXPECT_EQ(stat("active_bytes"), active);
    EXPECT_EQ(detail::g.backend.span_records(), records);
  }
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Many threads churn large blocks (256 KiB-1 MiB, random sizes, a quarter
// freed by another thread), cutting and joining their caches' blocks; no
// sleeps, so that it also runs under TSan.  At the end every block and every
// cached byte went back, and the backend's books hold.
TEST(LargeCacheStress, ManyThreadsChurnLargeBlocks) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  constexpr int kThreads = 32, kOps = 3000, kSlots = 8;
  const uint64_t active = stat("active_bytes"), blocks = stat("large_blocks");
  const uint64_t splits = stat("large_cache_splits"), joins = stat("large_cache_joins");
  // Blocks handed to the next thread, which frees them.
  std::vector<std::atomic<void*>> mailbox(kThreads);
  for (auto& m : mailbox) m.store(nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t x = 0x9e3779b97f4a7c15ull * uint64_t(t + 1);
      auto next = [&x] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
      };
      void* slots[kSlots] = {};
      for (int i = 0; i < kOps; ++i) {
        const unsigned k = unsigned(next() % kSlots);
        if (slots[k]) {
          if (next() % 4 == 0) {
            if (void* old = mailbox[(t + 1) % kThreads].exchange(slots[k])) lm_free(old);
          } else {
            char* p = static_cast<char*>(slots[k]);
            ASSERT_EQ(p[0], char(t));
            lm_free(p);
          }
        }
        const size_t size = 256 * kKiB + 1 + size_t(next() % (768 * kKiB));
        char* p = static_cast<char*>(lm_malloc(size));
        ASSERT_NE(p, nullptr);
        ASSERT_GE(lm_usable_size(p), size);
        p[0] = char(t);
        p[size - 1] = char(t);
        slots[k] = p;
        if (void* in = mailbox[t].exchange(nullptr)) lm_free(in);
      }
      for (void* p : slots) lm_free(p);
    });
  }
  for (auto& th : threads) th.join();
  for (auto& m : mailbox) lm_free(m.exchange(nullptr));
  lm_thread_collect();
  EXPECT_GT(stat("large_cache_splits"), splits);
  EXPECT_GT(stat("large_cache_joins"), joins);
  EXPECT_EQ(stat("large_blocks"), blocks);
  EXPECT_EQ(stat("large_cache_bytes"), 0u);
  EXPECT_EQ(stat("active_bytes"), active);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Large blocks start at a cache line of their first page that follows from
// their span's address (large_lead), within the room the unit rounding
// leaves: blocks at different addresses start at different lines, so the
// same offset of their pages does not fall into the same cache sets.  A
// size that fills its units exactly, and an alignment above a line, start
// at the span's start; the usable size runs to the span's end.
TEST_F(LargeCache, LargeBlocksStartAtDifferentCacheLinesOfTheirFirstPage) {
  std::vector<void*> v;
  uint64_t lines = 0;  // bit i: some block started at line i of its page
  for (int i = 0; i < 16; ++i) {
    char* p = static_cast<char*>(lm_malloc(300 * kKiB));  // 320 KiB of units: room for any line
    ASSERT_NE(p, nullptr);
    const size_t lead = size_t(p - base(p));
    EXPECT_LT(lead, 4096u);
    EXPECT_EQ(lead % 64, 0u);
    EXPECT_EQ(end(p), base(p) + 320 * kKiB);
    lines |= uint64_t(1) << (lead / 64);
    memset(p, i, 300 * kKiB);
    v.push_back(p);
  }
  EXPECT_GE(__builtin_popcountll(lines), 8) << "16 blocks on at least 8 different lines";
  char* exact = static_cast<char*>(lm_malloc(512 * kKiB));
  EXPECT_EQ(exact, base(exact)) << "no room";
  void* aligned = lm_aligned(300 * kKiB, 4096);
  ASSERT_NE(aligned, nullptr);
  EXPECT_EQ(aligned, base(aligned));
  void* line = lm_aligned(300 * kKiB, 64);
  ASSERT_NE(line, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(line) % 64, 0u);
  EXPECT_DEATH(lm_free(static_cast<char*>(v[0]) + 64), "points inside a block");
  for (int i = 0; i < 16; ++i) EXPECT_EQ(static_cast<unsigned char*>(v[size_t(i)])[300 * kKiB - 1], i);
  for (void* p : v) lm_free(p);
  lm_free(exact);
  lm_free(aligned);
  lm_free(line);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A buffer grown by realloc from 16 B to 4 MiB, cycle after cycle (a
// string or a vector appended to, then dropped): each cycle is copied once
// into the large range, at the bottom of the largest free run of slots
// (Backend::alloc's `growing`), grows there in place past its slot
// (promoted to a huge block, then into the next slot), and goes back
// whole, resident, so that the next cycle grows in the same memory: no
// mremap and no fresh page (realloc-grow ran at 0.59x glibc's rate when
// each cycle moved its pages with mremap and faulted in the rest: its
// slot was the smallest free run's, whose next slot a sparse span had
// taken; BackendTest.AGrowingBlockOpensTheBottomOfTheLargestFreeRun...
// pins the placement).
TEST_F(LargeCache, ABufferGrownByReallocCycleAfterCycleGrowsInPlaceWhereTheLastOneDid) {
  // The buffer at 4 MiB, or nullptr if its contents were lost or it moved
  // once it was a large block.
  auto cycle = [](char seed) {
    size_t n = 16;
    char* p = static_cast<char*>(lm_malloc(n));
    memset(p, seed, n);
    while (n < 4096 * kKiB) {
      size_t next = std::min(n + n / 2, 4096 * kKiB);
      char* q = static_cast<char*>(lm_realloc(p, next));
      if (!q || q[0] != seed || q[n - 1] != seed || (n > kMaxSmall && q != p)) return static_cast<char*>(nullptr);
      memset(q + n, seed, next - n);
      p = q;
      n = next;
    }
    return p;
  };
  char* first = cycle(1);
  ASSERT_NE(first, nullptr);
  lm_free(first);
  const uint64_t moves = stat("mremap_moves"), promotions = stat("promotions");
  char* second = cycle(2);
  ASSERT_NE(second, nullptr);
  lm_free(second);
  char* third = cycle(3);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third, second);
  EXPECT_EQ(stat("mremap_moves"), moves);
  EXPECT_EQ(stat("promotions"), promotions + 2);
  lm_free(third);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// realloc of a large block that starts past its span's start: in place it
// keeps its lead (the span grows by the request and the lead), and a block
// promoted to a huge one in place is copied, not moved with mremap, when it
// grows further (the new block starts at its slot, the old one past it).
// A block that realloc moves starts at its span.
TEST_F(LargeCache, ReallocKeepsALargeBlocksLeadAndCopiesItsPromotedBlock) {
  // A block alone in a slot, from its first unit, led, and with the next
  // slot in use, so that it cannot grow into it in place: of 24 blocks of 1
  // MiB of units (two a slot), one at a slot's start whose next slot is
  // used, its slot mate freed and given back to the backend.
  std::vector<void*> live;
  auto block_at = [&](const char* start) {  // the live block whose span starts there
    return std::find_if(live.begin(), live.end(), [&](void* b) { return base(b) == start; });
  };
  char* p = nullptr;
  for (int round = 0; round < 4 && !p; ++round) {  // earlier tests leave holes: more blocks until one fits
    for (int i = 0; i < 24; ++i) live.push_back(lm_malloc(1000 * kKiB));
    for (void* b : live) {
      const Span* s = detail::g.backend.span_of(b);
      if (!p && s->first_unit == 0 && b != s->start && detail::g.backend.span_of(s->start + 2048 * kKiB) &&
          block_at(s->start + 1024 * kKiB) != live.end()) {
        p = static_cast<char*>(b);
      }
    }
  }
  ASSERT_NE(p, nullptr) << "no led block at a slot's start before a used slot";
  const Span* ps = detail::g.backend.span_of(p);
  live.erase(std::find(live.begin(), live.end(), p));
  const auto mate = block_at(ps->start + 1024 * kKiB);
  lm_free(*mate);
  live.erase(mate);
  lm_thread_collect();  // the mate's units back to the backend
  ASSERT_EQ(ps->slot->used, bit_range(0, ps->nunits)) << "alone in its slot";
  for (size_t i = 0; i < 1000 * kKiB; i += 4096) p[i] = char(i / 4096);
  // A request past the largest one fails, the block untouched (size + lead
  // must not wrap around to a small size: a shrink).
  const size_t usable = lm_usable_size(p);
  errno = 0;
  EXPECT_EQ(lm_realloc(p, SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(lm_realloc(p, SIZE_MAX - 63), nullptr);
  EXPECT_EQ(lm_usable_size(p), usable);
  const uint64_t promotions = stat("promotions"), moves = stat("mremap_moves");
  char* q = static_cast<char*>(lm_realloc(p, 1020 * kKiB));  // within its units
  EXPECT_EQ(q, p);
  EXPECT_GE(lm_usable_size(q), 1020 * kKiB);
  q = static_cast<char*>(lm_realloc(q, 1536 * kKiB));  // promoted in place: the slot's huge block
  ASSERT_EQ(q, p);
  EXPECT_EQ(stat("promotions"), promotions + 1);
  EXPECT_EQ(end(q), base(q) + 2048 * kKiB);
  char* r = static_cast<char*>(lm_realloc(q, 8192 * kKiB));  // a new huge block: copied
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r, q);
  EXPECT_EQ(stat("mremap_moves"), moves);
  for (size_t i = 0; i < 1000 * kKiB; i += 4096) ASSERT_EQ(r[i], char(i / 4096)) << i;
  lm_free(r);
  // A block that realloc moves into a new large one starts at its span,
  // so that growing on into a huge block it can be moved with mremap.
  char* small = static_cast<char*>(lm_malloc(200 * kKiB));
  char* grown = static_cast<char*>(lm_realloc(small, 300 * kKiB));
  ASSERT_NE(grown, nullptr);
  EXPECT_EQ(grown, base(grown));
  lm_free(grown);
  for (void* b : live) lm_free(b);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

}  // namespace
}  // namespace lazymalloc
