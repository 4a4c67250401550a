// Every error path of the OS effects, injected through the fake platform:
// arena reservations, metadata mappings (slot records, arena records, page
// map leaves, span records), madvise and process_madvise failures, thread
// creation, missing and garbled pressure files, guard pages (mprotect),
// page moves (mremap) and the futex locks.  After each, the backend's
// invariants hold and the allocator works again once the fault is gone.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/options.h"
#include "fixture.h"
#include "frontend/heap.h"
#include "frontend/internal.h"
#include "pal/lock.h"
#include "wait.h"
#include "purge/purger.h"

namespace lazymalloc {
namespace {

using test::kMiB;

class FaultTest : public test::PurgeFixture {
 protected:
  FaultTest() : PurgeFixture(kPurgeDecay) {}

  void expect_consistent() {
    const char* broken = backend->check_invariants();
    EXPECT_EQ(broken, nullptr) << broken;
    MemoryState m = backend->memory_state();
    EXPECT_EQ(m.active + m.retained + m.lazy + m.clean, m.reserved);
  }
  // Every reservation the fake made was unmapped again (none leaked).
  void expect_reservations_returned() {
    for (const auto& [addr, size] : fake.reservations) {
      EXPECT_TRUE(fake.was_unmapped(addr, size)) << "reservation " << addr << " leaked";
      EXPECT_FALSE(backend->owns_address(addr));
    }
  }
  // `n` units freed in `n` different slots (kept apart by live units), all
  // old enough for decay: one purge batch of `n` ranges.
  void free_scattered_units(int n) {
    std::vector<Span*> drops;
    for (int i = 0; i < n; ++i) {
      Span* keep = backend->alloc_units_span(1);
      Span* drop = backend->alloc_units_span(1);
      Span* fill = backend->alloc_units_span(30);
      ASSERT_TRUE(keep && drop && fill);
      for (Span* d : drops) ASSERT_NE(d->slot, drop->slot);  // one range each
      keep_.push_back(keep);
      keep_.push_back(fill);
      drops.push_back(drop);
    }
    for (Span* d : drops) backend->release(d);
    fake.advance_ms(5000);
  }
  void TearDown() override {
    for (Span* s : keep_) backend->release(s);
    expect_consistent();
    PurgeFixture::TearDown();
  }
  std::vector<Span*> keep_;
};

// ------------------------------------------------------------ reservations

TEST_F(FaultTest, ArenaReservationFailsThenAllocationWorksAgain) {
  fake.reserve_fault.fail_every();
  EXPECT_EQ(backend->alloc(3 * kMiB, 16), nullptr);
  EXPECT_EQ(backend->alloc(100, 16), nullptr);
  EXPECT_EQ(backend->alloc_units_span(2), nullptr);
  EXPECT_GE(st(Stat::mmap_failures), 3u);
  EXPECT_EQ(st(Stat::reserved_bytes), 0u);
  EXPECT_EQ(st(Stat::active_bytes), 0u);
  expect_consistent();
  fake.reserve_fault.heal();
  Span* s = backend->alloc(3 * kMiB, 16);
  ASSERT_NE(s, nullptr);
  s->start[0] = 1;
  s->start[s->bytes - 1] = 2;
  expect_consistent();
  backend->release(s);
}

TEST_F(FaultTest, ArenaReservationIsHalvedWhenTheFullSizeFails) {
  set(Opt::hugepages, 1);
  set(Opt::hugepage_threshold, 0);  // every arena advised from the start
  backend->init(fake.get(), stats.get(), 64 * kMiB, true);
  fake.reserve_fault.fail_nth(1);  // 64 MiB fails, 32 MiB is taken
  Span* s = backend->alloc(kUnitSize, 16);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(fake.reserve_fault.calls, 2u);
  EXPECT_EQ(st(Stat::reserved_bytes), 32 * kMiB);
  EXPECT_EQ(st(Stat::mmap_failures), 1u);
  // MADV_HUGEPAGE for the arena and MADV_NOHUGEPAGE for the unit map's leaf
  // go through the platform too.
  EXPECT_EQ(fake.hugepage_calls, 2u);
  expect_consistent();
  backend->release(s);
}

// ------------------------------------------------------------ metadata

TEST_F(FaultTest, SlotRecordMappingFailsWithoutLeakingTheReservation) {
  fake.map_fault.fail_nth(1);  // the arena's SlotMeta array
  EXPECT_EQ(backend->alloc(2 * kMiB, 16), nullptr);
  EXPECT_EQ(fake.map_fault.failures, 1u);
  ASSERT_EQ(fake.reservations.size(), 1u);
  expect_reservations_returned();
  EXPECT_EQ(st(Stat::reserved_bytes), 0u);
  EXPECT_EQ(st(Stat::arenas), 0u);
  EXPECT_EQ(st(Stat::mmap_failures), 1u);
  expect_consistent();
  Span* s = backend->alloc(2 * kMiB, 16);  // the next call gets memory
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(backend->owns_address(s->start));
  backend->release(s);
}

TEST_F(FaultTest, ArenaRecordMappingFailsWithoutLeakingTheReservation) {
  fake.map_fault.fail_nth(2);  // SlotMeta array mapped, then the arena record pool's chunk
  EXPECT_EQ(backend->alloc(kUnitSize, 16), nullptr);
  ASSERT_EQ(fake.reservations.size(), 1u);
  expect_reservations_returned();
  // The slot records were unmapped too.
  size_t meta_bytes = align_up(32 * sizeof(SlotMeta), 4096);
  bool slots_unmapped = false;
  for (const auto& u : fake.unmaps) slots_unmapped |= u.second == meta_bytes;
  EXPECT_TRUE(slots_unmapped);
  EXPECT_EQ(st(Stat::reserved_bytes), 0u);
  expect_consistent();
  Span* s = backend->alloc(kUnitSize, 16);
  ASSERT_NE(s, nullptr);
  backend->release(s);
}

// An address range of `size` bytes that straddles a multiple of 16 GiB (a
// page map leaf's reach) and that nothing is mapped at, or 0.  Searched
// below where the kernel puts mappings now (addresses sanitizers allow).
uintptr_t free_range_across_leaf_boundary(size_t size) {
  constexpr uintptr_t kLeafReach = uintptr_t(kPageMapLeafSize) << kSlotShift;  // 16 GiB
  void* probe = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) return 0;
  munmap(probe, 4096);
  uintptr_t boundary = reinterpret_cast<uintptr_t>(probe) & ~(kLeafReach - 1);
  for (int k = 0; k < 64 && boundary > kLeafReach; ++k, boundary -= kLeafReach) {
    void* want = reinterpret_cast<void*>(boundary - size / 2);
    void* p = mmap(want, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == MAP_FAILED) continue;
    munmap(p, size);
    if (p == want) return reinterpret_cast<uintptr_t>(p);
  }
  return 0;
}

TEST_F(FaultTest, PageMapLeafFailureUnregistersTheSlotsAlreadyEntered) {
  // A 64 MiB arena straddling a leaf boundary: its first 16 slots go into
  // one leaf (mapped), the other 16 need a second leaf, whose mapping fails.
  uintptr_t at = free_range_across_leaf_boundary(64 * kMiB);
  ASSERT_NE(at, 0u) << "no free address range found for the test";
  fake.map_fault.only_size = kPageMapLeafSize * sizeof(SlotMeta*);
  fake.map_fault.fail_nth(2);
  fake.reserve_at = reinterpret_cast<void*>(at);
  EXPECT_EQ(backend->alloc(2 * kMiB, 16), nullptr);
  ASSERT_EQ(fake.reservations.size(), 1u);
  ASSERT_EQ(fake.reservations[0].first, reinterpret_cast<void*>(at));
  EXPECT_EQ(fake.map_fault.failures, 1u);
  // No page map entry may lead to the (unmapped) slot records.
  for (uintptr_t a = at; a < at + 64 * kMiB; a += kSlotSize) {
    EXPECT_FALSE(backend->owns_address(reinterpret_cast<void*>(a))) << std::hex << a;
    EXPECT_EQ(backend->span_of(reinterpret_cast<void*>(a)), nullptr);
  }
  expect_reservations_returned();
  EXPECT_EQ(st(Stat::arenas), 0u);
  EXPECT_GE(st(Stat::mmap_failures), 1u);
  expect_consistent();
  // Once leaves can be mapped, the same place works (the first leaf stays).
  fake.map_fault.heal();
  fake.reserve_at = reinterpret_cast<void*>(at);
  Span* s = backend->alloc(40 * kMiB, 16);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s->start), at);
  for (uintptr_t a = at; a < at + 40 * kMiB; a += kSlotSize) {
    EXPECT_EQ(backend->span_of(reinterpret_cast<void*>(a)), s);
  }
  s->start[40 * kMiB - 1] = 1;  // the second leaf's half is ours
  expect_consistent();
  backend->release(s);
}

