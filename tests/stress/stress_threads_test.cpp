// Deterministic multi-threaded stress and thread create/exit churn.  Every
// block carries a pattern derived from its id, verified before it is freed
// or reallocated.  LAZYMALLOC_TEST_SCALE scales the iteration counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "alloc_shim.h"
#include "wait.h"

namespace {

using lmt::CheckPattern;
using lmt::FillPattern;
using lmt::FindPatternMismatch;

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;

using lmt::Rng;

// Sizes from 1 B to 1 MiB, mostly small, with a few larger blocks.
size_t PickSize(Rng& r) {
  size_t c = r.Below(1000);
  if (c < 600) return 1 + r.Below(256);
  if (c < 850) return 257 + r.Below(4096 - 256);
  if (c < 960) return 4 * KiB + r.Below(60 * KiB);
  if (c < 995) return 64 * KiB + r.Below(1 * MiB - 64 * KiB + 1);
  if (c < 999) return 1 * MiB + r.Below(3 * MiB);
  return 4 * MiB + r.Below(4 * MiB);
}

struct Block {
  void* p;
  size_t n;
  uint64_t id;
};

// A failure inside a worker thread is recorded here (gtest assertions are
// only reliable on the main thread) and the workers stop.
std::mutex g_fail_mu;
std::string g_failure;
std::atomic<bool> g_failed{false};

void Fail(const std::string& what) {
  std::lock_guard<std::mutex> g(g_fail_mu);
  if (g_failure.empty()) g_failure = what;
  g_failed.store(true);
}

bool Verify(const Block& b, const char* where) {
  if (lmt::UsableSize(b.p) < b.n) {
    Fail(std::string(where) + ": usable size " + std::to_string(lmt::UsableSize(b.p)) + " < " +
         std::to_string(b.n));
    return false;
  }
  size_t bad = FindPatternMismatch(b.p, b.n, b.id);
  if (bad != SIZE_MAX) {
    Fail(std::string(where) + ": block id " + std::to_string(b.id) + " size " + std::to_string(b.n) +
         " corrupted at offset " + std::to_string(bad));
    return false;
  }
  return true;
}

struct Queue {
  std::mutex mu;
  std::vector<Block> items;
  void Push(const Block& b) {
    std::lock_guard<std::mutex> g(mu);
    items.push_back(b);
  }
  std::vector<Block> TakeAll() {
    std::lock_guard<std::mutex> g(mu);
    std::vector<Block> out;
    out.swap(items);
    return out;
  }
};

bool IsAligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

class StressWorker {
 public:
  StressWorker(int index, int nthreads, std::vector<Queue>* queues, std::atomic<int>* producing)
      : index_(index), nthreads_(nthreads), queues_(queues), producing_(producing),
        rng_(0xA110C000 + index) {}

  void Run(size_t ops) {
    for (size_t op = 0; op < ops && !g_failed.load(std::memory_order_relaxed); ++op) {
      size_t c = rng_.Below(100);
      if (c < 45 || owned_.empty()) {
        if (owned_.size() >= kMaxOwned) {
          FreeOne();
        } else {
          Allocate();
        }
      } else if (c < 72) {
        FreeOne();
      } else if (c < 84) {
        ReallocOne();
      } else if (c < 95) {
        SendOne();
      } else {
        Drain();
      }
      if ((op & 63) == 0) Drain();
    }
    producing_->fetch_sub(1);
    // Keep receiving until every thread has stopped sending.
    while (producing_->load() > 0 && !g_failed.load()) {
      Drain();
      std::this_thread::yield();
    }
    Drain();
    for (auto& b : owned_) {
      Verify(b, "final free");
      lmt::Free(b.p);
      ++frees_;
    }
    owned_.clear();
  }

  uint64_t allocs() const { return allocs_; }
  uint64_t frees() const { return frees_; }

 private:
  static constexpr size_t kMaxOwned = 1500;

  uint64_t NewId() { return (uint64_t(index_) << 48) | ++next_id_; }

  void Allocate() {
    size_t n = PickSize(rng_);
    size_t how = rng_.Below(20);
    void* p = nullptr;
    size_t align = 16;
    if (how < 13) {
      p = lmt::Malloc(n);
    } else if (how < 15) {
      p = lmt::Calloc(1, n);
      if (p && lmt::FindNonZero(p, n) != SIZE_MAX) {
        Fail("calloc(1, " + std::to_string(n) + ") returned dirty memory");
        lmt::Free(p);
        return;
      }
    } else if (how < 17) {
      align = size_t{16} << rng_.Below(9);  // 16 .. 4096
      p = lmt::AlignedAlloc(align, n);
    } else if (how < 19) {
      align = size_t{8} << rng_.Below(10);  // 8 .. 4096
      if (lmt::PosixMemalign(&p, align, n) != 0) p = nullptr;
    } else {
      p = lmt::Realloc(nullptr, n);
    }
    if (!p) {
      Fail("allocation of " + std::to_string(n) + " bytes failed");
      return;
    }
    if (!IsAligned(p, align)) {
      Fail("misaligned block for alignment " + std::to_string(align));
      return;
    }
    Block b{p, n, NewId()};
    FillPattern(p, n, b.id);
    owned_.push_back(b);
    ++allocs_;
  }

