// The release engine against the real kernel: what /proc/self/smaps_rollup
// and mincore(2) say after decay, purges, pressure and limits.  The test
// process runs on lazymalloc (linked), and sets options at run time.
#include <errno.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <tuple>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_util.h"
#include "wait.h"
#include "lazymalloc/lazymalloc.h"

namespace {

constexpr size_t kMiB = 1 << 20;

struct Rollup {
  long rss_kb = 0, lazy_kb = 0;
  long held_kb() const { return rss_kb - lazy_kb; }
};

Rollup rollup() {
  Rollup r;
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return r;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    sscanf(line, "Rss: %ld", &r.rss_kb);
    sscanf(line, "LazyFree: %ld", &r.lazy_kb);
  }
  fclose(f);
  return r;
}

// "Threads:" of /proc/self/status, and whether the leader is a zombie.
long status_threads(bool* leader_zombie = nullptr) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long threads = -1;
  char state = 0;
  while (fgets(line, sizeof line, f)) {
    sscanf(line, "Threads: %ld", &threads);
    sscanf(line, "State: %c", &state);
  }
  fclose(f);
  if (leader_zombie) *leader_zombie = state == 'Z';
  return threads;
}

// Context switches and CPU time of every thread of the process but the
// caller (threads that ended included).
struct Usage {
  long switches;
  double cpu_ms;
};
Usage other_threads() {
  struct rusage all, me;
  getrusage(RUSAGE_SELF, &all);
  getrusage(RUSAGE_THREAD, &me);
  auto ms = [](const struct timeval& t) { return double(t.tv_sec) * 1e3 + double(t.tv_usec) / 1e3; };
  return {all.ru_nvcsw + all.ru_nivcsw - me.ru_nvcsw - me.ru_nivcsw,
          ms(all.ru_utime) + ms(all.ru_stime) - ms(me.ru_utime) - ms(me.ru_stime)};
}

class Engine : public ::testing::Test {
 protected:
  void SetUp() override {
    lazymalloc_option_set("purge", 0);  // adaptive
    lazymalloc_option_set("purge_advice", 1);  // MADV_FREE even inside a limited cgroup
    lazymalloc_option_set("decay_ms", 100);
    lazymalloc_option_set("partial_decay_ms", 100);
    lazymalloc_option_set("background_interval_ms", 20);
    lazymalloc_option_set("lazy_decay_ms", 10000);
    lazymalloc_option_set("pressure", 1);
    // These tests follow freed large blocks into the backend and the purger;
    // a thread's cache of its last freed large blocks (unit.LargeCache) would
    // keep some back until the thread goes quiet.
    lazymalloc_option_set("large_cache", 0);
    lazymalloc_limit_set(0, 0);
    lazymalloc_purge(LAZYMALLOC_PURGE_NOW);
  }
};

TEST_F(Engine, IdleMemoryBecomesLazyFreeAndStaysResidentUntilNeeded) {
  std::vector<char*> blocks;
  for (int i = 0; i < 16; ++i) {
    char* p = static_cast<char*>(malloc(4 * kMiB));
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, 4 * kMiB);
    blocks.push_back(p);
  }
  Rollup before = rollup();
  char* first = blocks[0];
  for (char* p : blocks) free(p);
  // Nothing told to the kernel yet: the memory is retained and resident.
  EXPECT_GE(resident_pages(first, 4 * kMiB), 4 * kMiB / 4096 * 9 / 10);
  // The kernel shows an madvise done before the purging thread has counted
  // it: wait for both.
  ASSERT_TRUE(lmt::WaitFor([] { return rollup().lazy_kb >= 48 * 1024 && stat("lazy_bytes") >= 48 * kMiB; }))
      << "LazyFree " << rollup().lazy_kb << " kB (Rss before free " << before.rss_kb << " kB), lazy_bytes "
      << stat("lazy_bytes");
  EXPECT_GE(stat("purge_lazy_bytes"), 48 * kMiB);
  // MADV_FREE leaves the pages mapped and resident until the kernel needs them.
  EXPECT_GT(resident_pages(first, 4 * kMiB), 0u);
  // Purging now (MADV_DONTNEED) takes them out of the process.
  EXPECT_GE(lazymalloc_purge(LAZYMALLOC_PURGE_NOW), 48 * kMiB);
  EXPECT_EQ(resident_pages(first, 4 * kMiB), 0u);
  EXPECT_LT(rollup().lazy_kb, 8 * 1024);
}

