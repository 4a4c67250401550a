// The background thread's schedule and the second decay stage, against the
// fake platform: the thread (BackgroundPurger::round, driven by the test, as
// the fake never runs threads) sleeps to the next deadline, is woken by a
// release that comes due sooner (and only then), checks pressure at a rate
// that follows the free memory held and not at all when none is, exits when
// nothing is held, and looks for the process's last thread when a thread
// exits.  LAZY memory becomes CLEAN after lazy_decay_ms, later for a range
// that refaults.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/options.h"
#include "fixture.h"
#include "purge/purger.h"

namespace lazymalloc {
namespace {

using test::kMiB;
constexpr int64_t kMsNs = 1000000;

class ScheduleTest : public test::PurgeFixture {
 protected:
  ScheduleTest() : PurgeFixture(kPurgeAdaptive) {}
  void SetUp() override {
    PurgeFixture::SetUp();
    set(Opt::pressure, 0);  // only decay deadlines, unless a test watches pressure
    ASSERT_TRUE(bg.ensure_started(purger.get(), fake.get(), stats.get()));
  }
  void TearDown() override {
    fake.on_wait = nullptr;
    EXPECT_EQ(backend->check_invariants(), nullptr);
    PurgeFixture::TearDown();
  }
  // A release as the frontend makes it, with the thread running.
  void release(Span* s) { purger->after_release(backend->release(s), true); }

  BackgroundPurger bg;
  BackgroundPurger::Round r;
};

TEST_F(ScheduleTest, SleepsToEachDeadlineThenExitsWhenNothingIsHeld) {
  Span* s = backend->alloc(2 * kMiB, 16);
  release(s);
  ASSERT_TRUE(bg.round(r));
  ASSERT_EQ(fake.waits.size(), 1u);
  EXPECT_EQ(fake.waits[0], 1000 * kMsNs) << "the decay deadline of the freed slot";
  EXPECT_EQ(st(Stat::lazy_bytes), 2 * kMiB);
  ASSERT_TRUE(bg.round(r));
  ASSERT_EQ(fake.waits.size(), 2u);
  EXPECT_EQ(fake.waits[1], 10000 * kMsNs) << "the lazy-decay deadline";
  EXPECT_EQ(st(Stat::lazy_bytes), 0u);
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 2 * kMiB);
  // Nothing is held: the thread exits without another wait.
  EXPECT_FALSE(bg.round(r));
  EXPECT_EQ(fake.waits.size(), 2u);
  EXPECT_FALSE(bg.running());
  EXPECT_EQ(st(Stat::background_wakeups), 2u);
  EXPECT_EQ(st(Stat::background_threads), 0u);
  // The next release starts it again.
  s = backend->alloc(2 * kMiB, 16);
  Span* t = backend->alloc(2 * kMiB, 16);
  backend->release(t);
  EXPECT_TRUE(bg.ensure_started(purger.get(), fake.get(), stats.get()));
  EXPECT_EQ(fake.threads_started, 2u);
  EXPECT_EQ(st(Stat::background_starts), 2u);
  backend->release(s);
}

TEST_F(ScheduleTest, PartlyUsedSlotsWaitPartialDecay) {
  Span* keep = backend->alloc(kUnitSize, 16);
  Span* drop = backend->alloc(kUnitSize, 16);
  ASSERT_EQ(keep->slot, drop->slot);
  release(drop);
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.waits.back(), 4000 * kMsNs);
  EXPECT_EQ(st(Stat::lazy_bytes), kUnitSize);
  backend->release(keep);
}

TEST_F(ScheduleTest, AReleaseWakesTheThreadOnlyWhenItSleepsPastTheNewWork) {
  Span* a = backend->alloc(2 * kMiB, 16);
  Span* b = backend->alloc(2 * kMiB, 16);
  Span* c = backend->alloc(2 * kMiB, 16);
  release(a);
  ASSERT_TRUE(bg.round(r));  // a is LAZY; the thread will sleep to its lazy deadline
  EXPECT_EQ(fake.wakes, 0u);
  fake.on_wait = [&] {
    fake.on_wait = nullptr;
    release(b);  // due in 1 s, the thread sleeps 10 s: wake it
  };
  uint64_t before = fake.now_ns;
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.waits.back(), 10000 * kMsNs);
  EXPECT_EQ(fake.wakes, 1u);
  EXPECT_EQ(fake.waits_woken, 1u);
  EXPECT_EQ(fake.now_ns, before) << "woken at once, not at the deadline";
  // Now it sleeps to b's decay; a release 200 ms later is due after that:
  // no wake, no system call.
  fake.on_wait = [&] {
    fake.on_wait = nullptr;
    fake.advance_ms(200);
    release(c);
  };
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.waits.back(), 1000 * kMsNs);
  EXPECT_EQ(fake.wakes, 1u);
  EXPECT_EQ(fake.waits_woken, 1u);
  EXPECT_EQ(st(Stat::lazy_bytes), 6 * kMiB);  // (the fake's wait ends 1 s after the release of c)
}