  Block TakeRandom() {
    size_t i = rng_.Below(owned_.size());
    Block b = owned_[i];
    owned_[i] = owned_.back();
    owned_.pop_back();
    return b;
  }

  void FreeOne() {
    if (owned_.empty()) return;
    Block b = TakeRandom();
    Verify(b, "free");
    lmt::Free(b.p);
    ++frees_;
  }

  void ReallocBlock(Block& b) {
    if (!Verify(b, "before realloc")) return;
    size_t n = rng_.Below(4) == 0 ? b.n / 2 + 1 : PickSize(rng_);
    void* q = lmt::Realloc(b.p, n);
    if (!q) {
      Fail("realloc to " + std::to_string(n) + " failed");
      return;
    }
    size_t keep = n < b.n ? n : b.n;
    size_t bad = FindPatternMismatch(q, keep, b.id);
    if (bad != SIZE_MAX) {
      Fail("realloc " + std::to_string(b.n) + " -> " + std::to_string(n) + " lost byte " +
           std::to_string(bad));
      return;
    }
    b.p = q;
    b.n = n;
    FillPattern(q, n, b.id);  // same id: the prefix is unchanged
  }

  void ReallocOne() {
    if (owned_.empty()) return;
    ReallocBlock(owned_[rng_.Below(owned_.size())]);
  }

  void SendOne() {
    if (owned_.empty() || nthreads_ < 2) return;
    Block b = TakeRandom();
    int to = (index_ + 1 + static_cast<int>(rng_.Below(nthreads_ - 1))) % nthreads_;
    (*queues_)[to].Push(b);
  }

  void Drain() {
    for (Block& b : (*queues_)[index_].TakeAll()) {
      if (rng_.Below(3) == 0 && owned_.size() < kMaxOwned) {
        // Adopt it: a later realloc/free by this (non-allocating) thread.
        ReallocBlock(b);
        owned_.push_back(b);
      } else {
        Verify(b, "remote free");
        lmt::Free(b.p);
        ++frees_;
      }
    }
  }

  int index_;
  int nthreads_;
  std::vector<Queue>* queues_;
  std::atomic<int>* producing_;
  Rng rng_;
  std::vector<Block> owned_;
  uint64_t next_id_ = 0;
  uint64_t allocs_ = 0;
  uint64_t frees_ = 0;
};

TEST(Stress, MultiThreadedPatternVerified) {
  g_failure.clear();
  g_failed = false;
  const int kThreads = 4;
  const size_t ops = lmt::Scaled(40000, 2000);
  std::vector<Queue> queues(kThreads);
  std::atomic<int> producing{kThreads};
  std::vector<StressWorker> workers;
  workers.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) workers.emplace_back(i, kThreads, &queues, &producing);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { workers[i].Run(ops); });
  for (auto& t : threads) t.join();
  ASSERT_FALSE(g_failed.load()) << g_failure;
  uint64_t allocs = 0, frees = 0;
  for (auto& w : workers) {
    allocs += w.allocs();
    frees += w.frees();
  }
  EXPECT_EQ(allocs, frees) << "every block allocated was freed exactly once";
  EXPECT_GT(allocs, ops);  // the workers really did allocate
}

// ---------------------------------------------------------------- churn

std::mutex g_orphan_mu;
std::vector<Block> g_orphans;

// Memory freed and allocated from a thread_local destructor, i.e. during
// thread exit, possibly after the allocator's own per-thread teardown.
struct ThreadExitUser {
  std::vector<Block> blocks;
  ~ThreadExitUser() {
    for (auto& b : blocks) {
      Verify(b, "thread_local destructor free");
      lmt::Free(b.p);
    }
    void* p = lmt::Malloc(200);
    if (!p) {
      Fail("malloc in a thread_local destructor failed");
      return;
    }
    memset(p, 1, 200);
    lmt::Free(p);
  }
};
thread_local ThreadExitUser t_exit_user;

