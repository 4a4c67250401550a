// Sparse spans (issue #16, `mixed`): spans of the classes above 8 KiB whose
// pages the program touches sparsely get slots of their own advised
// MADV_NOHUGEPAGE, their empty spans stay with their class (bounded) and
// are reused, they go back with MADV_DONTNEED when mostly non-resident, and
// a class whose objects are written whole is not treated as sparse.  The
// backend part over a backend of its own; the frontend part over the
// process-wide allocator (lm_*) with a fake platform (recorded advice, an
// answer to resident_pages chosen by the test).
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/options.h"
#include "fixture.h"
#include "phases.h"
#include "frontend/bins.h"
#include "frontend/heap.h"
#include "frontend/internal.h"
#include "frontend/size_class.h"

namespace lazymalloc {
namespace {

using test::kMiB;

// The slot (2 MiB) of an address.
uintptr_t slot_of(const void* p) { return reinterpret_cast<uintptr_t>(p) & ~(uintptr_t(kSlotSize) - 1); }

// Whether the fake recorded MADV_NOHUGEPAGE for exactly the slot at `base`.
bool advised_nohuge(const test::FakePlatform& f, uintptr_t base) {
  for (const auto& h : f.hugepage_advice) {
    if (reinterpret_cast<uintptr_t>(h.addr) == base && h.len == kSlotSize && !h.huge) return true;
  }
  return false;
}

class SparseBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    stats = std::make_unique<Stats>();
    backend = std::make_unique<Backend>();
    backend->init(fake.get(), stats.get(), 64 * kMiB, true);
    purger = std::make_unique<Purger>();
    purger->init(backend.get(), fake.get(), stats.get());
  }
  test::FakePlatform fake;
  std::unique_ptr<Stats> stats;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Purger> purger;
};

