// Small objects go back to the backend (issue #13): spans emptied by their
// own thread, by other threads while their owner is quiet, and under
// concurrent collection.  Over the real backend, through the lm_* entry
// points (the test process's own malloc stays glibc's); the background
// thread is off, so the collector runs only when a test calls it, with
// clock values the test chooses.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/options.h"
#include "fixture.h"
#include "frontend/heap.h"

namespace lazymalloc {
namespace {

const auto stat = test::lm_stat;

constexpr uint64_t kSecond = 1000000000;

class SmallRelease : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    option_set(unsigned(Opt::background), 0);
    lm_init();
  }
  // Enough objects for about 4 MiB of spans.
  size_t count() const { return (size_t(4) << 20) / GetParam(); }
};

// Every size class fed by the fast path: direct (64), mid (1000, 4000) and
// the largest cached classes (30000).
INSTANTIATE_TEST_SUITE_P(Sizes, SmallRelease, ::testing::Values(64, 1000, 4000, 30000));

// Freeing everything in allocation order gives every span back but the
// class's current one and those the thread's cache still pins (a cache
// holds at most 2 x 16 KiB of a class).  The span that stopped being
// current when another one became so used to stay with no object in it.
TEST_P(SmallRelease, FreeingEverythingReleasesTheSpans) {
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  const uint64_t released0 = stat("spans_released");
  std::vector<void*> v(count());
  for (auto& p : v) {
    p = lm_malloc(GetParam());
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, GetParam());
  }
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  for (void* p : v) lm_free(p);
  EXPECT_LE(stat("small_spans"), spans0 + 3) << "of " << grown << " spans";
  EXPECT_GE(stat("spans_released") - released0, grown - 3);
  // Collecting the thread returns the cache and the current span too.
  lm_thread_collect();
  EXPECT_EQ(stat("small_spans"), spans0);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A worker allocates and then blocks; another thread frees everything.
// The worker never runs its slow path again, so the collector returns
// its spans once it has seen the heap quiet for the idle time, and not
// before.
TEST_P(SmallRelease, AnIdleOwnersRemoteFreesGoBackWithoutIt) {
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  std::vector<void*> v(count());
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;  // 1: allocated; 2: worker may exit
  std::thread worker([&] {
    for (auto& p : v) {
      p = lm_malloc(GetParam());
      ASSERT_NE(p, nullptr);
      memset(p, 0x3c, GetParam());
    }
    std::unique_lock<std::mutex> lock(m);
    phase = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return phase == 2; });
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return phase == 1; });
  }
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  for (void* p : v) lm_free(p);
  lm_thread_collect();  // this thread's cache goes back to the worker's spans
  EXPECT_GE(stat("small_spans"), spans0 + grown - 1) << "nothing collects a quiet owner's spans yet";

  const uint64_t t0 = 1000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);                 // sees the heaps
  lm_collect_idle_heaps(t0 + idle / 2, idle);      // quiet, not yet for long enough
  EXPECT_GE(stat("small_spans"), spans0 + grown - 1);
  const uint64_t collected0 = stat("idle_heap_collections");
  EXPECT_GE(lm_collect_idle_heaps(t0 + idle, idle), grown - 3);
  EXPECT_GE(stat("idle_heap_collections") - collected0, 1u);
  // The worker's cache holds none of these objects: at most its current
  // span per class is left (this thread's are empty and went back).
  EXPECT_LE(stat("small_spans"), spans0 + 1);
  // Collected once per quiet episode: nothing new, nothing done.
  const uint64_t collected1 = stat("idle_heap_collections");
  lm_collect_idle_heaps(t0 + 2 * idle, idle);
  EXPECT_EQ(stat("idle_heap_collections"), collected1);
  {
    std::lock_guard<std::mutex> lock(m);
    phase = 2;
  }
  cv.notify_all();
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A worker allocates, frees all but its last object itself and then
// blocks: the objects it freed last stay in its cache's free stack, and
// pin their span.  Freed in reverse order, those are the first objects, in
// a span that is not the class's current one (which the last object keeps).
// Once the heap has been quiet for the idle time, the collector takes the
// free stack back to the spans (the worker never runs meanwhile) and the
// first span goes.
TEST_P(SmallRelease, AQuietThreadsCachedFreesGoBackWithoutIt) {
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  const uint64_t bytes0 = stat("idle_cache_bytes");
  std::vector<void*> v(count());
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;  // 1: freed all but the last; 2: worker may go on
  std::thread worker([&] {
    for (auto& p : v) {
      p = lm_malloc(GetParam());
      ASSERT_NE(p, nullptr);
      memset(p, 0x6b, GetParam());
    }
    for (size_t i = v.size() - 1; i-- > 0;) lm_free(v[i]);
    std::unique_lock<std::mutex> lock(m);
    phase = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return phase == 2; });
    lm_free(v.back());
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return phase == 1; });
  }
  EXPECT_EQ(stat("small_spans"), spans0 + 2) << "the last object's span and the first, which the cached frees pin";

  const uint64_t t0 = 3000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  lm_collect_idle_heaps(t0 + idle / 2, idle);  // quiet, not yet for long enough
  EXPECT_EQ(stat("idle_cache_bytes"), bytes0);
  EXPECT_EQ(stat("small_spans"), spans0 + 2);
  lm_collect_idle_heaps(t0 + idle, idle);
  EXPECT_GE(stat("idle_cache_bytes") - bytes0, GetParam());
  EXPECT_EQ(stat("small_spans"), spans0 + 1);
  {
    std::lock_guard<std::mutex> lock(m);
    phase = 2;
  }
  cv.notify_all();
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// Without the process barrier (membarrier refused), a collector cannot
// tell that a quiet thread is outside its slow path: it claims nothing and
// changes nothing; once the barrier works again it collects.
TEST(SmallReleaseFaults, NoProcessBarrierNoCollection) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  test::FakePlatform fake;
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  std::vector<void*> v(1000);
  std::atomic<int> phase{0};
  std::thread worker([&] {
    for (auto& p : v) p = lm_malloc(4000);
    phase.store(1);
    while (phase.load() != 2) std::this_thread::yield();
  });
  while (phase.load() != 1) std::this_thread::yield();
  for (void* p : v) lm_free(p);
  lm_thread_collect();
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  lm_set_platform(fake.get());
  fake.barrier_fault.fail_every();
  const uint64_t t0 = 1000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  EXPECT_EQ(lm_collect_idle_heaps(t0 + idle, idle), 0u);
  EXPECT_GE(fake.barrier_fault.failures, 1u);
  EXPECT_EQ(stat("small_spans") - spans0, grown);
  EXPECT_EQ(stat("idle_heap_collections"), 0u);
  fake.barrier_fault.heal();
  EXPECT_GE(lm_collect_idle_heaps(t0 + idle, idle), grown - 3);
  EXPECT_LE(stat("small_spans"), spans0 + 1);
  phase.store(2);
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_set_platform(&pal::linux_platform());
}