TEST_F(FaultTest, SpanRecordMappingFailsForUnitAndSlotRuns) {
  // Fresh backend: SlotMeta array, arena record chunk, unit map leaf, slot
  // map leaf, span chunk.
  fake.map_fault.fail_nth(5);
  EXPECT_EQ(backend->alloc(3 * kUnitSize, 16), nullptr);
  EXPECT_EQ(fake.map_fault.failures, 1u);
  EXPECT_EQ(st(Stat::arenas), 1u);  // the arena itself is fine
  EXPECT_EQ(st(Stat::active_bytes), 0u);
  expect_consistent();
  Span* s = backend->alloc(3 * kUnitSize, 16);
  ASSERT_NE(s, nullptr);
  backend->release(s);
  // The slot-run path, on a second backend.
  Stats stats2;
  auto b2 = std::make_unique<Backend>();
  b2->init(fake.get(), &stats2, 64 * kMiB, false);
  fake.map_fault.fail_nth(5);  // the span chunk, as above
  EXPECT_EQ(b2->alloc(5 * kMiB, 4 * kMiB), nullptr);
  EXPECT_EQ(b2->check_invariants(), nullptr);
  EXPECT_EQ(stats2.get(Stat::active_bytes), 0u);
  Span* h = b2->alloc(60 * kMiB, 16);  // every slot is free and one run again
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(stats2.get(Stat::arenas), 1u);
  b2->release(h);
  EXPECT_EQ(b2->check_invariants(), nullptr);
}