// A sparse span gets a slot of its own, taken from the top of the free
// space and advised MADV_NOHUGEPAGE once; the next sparse span shares it,
// ordinary spans never do (nor large blocks, across a slot boundary).
TEST_F(SparseBackend, ASparseSpanGetsASlotOfItsOwnAdvisedNoHugepage) {
  Span* a = backend->alloc_units_span(2);
  ASSERT_NE(a, nullptr);
  Span* s = backend->alloc_units_span(2, true);
  ASSERT_NE(s, nullptr);
  EXPECT_NE(slot_of(s->start), slot_of(a->start));
  EXPECT_GT(slot_of(s->start), slot_of(a->start));  // from the top
  EXPECT_TRUE(advised_nohuge(fake, slot_of(s->start)));
  EXPECT_FALSE(advised_nohuge(fake, slot_of(a->start)));
  const size_t advice = fake.hugepage_advice.size();
  Span* t = backend->alloc_units_span(3, true);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(slot_of(t->start), slot_of(s->start));
  EXPECT_EQ(fake.hugepage_advice.size(), advice);  // once per slot
  Span* b = backend->alloc_units_span(4);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(slot_of(b->start), slot_of(a->start));
  // Large blocks fill ordinary slots only.
  std::vector<Span*> large;
  for (int i = 0; i < 12; ++i) {
    Span* l = backend->alloc(640 << 10, 16);
    ASSERT_NE(l, nullptr);
    EXPECT_NE(slot_of(l->start), slot_of(s->start));
    EXPECT_NE(slot_of(l->start + l->bytes - 1), slot_of(s->start));
    large.push_back(l);
  }
  EXPECT_EQ(backend->check_invariants(), nullptr);
  for (Span* l : large) backend->release(l);
  for (Span* x : {a, s, t, b}) backend->release(x);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// The arenas' hugepage advice (the heap reached hugepage_threshold) leaves
// sparse slots advised MADV_NOHUGEPAGE: they are advised again after it.
TEST_F(SparseBackend, ArenaAdviceKeepsSparseSlotsOffHugepages) {
  Span* s = backend->alloc_units_span(2, true);
  ASSERT_NE(s, nullptr);
  std::vector<Span*> dense;
  for (int i = 0; i < 32; ++i) {
    Span* d = backend->alloc_units_span(16);
    ASSERT_NE(d, nullptr);
    dense.push_back(d);
  }
  ASSERT_EQ(stats->get(Stat::hugepage_advice), 1u);  // 16 MiB of dense slots
  ASSERT_FALSE(fake.hugepage_advice.empty());
  const auto& last = fake.hugepage_advice.back();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(last.addr), slot_of(s->start));
  EXPECT_EQ(last.len, kSlotSize);
  EXPECT_FALSE(last.huge);
  for (Span* d : dense) backend->release(d);
  backend->release(s);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// Whether the fake recorded any hugepage advice (either way) for the slot
// at `base` since record `from`.
bool advised_since(const test::FakePlatform& f, size_t from, uintptr_t base) {
  for (size_t i = from; i < f.hugepage_advice.size(); ++i) {
    const auto& h = f.hugepage_advice[i];
    uintptr_t a = reinterpret_cast<uintptr_t>(h.addr);
    if (a <= base && base < a + h.len) return true;
  }
  return false;
}

// A growing block (one realloc moved into the large range) opens a slot of
// its own, which gets no hugepage while it is CLEAN: under the arenas'
// advice each such block of 300 KiB held 2 MiB.  Promoted to a huge block,
// it gets the slot's advice back; a growing block that opens the same slots
// again, resident, makes no madvise (realloc-grow: one such cycle after
// another).
TEST_F(SparseBackend, AGrowingBlocksSlotGetsNoHugepageWhileClean) {
  Span* plain = backend->alloc(300 * 1024, 16);  // a slot others may share: no advice of its own
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(advised_nohuge(fake, slot_of(plain->start)));
  Span* g = backend->alloc(300 * 1024, 16, /*growing=*/true);
  ASSERT_NE(g, nullptr);
  EXPECT_NE(slot_of(g->start), slot_of(plain->start));
  EXPECT_TRUE(advised_nohuge(fake, slot_of(g->start)));
  size_t from = fake.hugepage_advice.size();
  ASSERT_TRUE(backend->resize(g, 3 * kMiB));  // promoted, then grown into the next slot
  EXPECT_TRUE(advised_since(fake, from, slot_of(g->start)));
  EXPECT_TRUE(fake.hugepage_advice.back().huge);
  char* where = g->start;
  backend->release(g);
  from = fake.hugepage_advice.size();
  Span* again = backend->alloc(300 * 1024, 16, /*growing=*/true);
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(again->start, where);
  ASSERT_TRUE(backend->resize(again, 3 * kMiB));
  EXPECT_EQ(fake.hugepage_advice.size(), from);
  backend->release(again);
  backend->release(plain);
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

// ---- frontend, over the process-wide allocator

constexpr uint64_t kSecond = 1000000000;

class SparseSpans : public ::testing::Test {
 protected:
  static constexpr size_t kSize = 120000;  // one object per 2-unit span, not cached
  void SetUp() override {
    option_set(unsigned(Opt::background), 0);
    lm_init();
    lm_thread_collect();
    fake.now_ns = pal::linux_platform().now_ns(nullptr) + kSecond;
    fake.thread_fault.fail_every();
    lm_set_platform(fake.get());
    c = size_class(kSize);
    ASSERT_GT(detail::kClasses.units[c], 1u);
    detail::class_residency_reset();
  }
  void TearDown() override {
    lm_thread_collect();
    EXPECT_EQ(lm_check_invariants(), nullptr);
    lm_set_platform(&pal::linux_platform());
    detail::class_residency_reset();
  }
  // Class c judged sparse (a sample of nothing resident).
  void judge_sparse() {
    detail::g_class_residency[c].store(0);
    detail::g_class_samples[c].store(1);
  }
  test::FakePlatform fake;
  unsigned c = 0;
};

// Empty sparse spans stay with their class, at most kKeptSpans, and the
// class's next spans are those, at the same addresses, without the backend.
TEST_F(SparseSpans, EmptySpansAreKeptPerClassUpToTheBoundAndReused) {
  judge_sparse();
  constexpr int kCount = 20;
  std::vector<void*> v(kCount);
  for (auto& p : v) {
    p = lm_malloc(kSize);
    ASSERT_NE(p, nullptr);
    Span* s = detail::g.backend.span_of(p);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->sparse, 1u);
    // Advised when the slot was first taken (perhaps by an earlier test).
    EXPECT_TRUE(s->slot->sparse && s->slot->nohuge);
  }
  Heap* h = detail::tl_heap;
  const uint64_t released0 = test::lm_stat("spans_released");
  for (auto& p : v) lm_free(p);
  EXPECT_EQ(h->kept_count[c], detail::kKeptSpans);
  EXPECT_LE(h->kept_bytes, uint64_t(detail::kKeptSpans) * detail::kClasses.units[c] * kUnitSize);
  // All but the kept ones and the current span went back.
  EXPECT_EQ(test::lm_stat("spans_released") - released0, uint64_t(kCount - detail::kKeptSpans - 1));
  std::vector<char*> kept;
  for (Span* s = h->kept[c]; s; s = s->next) kept.push_back(s->start);
  ASSERT_EQ(kept.size(), detail::kKeptSpans);
  const uint64_t acquired0 = test::lm_stat("spans_acquired");
  const uint64_t reuses0 = test::lm_stat("sparse_span_reuses");
  EXPECT_EQ(lm_check_invariants(), nullptr);
  // The current span first, then the kept ones, newest first.
  std::vector<void*> w(detail::kKeptSpans + 1);
  for (auto& p : w) p = lm_malloc(kSize);
  EXPECT_EQ(test::lm_stat("spans_acquired"), acquired0);
  EXPECT_EQ(test::lm_stat("sparse_span_reuses") - reuses0, uint64_t(detail::kKeptSpans));
  EXPECT_EQ(h->kept_count[c], 0u);
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(w[i + 1], kept[i]);
  for (auto& p : w) lm_free(p);
  // A collection gives them all back.
  lm_thread_collect();
  EXPECT_EQ(h->kept_count[c], 0u);
  EXPECT_EQ(h->kept_bytes, 0u);
}

// A quiet thread's kept spans are held memory like its other spans: the
// idle-heap collector gives them back to the backend with the rest.
TEST_F(SparseSpans, AQuietThreadsKeptSpansGoBackWhenItsHeapIsCollected) {
  judge_sparse();
  constexpr int kCount = 20;  // kept: up to the bound, and no more than those in use
  Heap* wh = nullptr;
  lmt::Phases phases;  // 1: allocated and freed; 2: worker may exit
  std::thread worker([&] {
    std::vector<void*> v(kCount);
    for (auto& p : v) {
      p = lm_malloc(kSize);
      ASSERT_NE(p, nullptr);
      memset(p, 0x5e, 4096);  // its first page only: sparse
    }
    for (auto& p : v) lm_free(p);
    wh = detail::tl_heap;
    phases.set(1);
    phases.wait(2);
  });
  phases.wait(1);
  EXPECT_NE(wh, nullptr);
  EXPECT_EQ(wh ? wh->kept_count[c] : 0u, detail::kKeptSpans);
  const uint64_t released0 = test::lm_stat("spans_released");
  const uint64_t spans0 = test::lm_stat("small_spans");
  const uint64_t t0 = fake.now_ns + 1000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);  // sees the heap
  lm_collect_idle_heaps(t0 + idle, idle);
  if (wh) {
    EXPECT_EQ(wh->kept_count[c], 0u);
    EXPECT_EQ(wh->kept_bytes, 0u);
  }
  EXPECT_GE(test::lm_stat("spans_released") - released0, uint64_t(detail::kKeptSpans));
  EXPECT_LE(test::lm_stat("small_spans"), spans0 - detail::kKeptSpans);
  EXPECT_EQ(lm_check_invariants(), nullptr);
  phases.set(2);
  worker.join();
}