TEST_F(ScheduleTest, PressureChecksFollowHeldMemoryAndStopWithIt) {
  const char* psi = "/proc/pressure/memory";
  fake.files[psi] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n";
  set(Opt::pressure, 1);
  purger->init_pressure();
  set(Opt::decay_ms, 60000);
  set(Opt::partial_decay_ms, 60000);
  set(Opt::lazy_decay_ms, 600000);
  set(Opt::pressure_bytes, 8 * kMiB);  // 2 MiB held: every 4 x 250 ms
  Span* s = backend->alloc(2 * kMiB, 16);
  release(s);
  int reads = fake.file_reads[psi];
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.waits.back(), 100 * kMsNs) << "first check at once (background_interval_ms)";
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.waits.back(), 1000 * kMsNs);
  set(Opt::pressure_bytes, 2 * kMiB);  // the full rate
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.waits.back(), 250 * kMsNs);
  EXPECT_EQ(st(Stat::pressure_checks), 3u);
  EXPECT_EQ(fake.file_reads[psi], reads + 3);
  // The memory is used again: nothing held, no check, no wait: the thread exits.
  s = backend->alloc(2 * kMiB, 16);
  EXPECT_FALSE(bg.round(r));
  EXPECT_EQ(fake.waits.size(), 3u);
  EXPECT_EQ(st(Stat::pressure_checks), 3u);
  EXPECT_EQ(fake.file_reads[psi], reads + 3);
  for (int64_t w : fake.waits) EXPECT_GE(w, 0) << "never a wait without a deadline";
  backend->release(s);
}

TEST_F(ScheduleTest, ThreadStatusIsReadOnlyOnSpacedWakeupsAndAfterAThreadExits) {
  const char* status = "/proc/self/status";
  fake.files[status] = "State:\tS (sleeping)\nThreads:\t3\n";
  set(Opt::pressure, 1);
  set(Opt::pressure_bytes, 2 * kMiB);
  Span* s = backend->alloc(2 * kMiB, 16);
  release(s);
  ASSERT_TRUE(bg.round(r));  // first wakeup: looks once
  EXPECT_EQ(fake.file_reads[status], 1);
  ASSERT_TRUE(bg.round(r));  // 250 ms later: no look
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.file_reads[status], 1);
  // The program's other threads exit; the last one with a heap says so.
  fake.on_wait = [&] {
    fake.on_wait = nullptr;
    fake.files[status] = "State:\tS (sleeping)\nThreads:\t1\n";
    bg.thread_exited();
  };
  set(Opt::pressure_interval_ms, 60000);  // nothing else would wake it soon
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.waits_woken, 1u);
  EXPECT_FALSE(bg.round(r)) << "the look after the exit finds this thread alone: it ends";
  EXPECT_EQ(fake.file_reads[status], 2);
  EXPECT_LE(fake.waits.back(), 100 * kMsNs);
  EXPECT_FALSE(bg.running());
}

TEST_F(ScheduleTest, ThreadExitsWakeTheThreadOnlyForALookSoonerThanItsOwn) {
  const char* status = "/proc/self/status";
  fake.files[status] = "State:\tS (sleeping)\nThreads:\t12\n";
  set(Opt::pressure, 1);
  set(Opt::pressure_bytes, 2 * kMiB);
  Span* s = backend->alloc(2 * kMiB, 16);
  release(s);
  ASSERT_TRUE(bg.round(r));  // first wakeup: looks once
  ASSERT_EQ(fake.file_reads[status], 1);
  // A thread exits while this one sleeps for 250 ms: it is woken, to look
  // a tenth of a second after the last look.
  fake.on_wait = [&] { bg.thread_exited(); };
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.wakes, 1u);
  EXPECT_EQ(fake.waits_woken, 1u);
  // More threads exit during each of its next sleeps (a program that starts
  // and ends threads all the time): they poke for the look it has planned,
  // not sooner, so they wake it no more.
  fake.on_wait = [&] {
    bg.thread_exited();
    bg.thread_exited();
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.wakes, 1u);
  EXPECT_EQ(fake.waits_woken, 1u);
  // The exits stop: the look comes at the end of the next sleep.
  fake.on_wait = nullptr;
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(fake.file_reads[status], 2);
  EXPECT_EQ(fake.wakes, 1u);
}

TEST_F(ScheduleTest, CpuTimeIsCounted) {
  Span* s = backend->alloc(2 * kMiB, 16);
  release(s);
  fake.cpu_ns = 5000;
  ASSERT_TRUE(bg.round(r));
  fake.cpu_ns = 12000;
  ASSERT_TRUE(bg.round(r));
  EXPECT_EQ(st(Stat::background_cpu_ns), 12000u);
}