TEST_F(Engine, CallocAfterLazyFreeReuseIsZero) {
  lazymalloc_option_set("decay_ms", 100000);  // no background purge in the way
  for (size_t size : {size_t(300 * 1024), size_t(3 * kMiB), size_t(24 * kMiB)}) {
    char* p = static_cast<char*>(malloc(size));
    ASSERT_NE(p, nullptr);
    memset(p, 0xff, size);
    free(p);
    lazymalloc_purge(LAZYMALLOC_PURGE_LAZY);  // MADV_FREE: the old bytes may survive
    char* q = static_cast<char*>(calloc(1, size));
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q, p) << "expected reuse of the lazily freed block";
    size_t bad = 0;
    for (size_t i = 0; i < size; ++i) bad += q[i] != 0;
    EXPECT_EQ(bad, 0u) << size;
    free(q);
  }
  EXPECT_GT(stat("reuse_lazy_bytes"), 0u);
}

TEST_F(Engine, SoftLimitHoldsUnderChurn) {
  const uint64_t limit = 48 * kMiB;
  lazymalloc_option_set("decay_ms", 100000);  // only the limit purges
  // A pool of 80 MiB free and resident, then the limit: churn must trim it.
  std::vector<char*> pool;
  for (int i = 0; i < 20; ++i) {
    pool.push_back(static_cast<char*>(malloc(4 * kMiB)));
    memset(pool.back(), 7, 4 * kMiB);
  }
  for (char* p : pool) free(p);
  std::vector<char*> live(8, nullptr);
  for (auto& p : live) {
    p = static_cast<char*>(malloc(2 * kMiB));
    memset(p, 3, 2 * kMiB);
  }
  ASSERT_EQ(lazymalloc_option_set("memory_limit", int64_t(limit)), 0);  // no purge yet: set as an option
  unsigned seed = 12345;
  uint64_t worst = 0;
  for (int i = 0; i < 400; ++i) {
    seed = seed * 1103515245u + 12345u;
    size_t k = (seed >> 8) % live.size();
    free(live[k]);
    size_t size = (1 + (seed >> 16) % 4) * kMiB;  // live set <= 32 MiB
    live[k] = static_cast<char*>(malloc(size));
    ASSERT_NE(live[k], nullptr);
    memset(live[k], int(i), size);
    // A freed huge block over the limit goes to the release workers and
    // counts RETAINED until they have advised it (release_inflight_bytes):
    // what the allocator still holds by its own decision is the rest.
    // (In-flight bytes read first: a chunk settled in between lowers the
    // held bytes as well.)
    uint64_t inflight = stat("release_inflight_bytes");
    lazymalloc_memory_state m;
    lazymalloc_memory_state_get(&m);
    uint64_t held = m.active + m.retained + m.lazy - inflight;
    if (held > worst) worst = held;
  }
  // Held memory is purged back under the limit at each free; between two
  // frees it can exceed it by at most the block just allocated.
  EXPECT_LE(worst, limit + 4 * kMiB + 2 * kMiB);
  EXPECT_GT(stat("pressure_events_limit"), 0u);
  // Once the workers are done, the limit holds for the kernel too.
  ASSERT_TRUE(lmt::WaitFor([] { return stat("release_inflight_bytes") == 0; }));
  lazymalloc_memory_state m;
  lazymalloc_memory_state_get(&m);
  EXPECT_LE(m.active + m.retained + m.lazy, limit + 4 * kMiB + 2 * kMiB);
  EXPECT_LE(rollup().held_kb() * 1024, long(limit + 16 * kMiB));
  for (char* p : live) free(p);
  lazymalloc_limit_set(0, 0);
}

