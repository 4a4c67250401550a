// Release of freed huge blocks (purge/release.h) against a fake platform:
// the keep-or-release decision, chunking, the hand-off to workers, the
// back-pressure on free(), inline fallback, fork, and real worker threads.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/options.h"
#include "fixture.h"
#include "purge/purger.h"
#include "purge/release.h"
#include "wait.h"

namespace lazymalloc {
namespace {

using test::kMiB;

// Worker starts go to the fake platform, which counts them and never runs
// them: the test plays the workers by calling run_one(), so every
// interleaving is deterministic.  RealWorkersReleaseBlocksFreedByManyThreads
// gives the releaser a copy of the fake whose start_thread really starts it.
bool real_start(void*, void* (*fn)(void*), void* arg) {
  std::thread(fn, arg).detach();
  return true;
}

class ReleaseTest : public test::PurgeFixture {
 protected:
  ReleaseTest() : PurgeFixture(kPurgeAdaptive) {}
  void SetUp() override {
    PurgeFixture::SetUp();
    set(Opt::purge_batch, 8 * kMiB);  // chunks of 4 slots
    set(Opt::release_workers, 2);
    set(Opt::release_backlog, int64_t(1) << 40);
    set(Opt::huge_retain, 0);
  }
  void make(unsigned cpus = 2, const Platform* platform = nullptr) {
    releaser = std::make_unique<Releaser>();
    fake.cpus = cpus;  // the releaser asks the platform
    releaser->init(backend.get(), purger.get(), platform ? platform : fake.get(), stats.get());
  }
  // Frees a huge span the way free() does; true if it was kept.
  bool free_huge(Span* s, bool submit = true) {
    SlotRun run;
    uint64_t now = 0;
    bool kept = backend->release_huge(s, purger->huge_retain_budget(fake.now_ns), &run, &now);
    if (!kept && submit) releaser->submit(run, purger->release_dontneed(now), now);
    return kept;
  }
  void expect_sound() { EXPECT_EQ(backend->check_invariants(), nullptr); }

