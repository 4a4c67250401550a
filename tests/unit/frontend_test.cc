// The frontend (thread heaps) over the real backend, driven through the
// lm_* entry points in this process (whose own malloc stays glibc's), with
// the backend's invariants checked as it goes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

#include "core/options.h"
#include "fixture.h"
#include "frontend/bins.h"
#include "frontend/heap.h"
#include "frontend/internal.h"
#include "frontend/size_class.h"

namespace lazymalloc {
namespace {

size_t random_size(uint32_t x) {
  switch (x % 4) {
    case 0: return 1 + (x >> 4) % 1024;               // direct classes
    case 1: return 1024 + (x >> 4) % kMaxSmall;        // every small class, up to 256 KiB
    case 2: return kMaxSmall + (x >> 4) % kMaxLarge;   // large
    default: return kMaxLarge + (x >> 4) % (6 << 20);  // huge
  }
}

TEST(Frontend, EveryTierWithInlinePurgesKeepsTheBackendConsistent) {
  option_set(unsigned(Opt::background), 0);
  option_set(unsigned(Opt::decay_ms), 0);
  option_set(unsigned(Opt::partial_decay_ms), 0);
  option_set(unsigned(Opt::background_interval_ms), 1);
  uint32_t x = 99;
  std::vector<std::pair<unsigned char*, size_t>> live;
  for (int i = 0; i < 6000; ++i) {
    x = x * 1664525u + 1013904223u;
    if (live.size() < 200 && (x >> 28) < 9) {
      size_t n = random_size(x);
      auto* p = static_cast<unsigned char*>(lm_malloc(n));
      ASSERT_NE(p, nullptr);
      ASSERT_GE(lm_usable_size(p), n);
      memset(p, int(n & 0xff), n < 4096 ? n : 4096);
      live.emplace_back(p, n);
    } else if (!live.empty()) {
      size_t k = (x >> 3) % live.size();
      auto [p, n] = live[k];
      ASSERT_EQ(p[0], static_cast<unsigned char>(n & 0xff));
      if ((x >> 7) % 5 == 0) {
        size_t m = random_size(x >> 5);
        auto* q = static_cast<unsigned char*>(lm_realloc(p, m));
        ASSERT_NE(q, nullptr);
        ASSERT_EQ(q[0], static_cast<unsigned char>(n & 0xff));
        memset(q, int(m & 0xff), m < 4096 ? m : 4096);
        live[k] = {q, m};
      } else {
        lm_free(p);
        live[k] = live.back();
        live.pop_back();
      }
    }
    if (i % 50 == 0) {
      const char* broken = lm_check_invariants();
      ASSERT_EQ(broken, nullptr) << broken << " at step " << i;
    }
  }
  for (auto [p, n] : live) lm_free(p);
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST(Frontend, CrossThreadFreesAndThreadExitKeepTheBackendConsistent) {
  std::vector<void*> handoff[2];
  for (int round = 0; round < 20; ++round) {
    std::thread t([&, round] {
      uint32_t x = 7u + unsigned(round);
      for (int i = 0; i < 500; ++i) {
        x = x * 1664525u + 1013904223u;
        void* p = lm_malloc(random_size(x) % (512 << 10) + 1);
        ASSERT_NE(p, nullptr);
        handoff[round % 2].push_back(p);
      }
    });
    t.join();  // the heap goes to the pool; the next thread adopts it
    for (void* p : handoff[(round + 1) % 2]) lm_free(p);  // remote frees
    handoff[(round + 1) % 2].clear();
    ASSERT_EQ(lm_check_invariants(), nullptr) << "round " << round;
  }
  for (auto& h : handoff) {
    for (void* p : h) lm_free(p);
  }
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

const auto stat = test::lm_stat;

TEST(ThreadCache, AThreadReusesObjectsItFreedWhoeverAllocatedThem) {
  constexpr size_t kSize = 208;
  std::vector<void*> made;
  for (int i = 0; i < 8; ++i) made.push_back(lm_malloc(kSize));
  std::vector<void*> got;
  std::thread([&] {
    lm_free(lm_malloc(16));           // the thread has a heap (its first free does not cache)
    for (void* p : made) lm_free(p);  // another heap's objects, into this thread's cache
    for (size_t i = 0; i < made.size(); ++i) got.push_back(lm_malloc(kSize));
    for (void* p : got) lm_free(p);   // back to their spans at the thread's exit
  }).join();
  std::sort(made.begin(), made.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, made);
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Passive false sharing (cache-scratch): a thread started with small
// objects of its parent's frees them first.  Were they cached, its own
// allocations would reuse them and write the cache lines its parent's (or
// a sibling's) objects share; the free that gives the thread its heap
// sends the object back to its owner instead, and the thread allocates
// from its own span.
TEST(ThreadCache, ANewThreadsFirstFreeGoesBackToItsOwner) {
  constexpr size_t kSize = 8;
  const auto line = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / 64; };
  // Two of this thread's objects on one cache line (16-byte objects: four to a line).
  std::vector<void*> made;
  void* given = nullptr;
  void* neighbour = nullptr;
  while (!given && made.size() < 256) {
    void* p = lm_malloc(kSize);
    for (void* q : made)
      if (line(q) == line(p)) given = q, neighbour = p;
    made.push_back(p);
  }
  ASSERT_NE(given, nullptr) << "the test needs two objects on one line";
  for (void* p : made)
    if (p != given && p != neighbour) lm_free(p);
  const uint64_t remote0 = stat("remote_frees");
  void* got = nullptr;
  std::thread([&] {
    lm_free(given);
    got = lm_malloc(kSize);
  }).join();
  EXPECT_EQ(stat("remote_frees") - remote0, 1u) << "the first free went back to its span";
  ASSERT_NE(got, nullptr);
  EXPECT_NE(line(got), line(neighbour));
  lm_free(got);
  lm_free(neighbour);
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST(ThreadCache, WritesIntoCachedObjectsCannotMisdirectTheCache) {
  // A use after free that rewrites cached objects' first words (where an
  // intrusive list would keep its links and an attacker would aim) changes
  // nothing the cache relies on: the same objects come back, and nothing
  // else.
  constexpr size_t kSize = 112;
  std::thread([] {
    std::vector<void*> made;
    for (int i = 0; i < 6; ++i) made.push_back(lm_malloc(kSize));
    char decoy[64];
    for (void* p : made) lm_free(p);
    for (void* p : made) {
      auto* w = static_cast<void**>(p);
      w[0] = decoy;
      w[1] = decoy + 16;
    }
    // The cache hands out what it held before (its allocation stack), then
    // the objects freed above.
    std::vector<void*> got;
    size_t back = 0;
    while (got.size() < 1024 && back < made.size()) {
      void* p = lm_malloc(kSize);
      ASSERT_NE(p, nullptr);
      EXPECT_GE(reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(decoy), sizeof decoy);
      back += std::count(made.begin(), made.end(), p);
      got.push_back(p);
    }
    EXPECT_EQ(back, made.size());
    std::vector<void*> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "an object handed out twice";
    for (void* p : got) lm_free(p);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST(ThreadCache, OverflowAndExitReturnEveryObjectToItsOwner) {
  constexpr size_t kSize = 1024;  // a cache holds 32
  constexpr size_t kCount = 1000;
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  std::vector<void*> made(kCount);
  for (auto& p : made) p = lm_malloc(kSize);
  const uint64_t remote0 = stat("remote_frees");
  const uint64_t flushes0 = stat("cache_flushes");
  std::thread([&] {
    for (void* p : made) lm_free(p);
  }).join();
  // Every object went back to this thread's spans, in runs: at overflows
  // (each returns half the cache) and at the thread's exit.
  EXPECT_EQ(stat("remote_frees") - remote0, kCount);
  EXPECT_GE(stat("cache_flushes") - flushes0, kCount / 32);
  lm_thread_collect();  // collects the remote returns: the spans are empty and go back
  EXPECT_LE(stat("small_spans"), spans0);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A thread's exit returns its cache from where it lies, the heap's slots
// (bins_return_all with `exiting`, as heap_thread_exit calls it): it
// copied each bin onto the stack first (2 KiB: Block* out[256]), so a
// short-lived thread's exit touched fresh stack pages (minor faults,
// issue #16).  The thread fills its cache, paints the stack below its
// frame and returns the cache as its exit does: what that wrote below the
// frame shows as paint gone.  (The call, not the whole exit: glibc's and a
// sanitizer's own thread-exit work would be measured too.)  The old code
// wrote 2400 bytes below the frame, this 360 (Release build; 888 under
// ThreadSanitizer).
constexpr unsigned char kPaint = 0xa5;
constexpr size_t kPaintBytes = 16 << 10;
constexpr size_t kPaintGap = 256;  // left unpainted right below the frame (the calls that paint)

__attribute__((noinline)) unsigned char* callee_frame() {
  return static_cast<unsigned char*>(__builtin_frame_address(0));
}

// No calls (memset may be intercepted, and its interceptor's frame would
// lie in what it paints) and no instrumentation.
__attribute__((noinline, no_sanitize("thread", "address", "undefined"))) void paint(unsigned char* lo,
                                                                                      unsigned char* hi) {
  for (volatile unsigned char* q = lo; q < hi; ++q) *q = kPaint;
}
// The lowest byte in [lo, hi) that is not paint (hi if none).
__attribute__((noinline, no_sanitize("thread", "address", "undefined"))) const unsigned char* lowest_written(
    const unsigned char* lo, const unsigned char* hi) {
  const volatile unsigned char* q = lo;
  while (q < hi && *q == kPaint) ++q;
  return const_cast<const unsigned char*>(q);
}

__attribute__((noinline)) void fill_cache() {
  void* p[48];
  for (size_t size : {16, 64, 256, 1024, 4000}) {  // five bins, each holding 48 objects
    for (void*& q : p) q = lm_malloc(size);
    for (void* q : p) lm_free(q);
  }
}

__attribute__((noinline)) void return_the_cache_as_at_exit() {
  detail::bins_return_all(detail::tl_heap, /*exiting=*/true);
}

TEST(ThreadCache, ExitReturnsTheCacheWithoutCopyingItOntoTheStack) {
  lm_thread_collect();
  const uint64_t cached0 = stat("cache_bytes");
  std::thread([cached0] {
    fill_cache();
    ASSERT_GT(stat("cache_bytes"), cached0);
    unsigned char* frame = callee_frame();
    paint(frame - kPaintBytes, frame - kPaintGap);
    return_the_cache_as_at_exit();
    const size_t below = size_t(frame - lowest_written(frame - kPaintBytes, frame - kPaintGap));
    // The whole cache went back ...
    EXPECT_EQ(stat("cache_bytes"), cached0);
    // ... writing less below the frame than one bin's copy would take
    // (2 * kBinCapMax entries).
    EXPECT_LT(below, 2 * kBinCapMax * sizeof(void*)) << below << " bytes of stack written below the frame";
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST(ThreadCache, AnIdleBinGoesBackOnceTheThreadMovesOn) {
  std::thread([] {
    std::vector<void*> a;  // leaves objects of 96 bytes in this thread's cache
    for (int i = 0; i < 100; ++i) a.push_back(lm_malloc(96));
    for (void* p : a) lm_free(p);
    const uint64_t idle0 = stat("cache_idle_flushes");
    std::vector<void*> b;  // hundreds of refills and overflows of 48 bytes
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 50000; ++i) b.push_back(lm_malloc(48));
      for (void* p : b) lm_free(p);
      b.clear();
    }
    // Only the 96-byte cache sat unchanged (the 48-byte one was busy).
    EXPECT_GE(stat("cache_idle_flushes") - idle0, 1u);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A bin's capacity: how many objects its free stack takes before it
// overflows (flimit above the start of its half; no collector here).
uint32_t bin_capacity(unsigned c) {
  const detail::Bin& bin = detail::tl_bins[c];
  return uint32_t(bin.flimit - detail::tl_bin_fbase[c]);
}

// A class that keeps missing (refills and overflows: here a thread that
// swings between 600 live objects of 1000 B and none, which 16 KiB bins
// of 16 objects serve with an overflow every 8 frees and a refill every
// 16 mallocs) grows its bin, doubling up to bin_cap_max (64 objects), and
// misses less; once the thread moves on to other sizes, the idle bin goes
// back to its spans and to bin_cap (16 objects).
TEST(ThreadCache, ABusyClassGrowsItsBinAndAnIdleOneShrinksBack) {
  std::thread([] {
    constexpr size_t kSize = 1000;
    const unsigned c = size_class(kSize);
    ASSERT_EQ(bin_cap(c), 16u);
    std::vector<void*> v(600);
    auto swing = [&](size_t size) {
      for (auto& p : v) p = lm_malloc(size);
      for (void* p : v) lm_free(p);
    };
    const uint64_t flushes0 = stat("cache_flushes");
    swing(kSize);  // (111 refills and overflows: fewer than a look at the bins takes, 256)
    const uint64_t first = stat("cache_flushes") - flushes0;
    EXPECT_EQ(bin_capacity(c), 16u);
    for (int i = 0; i < 20; ++i) swing(kSize);
    EXPECT_EQ(bin_capacity(c), 64u);
    const uint64_t f0 = stat("cache_flushes");
    swing(kSize);
    const uint64_t grown = stat("cache_flushes") - f0;
    EXPECT_LT(grown * 3, first) << "overflows of one swing: " << first << " at 16 objects, " << grown << " at 64";
    // Other sizes only: the 1000-byte bin sits unchanged and goes back.
    const uint64_t idle0 = stat("cache_idle_flushes");
    for (int i = 0; i < 40; ++i) swing(96);
    EXPECT_GE(stat("cache_idle_flushes") - idle0, 1u);
    EXPECT_EQ(detail::tl_bins[c].top, detail::tl_bins[c].base);
    EXPECT_EQ(detail::tl_bins[c].ftop, detail::tl_bin_fbase[c]);
    EXPECT_EQ(bin_capacity(c), 16u);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Objects cached in this thread's bin of class c (both stacks).
uint32_t bin_held(unsigned c) {
  const detail::Bin& bin = detail::tl_bins[c];
  return uint32_t((bin.top - bin.base) + (bin.ftop - detail::tl_bin_fbase[c]));
}

// A consumer (xmalloc: a thread that frees the objects other threads
// allocate, and has allocated none of their class lately: tl_bin_mallocs)
// returns them whole bins at a time: each overflow sends back all the bin
// holds, not the older half (kept for a thread that allocates them again,
// they would only wait while their owner takes new memory), and its
// overflows do not grow the bin (a bigger one would only hold them
// longer).  Before, the consumer's bin of 256 B objects grew from 64 to
// 128 at the first look at the bins (256 overflows) and then held 64-128
// of them (16-32 KiB) for good.
TEST(ThreadCache, AConsumersBinReturnsOtherThreadsObjectsWhole) {
  constexpr size_t kSize = 256;
  const unsigned c = size_class(kSize);
  ASSERT_EQ(bin_cap(c), 64u);
  // Before: 256 overflows of 32, then overflows of 64 (grown to 128).
  constexpr size_t kObjects = 256 * 32 + 8000, kJudged = 256 * 32 + 64;
  std::vector<void*> made;
  for (size_t i = 0; i < kObjects; ++i) made.push_back(lm_malloc(kSize));
  uint32_t most = 0, least = bin_cap(c), cap = 0;
  std::thread([&] {
    lm_free(lm_malloc(16));  // the thread has a heap (its first free does not cache)
    for (size_t i = 0; i < made.size(); ++i) {
      lm_free(made[i]);
      if (i >= kJudged) {
        most = std::max(most, bin_held(c));
        least = std::min(least, bin_held(c));
      }
    }
    cap = bin_capacity(c);
  }).join();
  EXPECT_EQ(cap, bin_cap(c)) << "a consumer's bin does not grow";
  EXPECT_LE(most, bin_cap(c));
  EXPECT_LE(least, 1u) << "an overflow leaves nothing of another heap's in a consumer's bin";
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A thread that frees other heaps' objects and allocates from their class
// too (larson, rptest) is no consumer: its overflows keep the newer half
// of the bin for its mallocs.
TEST(ThreadCache, AThreadAllocatingTheClassItFreesKeepsHalfOfItsBin) {
  constexpr size_t kSize = 256;
  const unsigned c = size_class(kSize);
  std::vector<void*> made;
  for (int i = 0; i < 4000; ++i) made.push_back(lm_malloc(kSize));
  uint32_t least = bin_cap(c);
  std::thread([&] {
    lm_free(lm_malloc(16));  // the thread has a heap (its first free does not cache)
    std::vector<void*> own;
    for (size_t i = 0; i < made.size(); ++i) {
      lm_free(made[i]);
      if (i % 16 == 0) own.push_back(lm_malloc(kSize));
      if (i >= 2 * bin_cap(c)) least = std::min(least, bin_held(c));
    }
    for (void* p : own) lm_free(p);
  }).join();
  EXPECT_GE(least, bin_cap(c) / 2 - 1) << "an overflow keeps the newer half";
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A short-lived thread (mleak's: one calloc of 128 B, one free of another
// thread's object) takes a few objects from its spans and gives back as
// few at its exit.  Its first refill took a whole bin (128 objects of
// 128 B), which the exit returned: about 4k of the 7k instructions such a
// thread cost in the allocator (issue #16).
TEST(ThreadCache, AShortThreadTakesAndReturnsAFewObjects) {
  constexpr size_t kSize = 128;
  void* other = lm_malloc(kSize);
  lm_thread_collect();
  const uint64_t taken0 = stat("span_taken_bytes");
  const uint64_t returned0 = stat("span_returned_bytes");
  void* got = nullptr;
  unsigned bins_set_up = 0;
  std::thread([&] {
    got = lm_calloc(1, kSize);
    lm_free(other);
    for (unsigned c = 0; c < kSmallClasses; ++c) bins_set_up += detail::tl_bins[c].flimit != nullptr;
  }).join();
  ASSERT_NE(got, nullptr);
  // The object, and bin_cap_first more for the cache ...
  EXPECT_EQ(stat("span_taken_bytes") - taken0, (1 + kBinCapFirst) * kSize);
  // ... which the exit gave back, with the other thread's object.
  EXPECT_EQ(stat("span_returned_bytes") - returned0, (1 + kBinCapFirst) * kSize);
  // Only the class it used has a bin set up (the exit disables it again).
  EXPECT_EQ(bins_set_up, 1u);
  lm_free(got);
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A heap's record (46 KiB: the heap, and its thread's bins' stacks for
// every class) counts as metadata by the pages its thread touched: the
// heap's, then those of each class's stacks at the class's first use; a
// thread that adopts the pooled heap counts nothing again.  64 threads that
// each used a class or two counted 12 pages each before (the whole record).
TEST(ThreadCache, AHeapRecordCountsThePagesItsThreadTouched) {
  auto pages_of = [](size_t from, size_t to) {
    uint32_t bits = 0;
    for (size_t pg = from / kOsPageSize; pg * kOsPageSize < to; ++pg) bits |= uint32_t(1) << pg;
    return bits;
  };
  const size_t slots_at = offsetof(detail::HeapRecord, bin_slots);
  auto class_pages = [&](unsigned c) {
    const size_t at = slots_at + bin_slot_offset(c) * sizeof(void*);
    return pages_of(at, at + 2 * size_t(bin_cap_max(c)) * sizeof(void*));
  };
  const unsigned mid = size_class(2048), big = size_class(kCachedMax);
  // The thread may have a fresh heap or adopt one that other tests' threads
  // used: what is checked is what each new use adds.
  uint32_t start = 0, after_mid = 0, after_big = 0, adopted = 0;
  uint64_t grew_mid = 0, grew_big = 0;
  Heap* first = nullptr;
  std::thread([&] {
    lm_free(lm_malloc(16));
    first = detail::tl_heap;
    start = first->record_pages;
    uint64_t before = stat("metadata_bytes");
    lm_free(lm_malloc(2048));
    after_mid = first->record_pages;
    grew_mid = stat("metadata_bytes") - before;
    before = stat("metadata_bytes");
    lm_free(lm_malloc(kCachedMax));
    after_big = first->record_pages;
    grew_big = stat("metadata_bytes") - before;
  }).join();
  EXPECT_EQ(start & pages_of(0, sizeof(Heap)), pages_of(0, sizeof(Heap)));
  // The per-class statistics' page counts from the start, with the heap's.
  const size_t stats_at = offsetof(detail::HeapRecord, class_stats);
  const uint32_t stats_pages = pages_of(stats_at, stats_at + sizeof(ClassStats) * kSmallClasses);
  EXPECT_EQ(__builtin_popcount(stats_pages), 1);
  EXPECT_EQ(start & stats_pages, stats_pages);
  EXPECT_EQ(after_mid, start | class_pages(mid));
  EXPECT_EQ(after_big, after_mid | class_pages(big));
  EXPECT_LE(sizeof(detail::HeapRecord), 13 * kOsPageSize);
  // Each class's new pages, and at most a page of span records for its
  // span.
  const uint64_t mid_new = uint64_t(__builtin_popcount(after_mid & ~start)) * kOsPageSize;
  const uint64_t big_new = uint64_t(__builtin_popcount(after_big & ~after_mid)) * kOsPageSize;
  EXPECT_GE(grew_mid, mid_new);
  EXPECT_LE(grew_mid, mid_new + kOsPageSize);
  EXPECT_GE(grew_big, big_new);
  EXPECT_LE(grew_big, big_new + kOsPageSize);
  // The next thread adopts the pooled heap (the pool is LIFO), touches
  // nothing new and counts nothing again.
  Heap* second = nullptr;
  uint64_t grew_adopted = 0;
  std::thread([&] {
    const uint64_t before = stat("metadata_bytes");
    lm_free(lm_malloc(2048));
    second = detail::tl_heap;
    adopted = second->record_pages;
    grew_adopted = stat("metadata_bytes") - before;
  }).join();
  ASSERT_EQ(second, first) << "the pool hands out the heap pooled last";
  EXPECT_EQ(adopted, after_big);
  EXPECT_LE(grew_adopted, kOsPageSize);  // at most a span record page
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A bin warms: it starts at bin_cap_first objects and doubles at every
// refill, up to bin_cap (then it grows only with misses over time: the
// test above); a thread that allocates a class without freeing it takes
// 4, 8, 16, ... objects at its refills.
TEST(ThreadCache, ABinDoublesAtEveryRefillUpToItsCapacity) {
  std::thread([] {
    constexpr size_t kSize = 64;
    const unsigned c = size_class(kSize);
    ASSERT_EQ(bin_cap(c), 128u);
    const detail::Bin& bin = detail::tl_bins[c];
    std::vector<void*> held;
    std::vector<uint32_t> fills, caps;
    size_t depth = 0;
    while (fills.size() < 8) {
      void* p = lm_malloc(kSize);
      ASSERT_NE(p, nullptr);
      held.push_back(p);
      const size_t d = size_t(bin.top - bin.base);
      if (depth == 0) {  // that malloc refilled the allocation stack
        fills.push_back(uint32_t(d));
        caps.push_back(bin_capacity(c));
      }
      depth = d;
    }
    for (size_t i = 0; i < fills.size(); ++i)
      EXPECT_LE(fills[i], std::min<uint32_t>(kBinCapFirst << i, bin_cap(c))) << "refill " << i;
    EXPECT_EQ(caps, (std::vector<uint32_t>{8, 16, 32, 64, 128, 128, 128, 128}));
    for (void* p : held) lm_free(p);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A thread that only frees (a consumer) sets its bin up at its first free
// that overflows, with bin_cap_first slots, and doubles it at every
// overflow up to bin_cap.
TEST(ThreadCache, AConsumersBinDoublesAtEveryOverflow) {
  constexpr size_t kSize = 64;
  const unsigned c = size_class(kSize);
  std::vector<void*> made(600);
  for (auto& p : made) p = lm_malloc(kSize);
  std::vector<uint32_t> caps;
  std::thread([&] {
    for (void* p : made) {
      lm_free(p);
      const uint32_t cap = detail::tl_bins[c].flimit ? bin_capacity(c) : 0;
      if (cap && (caps.empty() || caps.back() != cap)) caps.push_back(cap);
    }
  }).join();
  EXPECT_EQ(caps, (std::vector<uint32_t>{4, 8, 16, 32, 64, 128}));
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A thread that frees its own objects without allocating in between (a
// program freeing a batch it made) is no consumer: its bin keeps its
// capacity, and the next batch's mallocs reuse what it holds.
TEST(ThreadCache, AThreadFreeingItsOwnObjectsKeepsItsBin) {
  std::thread([] {
    constexpr size_t kSize = 256;
    const unsigned c = size_class(kSize);
    std::vector<void*> v(2000);
    for (auto& p : v) p = lm_malloc(kSize);
    for (void* p : v) lm_free(p);
    EXPECT_GE(bin_capacity(c), bin_cap(c));
    EXPECT_GE(bin_held(c), bin_cap(c) / 2) << "an overflow leaves the newer half";
  }).join();
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Batches of one size allocated and then freed together (issue #16,
// lazybench's batch): once every object of the class's current span has
// come back (the cache flushed: only the phantom object of the current
// span is left in `used`), the next refill starts the span over from its
// first object and takes objects by address, in address order, not from
// the list the flushes linked (span_restart_if_empty, span_take_tail).  A
// free of an object of the old round is still a double free.
TEST(Batches, ASpanWhoseObjectsAllCameBackStartsOverFromItsFirstObject) {
  std::thread([] {
    constexpr size_t kSize = 720;  // 91 a span: 80 objects fill part of one
    std::vector<char*> v(80);
    for (auto& p : v) p = static_cast<char*>(lm_malloc(kSize));
    Span* s = detail::g.backend.span_of(v[0]);
    ASSERT_EQ(detail::g.backend.span_of(v.back()), s) << "one span";
    const size_t size = s->obj_size;
    for (char* p : v) lm_free(p);
    detail::bins_return_all(detail::tl_heap, false);  // the cache back to the span
    ASSERT_EQ(s->used, 1u) << "only the current span's phantom";
    const uint64_t restarts0 = stat("span_restarts");
    char* first = static_cast<char*>(lm_malloc(kSize));
    EXPECT_EQ(first, s->start) << "the span's first object";
    EXPECT_EQ(stat("span_restarts") - restarts0, 1u);
#if LAZYMALLOC_CHECKS
    // Beyond the new carve limit, handed out and freed before the restart.
    char* old = s->start + 70 * size;
    ASSERT_GE(70u, s->reserved);
    EXPECT_DEATH(lm_free(old), "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
#endif
    std::vector<char*> w{first};
    for (int i = 1; i < 40; ++i) w.push_back(static_cast<char*>(lm_malloc(kSize)));
    for (size_t i = 1; i < w.size(); ++i) EXPECT_EQ(w[i], w[i - 1] + size) << i;
    for (char* p : w) lm_free(p);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A span does not start over while remote frees wait on its `xfree` list,
// even when `used` reads 1: collect_remote takes the list and then the
// count, so a run another thread pushes between the two is counted off
// `used` before its objects leave the list (done here by hand: the count
// taken, the list left).  Before, the span started over, handed that
// object out by address and then again from the list once collected: the
// same object twice (xmalloc: "double free").
TEST(Batches, ASpanWithRemoteFreesWaitingDoesNotStartOver) {
  std::thread([] {
    constexpr size_t kSize = 720;  // 91 a span
    std::vector<char*> v(80);
    for (auto& p : v) p = static_cast<char*>(lm_malloc(kSize));
    Span* s = detail::g.backend.span_of(v[0]);
    ASSERT_EQ(detail::g.backend.span_of(v.back()), s) << "one span";
    for (size_t i = 1; i < v.size(); ++i) lm_free(v[i]);
    detail::bins_return_all(detail::tl_heap, false);
    ASSERT_EQ(s->used, 2u) << "the phantom and v[0]";
    std::thread([&] { lm_free(v[0]); }).join();  // a thread without a heap: straight onto xfree
    ASSERT_NE(s->xfree.load() & ~kXfreeMask, 0u);
    // The interleaving: the run's count taken, its list not yet.
    detail::span_used_add(s, uint32_t(0) - s->xfree_count.exchange(0));
    ASSERT_EQ(s->used, 1u);
    const uint64_t restarts0 = stat("span_restarts");
    std::vector<char*> w;
    for (uint32_t i = 0; i < s->capacity + 8; ++i) w.push_back(static_cast<char*>(lm_malloc(kSize)));
    EXPECT_EQ(stat("span_restarts"), restarts0);
    std::vector<char*> sorted = w;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "an object handed out twice";
    for (char* p : w) lm_free(p);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The thread's refills and overflows so far (its slow-path events, at which
// the bins are looked at).
uint64_t slow_path_events() { return stat("span_refills") + stat("cache_flushes"); }

// Mallocs of 48 B (each slow path a refill) into b until the thread has
// made n more slow-path events.
void make_slow_path_events(std::vector<void*>& b, uint64_t n) {
  const uint64_t events0 = slow_path_events();
  while (slow_path_events() - events0 < n) b.push_back(lm_malloc(48));
  EXPECT_EQ(slow_path_events() - events0, n);
}

// Batches: this thread allocates 80 objects of `size` and frees them; the
// class's current span, which held them, is returned (empty, its objects in
// the thread's cache), nullptr if it is not the current one.
Span* current_span_emptied(size_t size) {
  std::vector<void*> v(80);
  for (auto& p : v) p = lm_malloc(size);
  Span* s = detail::g.backend.span_of(v[0]);
  for (void* p : v) lm_free(p);
  return detail::tl_heap->head_ref[size_class(size)] == s ? s : nullptr;
}

// An object of `size`, a class above kCachedMax, allocated and freed: its
// span, empty and kept as the class's current span (its phantom).
Span* uncached_span_emptied(size_t size) {
  void* p = lm_malloc(size);
  Span* s = detail::g.backend.span_of(p);
  EXPECT_NE(s, nullptr);
  EXPECT_EQ(s->kind, SpanKind::kSmall);
  lm_free(p);
  EXPECT_EQ(detail::tl_heap->head_ref[size_class(size)], s) << "empty, kept as the class's current span";
  return s;
}

// Batches: span s of class c is neither the class's current span nor queued.
void expect_class_let_go(unsigned c, Span* s) {
  EXPECT_NE(detail::tl_heap->head_ref[c], s) << "class " << c << " still holds its span";
  for (Span* q = detail::tl_heap->queue[c].head; q; q = q->next) EXPECT_NE(q, s) << "still queued";
}

// Batches: span s, the empty current span of the class of `size`, which
// the thread does not use meanwhile, goes back (class_idle) within 32 of
// the thread's refills and overflows (two looks at the bins).
void expect_back_within_32_events(size_t size, Span* s) {
  const uint64_t released0 = stat("idle_class_spans_released");
  std::vector<void*> b;
  make_slow_path_events(b, 32);
  expect_class_let_go(size_class(size), s);
  EXPECT_EQ(stat("idle_class_spans_released") - released0, 1u);
  for (void* p : b) lm_free(p);
}

// A refill takes the objects on its span's list and no never-used ones
// beside them when the list fills a quarter of the bin or more, if not all
// of it (issue #16, sixth round): topped up by address, a class's refills
// touched fresh memory while freed objects waited on its spans' lists, and
// its spans were touched whole by a program with few objects live (xmalloc
// with two batches in flight).  The objects carved so far (`reserved`)
// stay as they were until the list is used up.
TEST(Batches, ARefillTakesTheListedObjectsAndNoNeverUsedOnesBesideThem) {
  std::thread([] {
    constexpr size_t kSize = 64;  // 1024 a span, bins of 128
    const unsigned c = size_class(kSize);
    std::vector<char*> v(300);
    for (auto& p : v) p = static_cast<char*>(lm_malloc(kSize));
    Span* s = detail::g.backend.span_of(v[0]);
    ASSERT_EQ(detail::g.backend.span_of(v.back()), s) << "one span";
    for (size_t i = 0; i < v.size(); i += 30) {
      lm_free(v[i]);
      v[i] = nullptr;
    }
    detail::bins_return_all(detail::tl_heap, false);  // the cache onto the span's list
    const uint32_t live = 290;
    ASSERT_EQ(s->used, live + 1) << "the live objects and the phantom";
    ASSERT_EQ(s->xfree.load() & ~kXfreeMask, 0u);
    const uint32_t reserved = s->reserved;
    const uint32_t listed = reserved - live;  // the 10 freed and what the bin held
    ASSERT_LT(reserved, s->capacity) << "never-used objects left";
    ASSERT_GT(listed, 1u);
    ASSERT_LT(listed, bin_capacity(c)) << "a list shorter than the bin";
    ASSERT_GE(4 * listed, bin_capacity(c)) << "and a quarter of it or more";
    std::vector<char*> w;
    for (uint32_t i = 0; i < listed; ++i) {
      w.push_back(static_cast<char*>(lm_malloc(kSize)));
      ASSERT_EQ(detail::g.backend.span_of(w.back()), s);
      EXPECT_LT(w.back(), s->start + size_t(reserved) * s->obj_size) << i << ": a listed object";
      EXPECT_EQ(s->reserved, reserved) << i << ": no never-used object taken beside the list";
    }
    w.push_back(static_cast<char*>(lm_malloc(kSize)));  // the list used up: by address again
    EXPECT_EQ(w.back(), s->start + size_t(reserved) * s->obj_size);
    EXPECT_GT(s->reserved, reserved);
    for (char* p : v) lm_free(p);
    for (char* p : w) lm_free(p);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A flush lists the objects it returns at consecutive addresses of one span
// as one run (issue #16, batch: checks.h, kRunFlag): the first object holds
// the link and the second the count, and no other object is written; a
// refill takes them back by address, each once.
TEST(Batches, AFlushListsObjectsAtConsecutiveAddressesAsOneRunWithoutWritingThem) {
  std::thread([] {
    constexpr size_t kSize = 64;  // 1024 a span
    constexpr size_t kRun = 100;
    std::vector<char*> v(kRun);
    for (auto& p : v) p = static_cast<char*>(lm_malloc(kSize));
    char* keep = static_cast<char*>(lm_malloc(kSize));  // the span does not start over
    Span* s = detail::g.backend.span_of(v[0]);
    for (size_t i = 0; i < kRun; ++i) ASSERT_EQ(v[i], v[0] + i * kSize) << i << ": a new span, by address";
    constexpr uint64_t kMark = 0x5a5a5a5a5a5a5a5aull;
    for (char* p : v) memcpy(p, &kMark, sizeof kMark);  // the first word, where a link would go
    for (char* p : v) lm_free(p);
    detail::bins_return_all(detail::tl_heap, false);  // the cache onto the span's list
    ASSERT_EQ(s->used, 2u) << "the phantom and keep";
    size_t unwritten = 0;
    for (size_t i = 0; i < kRun; ++i) {
      uint64_t w;
      memcpy(&w, v[i], sizeof w);
      unwritten += w == kMark;
    }
    EXPECT_GE(unwritten, kRun - 2) << "objects linked one by one";
    // Freed again: the free check still sees each object's tag.
    std::vector<char*> w;
    for (uint32_t i = 0; i < s->reserved - 1; ++i) w.push_back(static_cast<char*>(lm_malloc(kSize)));
    std::vector<char*> sorted = w;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "an object handed out twice";
    for (char* p : v) EXPECT_TRUE(std::binary_search(sorted.begin(), sorted.end(), p)) << "not handed out again";
    for (char* p : w) lm_free(p);
    lm_free(keep);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

#if LAZYMALLOC_CHECKS
// The checks see a run's objects as before: each keeps its free tag (a
// double free of one is reported), and a run's count, overwritten after
// the free, is caught by the refill that reaches it, as a link is.
TEST(Batches, ARunsObjectsKeepTheirFreeTagsAndACorruptedCountIsCaught) {
  std::thread([] {
    constexpr size_t kSize = 64;
    std::vector<char*> v(100);
    for (auto& p : v) p = static_cast<char*>(lm_malloc(kSize));
    char* keep = static_cast<char*>(lm_malloc(kSize));  // the span does not start over
    Span* s = detail::g.backend.span_of(v[0]);
    for (char* p : v) lm_free(p);
    detail::bins_return_all(detail::tl_heap, false);
    // The first run's head: its link carries the flag.
    size_t head = v.size();
    for (size_t i = 0; i + 1 < v.size() && head == v.size(); ++i) {
      if (detail::is_run(detail::link_get(reinterpret_cast<Block*>(v[i])))) head = i;
    }
    ASSERT_LT(head, v.size()) << "no run listed";
    EXPECT_DEATH(lm_free(v[head + 1]), "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
    EXPECT_DEATH(
        {
          memset(v[head + 1], 0x41, 8);  // the count
          for (uint32_t i = 0; i < s->reserved; ++i) (void)lm_malloc(kSize);
        },
        "lazymalloc: malloc\\(\\): invalid pointer 0x[0-9a-f]+: corrupted free list");
    std::vector<char*> w;
    for (uint32_t i = 0; i < s->reserved - 1; ++i) w.push_back(static_cast<char*>(lm_malloc(kSize)));
    for (char* p : w) lm_free(p);
    lm_free(keep);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}
#endif

// A class the thread stopped using gives back its cache and then its
// current span, once empty, instead of keeping it until the whole thread
// is quiet for the collector (class_idle): batch's 20 classes each held a
// span between their batches.
TEST(Batches, AnIdleClassGivesItsEmptyCurrentSpanBack) {
  std::thread([] {
    constexpr size_t kSize = 720;
    Span* s = current_span_emptied(kSize);
    ASSERT_NE(s, nullptr);
    const uint64_t released0 = stat("idle_class_spans_released");
    std::vector<void*> b;  // other sizes: hundreds of refills and overflows of 48 bytes
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 20000; ++i) b.push_back(lm_malloc(48));
      for (void* p : b) lm_free(p);
      b.clear();
    }
    expect_class_let_go(size_class(kSize), s);
    EXPECT_GE(stat("idle_class_spans_released") - released0, 1u);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Soon: within 32 of the thread's refills and overflows after the class's
// last one (two looks at the bins, every kBinIdleEvents = 16: the first
// finds it active, the second unchanged).  At 64 two looks took 65-128
// events, and batch's classes kept their spans that long after their
// batch (issue #16, fifth round: peak RSS 6.2-6.4 MiB, 5.6-5.8 at 16).
TEST(Batches, AnIdleClassGoesBackWithin32OfTheThreadsRefillsAndOverflows) {
  std::thread([] {
    constexpr size_t kSize = 720;
    Span* s = current_span_emptied(kSize);
    ASSERT_NE(s, nullptr);
    expect_back_within_32_events(kSize, s);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// An uncached class (above kCachedMax: no bin) gives back its empty
// current span at the same looks, once no malloc of it came for as many as
// its patience asks: python3's start-up used classes of 40-256 KiB a few
// times each and kept a span of 128-256 KiB for every one of them until the
// whole thread went quiet (issue #16, fifteenth round).  A malloc/free of
// one such object over and over keeps its span
// (SpanSize.OneBigObjectChurnedKeepsItsSpan).
TEST(Batches, AnIdleUncachedClassGivesItsEmptyCurrentSpanBack) {
  std::thread([] {
    constexpr size_t kSize = 100 << 10;
    static_assert(kSize > kCachedMax && kSize <= kMaxSmall);
    ASSERT_FALSE(detail::g.backend.arenas_huge()) << "a fresh process's arenas carry no hugepage advice";
    expect_back_within_32_events(kSize, uncached_span_emptied(kSize));
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Not once the arenas carry hugepage advice (a heap past
// hugepage_threshold): a span's units then lie in 2 MiB pages that stay
// resident while any of their spans is live, and an empty span given back
// is purged alone, a piece of a hugepage (phases gave back 54-64 spans a
// run where it gave back 4-10).  The span stays as the class's current one.
TEST(Batches, AnIdleUncachedClassKeepsItsSpanUnderHugepageAdvice) {
  std::thread([] {
    constexpr size_t kSize = 100 << 10;
    std::vector<void*> dense;  // 24 MiB of 2 KiB objects: past the threshold, densely
    while (!detail::g.backend.arenas_huge() && dense.size() < 12288) dense.push_back(lm_malloc(2048));
    ASSERT_TRUE(detail::g.backend.arenas_huge()) << "24 MiB of small objects did not bring the advice";
    Span* s = uncached_span_emptied(kSize);
    std::vector<void*> b;
    make_slow_path_events(b, 300);  // a growth look too (every kBinGrowEvents = 256)
    EXPECT_EQ(detail::tl_heap->head_ref[size_class(kSize)], s) << "the span was given back";
    for (void* q : b) lm_free(q);
    for (void* q : dense) lm_free(q);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Idle patience (bins.cc): a class that comes back within the looks it
// waited before its idle flush waits twice as many looks before the next;
// one that stays away more than twice as long waits half as many again.
// `mixed` flushed its 5-32 KiB classes as idle at a third of their refills
// and overflows (issue #16); on main every flush came after one unchanged
// look, so the second flush below came within 32 events.
TEST(ThreadCache, AClassBackSoonAfterAnIdleFlushWaitsLongerForTheNext) {
  std::thread([] {
    constexpr size_t kSize = 720;
    std::vector<void*> b;
    // The class's bin holds an object, and goes back after one unchanged look.
    auto use_class = [] { lm_free(lm_malloc(kSize)); };
    use_class();
    uint64_t idle0 = stat("cache_idle_flushes");
    make_slow_path_events(b, 32);
    ASSERT_EQ(stat("cache_idle_flushes") - idle0, 1u) << "a first idle flush after one unchanged look";
    // Back at once (a refill: the flush emptied the bin): two looks now.
    use_class();
    idle0 = stat("cache_idle_flushes");
    make_slow_path_events(b, 32);
    EXPECT_EQ(stat("cache_idle_flushes"), idle0) << "flushed again after one look";
    make_slow_path_events(b, 16);
    EXPECT_EQ(stat("cache_idle_flushes") - idle0, 1u) << "not flushed after two unchanged looks";
    // Away for eight looks, more than twice the two it waited: one look again.
    make_slow_path_events(b, 8 * 16);
    use_class();
    idle0 = stat("cache_idle_flushes");
    make_slow_path_events(b, 32);
    EXPECT_EQ(stat("cache_idle_flushes") - idle0, 1u) << "the patience did not come down";
    for (void* p : b) lm_free(p);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A class in use whose mallocs and frees balance between two looks (served
// by trades: no refill or overflow) may leave its stack tops where the last
// look saw them; the objects on top tell it apart from an idle one.  With
// the tops alone, random-size's classes were flushed as idle about once per
// 40,000 operations at looks every 16 events (their grown bins put back to
// bin_cap: 20% more refills).  4096 B objects: a bin of 4 from the start.
TEST(ThreadCache, ABinBackAtTheSameStackTopsWithOtherObjectsIsNotIdle) {
  std::thread([] {
    constexpr size_t kSize = 4096;
    const unsigned c = size_class(kSize);
    ASSERT_EQ(bin_cap(c), 4u);
    ASSERT_EQ(bin_cap_first(c), 4u);
    void* o[5];
    for (auto& p : o) p = lm_malloc(kSize);  // a refill: 1 + 4, then pops
    for (int i = 0; i < 4; ++i) lm_free(o[i]);  // the free stack full, the allocation stack empty
    const uint64_t idle0 = stat("cache_idle_flushes");
    std::vector<void*> b;
    for (int phase = 0; phase < 24; ++phase) {  // looks every 16 or 64 events
      // Two rounds: each trades the stacks once, so the tops come back;
      // freed in the order 0, 1, 3, 2, another object ends on top.
      for (int round = 0; round < 2; ++round) {
        void* q[4];
        for (auto& p : q) p = lm_malloc(kSize);
        for (int i : {0, 1, 3, 2}) lm_free(q[i]);
      }
      make_slow_path_events(b, 16);  // one look at the bins, in another class's refills
    }
    EXPECT_EQ(stat("cache_idle_flushes"), idle0) << "class " << c << " flushed as idle while in use";
    for (void* p : b) lm_free(p);
    lm_free(o[4]);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A phase that only allocates (every slow-path event of its class a
// refill) leaves the bin at the same stack top at each look at the bins;
// it is busy, not idle, and its cache is not flushed (nor its capacity put
// back) under it.
TEST(ThreadCache, AClassThatOnlyAllocatesIsNotIdle) {
  std::thread([] {
    const uint64_t idle0 = stat("cache_idle_flushes");
    const uint64_t refills0 = stat("span_refills");
    std::vector<void*> v(20000);
    for (auto& p : v) p = lm_malloc(1000);
    EXPECT_GE(stat("span_refills") - refills0, 600u) << "several looks at the bins";
    EXPECT_EQ(stat("cache_idle_flushes"), idle0);
    for (void* p : v) lm_free(p);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A warming bin is refilled, not traded: with one object in flight the
// bin's count stays what it is (a trade keeps it), so a bin of 4 objects
// that traded would trade every 5 mallocs for ever; refilled, it holds
// bin_cap objects after a few refills, as a bin that started full did.
TEST(ThreadCache, OneObjectInFlightFromAFreshThreadTradesRarely) {
  std::thread([] {
    constexpr size_t kSize = 64;
    const unsigned c = size_class(kSize);
    void* q = lm_malloc(kSize);
    void* last = nullptr;
    constexpr int kRounds = 2000;
    int again = 0;
    for (int i = 0; i < kRounds; ++i) {
      void* p = lm_malloc(kSize);
      ASSERT_NE(p, nullptr);
      again += p == last;
      last = q;
      lm_free(q);
      q = p;
    }
    // Five warming refills (4 to 128), then a trade per bin_cap / 2 + 1
    // mallocs at most.
    EXPECT_LE(again, kRounds / int(bin_cap(c) / 2 + 1) + 5 + 2);
    lm_free(q);
  }).join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// One object in flight (p = malloc(n); free(q); q = p) from a cache that
// holds one object of the class.  A trade of the two stacks keeps the
// bin's count, and so does the loop: each malloc found the allocation stack
// empty and traded it for the one object the last free had pushed, so every
// malloc got back the object freed one iteration before (issue #16).  A
// free stack of one object is not traded (trade_min): the allocation stack
// is refilled from the spans, and from then on the bin holds at least
// bin_cap / 2 + 1 objects (what an overflow leaves), so a trade or refill
// (the one malloc that gets the last freed object back) comes at most once
// per that many mallocs.  Sizes with stacks of 128, 16 and 2 objects.
TEST(ThreadCache, OneObjectInFlightFromADrainedCacheTradesRarely) {
  for (size_t size : {64, 1000, 6000}) {
    std::thread([size] {
      const unsigned c = size_class(size);
      const detail::Bin& bin = detail::tl_bins[c];
      std::vector<void*> held{lm_malloc(size)};
      while (bin.top != bin.base) held.push_back(lm_malloc(size));  // the allocation stack is empty
      ASSERT_EQ(bin.ftop, detail::tl_bin_fbase[c]) << "and so is the free stack";
      void* q = held.back();  // freed first: the cache holds one object
      held.pop_back();
      void* last = nullptr;
      constexpr int kRounds = 1000;
      int again = 0;
      for (int i = 0; i < kRounds; ++i) {
        void* p = lm_malloc(size);
        ASSERT_NE(p, nullptr);
        ASSERT_NE(p, q);
        again += p == last;
        last = q;
        lm_free(q);
        q = p;
      }
      EXPECT_LE(again, kRounds / int(bin_cap(c) / 2 + 1) + 2) << size << " B: trades";
      lm_free(q);
      for (void* p : held) lm_free(p);
    }).join();
  }
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

}  // namespace
}  // namespace lazymalloc

#if LAZYMALLOC_CHECKS
namespace lazymalloc {
namespace {

// The free tag is random per process; lm_free_tag lets these tests write it
// into a live object, which a program does by chance with probability
// 2^-64 per free.

TEST(FrontendChecks, MallocClearsTheTagAndALiveObjectCarryingItIsTakenAsFreed) {
  auto* p = static_cast<uintptr_t*>(lm_malloc(64));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p[1], 0u) << "malloc clears the tag word";
  lm_free(p);
  EXPECT_EQ(p[1], lm_free_tag(p)) << "free tags the object for its link";
  std::vector<void*> v;  // the thread's cache hands out p again sooner or later
  while (v.size() < 4096 && (v.empty() || v.back() != p)) v.push_back(lm_malloc(64));
  ASSERT_EQ(v.back(), p);
  v.pop_back();
  for (void* q : v) lm_free(q);
  EXPECT_EQ(p[1], 0u);
  p[1] = lm_free_tag(p);
  EXPECT_DEATH(lm_free(p), "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  EXPECT_DEATH(lm_realloc(p, 200), "lazymalloc: realloc\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  p[1] = 0;
  lm_free(p);
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

TEST(FrontendChecks, RemoteFreeTakesATagAsADoubleFree) {
  // The documented limit: a remote free cannot walk the owner's lists.
  void* keep = lm_malloc(48);
  auto* p = static_cast<uintptr_t*>(lm_malloc(48));
  p[1] = lm_free_tag(p);
  EXPECT_DEATH(std::thread([p] { lm_free(p); }).join(),
               "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  p[1] = 0;
  std::thread([p] { lm_free(p); }).join();  // without the tag: a valid remote free
  lm_free(keep);
  lm_thread_collect();
}

TEST(FrontendChecks, DoubleFreeIsCaughtWhereverTheObjectWaits) {
  void* keep = lm_malloc(80);
  void* p = lm_malloc(80);
  // In another thread's bin, that thread still running.
  std::atomic<int> stage{0};
  std::thread t([&] {
    lm_free(p);
    stage.store(1);
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  EXPECT_DEATH(lm_free(p), "double free");
  stage.store(2);
  t.join();  // its bin went back: p waits on its span's remote list
  EXPECT_DEATH(lm_free(p), "double free");
  lm_thread_collect();  // collected: on the span's allocation list
  EXPECT_DEATH(lm_free(p), "double free");
  std::vector<void*> v;
  while (v.size() < 4096 && (v.empty() || v.back() != p)) v.push_back(lm_malloc(80));
  ASSERT_EQ(v.back(), p);
  lm_free(p);  // in this thread's bin
  EXPECT_DEATH(lm_free(p), "double free");
  v.pop_back();
  for (void* q : v) lm_free(q);
  lm_free(keep);
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

}  // namespace
}  // namespace lazymalloc
#endif