TEST_F(FaultTest, UnitMapLeafFailureGivesTheArenaBack) {
  fake.map_fault.only_size = kUnitLeafSize * sizeof(Span*);
  fake.map_fault.fail_nth(1);
  EXPECT_EQ(backend->alloc(2 * kMiB, 16), nullptr);
  EXPECT_EQ(fake.map_fault.failures, 1u);
  expect_reservations_returned();
  EXPECT_EQ(st(Stat::arenas), 0u);
  expect_consistent();
  fake.map_fault.heal();
  Span* s = backend->alloc(2 * kMiB, 16);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(backend->span_of(s->start + kMiB), s);
  EXPECT_TRUE(backend->owns_address(s->start));
  backend->release(s);
  expect_consistent();
}

// ------------------------------------------------------------ advice

TEST_F(FaultTest, MadvFreeEinvalOnAVectorFallsBackToDontneed) {
  fake.fail_free_with = EINVAL;
  free_scattered_units(3);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 3 * kUnitSize);
  EXPECT_TRUE(purger->adviser().free_unsupported());
  EXPECT_EQ(st(Stat::purge_free_unsupported), 1u);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 3 * kUnitSize);
  EXPECT_EQ(fake.advised_bytes(Advice::kFree), 0u);
  EXPECT_EQ(st(Stat::lazy_bytes), 0u);
  EXPECT_EQ(st(Stat::purge_failures), 0u);
  expect_consistent();
  // Later purges go straight to DONTNEED.
  size_t before = fake.advise_calls;
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(2000);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  EXPECT_EQ(fake.advise_calls, before + 1);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 3 * kUnitSize + 2 * kMiB);
}

