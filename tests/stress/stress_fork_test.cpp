// fork() from a multi-threaded process whose threads are busy allocating:
// the child must be able to allocate, free (also blocks inherited from the
// parent), create a thread, and exit; the parent keeps working.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "alloc_shim.h"
#include "wait.h"

namespace {

using lmt::CheckPattern;
using lmt::FillPattern;

#if defined(__SANITIZE_THREAD__)
// TSan does not support threads started after a multi-threaded fork (it
// kills the child, or with die_after_fork=0 trips over reused thread ids).
constexpr bool kChildMayStartThreads = false;
#else
constexpr bool kChildMayStartThreads = true;
#endif

std::atomic<bool> g_stop{false};
std::atomic<bool> g_worker_failed{false};

void BusyWorker(int index, std::atomic<uint64_t>* ops) {
  uint64_t id = uint64_t(index) << 40;
  std::vector<std::pair<void*, size_t>> live;
  live.reserve(512);
  uint64_t i = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    ++i;
    size_t n = (i % 97 == 0) ? 200 * 1024 + (i % 7) * 4096 : 16 + (i * 37) % 3000;
    void* p = lmt::Malloc(n);
    if (!p) {
      g_worker_failed = true;
      return;
    }
    FillPattern(p, n, id + i);
    live.emplace_back(p, n);
    if (live.size() >= 256 || (i & 3) == 0) {
      size_t k = (i * 131) % live.size();
      auto [q, qn] = live[k];
      live[k] = live.back();
      live.pop_back();
      // Grow it, then fill and check the whole new size.
      void* r = lmt::Realloc(q, qn + 64);
      if (!r) {
        g_worker_failed = true;
        return;
      }
      FillPattern(r, qn + 64, id + i + 1000000);
      if (!CheckPattern(r, qn + 64, id + i + 1000000)) {
        g_worker_failed = true;
        return;
      }
      lmt::Free(r);
    }
    ops->fetch_add(1, std::memory_order_relaxed);
  }
  for (auto& [p, n] : live) lmt::Free(p);
}

int ChildBody(std::vector<std::pair<void*, size_t>>* inherited) {
  // Blocks the parent allocated before fork are valid here and can be freed.
  for (size_t i = 0; i < inherited->size(); ++i) {
    auto [p, n] = (*inherited)[i];
    LMT_CHILD_CHECK(CheckPattern(p, n, 777 + i));
    lmt::Free(p);
  }
  std::vector<void*> v;
  for (int i = 0; i < 2000; ++i) {
    size_t n = 1 + (i * 53) % 8000;
    void* p = lmt::Malloc(n);
    LMT_CHILD_CHECK(p != nullptr);
    FillPattern(p, n, i);
    v.push_back(p);
  }
  for (int i = 0; i < 2000; ++i) {
    LMT_CHILD_CHECK(CheckPattern(v[i], 1 + (i * 53) % 8000, i));
    lmt::Free(v[i]);
  }
  void* big = lmt::Malloc(3 * 1024 * 1024);
  LMT_CHILD_CHECK(big != nullptr);
  memset(big, 0x33, 3 * 1024 * 1024);
  lmt::Free(big);
  void* z = lmt::Calloc(1, 1024 * 1024);
  LMT_CHILD_CHECK(z != nullptr && lmt::FindNonZero(z, 1024 * 1024) == SIZE_MAX);
  lmt::Free(z);
  if (kChildMayStartThreads) {
    std::atomic<bool> ok{false};
    std::thread t([&ok] {
      bool good = true;
      for (int i = 0; i < 1000 && good; ++i) {
        void* p = lmt::Malloc(32 + i);
        good = p != nullptr;
        if (p) {
          FillPattern(p, 32 + i, i);
          good = CheckPattern(p, 32 + i, i);
          lmt::Free(p);
        }
      }
      ok = good;
    });
    t.join();
    LMT_CHILD_CHECK(ok.load());
  }
  return 0;
}

TEST(Stress, ForkWhileThreadsAllocate) {
  g_stop = false;
  g_worker_failed = false;
  const int kWorkers = 3;
  std::vector<std::atomic<uint64_t>> ops(kWorkers);
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) workers.emplace_back(BusyWorker, i, &ops[i]);

  const size_t forks = lmt::Scaled(40, 5);
  std::string failure;
  for (size_t f = 0; f < forks && failure.empty(); ++f) {
    std::vector<std::pair<void*, size_t>> inherited;
    for (size_t i = 0; i < 16; ++i) {
      size_t n = 10 + i * 1000 + (i == 15 ? 1024 * 1024 : 0);
      void* p = lmt::Malloc(n);
      ASSERT_NE(p, nullptr);
      FillPattern(p, n, 777 + i);
      inherited.emplace_back(p, n);
    }
    // Fork while every worker is busy, at a different point of their work
    // each time: after each has done 50 to 250 more operations.
    const uint64_t more = 50 * (1 + f % 5);
    std::vector<uint64_t> at(kWorkers);
    for (int i = 0; i < kWorkers; ++i) at[i] = ops[i].load() + more;
    bool busy = lmt::WaitFor([&] {
      if (g_worker_failed.load()) return true;
      for (int i = 0; i < kWorkers; ++i)
        if (ops[i].load() < at[i]) return false;
      return true;
    });
    if (!busy) failure = "the workers made no progress before fork #" + std::to_string(f);
    if (!busy || g_worker_failed.load()) break;  // (the workers are stopped and joined below)
    failure = lmt::RunInChild([&inherited] { return ChildBody(&inherited); }, 30);
    if (!failure.empty()) failure = "fork #" + std::to_string(f) + ": " + failure;
    // The parent's copies are untouched by the child and still ours.
    for (size_t i = 0; i < inherited.size(); ++i) {
      ASSERT_TRUE(CheckPattern(inherited[i].first, inherited[i].second, 777 + i));
      lmt::Free(inherited[i].first);
    }
  }
  // The workers keep making progress after the last fork (a worker stalled
  // on a lock left taken by fork would never get there).
  for (int i = 0; i < kWorkers; ++i) {
    const uint64_t before = ops[i].load();
    EXPECT_TRUE(lmt::WaitFor([&] { return g_worker_failed.load() || ops[i].load() > before; }))
        << "worker " << i << " stalled after fork";
  }
  g_stop = true;
  for (auto& t : workers) t.join();
  EXPECT_EQ(failure, "");
  EXPECT_FALSE(g_worker_failed.load()) << "a worker thread saw a failed or corrupted allocation";
}

TEST(Stress, ForkChildCanExitNormally) {
  // The child returns through exit() (atexit handlers, stats printing,
  // static destructors) rather than _exit().
  g_stop = false;
  std::atomic<uint64_t> ops{0};
  std::thread worker(BusyWorker, 9, &ops);
  while (ops.load() == 0 && !g_worker_failed.load()) std::this_thread::yield();  // fork while it allocates
  const int forks = static_cast<int>(lmt::Scaled(20, 3));
  for (int f = 0; f < forks; ++f) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(30);
      void* p = lmt::Malloc(1000);
      if (!p) _exit(3);
      lmt::Free(p);
      exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << f << " status " << status;
  }
  g_stop = true;
  worker.join();
  EXPECT_GT(ops.load(), 0u);
}

}  // namespace