// A sparse span that goes back with at most half its pages resident is
// given MADV_DONTNEED and its units are CLEAN; one mostly resident stays
// RETAINED.
TEST_F(SparseSpans, AMostlyNonResidentSpanGoesBackWithDontNeed) {
  judge_sparse();
  const size_t pages = detail::kClasses.units[c] * kUnitSize / kOsPageSize;
  auto one_span_back = [&](long resident, bool dontneed) {
    void* p = lm_malloc(kSize);
    void* q = lm_malloc(kSize);  // the next span becomes current
    ASSERT_NE(p, nullptr);
    ASSERT_NE(q, nullptr);
    Span* s = detail::g.backend.span_of(p);
    ASSERT_EQ(s->sparse, 1u);
    char* start = s->start;
    const size_t bytes = s->bytes;
    lm_thread_collect();  // nothing kept from here
    fake.resident_answer = resident;
    fake.calls.clear();
    const uint64_t clean0 = test::lm_stat("clean_bytes");
    const uint64_t dontneed0 = test::lm_stat("sparse_span_dontneed_bytes");
    lm_free(p);
    lm_thread_collect();
    bool advised = false;
    for (const auto& a : fake.calls) {
      advised |= a.addr == reinterpret_cast<uintptr_t>(start) && a.len == bytes && a.advice == Advice::kDontNeed;
    }
    EXPECT_EQ(advised, dontneed);
    EXPECT_EQ(test::lm_stat("sparse_span_dontneed_bytes") - dontneed0, dontneed ? bytes : 0);
    if (dontneed) EXPECT_GE(test::lm_stat("clean_bytes") - clean0, uint64_t(bytes));
    EXPECT_EQ(lm_check_invariants(), nullptr);
    fake.resident_answer = -2;
    lm_free(q);
    lm_thread_collect();
  };
  one_span_back(long(pages / 2), true);
  one_span_back(2, true);
  EXPECT_LE(detail::g_class_residency[c].load(), detail::kSparseResidencyMax);
  one_span_back(long(pages / 2 + 1), false);
}