TEST_F(FaultTest, OtherAdviceErrorsKeepTheBatchRetainedAndRetryLater) {
  for (int err : {EAGAIN, ENOMEM, EPERM}) {
    SCOPED_TRACE(err);
    fake.advise_fault.fail_every(err);
    free_scattered_units(3);
    uint64_t retained = st(Stat::retained_bytes);
    uint64_t failures = st(Stat::purge_failures);
    EXPECT_EQ(purger->decay_pass(fake.now_ns), 0u);
    EXPECT_GT(st(Stat::purge_failures), failures);
    EXPECT_EQ(st(Stat::retained_bytes), retained);
    EXPECT_FALSE(purger->adviser().free_unsupported());
    expect_consistent();
    // Pressure relief (DONTNEED) and trim fail the same way.
    EXPECT_EQ(purger->relieve(~uint64_t(0)), 0u);
    EXPECT_EQ(purger->purge_all(true), 0u);
    EXPECT_EQ(st(Stat::retained_bytes), retained);
    expect_consistent();
    fake.advise_fault.heal();
    fake.advance_ms(10);
    EXPECT_EQ(purger->decay_pass(fake.now_ns), retained);  // retried
    EXPECT_EQ(st(Stat::retained_bytes), 0u);
    expect_consistent();
  }
}

TEST_F(FaultTest, AFailureInTheMiddleOfAPassLeavesTheRestForLater) {
  set(Opt::purge_batch, 2 * kMiB);
  std::vector<Span*> spans;
  for (int i = 0; i < 4; ++i) spans.push_back(backend->alloc(2 * kMiB, 16));
  Span* fence = backend->alloc(kUnitSize, 16);  // spans[] are one run; fence keeps the arena's tail apart
  for (Span* s : spans) backend->release(s);
  fake.advance_ms(2000);
  fake.advise_fault.fail_nth(2, EAGAIN);  // one batch of 2 MiB each: the second fails
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  EXPECT_EQ(st(Stat::purge_failures), 1u);
  EXPECT_EQ(st(Stat::lazy_bytes), 2 * kMiB);
  EXPECT_EQ(st(Stat::retained_bytes), 6 * kMiB);
  expect_consistent();
  // Everything that was held back is still allocatable meanwhile.
  Span* big = backend->alloc(6 * kMiB, 16);
  ASSERT_NE(big, nullptr);
  backend->release(big);
  fake.advance_ms(2000);
  uint64_t retained = st(Stat::retained_bytes);
  EXPECT_GE(retained, 6 * kMiB);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), retained);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  backend->release(fence);
}

TEST_F(FaultTest, ProcessMadviseUnsupportedFallsBackToMadviseForGood) {
  fake.vector_fault.fail_every(ENOSYS);
  free_scattered_units(3);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 3 * kUnitSize);
  EXPECT_EQ(fake.vector_calls, 1u);
  EXPECT_EQ(fake.advise_calls, 4u);  // the refused vector, then one per range
  EXPECT_EQ(fake.calls.size(), 3u);
  EXPECT_TRUE(purger->adviser().vector_unsupported());
  EXPECT_EQ(st(Stat::purge_vector_unsupported), 1u);
  EXPECT_EQ(st(Stat::purge_lazy_calls), 4u);
  EXPECT_EQ(st(Stat::lazy_bytes), 3 * kUnitSize);
  expect_consistent();
  // The next batch does not try process_madvise again.
  free_scattered_units(2);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kUnitSize);
  EXPECT_EQ(fake.vector_calls, 1u);
}

TEST_F(FaultTest, TransientOrPartialProcessMadviseIsFinishedRangeByRange) {
  fake.vector_fault.fail_nth(1, EAGAIN);
  free_scattered_units(3);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 3 * kUnitSize);
  EXPECT_FALSE(purger->adviser().vector_unsupported());
  EXPECT_EQ(fake.calls.size(), 3u);
  // A partial result: the batch is finished with madvise, still not refused.
  fake.vector_short_by = kUnitSize;
  free_scattered_units(3);
  fake.calls.clear();
  uint64_t lazy = st(Stat::lazy_bytes);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 3 * kUnitSize);
  EXPECT_FALSE(purger->adviser().vector_unsupported());
  EXPECT_EQ(fake.vector_calls, 2u);
  EXPECT_EQ(fake.advised_bytes(Advice::kFree), 6 * kUnitSize);  // vector, then each range again
  EXPECT_EQ(st(Stat::lazy_bytes), lazy + 3 * kUnitSize);
  EXPECT_EQ(st(Stat::purge_failures), 0u);
}