void ChurnThread(uint64_t seed) {
  Rng r(seed);
  std::vector<Block> mine;
  size_t count = 8 + r.Below(40);
  for (size_t i = 0; i < count; ++i) {
    size_t n = r.Below(10) == 0 ? 1 + r.Below(300 * KiB) : 1 + r.Below(2048);
    void* p = lmt::Malloc(n);
    if (!p) {
      Fail("churn malloc failed");
      return;
    }
    Block b{p, n, (seed << 16) | i};
    FillPattern(p, n, b.id);
    mine.push_back(b);
  }
  // Free about half, keep a few for thread exit, leave a few for others.
  std::vector<Block> leave;
  for (size_t i = 0; i < mine.size(); ++i) {
    size_t c = r.Below(10);
    if (c < 5) {
      Verify(mine[i], "churn free");
      lmt::Free(mine[i].p);
    } else if (c < 7) {
      t_exit_user.blocks.push_back(mine[i]);
    } else {
      leave.push_back(mine[i]);
    }
  }
  // Take over blocks other (possibly exited) threads left behind.
  std::vector<Block> taken;
  {
    std::lock_guard<std::mutex> g(g_orphan_mu);
    size_t take = std::min<size_t>(g_orphans.size(), 6);
    taken.assign(g_orphans.end() - take, g_orphans.end());
    g_orphans.resize(g_orphans.size() - take);
    g_orphans.insert(g_orphans.end(), leave.begin(), leave.end());
  }
  for (auto& b : taken) {
    if (!Verify(b, "orphan")) return;
    if (r.Below(2) == 0) {
      size_t n = 1 + r.Below(4096);
      void* q = lmt::Realloc(b.p, n);
      if (!q || !CheckPattern(q, std::min(n, b.n), b.id)) {
        Fail("realloc of an orphaned block failed or lost data");
        return;
      }
      lmt::Free(q);
    } else {
      lmt::Free(b.p);
    }
  }
}

TEST(Stress, ThreadCreateExitChurn) {
  g_failure.clear();
  g_failed = false;
  const size_t total = lmt::Scaled(3000, 50);
  const size_t wave = 4;
  uint64_t seed = 1;
  for (size_t done = 0; done < total && !g_failed.load(); done += wave) {
    std::vector<std::thread> ts;
    for (size_t i = 0; i < wave; ++i) ts.emplace_back(ChurnThread, seed++);
    for (auto& t : ts) t.join();
  }
  ASSERT_FALSE(g_failed.load()) << g_failure;
  std::lock_guard<std::mutex> g(g_orphan_mu);
  EXPECT_FALSE(g_orphans.empty()) << "the churn threads should leave blocks behind";
  for (auto& b : g_orphans) {
    ASSERT_TRUE(CheckPattern(b.p, b.n, b.id)) << "orphan " << b.id << " corrupted";
    lmt::Free(b.p);
  }
  g_orphans.clear();
}

TEST(Stress, DetachedThreadsExitWhileOthersAllocate) {
  // Detached threads that exit on their own while the main thread keeps
  // allocating: heap teardown races with live allocation.
  g_failure.clear();
  g_failed = false;
  const size_t total = lmt::Scaled(800, 20);
  std::atomic<size_t> finished{0};
  std::mutex tids_mu;
  std::vector<pid_t> tids;
  for (size_t i = 0; i < total; ++i) {
    std::thread([&finished, &tids_mu, &tids, i] {
      {
        std::lock_guard<std::mutex> g(tids_mu);
        tids.push_back(gettid());
      }
      ChurnThread(100000 + i);
      finished.fetch_add(1);
    }).detach();
    void* p = lmt::Malloc(64 + i % 512);
    ASSERT_NE(p, nullptr);
    FillPattern(p, 64, i);
    ASSERT_TRUE(CheckPattern(p, 64, i));
    lmt::Free(p);
    while (i + 1 > finished.load() + 8) std::this_thread::yield();  // <= 8 running
  }
  while (finished.load() < total) std::this_thread::yield();
  // Their thread-local destructors and heap teardown may still be running
  // after `finished` was incremented: wait until every thread has ended
  // (gone from /proc/self/task) before the orphans are freed.
  std::lock_guard<std::mutex> tg(tids_mu);
  ASSERT_EQ(tids.size(), total);
  ASSERT_EQ(lmt::ThreadState(gettid()), 'R') << "/proc/self/task does not show this thread";
  for (pid_t tid : tids) {
    ASSERT_TRUE(lmt::WaitFor([tid] { return lmt::ThreadGone(tid); }))
        << "detached thread " << tid << " still exists, state '" << lmt::ThreadState(tid) << "'";
  }
  ASSERT_FALSE(g_failed.load()) << g_failure;
  std::lock_guard<std::mutex> g(g_orphan_mu);
  for (auto& b : g_orphans) {
    ASSERT_TRUE(CheckPattern(b.p, b.n, b.id));
    lmt::Free(b.p);
  }
  g_orphans.clear();
}

}  // namespace