  std::unique_ptr<Releaser> releaser;
};

TEST_F(ReleaseTest, BlockIsReleasedInBoundedChunksThenReusable) {
  make();
  Span* s = backend->alloc(40 * kMiB, 16);
  ASSERT_NE(s, nullptr);
  char* where = s->start;
  EXPECT_FALSE(free_huge(s));
  EXPECT_EQ(fake.threads_started, 2u) << "workers are started on first need, at most release_workers";
  EXPECT_EQ(st(Stat::release_inflight_bytes), 40 * kMiB);
  EXPECT_EQ(st(Stat::huge_released), 1u);
  expect_sound();
  // While in flight, the range is out of circulation: a same-sized request
  // that may not map a new arena fails (the 64 MiB arena has 24 MiB left).
  EXPECT_EQ(backend->alloc(40 * kMiB, 16, false, false), nullptr);

  int chunks = 0;
  while (releaser->run_one(false)) {
    ++chunks;
    expect_sound();
  }
  EXPECT_EQ(chunks, 5);
  ASSERT_EQ(fake.calls.size(), 5u);
  for (size_t i = 0; i < fake.calls.size(); ++i) {
    EXPECT_EQ(fake.calls[i].addr, reinterpret_cast<uintptr_t>(where) + i * 8 * kMiB);
    EXPECT_EQ(fake.calls[i].len, 8 * kMiB) << "no advice covers more than purge_batch";
    EXPECT_EQ(fake.calls[i].advice, Advice::kFree);
  }
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  EXPECT_EQ(st(Stat::release_chunks), 5u);
  EXPECT_EQ(st(Stat::release_helped_chunks), 0u);
  EXPECT_EQ(st(Stat::release_bytes), 40 * kMiB);
  EXPECT_EQ(st(Stat::lazy_bytes), 40 * kMiB);
  EXPECT_EQ(st(Stat::retained_bytes), 0u);
  // Released: the same range comes back, LAZY (not known to be zero).
  Span* again = backend->alloc(40 * kMiB, 16, false, false);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->start, where);
  EXPECT_FALSE(again->zero);
  EXPECT_EQ(st(Stat::reuse_lazy_bytes), 40 * kMiB);
  backend->release(again);
  expect_sound();
}

TEST_F(ReleaseTest, SettledChunksAreReusableBeforeTheWholeBlock) {
  make();
  Span* s = backend->alloc(40 * kMiB, 16);
  char* where = s->start;
  free_huge(s);
  ASSERT_TRUE(releaser->run_one(false));
  ASSERT_TRUE(releaser->run_one(false));
  expect_sound();
  EXPECT_EQ(st(Stat::release_inflight_bytes), 24 * kMiB);
  // The first 16 MiB are free again.
  Span* part = backend->alloc(16 * kMiB, 16, false, false);
  ASSERT_NE(part, nullptr);
  EXPECT_EQ(part->start, where);
  backend->release(part);
  while (releaser->run_one(false)) {
  }
  expect_sound();
}

TEST_F(ReleaseTest, BudgetKeepsSmallBlocksAndHysteresisGrowsIt) {
  make();
  set(Opt::huge_retain, 16 * kMiB);
  Span* small = backend->alloc(8 * kMiB, 16);
  EXPECT_TRUE(free_huge(small)) << "8 MiB fits the 16 MiB budget: kept RETAINED";
  EXPECT_EQ(st(Stat::retained_bytes), 8 * kMiB);
  Span* big = backend->alloc(24 * kMiB, 16);
  char* where = big->start;
  EXPECT_FALSE(free_huge(big)) << "8 + 24 MiB is over the budget: released";
  while (releaser->run_one(false)) {
  }
  // Reused at once after its release: a refault, so this range's budget doubles.
  big = backend->alloc(24 * kMiB, 16);
  ASSERT_EQ(big->start, where);
  EXPECT_EQ(st(Stat::refaults), 12u) << "one per 2 MiB slot";
  EXPECT_EQ(big->slot->decay_shift, 1u);
  EXPECT_TRUE(free_huge(big)) << "8 + 24 MiB is within 16 MiB << 1";
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  EXPECT_EQ(st(Stat::huge_released), 1u);
  expect_sound();
}

TEST_F(ReleaseTest, PressureAndEagerPolicyReleaseEverythingWithTheRightAdvice) {
  make();
  set(Opt::huge_retain, 1 << 30);
  purger->relieve(1);  // pressure just now
  EXPECT_EQ(purger->huge_retain_budget(fake.now_ns), 0u);
  EXPECT_TRUE(purger->release_dontneed(fake.now_ns));
  Span* s = backend->alloc(8 * kMiB, 16);
  EXPECT_FALSE(free_huge(s));
  while (releaser->run_one(false)) {
  }
  EXPECT_EQ(fake.advised_bytes(Advice::kDontNeed), 8 * kMiB);
  EXPECT_EQ(st(Stat::clean_bytes), st(Stat::reserved_bytes)) << "all CLEAN again";
  // Pressure passes after decay_ms; the eager policy keeps nothing either.
  fake.advance_ms(1001);
  EXPECT_EQ(purger->huge_retain_budget(fake.now_ns), uint64_t(1) << 30);
  EXPECT_FALSE(purger->release_dontneed(fake.now_ns));
  set(Opt::purge, kPurgeEager);
  EXPECT_EQ(purger->huge_retain_budget(fake.now_ns), 0u);
  set(Opt::purge, kPurgeNever);
  EXPECT_EQ(purger->huge_retain_budget(fake.now_ns), ~uint64_t(0));
  expect_sound();
}

TEST_F(ReleaseTest, WithoutWorkersFreeReleasesInline) {
  set(Opt::release_workers, 0);
  make();
  free_huge(backend->alloc(40 * kMiB, 16));
  EXPECT_EQ(fake.threads_started, 0u);
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  EXPECT_EQ(st(Stat::release_helped_chunks), 5u);
  expect_sound();
}

TEST_F(ReleaseTest, WorkerStartFailureDegradesToInline) {
  fake.thread_fault.fail_every(EAGAIN);
  make();
  free_huge(backend->alloc(40 * kMiB, 16));
  EXPECT_EQ(st(Stat::release_thread_failures), 1u);
  EXPECT_EQ(st(Stat::release_threads), 0u);
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  EXPECT_EQ(st(Stat::release_helped_chunks), 5u);
  expect_sound();
}

TEST_F(ReleaseTest, WorkersAreBoundedByTheCpus) {
  set(Opt::release_workers, 8);
  make(3);
  free_huge(backend->alloc(8 * kMiB, 16));
  EXPECT_EQ(fake.threads_started, 3u);
  EXPECT_EQ(releaser->workers(), 3u);
}

// A platform that cannot count its CPUs (0) leaves one worker.
TEST_F(ReleaseTest, UnknownCpuCountMeansOneWorker) {
  set(Opt::release_workers, 8);
  fake.cpu_fault.fail_every();
  make(3);
  EXPECT_EQ(fake.cpu_fault.failures, 1u);
  free_huge(backend->alloc(8 * kMiB, 16));
  EXPECT_EQ(fake.threads_started, 1u);
  EXPECT_EQ(releaser->workers(), 1u);
}

// Worker threads lower their priority through the platform.
TEST_F(ReleaseTest, WorkersLowerTheirPriorityThroughThePlatform) {
  Platform with_threads = *fake.get();
  with_threads.start_thread = real_start;
  with_threads.wait = pal::linux_platform().wait;
  with_threads.wake = pal::linux_platform().wake;
  make(1, &with_threads);
  free_huge(backend->alloc(8 * kMiB, 16));
  releaser->help(true);
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  ASSERT_TRUE(lmt::WaitFor([&] { return releaser->workers() == 0; })) << releaser->workers() << " workers left";
  std::lock_guard<std::mutex> guard(fake.records_lock());
  EXPECT_EQ(fake.background_priorities, 1u);
}

TEST_F(ReleaseTest, BacklogMakesFreeHelp) {
  set(Opt::release_backlog, 16 * kMiB);
  make();
  free_huge(backend->alloc(40 * kMiB, 16));
  // 40 MiB in flight, over the 16 MiB backlog: free() released 8 MiB chunks
  // itself until 16 MiB were left.
  EXPECT_EQ(st(Stat::release_helped_chunks), 3u);
  EXPECT_EQ(st(Stat::release_inflight_bytes), 16 * kMiB);
  releaser->help(true);
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  expect_sound();
}

TEST_F(ReleaseTest, ManyJobsBeyondTheJobTable) {
  make();
  std::vector<Span*> spans;
  for (unsigned i = 0; i < Releaser::kMaxJobs + 8; ++i) spans.push_back(backend->alloc(2 * kMiB, 16));
  for (Span* s : spans) free_huge(s);  // the last 8 find the table full and help
  EXPECT_GE(st(Stat::release_helped_chunks), 8u);
  releaser->help(true);
  EXPECT_EQ(st(Stat::release_chunks), Releaser::kMaxJobs + 8);
  expect_sound();
}

TEST_F(ReleaseTest, HugeBlocksUseAtMostMaxChunks) {
  set(Opt::purge_batch, 2 * kMiB);
  backend = std::make_unique<Backend>();
  backend->init(fake.get(), stats.get(), 1024 * kMiB, false);
  purger->init(backend.get(), fake.get(), stats.get());
  make();
  free_huge(backend->alloc(1024 * kMiB, 16));  // 512 slots in at most 256 chunks
  releaser->help(true);
  EXPECT_EQ(st(Stat::release_chunks), 256u);
  EXPECT_EQ(fake.advised_bytes(Advice::kFree), 1024 * kMiB);
  expect_sound();
}

TEST_F(ReleaseTest, ForkChildSettlesUnfinishedChunksAsRetained) {
  make();
  free_huge(backend->alloc(40 * kMiB, 16));
  ASSERT_TRUE(releaser->run_one(false));
  // Four chunks are unsettled when the process forks (queued, or being
  // advised by a parent's thread: the child cannot tell, nor needs to).
  releaser->fork_prepare();
  backend->fork_prepare();
  backend->fork_child();
  releaser->fork_child();
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  EXPECT_EQ(st(Stat::release_threads), 0u);
  EXPECT_EQ(st(Stat::lazy_bytes), 8 * kMiB) << "the settled chunk";
  EXPECT_EQ(st(Stat::retained_bytes), 32 * kMiB) << "the rest, back as RETAINED free memory";
  EXPECT_FALSE(releaser->run_one(false));
  expect_sound();
  // The child's decay gives it back later.
  fake.advance_ms(1100);
  EXPECT_EQ(purger->decay_pass(fake.now_ns), 32 * kMiB);
  expect_sound();
}

TEST_F(ReleaseTest, RealWorkersReleaseBlocksFreedByManyThreads) {
  backend = std::make_unique<Backend>();
  backend->init(fake.get(), stats.get(), 512 * kMiB, false);
  purger->init(backend.get(), fake.get(), stats.get());
  Platform with_threads = *fake.get();
  with_threads.start_thread = real_start;
  // Real threads sleep and wake for real (the fake's wait advances its clock).
  with_threads.wait = pal::linux_platform().wait;
  with_threads.wake = pal::linux_platform().wake;
  make(2, &with_threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Span* s = backend->alloc(size_t(2 + (t + i) % 7) * 2 * kMiB, 16);
        ASSERT_NE(s, nullptr);
        s->start[0] = char(i);
        free_huge(s);
      }
    });
  }
  for (auto& th : threads) th.join();
  releaser->help(true);
  EXPECT_EQ(st(Stat::release_inflight_bytes), 0u);
  EXPECT_EQ(st(Stat::huge_released), 80u);
  EXPECT_EQ(st(Stat::release_bytes), fake.advised_bytes(Advice::kFree));
  expect_sound();
  // Workers exit after a second without work (a real futex timeout); wait
  // so that none outlives the test.
  ASSERT_TRUE(lmt::WaitFor([&] { return releaser->workers() == 0; })) << releaser->workers() << " workers left";
}

}  // namespace
}  // namespace lazymalloc