// ------------------------------------------------------------ thread

TEST_F(FaultTest, BackgroundThreadThatCannotStartDegradesToInlineDecay) {
  set(Opt::background, 1);
  set(Opt::background_interval_ms, 100);
  BackgroundPurger bg;
  fake.thread_fault.fail_every(EAGAIN);
  EXPECT_FALSE(bg.ensure_started(purger.get(), fake.get(), stats.get()));
  EXPECT_FALSE(bg.running());
  EXPECT_EQ(st(Stat::background_start_failures), 1u);
  // Not retried on every free.
  EXPECT_FALSE(bg.ensure_started(purger.get(), fake.get(), stats.get()));
  EXPECT_EQ(fake.thread_fault.calls, 1u);
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(1500);
  purger->after_release(fake.now_ns, bg.ensure_started(purger.get(), fake.get(), stats.get()));
  EXPECT_EQ(st(Stat::inline_purges), 1u);
  EXPECT_EQ(st(Stat::lazy_bytes), 2 * kMiB);
  // A fork child tries again.
  bg.fork_child();
  fake.thread_fault.heal();
  EXPECT_TRUE(bg.ensure_started(purger.get(), fake.get(), stats.get()));
  EXPECT_EQ(fake.threads_started, 1u);
}

// The same through the process-wide allocator (lm_*), whose OS effects go
// through a fake platform with a clock that runs from the real one.
TEST(FaultFrontend, FreeDecaysInlineWhenTheBackgroundThreadCannotStart) {
  static test::FakePlatform fake;
  // An hour ahead: past the clock of the tests that may run before it in this
  // process (an inline purge runs at most once per background_interval_ms).
  fake.now_ns = pal::linux_platform().now_ns(nullptr) + 3600 * 1'000'000'000ull;
  fake.thread_fault.fail_every(EAGAIN);
  option_set(unsigned(Opt::background), 1);
  option_set(unsigned(Opt::background_interval_ms), 100);
  option_set(unsigned(Opt::decay_ms), 1000);
  option_set(unsigned(Opt::purge), kPurgeDecay);
  // Huge frees stay RETAINED (no release worker start to count below).
  int64_t retain = option(Opt::huge_retain);
  option_set(unsigned(Opt::huge_retain), int64_t(1) << 50);
  lm_set_platform(fake.get());
  auto stat = test::lm_stat;
  uint64_t inline_before = stat("inline_purges");
  void* p = lm_malloc(6 << 20);
  void* q = lm_malloc(3 << 20);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  lm_free(p);
  EXPECT_GE(fake.thread_fault.calls, 1u);
  EXPECT_EQ(fake.threads_started, 0u);
  EXPECT_GE(stat("background_start_failures"), 1u);
  EXPECT_EQ(stat("background_threads"), 0u);
  EXPECT_GT(stat("inline_purges"), inline_before);
  // 1.5 s later the next free decays the 6 MiB block inline.
  fake.advance_ms(1500);
  lm_free(q);
  EXPECT_GE(stat("lazy_bytes"), uint64_t(6) << 20);
  EXPECT_GE(fake.advised_bytes(Advice::kFree), size_t(6) << 20);
  EXPECT_EQ(fake.thread_fault.calls, 1u);  // never retried
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_set_platform(&pal::linux_platform());
  option_set(unsigned(Opt::huge_retain), retain);
}