// Threads that allocate, hand objects to each other, check their contents
// and go quiet, while another thread collects every heap it finds quiet
// between two of its passes (idle time 0): a collection never takes a span
// from under a thread that uses it, and never loses or duplicates an object.
TEST(SmallReleaseStress, CollectionRacesWithThreadsThatSleepAndWake) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  constexpr int kThreads = 3;
  constexpr int kRounds = 300;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> clock{1};
  std::thread collector([&] {
    while (!done.load(std::memory_order_relaxed)) {
      lm_collect_idle_heaps(clock.fetch_add(1) * kSecond, 0);
      std::this_thread::yield();
    }
  });
  // Each thread passes its objects to the next one, which checks and frees
  // them (remote frees into a heap whose thread may be quiet).
  std::mutex m[kThreads];
  std::vector<std::pair<unsigned char*, size_t>> inbox[kThreads];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint32_t x = 12345u + unsigned(t);
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::pair<unsigned char*, size_t>> mine, got;
        for (int i = 0; i < 200; ++i) {
          x = x * 1664525u + 1013904223u;
          size_t n = 16 + (x >> 8) % 6000;
          auto* p = static_cast<unsigned char*>(lm_malloc(n));
          ASSERT_NE(p, nullptr);
          memset(p, int((n + size_t(t)) & 0xff), n);
          mine.emplace_back(p, n);
        }
        // Half stays here and is freed here; half goes to the next thread.
        {
          std::lock_guard<std::mutex> lock(m[(t + 1) % kThreads]);
          for (size_t i = 0; i < mine.size(); i += 2) inbox[(t + 1) % kThreads].push_back(mine[i]);
        }
        {
          std::lock_guard<std::mutex> lock(m[t]);
          got.swap(inbox[t]);
        }
        for (auto [p, n] : got) {
          size_t from = (size_t(t) + kThreads - 1) % kThreads;
          ASSERT_EQ(p[0], static_cast<unsigned char>((n + from) & 0xff));
          ASSERT_EQ(p[n - 1], static_cast<unsigned char>((n + from) & 0xff));
          lm_free(p);
        }
        for (size_t i = 1; i < mine.size(); i += 2) {
          auto [p, n] = mine[i];
          ASSERT_EQ(p[n / 2], static_cast<unsigned char>((n + size_t(t)) & 0xff));
          lm_free(p);
        }
        // Go quiet now and then, so that the collector finds the heap idle.
        if (round % 16 == 0) {
          uint64_t seen = clock.load();
          while (clock.load() < seen + 3) std::this_thread::yield();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  done.store(true);
  collector.join();
  for (int t = 0; t < kThreads; ++t) {
    for (auto [p, n] : inbox[t]) lm_free(p);
  }
  lm_thread_collect();
  EXPECT_GE(stat("idle_heap_collections"), 1u);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

}  // namespace
}  // namespace lazymalloc
