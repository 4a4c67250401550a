// Misuse must end in an abort whose message names the problem and the
// address: double frees of small, large and huge blocks (same thread,
// across threads, with allocations in between), free/realloc of pointers
// lazymalloc never returned (interior, stack, mmap, brk), realloc after
// free, and a corrupted free list.
//
// Built twice: lazymalloc_misuse_tests (default mode) and, with
// LMT_SECURE=1, lazymalloc_misuse_secure_tests, run with LAZYMALLOC_SECURE=1,
// which adds the secure-mode checks (guard pages, fill, delayed reuse,
// random order, encoded links).  Death tests fork ("fast" style), so the
// child sees the same addresses as the regular expression.
#include <gtest/gtest.h>
#include <lazymalloc/lazymalloc.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#ifndef LMT_SECURE
#define LMT_SECURE 0
#endif

namespace {

// Keeps the compiler from seeing through allocation calls and values.
void* Opaque(void* p) {
  void* volatile v = p;
  return v;
}

std::string Msg(const char* fn, const void* p, const char* why) {
  char addr[32];
  snprintf(addr, sizeof addr, "0x%lx", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
  return std::string("lazymalloc: ") + fn + "\\(\\): invalid pointer " + addr + ": " + why;
}

const char* kDouble = "(double free|not allocated \\(double free\\?\\))";

// A small size of every kind: direct fast path, class queue, largest class.
const size_t kSmallSizes[] = {24, 700, 5000, 200000};
const size_t kLarge = 300 << 10;  // large: unit run
const size_t kHuge = 5 << 20;     // huge: slot run

void Churn() {
  // Allocations of other sizes between the two frees, some kept.
  std::vector<void*> keep;
  for (size_t n : {16, 48, 96, 160, 2000, 9000, 70000, 600000, 3000000}) {
    for (int i = 0; i < 20; ++i) {
      void* q = malloc(n);
      memset(q, 0x5a, n < 256 ? n : 256);
      if (i % 3) free(q); else keep.push_back(q);
    }
  }
  for (void* q : keep) free(q);
}

TEST(Misuse, ModeIsAsBuilt) {
  int64_t v = -1;
  ASSERT_EQ(lazymalloc_option_get("secure", &v), 0);
  EXPECT_EQ(v, LMT_SECURE);
}

TEST(Misuse, DoubleFreeSmallSameThread) {
  for (size_t n : kSmallSizes) {
    void* p = Opaque(malloc(n));
    // (The largest class's span goes back to the backend when its only
    // object is freed: the second free finds no span.)
    EXPECT_DEATH({ free(p); free(p); }, Msg("free", p, kDouble)) << n;
    free(p);
  }
}

// For each small size: p (with a live neighbour that keeps its span) must
// make `misuse(p, n)` die with fn's message for p.
template <typename F>
void ExpectSmallDeath(const char* fn, const char* why, F misuse) {
  for (size_t n : kSmallSizes) {
    void* keep = malloc(n);
    void* p = Opaque(malloc(n));
    EXPECT_DEATH(misuse(p, n), Msg(fn, p, why)) << n;
    free(p);
    free(keep);
  }
}

TEST(Misuse, DoubleFreeSmallAfterOtherAllocations) {
  // (The largest class's span holds p alone: once the allocations of
  // other sizes find the class idle, its empty span goes back to the
  // backend, and the second free finds no span.)
  ExpectSmallDeath("free", kDouble, [](void* p, size_t) {
    free(p);
    Churn();
    free(p);
  });
}

TEST(Misuse, DoubleFreeSmallAfterSameClassAllocationsThatDidNotReuseIt) {
  // free(p), then objects of the same class are allocated (none of them
  // p, which is checked), then p is freed again.
  void* p = Opaque(malloc(64));
  EXPECT_DEATH(
      {
        void* a[4];
        for (void*& q : a) q = malloc(64);
        free(p);
        for (void* q : a) free(q);  // reused first (LIFO), or p is in quarantine
        std::vector<void*> v;
        for (int i = 0; i < 3; ++i) {
          void* q = malloc(64);
          if (q == p) abort();  // p handed out again: a test bug, not a detection
          v.push_back(q);
        }
        free(p);
      },
      Msg("free", p, "double free"));
  free(p);
}

TEST(Misuse, ReallocAfterFreeSmall) {
  ExpectSmallDeath("realloc", "double free", [](void* p, size_t n) {
    free(p);
    (void)Opaque(realloc(p, n * 2));
  });
  ExpectSmallDeath("realloc", "double free", [](void* p, size_t n) {
    free(p);
    (void)Opaque(realloc(p, n / 2));
  });
}

TEST(Misuse, RemoteFreeThenOwnerFree) {
  ExpectSmallDeath("free", "double free", [](void* p, size_t) {
    std::thread([p] { free(p); }).join();
    free(p);
  });
}

TEST(Misuse, RemoteFreeTwiceSameThread) {
  ExpectSmallDeath("free", "double free", [](void* p, size_t) {
    std::thread([p] {
      free(p);
      free(p);
    }).join();
  });
}

TEST(Misuse, TwoRemoteFreesFromTwoThreads) {
  ExpectSmallDeath("free", "double free", [](void* p, size_t) {
    std::thread([p] { free(p); }).join();
    std::thread([p] { free(p); }).join();
  });
}

TEST(Misuse, OwnerFreeThenRemoteFree) {
  ExpectSmallDeath("free", "double free", [](void* p, size_t) {
    free(p);
    std::thread([p] { free(p); }).join();
  });
}

TEST(Misuse, RemoteFreeCollectedByOwnerThenRemoteFreeAgain) {
  // The 200000-byte object is alone in its span: once the collected span
  // empties and the churn's spans land elsewhere, its units are free.
  ExpectSmallDeath("free", kDouble, [](void* p, size_t) {
    std::thread([p] { free(p); }).join();
    lazymalloc_thread_collect();  // the owner collects the remote free
    Churn();
    std::thread([p] { free(p); }).join();
  });
}

TEST(Misuse, ReallocAfterRemoteFree) {
  ExpectSmallDeath("realloc", "double free", [](void* p, size_t n) {
    std::thread([p] { free(p); }).join();
    (void)Opaque(realloc(p, n + 1));
  });
}

TEST(Misuse, ThreadFreesItsOwnObjectTwiceAfterExit) {
  // Objects of an exited thread's heap (pooled, then adopted).
  void* p = nullptr;
  std::thread([&p] { p = Opaque(malloc(40)); malloc(40); }).join();
  EXPECT_DEATH(
      {
        free(p);
        std::thread([p] { free(p); }).join();
      },
      Msg("free", p, "double free"));
  free(p);
}

TEST(Misuse, DoubleFreeLargeAndHuge) {
  for (size_t n : {kLarge, kHuge}) {
    void* p = Opaque(malloc(n));
    EXPECT_DEATH({ free(p); free(p); }, Msg("free", p, kDouble)) << n;
    // Its units may meanwhile hold another block or span (in secure mode a
    // block need not start at its span's start): then p is inside it.
    EXPECT_DEATH({ free(p); Churn(); free(p); },
                 Msg("free", p, "(double free|not allocated \\(double free\\?\\)|points inside)")) << n;
    EXPECT_DEATH({ free(p); (void)Opaque(realloc(p, n * 2)); }, Msg("realloc", p, kDouble)) << n;
    // The first free of a large block in the death test's child starts the
    // background thread, whose creation allocates (its TLS vector), maybe
    // in a small span on the units just freed: a live object at p would
    // make the second free a valid one.  A block freed first takes that.
    auto start_background = [n] { free(Opaque(malloc(n))); };
    EXPECT_DEATH(
        {
          start_background();
          std::thread([p] { free(p); }).join();
          free(p);
        },
        Msg("free", p, kDouble))
        << n;
    EXPECT_DEATH(
        {
          start_background();
          std::thread([p] { free(p); }).join();
          std::thread([p] { free(p); }).join();
        },
        Msg("free", p, kDouble))
        << n;
    free(p);
  }
}

TEST(Misuse, InteriorPointers) {
  for (size_t n : kSmallSizes) {
    char* p = static_cast<char*>(Opaque(malloc(n)));
    EXPECT_DEATH(free(p + 16), Msg("free", p + 16, "points inside an object")) << n;
    EXPECT_DEATH((void)Opaque(realloc(p + 8, 10)), Msg("realloc", p + 8, "points inside an object")) << n;
    free(p);
  }
  for (size_t n : {kLarge, kHuge}) {
    char* p = static_cast<char*>(Opaque(malloc(n)));
    EXPECT_DEATH(free(p + 4096), Msg("free", p + 4096, "points inside a block")) << n;
    EXPECT_DEATH((void)Opaque(realloc(p + 16, 10)), Msg("realloc", p + 16, "points inside a block")) << n;
    free(p);
  }
}

TEST(Misuse, ForeignPointers) {
  char stack[64];
  char* on_stack = static_cast<char*>(Opaque(stack));
  EXPECT_DEATH(free(on_stack), Msg("free", on_stack, "not allocated by lazymalloc"));
  EXPECT_DEATH((void)Opaque(realloc(on_stack, 100)), Msg("realloc", on_stack, "not allocated by lazymalloc"));

  void* m = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_DEATH(free(m), Msg("free", m, "not allocated by lazymalloc"));
  EXPECT_DEATH((void)Opaque(realloc(m, 100)), Msg("realloc", m, "not allocated by lazymalloc"));
  munmap(m, 1 << 16);

  // Another allocator's memory: the brk heap (glibc's main arena lives there).
  void* brk_mem = sbrk(4096);
  ASSERT_NE(brk_mem, reinterpret_cast<void*>(-1));
  EXPECT_DEATH(free(brk_mem), Msg("free", brk_mem, "not allocated by lazymalloc"));
  EXPECT_DEATH((void)Opaque(realloc(brk_mem, 100)), Msg("realloc", brk_mem, "not allocated by lazymalloc"));
}

TEST(Misuse, FreeOfAnObjectNeverHandedOut) {
  // A new span of an unused class carves one object at a time: the one
  // after the first was never handed out.
  EXPECT_DEATH(
      {
        char* p = static_cast<char*>(Opaque(malloc(100000)));
        char* never = p + malloc_usable_size(p);
        free(never);
      },
      "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: not allocated \\(never handed out\\)");
}

// Objects of a size used by no other test: one object per carve, so the
// allocation list is empty after each malloc and a refill takes local_free.
constexpr size_t kLone = 45000;

// Frees a and b (kLone objects, with a live neighbour) onto their span's
// local list (out of the quarantine in secure mode).
void FreeTwoLone(char** a, char** b, void** keep) {
  *keep = malloc(kLone);
  *a = static_cast<char*>(Opaque(malloc(kLone)));
  *b = static_cast<char*>(Opaque(malloc(kLone)));
  free(*a);
  free(*b);
  lazymalloc_thread_collect();
}

TEST(Misuse, UseAfterFreeWriteIntoFirst16BytesIsCaughtByMalloc) {
  // Both words of a freed object (its link and its free tag) overwritten,
  // or only the second: the next allocations of that size abort.
  for (size_t first : {size_t(0), size_t(8)}) {
    EXPECT_DEATH(
        {
          char* a;
          char* b;
          void* keep;
          FreeTwoLone(&a, &b, &keep);
          memset(a + first, 0x41, 16 - first);
          memset(b + first, 0x41, 16 - first);
          (void)Opaque(malloc(kLone));
          (void)Opaque(malloc(kLone));
          free(keep);
        },
        "lazymalloc: malloc\\(\\): invalid pointer 0x[0-9a-f]+: corrupted free list")
        << first;
  }
}

TEST(Misuse, WildLinkIsReportedNotFollowed) {
  // A link rewritten to an address outside the span (unmapped here) with
  // the free tag word left intact: reported before it is followed.
  char* wild = reinterpret_cast<char*>(uintptr_t(0x10000));
  EXPECT_DEATH(
      {
        char* a;
        char* b;
        void* keep;
        FreeTwoLone(&a, &b, &keep);
        *reinterpret_cast<char**>(a) = wild;
        *reinterpret_cast<char**>(b) = wild;
        (void)Opaque(malloc(kLone));
        (void)Opaque(malloc(kLone));
        free(keep);
      },
      // The object whose link was rewritten: its tag vouches for the link.
      "lazymalloc: malloc\\(\\): invalid pointer 0x[0-9a-f]+: corrupted free list");
}

#if !LMT_SECURE

TEST(Misuse, CorruptedFreeListLinkIsCaughtNotFollowed) {
  EXPECT_DEATH(
      {
        void* keep = malloc(kLone);
        char* a = static_cast<char*>(Opaque(malloc(kLone)));
        char* b = static_cast<char*>(Opaque(malloc(kLone)));
        free(a);
        free(b);  // local_free: b -> a
        // Use after free: overwrite b's link with a pointer into a.
        *reinterpret_cast<char**>(b) = a + 64;
        (void)Opaque(malloc(kLone));  // b
        (void)Opaque(malloc(kLone));  // the corrupted link: must abort, not be returned
        free(keep);
      },
      "lazymalloc: malloc\\(\\): invalid pointer 0x[0-9a-f]+: corrupted free list");
}

TEST(Misuse, DefaultModeCarvesInAddressOrder) {
  // The contrast for SecureMode.AllocationOrderIsRandom (a new thread's
  // new span of an unused class).
  std::vector<uintptr_t> v;
  std::thread([&v] {
    for (int i = 0; i < 64; ++i) v.push_back(reinterpret_cast<uintptr_t>(Opaque(malloc(200))));
  }).join();
  int ascending = 0;
  for (size_t i = 1; i < v.size(); ++i) ascending += v[i] > v[i - 1];
  EXPECT_GE(ascending, 60);
  for (uintptr_t p : v) free(reinterpret_cast<void*>(p));
}

#else  // secure mode

TEST(SecureMode, GuardPageAfterLargeAndHugeBlocks) {
  for (size_t n : {kLarge, size_t(kLarge + 5), size_t(1 << 20), kHuge, size_t(2 << 20)}) {
    char* p = static_cast<char*>(Opaque(malloc(n)));
    size_t usable = malloc_usable_size(p);
    ASSERT_GE(usable, n);
    EXPECT_LT(usable, n + 16) << "the block ends at the guard page";
    memset(p, 1, usable);  // all of it is writable
    EXPECT_EXIT({ p[usable] = 1; _exit(0); }, testing::KilledBySignal(SIGSEGV), "") << n;
    // Aligned blocks too.
    void* a = nullptr;
    ASSERT_EQ(posix_memalign(&a, 4096, n), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
    char* c = static_cast<char*>(a);
    EXPECT_EXIT({ c[malloc_usable_size(c)] = 1; _exit(0); }, testing::KilledBySignal(SIGSEGV), "") << n;
    free(a);
    // realloc moves the contents and keeps a guard.
    p = static_cast<char*>(realloc(p, n * 2));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p[0], 1);
    EXPECT_EQ(p[n - 1], 1);
    usable = malloc_usable_size(p);
    EXPECT_EXIT({ p[usable] = 1; _exit(0); }, testing::KilledBySignal(SIGSEGV), "") << n;
    free(p);
  }
}

TEST(SecureMode, FreedObjectsAreFilled) {
  for (size_t n : kSmallSizes) {
    unsigned char* p = static_cast<unsigned char*>(Opaque(malloc(n)));
    size_t usable = malloc_usable_size(p);
    memset(p, 0x11, usable);
    free(p);
    // p sits in the quarantine: still mapped, filled but for its first 16
    // bytes (an encoded link once it leaves; its free tag).
    volatile unsigned char* v = p;
    size_t filled = 0;
    for (size_t i = 16; i < usable; ++i) filled += v[i] == 0xdf;
    EXPECT_EQ(filled, usable - 16) << n;
  }
}

TEST(SecureMode, ReuseIsDelayed) {
  for (size_t n : kSmallSizes) {
    void* p = Opaque(malloc(n));
    // The FIFO holds 128 objects and 1 MiB: each round frees one object.
    size_t rounds = (size_t(1) << 20) / malloc_usable_size(p) / 2;
    if (rounds > 100) rounds = 100;
    free(p);
    std::vector<void*> v;
    for (size_t i = 0; i < rounds; ++i) {
      void* q = malloc(n);
      EXPECT_NE(q, p) << n << " reused after " << i << " allocations";
      v.push_back(q);
      void* t = malloc(n);  // allocated and freed at once: goes through the FIFO too
      EXPECT_NE(t, p);
      free(t);
    }
    for (void* q : v) free(q);
  }
}

TEST(SecureMode, AllocationOrderIsRandom) {
  // Two new threads carve new spans of an unused class: the order within
  // each is shuffled (ascending neighbours about half the time), and
  // differs between them.
  std::vector<uintptr_t> v[2];
  for (auto& vec : v) {
    std::thread([&vec] {
      for (int i = 0; i < 64; ++i) vec.push_back(reinterpret_cast<uintptr_t>(Opaque(malloc(200))));
    }).join();
  }
  for (auto& vec : v) {
    int ascending = 0;
    for (size_t i = 1; i < vec.size(); ++i) ascending += vec[i] > vec[i - 1];
    // Binomial(63, 1/2): outside [14, 49] with probability < 1e-5.
    EXPECT_GE(ascending, 14);
    EXPECT_LE(ascending, 49);
  }
  for (auto& vec : v)
    for (uintptr_t p : vec) free(reinterpret_cast<void*>(p));
}

TEST(SecureMode, CorruptedEncodedLinkIsCaught) {
  // Overwriting the links of two freed objects with each other's (valid,
  // free) addresses would pass validation in the default mode; encoded,
  // they decode to garbage and the next allocation aborts.
  EXPECT_DEATH(
      {
        void* keep = malloc(kLone);
        char* a = static_cast<char*>(Opaque(malloc(kLone)));
        char* b = static_cast<char*>(Opaque(malloc(kLone)));
        free(a);
        free(b);
        lazymalloc_thread_collect();  // both leave the quarantine for local_free
        *reinterpret_cast<char**>(a) = b;
        *reinterpret_cast<char**>(b) = a;
        (void)Opaque(malloc(kLone));
        (void)Opaque(malloc(kLone));
        free(keep);
      },
      "lazymalloc: malloc\\(\\): invalid pointer 0x[0-9a-f]+: corrupted free list");
}

#endif

}  // namespace