// Secure mode's guard page (alloc_large): an mprotect that fails leaves the
// block without one, and its free unprotects nothing; one that works
// protects the page below which the block ends, and free unprotects it.
TEST(FaultFrontend, GuardPageThatCannotBeProtectedIsLeftOut) {
  static test::FakePlatform fake;
  fake.now_ns = pal::linux_platform().now_ns(nullptr) + 1'000'000'000;
  fake.thread_fault.fail_every(EAGAIN);
  lm_free(lm_malloc(16));  // initialised with the real platform first
  lm_set_platform(fake.get());
  bool secure = detail::g_secure;
  detail::g_secure = true;  // (only alloc_large and free_generic run meanwhile)
  constexpr size_t kSize = 300 << 10;
  fake.protect_fault.fail_nth(1);
  void* p = detail::alloc_large(kSize, 16, nullptr);
  ASSERT_NE(p, nullptr);
  Span* s = detail::g.backend.span_of(p);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(fake.protect_fault.failures, 1u);
  EXPECT_EQ(s->guard, 0u);
  memset(p, 1, kSize);
  detail::free_generic(p, s);
  EXPECT_EQ(fake.protects, 0u);
  void* q = detail::alloc_large(kSize, 16, nullptr);
  ASSERT_NE(q, nullptr);
  Span* t = detail::g.backend.span_of(q);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->guard, 1u);
  EXPECT_EQ(fake.protects, 1u);
  EXPECT_LE(static_cast<char*>(q) + kSize, t->start + t->bytes - kOsPageSize);
  memset(q, 1, kSize);
  detail::free_generic(q, t);
  EXPECT_EQ(fake.protects, 2u);  // unprotected before the span went back
  detail::g_secure = secure;
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_set_platform(&pal::linux_platform());
}

// realloc of a huge block that cannot grow in place moves its pages
// (mremap); if the move fails it copies them instead, and nothing counts a
// move.
TEST(FaultFrontend, HugeReallocCopiesWhenThePagesCannotMove) {
  static test::FakePlatform fake;
  fake.now_ns = pal::linux_platform().now_ns(nullptr) + 1'000'000'000;
  fake.thread_fault.fail_every(EAGAIN);
  int64_t retain = option(Opt::huge_retain);
  option_set(unsigned(Opt::huge_retain), int64_t(1) << 50);  // no release workers
  lm_free(lm_malloc(16));
  lm_set_platform(fake.get());
  constexpr size_t kBlock = 4 << 20;
  // A block followed directly by another cannot grow in place.
  std::vector<void*> blocks;
  char* p = nullptr;
  for (int i = 0; i < 16 && !p; ++i) {
    void* b = lm_malloc(kBlock);
    ASSERT_NE(b, nullptr);
    for (void* a : blocks) {
      if (static_cast<char*>(a) + kBlock == b) p = static_cast<char*>(a);
    }
    blocks.push_back(b);
  }
  ASSERT_NE(p, nullptr);
  std::erase(blocks, p);
  for (size_t i = 0; i < kBlock; i += 4096) p[i] = char(i >> 12);
  uint64_t moves = test::lm_stat("mremap_moves");
  fake.move_fault.fail_nth(1);
  char* q = static_cast<char*>(lm_realloc(p, 3 * kBlock));
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(fake.move_fault.failures, 1u);
  EXPECT_EQ(fake.moves, 0u);
  EXPECT_EQ(test::lm_stat("mremap_moves"), moves);
  size_t wrong = 0;
  for (size_t i = 0; i < kBlock; i += 4096) wrong += q[i] != char(i >> 12);
  EXPECT_EQ(wrong, 0u);
  lm_free(q);
  for (void* b : blocks) lm_free(b);
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_set_platform(&pal::linux_platform());
  option_set(unsigned(Opt::huge_retain), retain);
}

