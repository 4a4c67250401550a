// Discardable memory against the real kernel: pressure drops unlocked blocks
// (mincore shows them gone, they read as zero) and leaves locked ones
// byte for byte; the background thread enforces discardable_limit; fork();
// misuse through free() and realloc().
#include <errno.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kernel_util.h"
#include "wait.h"
#include "lazymalloc/lazymalloc.h"

namespace {

constexpr size_t kMiB = 1 << 20;

void fill(void* p, size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 131 + seed * 7 + 1) % 251);
}
bool holds(const void* p, size_t n, unsigned seed) {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<unsigned char>((i * 131 + seed * 7 + 1) % 251)) return false;
  }
  return true;
}
bool all_zero(const void* p, size_t n) {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i]) return false;
  }
  return true;
}

class Discardable : public ::testing::Test {
 protected:
  void SetUp() override {
    lazymalloc_option_set("purge", 0);
    lazymalloc_option_set("discardable_limit", 0);
    lazymalloc_option_set("background_interval_ms", 20);
    lazymalloc_limit_set(0, 0);
  }
  void TearDown() override { lazymalloc_option_set("discardable_limit", 0); }
};

TEST_F(Discardable, PressureDiscardsUnlockedAndKeepsLockedByteForByte) {
  struct B {
    void* p;
    size_t size;
    bool locked;
  };
  std::vector<B> blocks;
  // Big ones (own spans), a packed run of small ones, odd sizes.
  size_t sizes[] = {kMiB, 3 * kMiB + 5, 4096, 4096, 10000, 60 * 1024, 64 * 1024, 100, 200 * 1024, 2 * kMiB};
  unsigned i = 0;
  for (size_t size : sizes) {
    void* p = lazymalloc_discardable_alloc(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    EXPECT_GE(lazymalloc_discardable_size(p), size);
    fill(p, size, i);
    bool locked = i % 2 == 0;
    if (!locked) EXPECT_EQ(lazymalloc_discardable_unlock(p), 0);
    blocks.push_back({p, size, locked});
    ++i;
  }
  uint64_t discards = stat("discards");
  uint64_t misses = stat("discardable_lock_misses");
  EXPECT_GT(stat("discardable_unlocked_bytes"), 0u);
  lazymalloc_pressure_notify();
  EXPECT_EQ(stat("discards"), discards + blocks.size() / 2);
  EXPECT_EQ(stat("discardable_unlocked_bytes"), 0u);
  i = 0;
  for (B& b : blocks) {
    size_t usable = lazymalloc_discardable_size(b.p);
    if (b.locked) {
      EXPECT_EQ(resident_pages(b.p, usable), usable / 4096) << i;
      EXPECT_TRUE(holds(b.p, b.size, i)) << "locked block " << i << " changed";
      EXPECT_EQ(lazymalloc_discardable_unlock(b.p), 0);
      EXPECT_EQ(lazymalloc_discardable_lock(b.p), LAZYMALLOC_DISCARDABLE_INTACT);
    } else {
      EXPECT_EQ(resident_pages(b.p, usable), 0u) << "unlocked block " << i << " still resident";
      EXPECT_EQ(lazymalloc_discardable_lock(b.p), LAZYMALLOC_DISCARDABLE_DISCARDED) << i;
      EXPECT_TRUE(all_zero(b.p, usable)) << "a discarded block reads as zero";
      fill(b.p, b.size, i);  // regenerate: usable again
      EXPECT_TRUE(holds(b.p, b.size, i));
    }
    ++i;
  }
  EXPECT_EQ(stat("discardable_lock_misses"), misses + blocks.size() / 2);
  for (B& b : blocks) EXPECT_EQ(lazymalloc_discardable_free(b.p), 0);
}

TEST_F(Discardable, BackgroundThreadEnforcesTheLimitOldestFirst) {
  std::vector<void*> ps;
  for (unsigned i = 0; i < 8; ++i) {
    void* p = lazymalloc_discardable_alloc(kMiB);
    ASSERT_NE(p, nullptr);
    fill(p, kMiB, i);
    ps.push_back(p);
  }
  for (void* p : ps) EXPECT_EQ(lazymalloc_discardable_unlock(p), 0);  // ps[0] is the oldest
  uint64_t wakeups = stat("background_wakeups");
  ASSERT_EQ(lazymalloc_option_set("discardable_limit", 3 * kMiB), 0);
  ASSERT_TRUE(lmt::WaitFor([] { return stat("discardable_unlocked_bytes") <= 3 * kMiB; }))
      << "the background thread did not discard down to the limit";
  EXPECT_GT(stat("background_wakeups"), wakeups);
  for (unsigned i = 0; i < 8; ++i) {
    int r = lazymalloc_discardable_lock(ps[i]);
    EXPECT_EQ(r, i < 5 ? LAZYMALLOC_DISCARDABLE_DISCARDED : LAZYMALLOC_DISCARDABLE_INTACT) << i;
    if (r == LAZYMALLOC_DISCARDABLE_INTACT) EXPECT_TRUE(holds(ps[i], kMiB, i));
  }
  for (void* p : ps) EXPECT_EQ(lazymalloc_discardable_free(p), 0);
}

TEST_F(Discardable, PurgeAndExplicitDiscard) {
  void* a = lazymalloc_discardable_alloc(8192);
  void* b = lazymalloc_discardable_alloc(8192);
  fill(a, 8192, 1);
  fill(b, 8192, 2);
  lazymalloc_discardable_unlock(a);
  EXPECT_EQ(lazymalloc_discardable_purge(), 8192u);
  EXPECT_EQ(lazymalloc_discardable_purge(), 0u);
  lazymalloc_discardable_unlock(b);
  lazymalloc_purge(LAZYMALLOC_PURGE_LAZY);  // malloc_trim and lazymalloc_purge discard too
  EXPECT_EQ(lazymalloc_discardable_lock(a), LAZYMALLOC_DISCARDABLE_DISCARDED);
  EXPECT_EQ(lazymalloc_discardable_lock(b), LAZYMALLOC_DISCARDABLE_DISCARDED);
  EXPECT_TRUE(all_zero(a, 8192));
  EXPECT_TRUE(all_zero(b, 8192));
  EXPECT_EQ(lazymalloc_discardable_free(a), 0);
  EXPECT_EQ(lazymalloc_discardable_free(b), 0);
}

TEST_F(Discardable, ErrorsAreReported) {
  void* p = lazymalloc_discardable_alloc(100);
  ASSERT_NE(p, nullptr);
  void* m = malloc(100);
  int x = 0;
  for (void* bad : {m, static_cast<void*>(&x), static_cast<void*>(static_cast<char*>(p) + 16)}) {
    errno = 0;
    EXPECT_EQ(lazymalloc_discardable_lock(bad), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(lazymalloc_discardable_unlock(bad), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(lazymalloc_discardable_free(bad), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(lazymalloc_discardable_size(bad), 0u);
  }
  EXPECT_EQ(lazymalloc_discardable_unlock(p), 0);
  errno = 0;
  EXPECT_EQ(lazymalloc_discardable_unlock(p), -1) << "not locked";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(lazymalloc_discardable_free(p), 0);
  EXPECT_EQ(lazymalloc_discardable_free(nullptr), 0);
  errno = 0;
  EXPECT_EQ(lazymalloc_discardable_lock(p), -1) << "freed";
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(lazymalloc_discardable_alloc(SIZE_MAX / 2), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  free(m);
}

TEST_F(Discardable, FreeOrReallocOfADiscardableBlockAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  void* p = lazymalloc_discardable_alloc(5000);
  void* big = lazymalloc_discardable_alloc(2 * kMiB);
  EXPECT_DEATH(free(p), "free\\(\\): invalid pointer 0x[0-9a-f]+: discardable memory");
  EXPECT_DEATH(free(big), "discardable memory");
  EXPECT_DEATH({ if (realloc(p, 10)) abort(); }, "realloc\\(\\): invalid pointer 0x[0-9a-f]+: discardable memory");
  lazymalloc_discardable_free(p);
  lazymalloc_discardable_free(big);
}

// The child inherits every block in its state; each process discards its
// own copy.  A fork while another thread discards leaves no block stuck.
TEST_F(Discardable, ForkInheritsBlocksAndStates) {
  void* locked = lazymalloc_discardable_alloc(64 * 1024);
  void* unlocked = lazymalloc_discardable_alloc(3 * 4096);
  void* discarded = lazymalloc_discardable_alloc(4096);
  fill(locked, 64 * 1024, 1);
  fill(unlocked, 3 * 4096, 2);
  lazymalloc_discardable_unlock(discarded);
  lazymalloc_discardable_purge();
  lazymalloc_discardable_unlock(unlocked);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int bad = 0;
    if (!holds(locked, 64 * 1024, 1)) bad |= 1;
    if (lazymalloc_discardable_unlock(locked) != 0) bad |= 2;  // it was locked
    if (lazymalloc_discardable_lock(discarded) != LAZYMALLOC_DISCARDABLE_DISCARDED) bad |= 4;
    if (lazymalloc_discardable_purge() != 64 * 1024 + 3 * 4096) bad |= 8;  // the child's copies
    if (lazymalloc_discardable_lock(unlocked) != LAZYMALLOC_DISCARDABLE_DISCARDED) bad |= 16;
    if (!all_zero(unlocked, 3 * 4096)) bad |= 32;
    void* fresh = lazymalloc_discardable_alloc(4096);
    if (!fresh || lazymalloc_discardable_free(fresh) != 0) bad |= 64;
    _exit(bad);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's copies are untouched by the child's discards.
  EXPECT_EQ(lazymalloc_discardable_lock(unlocked), LAZYMALLOC_DISCARDABLE_INTACT);
  EXPECT_TRUE(holds(unlocked, 3 * 4096, 2));
  EXPECT_TRUE(holds(locked, 64 * 1024, 1));
  EXPECT_EQ(lazymalloc_discardable_lock(discarded), LAZYMALLOC_DISCARDABLE_DISCARDED);

  // Fork while a thread keeps discarding and relocking.
  std::atomic<bool> stop{false};
  lazymalloc_discardable_unlock(unlocked);
  std::thread churn([&] {
    while (!stop.load()) {
      lazymalloc_discardable_purge();
      if (lazymalloc_discardable_lock(unlocked) >= 0) lazymalloc_discardable_unlock(unlocked);
    }
  });
  for (int k = 0; k < 20; ++k) {
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(10);
      int r = lazymalloc_discardable_lock(unlocked);  // must not wait for a discard in flight
      _exit(r == LAZYMALLOC_DISCARDABLE_INTACT || r == LAZYMALLOC_DISCARDABLE_DISCARDED ? 0 : 1);
    }
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child killed (stuck on a discard in flight?)";
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  stop = true;
  churn.join();
  for (void* p : {locked, unlocked, discarded}) EXPECT_EQ(lazymalloc_discardable_free(p), 0);
}

}  // namespace