TEST_F(Engine, InjectedPressurePurgesEverythingFree) {
  lazymalloc_option_set("decay_ms", 100000);
  std::vector<char*> blocks;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(static_cast<char*>(malloc(4 * kMiB)));
    memset(blocks.back(), 1, 4 * kMiB);
  }
  for (char* p : blocks) free(p);
  long held_before = rollup().held_kb();
  uint64_t events = stat("pressure_events_api");
  EXPECT_GE(lazymalloc_pressure_notify(), 32 * kMiB);
  EXPECT_EQ(stat("pressure_events_api"), events + 1);
  EXPECT_LE(rollup().held_kb(), held_before - 28 * 1024);
  EXPECT_EQ(stat("retained_bytes"), 0u);
  EXPECT_EQ(stat("lazy_bytes"), 0u);
}

TEST_F(Engine, HardLimitFailsWithENOMEMAndRecovers) {
  ASSERT_EQ(lazymalloc_limit_set(0, 64 * kMiB), 0);
  errno = 0;
  void* big = malloc(128 * kMiB);
  EXPECT_EQ(big, nullptr);
  EXPECT_EQ(errno, ENOMEM);
  void* ok = malloc(16 * kMiB);
  EXPECT_NE(ok, nullptr);
  free(ok);
  lazymalloc_limit_set(0, 0);
  big = malloc(128 * kMiB);
  EXPECT_NE(big, nullptr);
  free(big);
}

TEST_F(Engine, EagerPolicyGivesBackAtFree) {
  lazymalloc_option_set("purge", 2);         // eager
  lazymalloc_option_set("purge_advice", 2);  // dontneed
  char* p = static_cast<char*>(malloc(16 * kMiB));
  memset(p, 1, 16 * kMiB);
  free(p);
  EXPECT_EQ(resident_pages(p, 16 * kMiB), 0u);
  lazymalloc_option_set("purge", 0);
  lazymalloc_option_set("purge_advice", 0);
}

// free() of a touched huge block hands it to the release workers and
// returns; the memory leaves the process (Rss - LazyFree) soon after.
TEST_F(Engine, HugeFreeIsReleasedOffThreadAndLeaves) {
  int64_t retain = 0;
  lazymalloc_option_get("huge_retain", &retain);
  lazymalloc_option_set("huge_retain", 0);
  const size_t n = 512 * kMiB;
  char* p = static_cast<char*>(malloc(n));
  ASSERT_NE(p, nullptr);
  memset(p, 1, n);
  long before = rollup().held_kb();
  uint64_t helped = stat("release_helped_chunks");
  uint64_t chunks = stat("release_chunks");
  uint64_t thread_failures = stat("release_thread_failures");
  free(p);
  ASSERT_TRUE(lmt::WaitFor([&] { return stat("release_inflight_bytes") == 0; }));
  // Workers could be started (without one, free() releases inline and every
  // chunk counts as helped), and they did all of it.
  EXPECT_EQ(stat("release_thread_failures"), thread_failures) << "no release worker could be started";
  EXPECT_GE(stat("release_chunks") - chunks, 16u) << "512 MiB in purge_batch (32 MiB) chunks";
  EXPECT_EQ(stat("release_helped_chunks"), helped) << "free() left the whole release to the workers";
  EXPECT_TRUE(lmt::WaitFor([&] { return rollup().held_kb() < before - long(400 * kMiB / 1024); }))
      << "held " << rollup().held_kb() << " kB, before free " << before << " kB";
  lazymalloc_option_set("huge_retain", retain);
}

// A process whose own last thread ends with pthread_exit() must end: the
// background purge thread may not keep it alive (CPython's test_threading
// does this in a forked child).
TEST_F(Engine, ProcessEndsWhenItsLastThreadExits) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A large block goes back to the backend RETAINED: the thread starts
    // and stays (its decay is due in 100 ms).
    void* p = malloc(512 * 1024);
    memset(p, 1, 512 * 1024);
    free(p);
    bool started = lmt::WaitFor([] {
      uint64_t threads = 0;
      lazymalloc_stat_get("background_threads", &threads);
      return threads == 1;
    });
    if (!started) _exit(3);
    // The thread ends, the process goes on (pthread_exit would unwind through
    // gtest's frames, which catch the forced unwind).
    syscall(SYS_exit, 0);
  }
  int status = 0;
  pid_t got = 0;
  if (!lmt::WaitFor([&] { return (got = waitpid(pid, &status, WNOHANG)) != 0; })) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the child was still alive " << lmt::kGenerousDeadline.count() << " s after its last thread exited";
  }
  ASSERT_EQ(got, pid) << strerror(errno);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "(status 3: the background thread never started)";
}