// The process-wide locks sleep and hand over through the lock platform.
// The fake's wait returns at once (a spurious wake-up): the waiter only
// tries again, and gets the lock once it is free.
TEST(FaultPlatform, MutexWaitsAndHandsOverThroughTheLockPlatform) {
  test::FakePlatform fake;
  pal::set_lock_platform(fake.get());
  Mutex m;
  m.lock();
  std::atomic<bool> got{false};
  std::thread t([&] {
    m.lock();
    got = true;
    m.unlock();
  });
  bool waited = lmt::WaitFor([&] {
    std::lock_guard<std::mutex> guard(fake.records_lock());
    return !fake.waits.empty();
  });
  EXPECT_TRUE(waited);
  EXPECT_FALSE(got.load());
  m.unlock();
  t.join();
  pal::set_lock_platform(nullptr);
  EXPECT_TRUE(got.load());
  // The unlock that found the waiter, and the waiter's own: it took the
  // lock marked contended.
  EXPECT_EQ(fake.wake_ones, 2u);
  EXPECT_EQ(fake.wakes, 0u);
  size_t timed = 0;
  for (int64_t w : fake.waits) timed += w != -1;
  EXPECT_EQ(timed, 0u);  // a lock waits without a timeout
}

// ------------------------------------------------------------ pressure files

TEST_F(FaultTest, PressureFilesMissingLeaveOnlyDecay) {
  fake.read_fault.fail_every();
  purger->init_pressure();
  EXPECT_EQ(st(Stat::pressure_psi_active), 0u);
  EXPECT_EQ(st(Stat::pressure_meminfo_active), 0u);
  EXPECT_EQ(st(Stat::cgroup_limit_bytes), 0u);
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  for (int i = 0; i < 15; ++i) {
    fake.advance_ms(100);
    purger->tick(fake.now_ns);
  }
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 0u);
  EXPECT_EQ(fake.advised_bytes(Advice::kFree), 2 * kMiB);  // decay as usual
  EXPECT_EQ(st(Stat::pressure_purged_bytes), 0u);
  expect_consistent();
}

TEST_F(FaultTest, GarbledPressureFilesAreIgnored) {
  fake.files["/proc/self/cgroup"] = "0::/svc\n";
  fake.files["/sys/fs/cgroup/svc/memory.max"] = "lots\n";
  fake.files["/sys/fs/cgroup/svc/memory.high"] = "\n";
  fake.files["/sys/fs/cgroup/svc/memory.current"] = "-5\n";
  fake.files["/sys/fs/cgroup/svc/memory.pressure"] = "some avg10=9.99 total=\nfull total=x\n";
  fake.files["/proc/pressure/memory"] = "garbage";
  fake.files["/proc/meminfo"] = "MemTotal: many kB\nMemAvailable: 1 kB\n";
  purger->init_pressure();
  EXPECT_EQ(st(Stat::cgroup_limit_bytes), 0u);
  EXPECT_EQ(st(Stat::pressure_psi_active), 0u);
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);
  fake.advance_ms(300);
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::pressure_events_cgroup) + st(Stat::pressure_events_psi) +
                st(Stat::pressure_events_meminfo),
            0u);
  EXPECT_TRUE(fake.calls.empty());
  // /proc/self/cgroup itself garbled, and a cgroup whose files vanish later.
  fake.files["/proc/self/cgroup"] = "no colons here\n::\n0:";
  purger->init_pressure();
  EXPECT_EQ(st(Stat::cgroup_limit_bytes), 0u);
  fake.files["/proc/self/cgroup"] = "0::/svc\n";
  fake.files["/sys/fs/cgroup/svc/memory.max"] = "100000000\n";
  fake.files["/sys/fs/cgroup/svc/memory.current"] = "99000000\n";
  purger->init_pressure();
  EXPECT_EQ(st(Stat::cgroup_limit_bytes), 100000000u);
  fake.files.erase("/sys/fs/cgroup/svc/memory.max");
  fake.files.erase("/sys/fs/cgroup/svc/memory.current");
  fake.advance_ms(300);
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::cgroup_limit_bytes), 0u);  // gone: no limit any more
  EXPECT_EQ(st(Stat::pressure_events_cgroup), 0u);
  EXPECT_FALSE(purger->pressure().cgroup_limited());
  // Reads that start failing after start-up: no events, no crash.
  fake.files["/proc/meminfo"] = "MemTotal: 1000000 kB\nMemAvailable: 10 kB\n";
  fake.read_fault.fail_every();
  fake.advance_ms(300);
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::pressure_events_meminfo), 0u);
  expect_consistent();
}

}  // namespace
}  // namespace lazymalloc