// The verdict: an unmeasured class gets one sparse span (the probe) and
// ordinary ones; measured (the fake's resident_pages answer) mostly
// resident, its spans stay ordinary, not kept; measured sparse, its next
// span is sparse.  The real resident_pages counts the pages touched.
TEST_F(SparseSpans, TheVerdictSparseOrDenseComesFromTheResidencyOfItsSpans) {
  auto first_span_back = [&](size_t size, long resident) {
    void* p = lm_malloc(size);
    void* q = lm_malloc(size);  // the next span becomes current
    ASSERT_NE(p, nullptr);
    ASSERT_NE(q, nullptr);
    // Unmeasured: the first span is the probe, the next one ordinary.
    EXPECT_EQ(detail::g.backend.span_of(p)->sparse, 1u);
    EXPECT_EQ(detail::g.backend.span_of(q)->sparse, 0u);
    fake.resident_answer = resident;
    lm_free(p);
    lm_thread_collect();
    fake.resident_answer = -2;
    lm_free(q);
    lm_thread_collect();
  };
  // Sparse (first: the dense spans' units come back RETAINED, resident,
  // and the backend prefers resident units).
  constexpr size_t kBig = 200000;
  const unsigned b = size_class(kBig);
  ASSERT_NE(b, c);
  first_span_back(kBig, 2);
  EXPECT_GE(detail::g_class_samples[b].load(), 1u);
  EXPECT_LE(detail::g_class_residency[b].load(), detail::kSparseResidencyMax);
  EXPECT_TRUE(detail::class_sparse_now(b));
  void* p = lm_malloc(kBig);
  ASSERT_NE(p, nullptr);
  Span* t = detail::g.backend.span_of(p);
  EXPECT_EQ(t->sparse, 1u);
  EXPECT_TRUE(t->slot->sparse && t->slot->nohuge);
  lm_free(p);
  // Dense.
  first_span_back(kSize, long(detail::kClasses.units[c] * kUnitSize / kOsPageSize));
  EXPECT_GE(detail::g_class_samples[c].load(), 1u);
  EXPECT_GT(detail::g_class_residency[c].load(), detail::kSparseResidencyMax);
  EXPECT_FALSE(detail::class_sparse_now(c));
  std::vector<void*> v(4);
  for (auto& o : v) {
    o = lm_malloc(kSize);
    ASSERT_NE(o, nullptr);
    memset(o, 2, kSize);
    Span* t = detail::g.backend.span_of(o);
    EXPECT_EQ(t->sparse, 0u);
    EXPECT_FALSE(t->slot->sparse);
  }
  for (auto& o : v) lm_free(o);
  EXPECT_EQ(detail::tl_heap->kept_count[c], 0u);
  // A class of 8 KiB objects or less (one-unit spans) is never sparse.
  const unsigned small = size_class(4096);
  detail::g_class_samples[small].store(1);
  EXPECT_FALSE(detail::class_sparse_now(small));
  // mincore: the pages touched of a fresh mapping.
  const Platform& linux = pal::linux_platform();
  char* m = static_cast<char*>(mmap(nullptr, 64 * kOsPageSize, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  m[0] = 1;
  m[63 * kOsPageSize] = 1;
  EXPECT_EQ(linux.resident_pages(nullptr, m, 64 * kOsPageSize), 2);
  munmap(m, 64 * kOsPageSize);
}

}  // namespace
}  // namespace lazymalloc