// After a churn, once its purges are done, an idle process costs nothing:
// the background thread has given everything back (Rss too, after the lazy
// stage) and exited; no thread of ours wakes up.  The targets (at
// most 0.2 wakeups/s summed over threads, 0.1 ms of CPU/s) over a 2 s window,
// with the decays turned down so the test does not take a minute.
TEST_F(Engine, IdleProcessAfterItsPurgesHasNoWakeups) {
  lazymalloc_option_set("lazy_decay_ms", 100);
  Rollup start = rollup();
  constexpr size_t kBlock = 512 * 1024, kCount = 128;  // 64 MiB of large blocks
  std::vector<char*> blocks;
  for (size_t i = 0; i < kCount; ++i) {
    char* p = static_cast<char*>(malloc(kBlock));
    ASSERT_NE(p, nullptr);
    memset(p, int(i | 1), kBlock);
    blocks.push_back(p);
  }
  for (size_t i = 0; i < kCount; ++i) {
    if (i % 32 == 0) continue;  // 2 MiB stays live, spread over the heap
    free(blocks[i]);
    blocks[i] = nullptr;
  }
  ASSERT_TRUE(lmt::WaitFor([] { return stat("background_threads") == 0 && status_threads() == 1; }))
      << "background_threads " << stat("background_threads") << ", threads " << status_threads();
  EXPECT_GT(stat("lazy_decay_bytes"), 0u);
  EXPECT_EQ(stat("retained_bytes") + stat("lazy_bytes"), 0u);
  // Plain Rss, not only Rss - LazyFree, is back near where it started.
  EXPECT_LT(rollup().rss_kb, start.rss_kb + long(2 * kMiB + 8 * kMiB) / 1024)
      << "Rss " << rollup().rss_kb << " kB, at the start " << start.rss_kb << " kB";
  uint64_t wakeups = stat("background_wakeups");
  Usage a = other_threads();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Usage b = other_threads();
  EXPECT_EQ(stat("background_wakeups"), wakeups);
  EXPECT_LE(double(b.switches - a.switches) / 2, 0.2);
  EXPECT_LE((b.cpu_ms - a.cpu_ms) / 2, 0.1);
  for (char* p : blocks) free(p);
}

// The last thread of the program ends through pthread (its heap's exit
// hook): the background thread looks at once, although nothing else would
// wake it for a minute.
TEST_F(Engine, ProcessEndsWhenItsLastThreadExitsThroughPthread) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    lazymalloc_option_set("pressure", 0);
    lazymalloc_option_set("decay_ms", 60000);
    lazymalloc_option_set("partial_decay_ms", 60000);
    // RETAINED for a minute: the thread starts and sleeps to its decay.  A
    // huge block, kept for reuse (huge_retain): a large one that the only
    // thread frees with its cache cold goes back with MADV_DONTNEED
    // (large_release_cold), and nothing would be RETAINED.
    void* p = malloc(4 << 20);
    memset(p, 1, 4 << 20);
    free(p);
    uint64_t running = 0;
    lazymalloc_stat_get("background_threads", &running);
    if (running != 1) {
      // Why the thread did not start, for the parent's failure.
      for (const char* name : {"retained_bytes", "large_cache_bytes", "large_cold_dontneed_bytes", "heaps",
                               "heaps_pooled", "background_starts", "background_start_failures"}) {
        uint64_t v = 0;
        lazymalloc_stat_get(name, &v);
        fprintf(stderr, "child: %s %llu\n", name, static_cast<unsigned long long>(v));
      }
      _exit(3);
    }
    pthread_t t;
    auto last = [](void*) -> void* {
      free(malloc(100));  // a heap, so the exit hook runs
      bool zombie = false;
      for (int i = 0; i < 500 && !zombie; ++i) {
        status_threads(&zombie);
        if (!zombie) usleep(10000);
      }
      return nullptr;  // pthread's exit: key destructors run
    };
    if (pthread_create(&t, nullptr, last, nullptr) != 0) _exit(3);
    syscall(SYS_exit, 0);  // the main thread ends without pthread_exit
  }
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 500 && got == 0; ++i) {
    got = waitpid(pid, &status, WNOHANG);
    if (got == 0) usleep(10000);
  }
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the child was still alive 5 s after its last thread exited";
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace

// Small objects come back, whichever thread frees them (issue #13): 32 MiB
// of objects written (those above 64 KiB sparsely), then freed (a) by the thread that allocated them,
// (b) by a worker that allocated them and then blocks, (c) by this thread
// while the worker that allocated them blocks.  The worker never runs its
// slow path again: its heap is collected by the background thread.
class SmallRelease : public Engine, public ::testing::WithParamInterface<std::tuple<char, size_t>> {};

TEST_P(SmallRelease, HeldMemoryReturnsAfterTheDecay) {
  const auto [which, size] = GetParam();
  const size_t count = (32 * kMiB) / size;
  std::vector<char*> v(count);
  const long start_kb = rollup().held_kb();
  // Objects above 64 KiB are written on their first and last page only, as
  // `mixed` writes them: their class's spans become sparse spans (kept with
  // their class, given MADV_DONTNEED, spans.cc); the others are written whole.
  const bool sparse = size > 64 * 1024;
  auto alloc_all = [&] {
    for (auto& p : v) {
      p = static_cast<char*>(malloc(size));
      ASSERT_NE(p, nullptr);
      if (sparse) {
        memset(p, 0x6b, 4096);
        memset(p + size - 4096, 0x6b, 4096);
      } else {
        memset(p, 0x6b, size);
      }
    }
  };
  auto free_all = [&] {
    for (char* p : v) free(p);
  };
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;  // 1: the worker is done with its part; 2: it may exit
  std::thread worker;
  if (which == 'a') {
    alloc_all();
    EXPECT_GT(rollup().held_kb(), start_kb + long((sparse ? 2 : 24) * kMiB / 1024));
    free_all();
  } else {
    worker = std::thread([&] {
      alloc_all();
      if (which == 'b') free_all();
      std::unique_lock<std::mutex> lock(m);
      phase = 1;
      cv.notify_all();
      cv.wait(lock, [&] { return phase == 2; });  // blocked: a quiet thread
    });
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return phase == 1; });
    }
    if (which == 'c') free_all();
  }
  // (c): the quiet worker's heap is collected whatever the pages: on 4 KiB
  // pages (fresh small-object spans under hugepages=auto on a guest that
  // reports free memory) the sparse objects' held bytes may be under the
  // bound before it is.
  EXPECT_TRUE(lmt::WaitFor([&] {
    return rollup().held_kb() < start_kb + long(8 * kMiB / 1024) &&
           (which != 'c' || stat("idle_heap_collections") >= 1);
  }))
      << "held " << rollup().held_kb() << " kB, at the start " << start_kb << " kB; small_spans "
      << stat("small_spans") << ", idle_heap_collections " << stat("idle_heap_collections");
  if (which == 'c') EXPECT_GE(stat("idle_heap_collections"), 1u);
  {
    std::lock_guard<std::mutex> lock(m);
    phase = 2;
  }
  cv.notify_all();
  if (worker.joinable()) worker.join();
}

INSTANTIATE_TEST_SUITE_P(CasesAndSizes, SmallRelease,
                         ::testing::Combine(::testing::Values('a', 'b', 'c'),
                                            ::testing::Values(size_t(64), size_t(1000), size_t(4000), size_t(30000),
                                                              size_t(100000))),
                         [](const auto& info) {
                           return std::string(1, std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });
