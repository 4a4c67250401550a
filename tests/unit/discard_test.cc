// Discardable memory (purge/discard.h) against a fake platform: the state
// machine, packing, least-recently-unlocked order, batching, the purger's
// pressure, limit and purge paths, and a lock racing a discard in flight.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "fixture.h"
#include "purge/discard.h"
#include "wait.h"

namespace lazymalloc {
namespace {

using test::kMiB;
constexpr size_t kPage = kOsPageSize;

class DiscardTest : public test::PurgeFixture {
 protected:
  DiscardTest() : PurgeFixture(kPurgeAdaptive) {}
  void SetUp() override {
    PurgeFixture::SetUp();
    set(Opt::discardable_limit, 0);
    d.init(backend.get(), fake.get(), stats.get());
    purger->attach(&d);
  }
  void* alloc_unlocked(size_t size) {
    void* p = d.alloc(size);
    EXPECT_NE(p, nullptr);
    EXPECT_TRUE(d.unlock(p));
    return p;
  }
  bool advised(const void* p) const {
    for (const auto& c : fake.calls) {
      if (c.advice == Advice::kDontNeed && c.addr <= uintptr_t(p) && uintptr_t(p) < c.addr + c.len) return true;
    }
    return false;
  }
  void free_all(std::initializer_list<void*> ps) {
    uint64_t released;
    for (void* p : ps) EXPECT_TRUE(d.free(p, &released));
  }
  uint64_t tag(const void* p) const { return d.state_of(p) & Discardable::kTagMask; }

  Discardable d;
};

TEST_F(DiscardTest, StateMachineAndNestedLocks) {
  void* p = d.alloc(10000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(uintptr_t(p) % kPage, 0u);
  EXPECT_EQ(d.size(p), 3 * kPage);
  EXPECT_EQ(tag(p), Discardable::kLocked) << "a block is locked when allocated";
  EXPECT_EQ(d.lock(p), LockResult::kIntact);  // nested
  EXPECT_TRUE(d.unlock(p));
  EXPECT_EQ(tag(p), Discardable::kLocked) << "still locked once";
  EXPECT_TRUE(d.unlock(p));
  EXPECT_EQ(tag(p), Discardable::kUnlocked);
  EXPECT_FALSE(d.unlock(p)) << "unlock of an unlocked block";
  EXPECT_EQ(d.lock(p), LockResult::kIntact);
  EXPECT_EQ(st(Stat::discardable_blocks), 1u);
  EXPECT_EQ(st(Stat::discardable_bytes), 3 * kPage);
  d.refresh_stats();
  EXPECT_EQ(st(Stat::discardable_locked_bytes), 3 * kPage);
  EXPECT_EQ(st(Stat::discardable_unlocked_bytes), 0u);
  free_all({p});
  EXPECT_EQ(st(Stat::discardable_blocks), 0u);
  EXPECT_EQ(st(Stat::discardable_bytes), 0u);
}

TEST_F(DiscardTest, BadPointersAreRefused) {
  void* p = d.alloc(2 * kPage);
  void* big = d.alloc(3 * kMiB);
  void* foreign = std::malloc(64);
  Span* plain = backend->alloc(kUnitSize, 16);  // backend memory that is not discardable
  uint64_t released;
  for (void* bad : {static_cast<void*>(static_cast<char*>(p) + kPage), static_cast<void*>(static_cast<char*>(p) + 8),
                    static_cast<void*>(static_cast<char*>(big) + 40 * kPage), foreign,
                    static_cast<void*>(plain->start), static_cast<void*>(nullptr)}) {
    EXPECT_EQ(d.lock(bad), LockResult::kInvalid) << bad;
    EXPECT_FALSE(d.unlock(bad)) << bad;
    EXPECT_EQ(d.size(bad), 0u) << bad;
    EXPECT_FALSE(d.free(bad, &released)) << bad;
  }
  free_all({p, big});
  // Freed: stale pointers are refused too.
  EXPECT_EQ(d.lock(p), LockResult::kInvalid);
  EXPECT_FALSE(d.free(p, &released));
  EXPECT_FALSE(d.free(big, &released));
  std::free(foreign);
  backend->release(plain);
}

TEST_F(DiscardTest, SmallBlocksArePackedPageGranular) {
  // 32 one-page blocks share one 128 KiB chunk; the 33rd starts another.
  std::vector<void*> ps;
  for (int i = 0; i < 33; ++i) ps.push_back(d.alloc(i % 2 ? kPage : 1));
  EXPECT_EQ(st(Stat::active_bytes), 2 * kChunkBytes);
  for (int i = 1; i < 32; ++i) EXPECT_EQ(static_cast<char*>(ps[i]) - static_cast<char*>(ps[0]), i * ptrdiff_t(kPage));
  // A freed hole is reused first fit.
  uint64_t released;
  ASSERT_TRUE(d.free(ps[5], &released));
  EXPECT_EQ(released, 0u);
  ps[5] = d.alloc(kPage);
  EXPECT_EQ(static_cast<char*>(ps[5]) - static_cast<char*>(ps[0]), 5 * ptrdiff_t(kPage));
  // 60 KiB is packed, 64 KiB gets a span of its own.
  void* packed = d.alloc(kPackedMax);
  void* own = d.alloc(kUnitSize);
  EXPECT_EQ(st(Stat::active_bytes), 2 * kChunkBytes + kUnitSize);
  EXPECT_EQ(d.size(packed), kPackedMax);
  for (void* p : ps) ASSERT_TRUE(d.free(p, &released));
  free_all({packed, own});
  EXPECT_EQ(st(Stat::active_bytes), 0u) << "empty chunks go back to the backend";
  EXPECT_EQ(backend->check_invariants(), nullptr);
}

TEST_F(DiscardTest, LeastRecentlyUnlockedFirstAndLockedNever) {
  void* a = d.alloc(2 * kPage);
  void* b = d.alloc(2 * kPage);
  void* c = d.alloc(2 * kPage);
  void* e = d.alloc(2 * kPage);
  void* locked = d.alloc(2 * kPage);
  d.unlock(b);
  d.unlock(e);
  d.unlock(a);
  d.unlock(c);
  EXPECT_EQ(d.discard(4 * kPage, 8 * kMiB), 4 * kPage);
  EXPECT_TRUE(advised(b));
  EXPECT_TRUE(advised(e));
  EXPECT_FALSE(advised(a));
  EXPECT_FALSE(advised(c));
  EXPECT_EQ(st(Stat::discards), 2u);
  EXPECT_EQ(st(Stat::discarded_bytes), 4 * kPage);
  EXPECT_EQ(st(Stat::discardable_discarded_bytes), 4 * kPage);
  // Everything: the locked block stays.
  EXPECT_EQ(d.discard(~uint64_t(0), 8 * kMiB), 4 * kPage);
  EXPECT_FALSE(advised(locked));
  EXPECT_EQ(tag(locked), Discardable::kLocked);
  // Each discard is reported once, to the next lock; after that, intact.
  for (void* p : {a, b, c, e}) {
    EXPECT_EQ(d.lock(p), LockResult::kDiscarded);
    EXPECT_TRUE(d.unlock(p));
    EXPECT_EQ(d.lock(p), LockResult::kIntact);
  }
  EXPECT_EQ(st(Stat::discardable_discarded_bytes), 0u);
  EXPECT_EQ(d.discard(~uint64_t(0), 8 * kMiB), 0u) << "all locked now";
  free_all({a, b, c, e, locked});
}

TEST_F(DiscardTest, BatchesAreBoundedByPurgeBatch) {
  std::vector<void*> ps;
  for (int i = 0; i < 10; ++i) ps.push_back(alloc_unlocked(8 * kPage));  // 32 KiB each
  fake.advise_calls = 0;
  // 64 KiB batches: two blocks per advise call.
  EXPECT_EQ(d.discard(~uint64_t(0), 64 * 1024), 10 * 8 * kPage);
  EXPECT_EQ(fake.advise_calls, 5u);
  EXPECT_EQ(fake.calls.size(), 10u);
  // A block larger than a batch is split into ranges of at most the batch.
  void* big = alloc_unlocked(kMiB);
  fake.calls.clear();
  EXPECT_EQ(d.discard(1, 256 * 1024), kMiB);
  ASSERT_EQ(fake.calls.size(), 4u);
  for (const auto& c : fake.calls) EXPECT_EQ(c.len, 256u * 1024);
  for (void* p : ps) d.lock(p);
  ps.push_back(big);
  uint64_t released;
  for (void* p : ps) ASSERT_TRUE(d.free(p, &released));
}

TEST_F(DiscardTest, RefusedAdviceIsStillReportedDiscarded) {
  void* p = alloc_unlocked(4 * kPage);
  fake.fail_dontneed_with = EINVAL;
  EXPECT_EQ(d.discard(~uint64_t(0), 8 * kMiB), 4 * kPage);
  EXPECT_EQ(st(Stat::purge_failures), 1u);
  EXPECT_EQ(d.lock(p), LockResult::kDiscarded) << "no false intact when the kernel refused";
  free_all({p});
}

TEST_F(DiscardTest, PressureTakesFreeMemoryFirstThenUnlockedBlocks) {
  void* old = alloc_unlocked(kMiB);
  void* young = alloc_unlocked(kMiB);
  void* locked = d.alloc(kMiB);
  Span* s = backend->alloc(2 * kMiB, 16);
  backend->release(s);  // 2 MiB RETAINED
  // 3 MiB wanted: the free 2 MiB, then the older unlocked block.
  EXPECT_EQ(purger->relieve(3 * kMiB), 3 * kMiB);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  EXPECT_EQ(tag(old), Discardable::kDiscarded);
  EXPECT_EQ(tag(young), Discardable::kUnlocked);
  // Everything (a PSI stall, lazymalloc_pressure_notify): every unlocked block.
  purger->relieve(~uint64_t(0));
  EXPECT_EQ(tag(young), Discardable::kDiscarded);
  EXPECT_EQ(tag(locked), Discardable::kLocked);
  EXPECT_FALSE(advised(locked));
  // Discarded blocks no longer count as held memory.
  EXPECT_EQ(purger->footprint(), 3 * kMiB - 2 * kMiB);
  free_all({old, young, locked});
}

TEST_F(DiscardTest, PsiStallOnTheTickDiscardsUnlockedBlocks) {
  const char* psi = "/proc/pressure/memory";
  fake.files[psi] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=5000000\n";
  purger->init_pressure();
  void* u = alloc_unlocked(kMiB);
  void* l = d.alloc(kMiB);
  fake.advance_ms(300);
  purger->tick(fake.now_ns);
  EXPECT_EQ(tag(u), Discardable::kUnlocked) << "no pressure yet";
  fake.advance_ms(300);
  fake.files[psi] = "some avg10=9.00 avg60=1.00 avg300=0.00 total=5070000\n";
  purger->tick(fake.now_ns);
  EXPECT_EQ(st(Stat::pressure_events_psi), 1u);
  EXPECT_EQ(tag(u), Discardable::kDiscarded);
  EXPECT_EQ(tag(l), Discardable::kLocked);
  free_all({u, l});
}

TEST_F(DiscardTest, SoftLimitAndDiscardableLimit) {
  void* a = alloc_unlocked(kMiB);
  void* b = alloc_unlocked(kMiB);
  void* c = alloc_unlocked(kMiB);
  // discardable_limit: the tick keeps at most 1 MiB unlocked, oldest go.
  set(Opt::discardable_limit, kMiB);
  purger->tick(fake.now_ns);
  EXPECT_EQ(tag(a), Discardable::kDiscarded);
  EXPECT_EQ(tag(b), Discardable::kDiscarded);
  EXPECT_EQ(tag(c), Discardable::kUnlocked);
  set(Opt::discardable_limit, 0);
  // Soft limit below the footprint: enforced after a release.
  EXPECT_EQ(d.lock(a), LockResult::kDiscarded);
  EXPECT_TRUE(d.unlock(a));  // now younger than c
  set(Opt::memory_limit, 3 * kMiB / 2);  // held: 3 MiB active - 1 MiB discarded
  purger->after_release(fake.now_ns, true);
  EXPECT_EQ(st(Stat::pressure_events_limit), 1u);
  EXPECT_EQ(tag(c), Discardable::kDiscarded);
  EXPECT_EQ(tag(a), Discardable::kUnlocked);
  EXPECT_LE(purger->footprint(), 3 * kMiB / 2);
  free_all({a, b, c});
}

TEST_F(DiscardTest, PurgeAllDiscardsEveryUnlockedBlock) {
  void* u = alloc_unlocked(5 * kPage);
  void* l = d.alloc(5 * kPage);
  purger->purge_all(false);
  EXPECT_EQ(tag(u), Discardable::kDiscarded);
  EXPECT_EQ(tag(l), Discardable::kLocked);
  free_all({u, l});
}

TEST_F(DiscardTest, FreeingADiscardedBlockSettlesTheGauges) {
  void* u = alloc_unlocked(kMiB);
  d.discard(~uint64_t(0), 8 * kMiB);
  EXPECT_EQ(st(Stat::discardable_discarded_bytes), kMiB);
  free_all({u});
  EXPECT_EQ(st(Stat::discardable_discarded_bytes), 0u);
  EXPECT_EQ(st(Stat::discardable_bytes), 0u);
}

// A platform whose advise() runs a hook first: a lock issued while the
// discarder is inside madvise must wait for it and report DISCARDED.  Its
// futex wait and wake are the real ones: the test sees the waiter asleep.
struct HookPlatform {
  test::FakePlatform* fake;
  std::function<void()> hook;
  Platform p;
  explicit HookPlatform(test::FakePlatform* f) : fake(f) {
    p = *f->get();
    p.ctx = this;
    p.advise = [](void* ctx, void* addr, size_t len, Advice a) {
      auto* self = static_cast<HookPlatform*>(ctx);
      if (self->hook) self->hook();
      const Platform* real = self->fake->get();
      return real->advise(real->ctx, addr, len, a);
    };
    p.now_ns = [](void* ctx) {
      const Platform* real = static_cast<HookPlatform*>(ctx)->fake->get();
      return real->now_ns(real->ctx);
    };
    p.wait = pal::linux_platform().wait;
    p.wake = pal::linux_platform().wake;
    p.wake_one = pal::linux_platform().wake_one;
  }
};

// Waits until `tid` is blocked in `d`: registered as a waiter for the
// discard in flight and asleep in the kernel (its futex wait).  Fails after
// a generous deadline, e.g. if the call returned or spins instead.
::testing::AssertionResult BlockedInDiscardWait(const Discardable& d, const std::atomic<pid_t>& tid,
                                                const std::atomic<int>& returned) {
  bool blocked = lmt::WaitFor([&] {
    pid_t t = tid.load();
    return returned.load() || (t != 0 && d.waiters() == 1 && lmt::ThreadState(t) == 'S');
  });
  if (returned.load()) return ::testing::AssertionFailure() << "the call returned while the madvise was running";
  if (!blocked) {
    return ::testing::AssertionFailure() << "not blocked after " << lmt::kGenerousDeadline.count()
                                         << " s: waiters " << d.waiters() << ", thread state '"
                                         << lmt::ThreadState(tid.load()) << "'";
  }
  return ::testing::AssertionSuccess();
}

TEST_F(DiscardTest, LockDuringDiscardWaitsAndReportsDiscarded) {
  HookPlatform hp(&fake);
  Discardable racy;
  racy.init(backend.get(), &hp.p, stats.get());
  void* p = racy.alloc(kPage);
  ASSERT_TRUE(racy.unlock(p));
  std::atomic<int> result{-100};
  std::atomic<int> returned{0};
  std::atomic<pid_t> tid{0};
  std::thread locker;
  int hooks = 0;
  hp.hook = [&] {
    ++hooks;
    EXPECT_EQ(racy.state_of(p) & Discardable::kTagMask, Discardable::kDiscarding);
    locker = std::thread([&] {
      tid = gettid();  // announced before it calls lock()
      result = int(racy.lock(p));
      returned = 1;
    });
    // The madvise (this hook) has not finished: lock() must be waiting for it.
    EXPECT_TRUE(BlockedInDiscardWait(racy, tid, returned));
  };
  EXPECT_EQ(racy.discard(~uint64_t(0), 8 * kMiB), kPage);
  locker.join();
  EXPECT_EQ(hooks, 1);
  EXPECT_EQ(result.load(), int(LockResult::kDiscarded));
  EXPECT_EQ(racy.waiters(), 0u);
  EXPECT_EQ(racy.state_of(p) & Discardable::kTagMask, Discardable::kLocked);
  // free() waits the same way.
  ASSERT_TRUE(racy.unlock(p));
  std::atomic<bool> freed{false};
  returned = 0;
  tid = 0;
  std::thread freer;
  hp.hook = [&] {
    ++hooks;
    freer = std::thread([&] {
      tid = gettid();
      uint64_t released;
      freed = racy.free(p, &released);
      returned = 1;
    });
    EXPECT_TRUE(BlockedInDiscardWait(racy, tid, returned));
  };
  EXPECT_EQ(racy.discard(~uint64_t(0), 8 * kMiB), kPage);
  freer.join();
  EXPECT_EQ(hooks, 2);
  EXPECT_TRUE(freed.load());
  EXPECT_EQ(racy.waiters(), 0u);
  EXPECT_EQ(st(Stat::discardable_blocks), 0u);
}

TEST_F(DiscardTest, RelockedBlockBecomesTheYoungest) {
  void* p = alloc_unlocked(kPage);
  void* q = alloc_unlocked(kPage);
  EXPECT_EQ(d.lock(p), LockResult::kIntact);
  EXPECT_TRUE(d.unlock(p));  // p is now the younger
  EXPECT_EQ(d.discard(kPage, 8 * kMiB), kPage);
  EXPECT_EQ(tag(q), Discardable::kDiscarded);
  EXPECT_EQ(tag(p), Discardable::kUnlocked);
  free_all({p, q});
}

}  // namespace
}  // namespace lazymalloc