TEST_F(ScheduleTest, LazyMemoryBecomesCleanAfterLazyDecayAndNotBefore) {
  Span* s = backend->alloc(2 * kMiB, 16);
  Span* later = backend->alloc(2 * kMiB, 16);
  uintptr_t where = reinterpret_cast<uintptr_t>(s->start);
  backend->release(s);
  fake.advance_ms(1000);
  ASSERT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 2 * kMiB);
  fake.advance_ms(9999);
  EXPECT_EQ(purger->lazy_pass(fake.now_ns), 0u);
  EXPECT_EQ(purger->next_due(fake.now_ns), fake.now_ns + kMsNs);
  fake.advance_ms(1);
  EXPECT_EQ(purger->lazy_pass(fake.now_ns), 2 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 0u);
  EXPECT_EQ(st(Stat::lazy_decay_bytes), 2 * kMiB);
  ASSERT_FALSE(fake.calls.empty());
  EXPECT_EQ(fake.calls.back().advice, Advice::kDontNeed);
  EXPECT_EQ(fake.calls.back().addr, where);
  EXPECT_EQ(purger->next_due(fake.now_ns), Purger::kNever);
  // Memory given MADV_DONTNEED by decay itself has no second stage.
  set(Opt::purge_advice, kAdviceDontneed);
  backend->release(later);
  fake.advance_ms(1000);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 0u);
  EXPECT_EQ(purger->next_due(fake.now_ns), Purger::kNever);
}

TEST_F(ScheduleTest, HysteresisLengthensLazyDecayForARangeThatRefaults) {
  // Another block churns, so the process is busy.
  Span* busy = backend->alloc(kUnitSize, 16);
  auto touch = [&] {
    backend->release(busy);
    busy = backend->alloc(kUnitSize, 16);
  };
  Span* s = backend->alloc(2 * kMiB, 16);
  char* where = s->start;
  backend->release(s);
  fake.advance_ms(1000);
  touch();
  ASSERT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  fake.advance_ms(10000);
  touch();
  ASSERT_EQ(purger->lazy_pass(fake.now_ns), 2 * kMiB);
  // Used again 2 s after it became CLEAN: sooner than lazy_decay_ms.
  fake.advance_ms(2000);
  s = backend->alloc(2 * kMiB, 16);
  ASSERT_EQ(s->start, where);
  EXPECT_EQ(st(Stat::refaults), 1u);
  EXPECT_EQ(s->slot->decay_shift, 1u);
  backend->release(s);
  fake.advance_ms(2000);  // decay is 2 s for it now
  touch();
  ASSERT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);
  uint64_t lazy_at = fake.now_ns;
  EXPECT_EQ(purger->next_due(fake.now_ns), lazy_at + 20000 * kMsNs);
  fake.advance_ms(10000);
  touch();
  EXPECT_EQ(purger->lazy_pass(fake.now_ns), 0u) << "lazy decay doubled for this range";
  fake.advance_ms(10000);
  touch();
  EXPECT_EQ(purger->lazy_pass(fake.now_ns), 2 * kMiB);
  backend->release(busy);
}

TEST_F(ScheduleTest, AnIdleProcessIgnoresLazyHysteresis) {
  Span* s = backend->alloc(2 * kMiB, 16);
  s->slot->decay_shift = kMaxDecayShift;  // pinned by earlier refaults
  backend->release(s);                    // the process's last activity
  fake.advance_ms(1000);
  ASSERT_EQ(purger->decay_pass(fake.now_ns), 2 * kMiB);  // idle for decay_ms: plain decay
  // Pinned while busy; idle for 4 x lazy_decay_ms since the release: plain.
  uint64_t release_at = fake.now_ns - 1000 * kMsNs;
  EXPECT_EQ(purger->next_due(fake.now_ns), release_at + 40000 * kMsNs);
  fake.advance_ms(38999);
  EXPECT_EQ(purger->lazy_pass(fake.now_ns), 0u);
  fake.advance_ms(1);
  EXPECT_EQ(purger->lazy_pass(fake.now_ns), 2 * kMiB);
}

TEST_F(ScheduleTest, WithoutTheThreadFreeRunsBothStagesInline) {
  Span* a = backend->alloc(2 * kMiB, 16);
  Span* b = backend->alloc(2 * kMiB, 16);
  Span* c = backend->alloc(2 * kMiB, 16);
  purger->after_release(backend->release(a), false);
  fake.advance_ms(1000);
  purger->after_release(backend->release(b), false);
  EXPECT_EQ(st(Stat::lazy_bytes), 2 * kMiB);
  fake.advance_ms(10000);
  purger->after_release(backend->release(c), false);
  EXPECT_EQ(st(Stat::lazy_decay_bytes), 2 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 2 * kMiB);  // b
}

}  // namespace
}  // namespace lazymalloc
