// Conformance of the C allocation API with glibc 2.36 (the behaviour of the
// glibc on the project's machines was checked by building this file without
// lazymalloc: tests/run_standalone_glibc.sh).
#include <gtest/gtest.h>

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

using lmt::CheckPattern;
using lmt::FillPattern;
using lmt::FindNonZero;
using lmt::FindPatternMismatch;
using lmt::Opaque;

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

bool IsAligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Writes the whole usable size with a pattern and reads it back.  Huge
// blocks are written one word per page (touching all of a 1 GiB usable size
// would take too long), the first and last 64 KiB fully.
::testing::AssertionResult WritableUsable(void* p, size_t requested, uint64_t id) {
  size_t u = malloc_usable_size(p);
  if (u < requested)
    return ::testing::AssertionFailure()
           << "usable size " << u << " < requested " << requested;
  if (u <= 64 * MiB) {
    FillPattern(p, u, id);
    size_t bad = FindPatternMismatch(p, u, id);
    if (bad != SIZE_MAX)
      return ::testing::AssertionFailure() << "pattern mismatch at offset " << bad << " of " << u;
    return ::testing::AssertionSuccess();
  }
  unsigned char* b = static_cast<unsigned char*>(p);
  FillPattern(b, 64 * KiB, id);
  FillPattern(b + u - 64 * KiB, 64 * KiB, id + 1);
  for (size_t off = 64 * KiB; off + 64 * KiB < u; off += kPage) b[off] = static_cast<unsigned char>(off >> 12);
  if (!CheckPattern(b, 64 * KiB, id) || !CheckPattern(b + u - 64 * KiB, 64 * KiB, id + 1))
    return ::testing::AssertionFailure() << "head/tail pattern mismatch in huge block";
  for (size_t off = 64 * KiB; off + 64 * KiB < u; off += kPage)
    if (b[off] != static_cast<unsigned char>(off >> 12))
      return ::testing::AssertionFailure() << "page probe mismatch at " << off;
  return ::testing::AssertionSuccess();
}

std::vector<size_t> InterestingSizes() {
  std::vector<size_t> v;
  for (size_t s = 0; s <= 1100; ++s) v.push_back(s);
  for (size_t s = 1100; s <= 70 * KiB; s += 509) v.push_back(s);
  for (size_t base : {2 * KiB, 4 * KiB, 8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB, 128 * KiB, 256 * KiB,
                      512 * KiB, 1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 32 * MiB}) {
    v.push_back(base - 1);
    v.push_back(base);
    v.push_back(base + 1);
  }
  v.push_back(300 * KiB);
  v.push_back(5 * MiB + 17);
  return v;
}

// ---------------------------------------------------------------- malloc/free

TEST(Malloc, AlignmentAndFullUsableSizeWritable) {
  uint64_t id = 1;
  for (size_t n : InterestingSizes()) {
    void* p = malloc(n);
    ASSERT_NE(p, nullptr) << "malloc(" << n << ")";
    // glibc's malloc aligns every block, whatever its size, to 16 bytes
    // (alignof(max_align_t)); programs rely on it.
    EXPECT_TRUE(IsAligned(p, alignof(max_align_t))) << "malloc(" << n << ") = " << p;
    EXPECT_TRUE(WritableUsable(p, n, id++)) << "malloc(" << n << ")";
    free(p);
  }
}

TEST(Malloc, LiveBlocksDoNotOverlap) {
  // Many live blocks of mixed sizes, each filled over its whole usable size;
  // any overlap corrupts another block's pattern.
  std::vector<std::pair<void*, size_t>> blocks;
  uint64_t id = 1000;
  for (int round = 0; round < 3; ++round) {
    for (size_t n : InterestingSizes()) {
      if (n > 2 * MiB && round > 0) continue;
      void* p = malloc(n);
      ASSERT_NE(p, nullptr);
      size_t u = malloc_usable_size(p);
      ASSERT_GE(u, n);
      FillPattern(p, u, id + blocks.size());
      blocks.emplace_back(p, u);
    }
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    size_t bad = FindPatternMismatch(blocks[i].first, blocks[i].second, id + i);
    ASSERT_EQ(bad, SIZE_MAX) << "block " << i << " (usable " << blocks[i].second
                             << ") corrupted at offset " << bad;
  }
  for (size_t i = 0; i < blocks.size(); i += 2) free(blocks[i].first);
  for (size_t i = 1; i < blocks.size(); i += 2) {
    ASSERT_TRUE(CheckPattern(blocks[i].first, blocks[i].second, id + i)) << "block " << i;
    free(blocks[i].first);
  }
}

TEST(Malloc, ZeroSizeReturnsUniqueFreeablePointers) {
  std::set<void*> seen;
  std::vector<void*> ptrs;
  for (int i = 0; i < 1000; ++i) {
    void* p = malloc(Opaque(0));
    ASSERT_NE(p, nullptr) << "glibc returns a unique non-NULL pointer for malloc(0)";
    ASSERT_TRUE(seen.insert(p).second) << "malloc(0) returned " << p << " twice";
    ptrs.push_back(p);
  }
  for (void* p : ptrs) free(p);
}

TEST(Malloc, ImpossibleSizesFailWithENOMEM) {
  const size_t sizes[] = {
      SIZE_MAX,
      SIZE_MAX - 1,
      SIZE_MAX - 4096,
      static_cast<size_t>(PTRDIFF_MAX) + 1,
      static_cast<size_t>(PTRDIFF_MAX),
      static_cast<size_t>(PTRDIFF_MAX) - 4 * MiB,
      size_t{1} << 48,  // more than the 47-bit user address space
      (size_t{1} << 48) + 1,
  };
  for (size_t n : sizes) {
    errno = 0;
    void* p = malloc(Opaque(n));
    EXPECT_EQ(p, nullptr) << "malloc(" << n << ")";
    EXPECT_EQ(errno, ENOMEM) << "malloc(" << n << ")";
    if (p) free(p);
  }
  // The allocator still works afterwards.
  void* p = malloc(100);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(WritableUsable(p, 100, 7));
  free(p);
}

TEST(Malloc, UsableSizeOfNullIsZero) { EXPECT_EQ(malloc_usable_size(nullptr), 0u); }

TEST(Free, NullIsNoOpAndErrnoIsPreserved) {
  errno = EDOM;
  free(nullptr);
  EXPECT_EQ(errno, EDOM);
  // glibc >= 2.33 never changes errno in free(), also when it unmaps.
  for (size_t n : {size_t{16}, size_t{4000}, 300 * KiB, 8 * MiB, 64 * MiB}) {
    void* p = malloc(n);
    ASSERT_NE(p, nullptr);
    memset(p, 1, n);
    errno = EDOM;
    free(p);
    EXPECT_EQ(errno, EDOM) << "free of a " << n << "-byte block changed errno";
  }
  lmt::Escape(nullptr);
}

// ---------------------------------------------------------------- calloc

TEST(Calloc, OverflowFailsWithENOMEM) {
  struct {
    size_t c, n;
  } cases[] = {
      {SIZE_MAX / 2, 3},
      {3, SIZE_MAX / 2},
      {size_t{1} << 32, size_t{1} << 32},
      {SIZE_MAX, SIZE_MAX},
      {(SIZE_MAX / 16) + 1, 16},
      {size_t{1} << 24, size_t{1} << 24},  // 2^48: no overflow, but impossible
      {static_cast<size_t>(PTRDIFF_MAX), 1},
  };
  for (auto c : cases) {
    errno = 0;
    void* p = calloc(Opaque(c.c), Opaque(c.n));
    EXPECT_EQ(p, nullptr) << "calloc(" << c.c << ", " << c.n << ")";
    EXPECT_EQ(errno, ENOMEM) << "calloc(" << c.c << ", " << c.n << ")";
    if (p) free(p);
  }
}

TEST(Calloc, ZeroCountOrSizeReturnsFreeablePointer) {
  void* a = calloc(Opaque(0), Opaque(SIZE_MAX));
  void* b = calloc(Opaque(SIZE_MAX), Opaque(0));
  void* c = calloc(Opaque(0), Opaque(0));
  EXPECT_NE(a, nullptr);
  EXPECT_NE(b, nullptr);
  EXPECT_NE(c, nullptr);
  free(a);
  free(b);
  free(c);
}

// Fill with 0xff, free, calloc the same size: every byte must be zero.
void DirtyThenCalloc(size_t n, int reps) {
  for (int r = 0; r < reps; ++r) {
    void* d = malloc(n);
    ASSERT_NE(d, nullptr);
    memset(d, 0xff, malloc_usable_size(d));
    free(d);
    void* z = calloc(1, n);
    ASSERT_NE(z, nullptr) << "calloc(1, " << n << ")";
    size_t bad = FindNonZero(z, n);
    ASSERT_EQ(bad, SIZE_MAX) << "calloc(1, " << n << ") rep " << r << ": byte " << bad
                             << " is not zero";
    memset(z, 0xff, n);
    free(z);
    // Also as count * size.
    void* z2 = calloc(n / 8 + 1, 8);
    ASSERT_NE(z2, nullptr);
    bad = FindNonZero(z2, (n / 8 + 1) * 8);
    ASSERT_EQ(bad, SIZE_MAX) << "calloc(" << n / 8 + 1 << ", 8) rep " << r << ": byte " << bad;
    memset(z2, 0xff, (n / 8 + 1) * 8);
    free(z2);
  }
}

TEST(Calloc, ZeroAfterReuseSmallAndMedium) {
  for (size_t n : {size_t{1}, size_t{8}, size_t{16}, size_t{24}, size_t{100}, size_t{1000},
                   size_t{4096}, size_t{10000}, 64 * KiB, 200 * KiB})
    ASSERT_NO_FATAL_FAILURE(DirtyThenCalloc(n, 50));
}

TEST(Calloc, ZeroAfterReuseLarge) {
  for (size_t n : {256 * KiB, 256 * KiB + 1, 300 * KiB, 1 * MiB, 2 * MiB - 1, 2 * MiB + 1,
                   5 * MiB, 16 * MiB})
    ASSERT_NO_FATAL_FAILURE(DirtyThenCalloc(n, 12));
  ASSERT_NO_FATAL_FAILURE(DirtyThenCalloc(64 * MiB, 4));
}

TEST(Calloc, ZeroAfterManyDirtyBlocksOfTheSameSize) {
  // Several blocks of one size dirtied and freed together, then calloc'd
  // back: whichever freed block calloc reuses must come back zeroed.
  for (size_t n : {size_t{48}, size_t{512}, size_t{3000}, 40 * KiB, 260 * KiB, 1 * MiB + 4096}) {
    std::vector<void*> v;
    for (int i = 0; i < 32; ++i) {
      void* p = malloc(n);
      ASSERT_NE(p, nullptr);
      memset(p, 0xff, malloc_usable_size(p));
      v.push_back(p);
    }
    for (void* p : v) free(p);
    v.clear();
    for (int i = 0; i < 32; ++i) {
      void* p = calloc(n, 1);
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(FindNonZero(p, n), SIZE_MAX) << "calloc(" << n << ", 1) #" << i;
      v.push_back(p);
    }
    for (void* p : v) free(p);
  }
}

// The dirtied memory is given back with MADV_FREE (lazymalloc_purge LAZY)
// or MADV_DONTNEED (NOW); MADV_FREE'd pages keep their old bytes until the
// kernel reclaims them, so calloc must still zero them.
void DirtyPurgeCalloc(int mode) {
  const size_t sizes[] = {64, 4096, 20 * KiB, 256 * KiB, 512 * KiB, 1 * MiB, 3 * MiB + 5, 8 * MiB, 32 * MiB};
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<void*> dirty;
    for (size_t n : sizes)
      for (int i = 0; i < (n < MiB ? 16 : 2); ++i) {
        void* p = malloc(n);
        ASSERT_NE(p, nullptr);
        memset(p, 0xff, malloc_usable_size(p));
        dirty.push_back(p);
      }
    for (void* p : dirty) free(p);
#if LMT_HAVE_LAZYMALLOC
    size_t changed = lazymalloc_purge(static_cast<lazymalloc_purge_mode>(mode));
    // Tens of MiB of dirty free memory: the purge must have done something,
    // or this test would not exercise purged memory at all.
    ASSERT_GT(changed, 1024 * 1024u) << "lazymalloc_purge(" << mode << ") changed nothing";
    if (mode == LAZYMALLOC_PURGE_LAZY) {
      lazymalloc_memory_state st{};
      lazymalloc_memory_state_get(&st);
      ASSERT_GT(st.lazy, 1024 * 1024u) << "no LAZY (MADV_FREE) memory after purge(LAZY)";
    }
#else
    (void)mode;
    malloc_trim(0);
#endif
    std::vector<void*> zeroed;
    for (size_t n : sizes)
      for (int i = 0; i < (n < MiB ? 16 : 2); ++i) {
        void* p = calloc(1, n);
        ASSERT_NE(p, nullptr);
        ASSERT_EQ(FindNonZero(p, n), SIZE_MAX) << "calloc(1, " << n << ") after purge, rep " << rep;
        zeroed.push_back(p);
      }
    for (void* p : zeroed) free(p);
  }
}

TEST(Calloc, ZeroAfterLazyPurge) {
#if LMT_HAVE_LAZYMALLOC
  ASSERT_NO_FATAL_FAILURE(DirtyPurgeCalloc(LAZYMALLOC_PURGE_LAZY));
#else
  ASSERT_NO_FATAL_FAILURE(DirtyPurgeCalloc(0));
#endif
}

TEST(Calloc, ZeroAfterImmediatePurge) {
#if LMT_HAVE_LAZYMALLOC
  ASSERT_NO_FATAL_FAILURE(DirtyPurgeCalloc(LAZYMALLOC_PURGE_NOW));
#else
  ASSERT_NO_FATAL_FAILURE(DirtyPurgeCalloc(1));
#endif
}

// Found by running the whole binary in one process: one 200 KiB block
// dirtied and freed, then 8 dirty 512 KiB blocks freed and purged; calloc
// of 512 KiB then returned a block (2 MiB-aligned) with 0xff at offset 8.
TEST(Calloc, ZeroAfterPurgeFollowingMediumReuse) {
  for (int mode = 0; mode < 2; ++mode) {
    for (size_t pre : {150000 * size_t{1}, 200 * KiB, 256 * KiB}) {
      void* d = malloc(pre);
      ASSERT_NE(d, nullptr);
      memset(d, 0xff, malloc_usable_size(d));
      free(d);
      std::vector<void*> v;
      for (int i = 0; i < 8; ++i) {
        void* p = malloc(512 * KiB);
        ASSERT_NE(p, nullptr);
        memset(p, 0xff, malloc_usable_size(p));
        v.push_back(p);
      }
      for (void* p : v) free(p);
      v.clear();
#if LMT_HAVE_LAZYMALLOC
      lazymalloc_purge(mode == 0 ? LAZYMALLOC_PURGE_LAZY : LAZYMALLOC_PURGE_NOW);
#else
      malloc_trim(0);
#endif
      for (int i = 0; i < 8; ++i) {
        void* p = calloc(1, 512 * KiB);
        ASSERT_NE(p, nullptr);
        size_t bad = FindNonZero(p, 512 * KiB);
        EXPECT_EQ(bad, SIZE_MAX) << "calloc(1, 512 KiB) #" << i << " = " << p << " after a "
                                 << pre << "-byte block and purge mode " << mode << ": byte "
                                 << bad << " is 0x" << std::hex
                                 << int(static_cast<unsigned char*>(p)[bad == SIZE_MAX ? 0 : bad]);
        v.push_back(p);
      }
      for (void* p : v) free(p);
    }
  }
}

// The purge tests again, after a history of mixed-size reuse (the state a
// long-running process has).
TEST(Calloc, ZeroAfterPurgeWithHistory) {
  for (size_t n : {size_t{24}, size_t{1000}, size_t{10000}, 64 * KiB, 150 * KiB, 200 * KiB, 600 * KiB,
                   3 * MiB})
    ASSERT_NO_FATAL_FAILURE(DirtyThenCalloc(n, 3));
  ASSERT_NO_FATAL_FAILURE(DirtyPurgeCalloc(0));
  ASSERT_NO_FATAL_FAILURE(DirtyThenCalloc(200 * KiB, 3));
  ASSERT_NO_FATAL_FAILURE(DirtyPurgeCalloc(1));
}

// ---------------------------------------------------------------- realloc

TEST(Realloc, NullPointerActsAsMalloc) {
  void* p = realloc(nullptr, Opaque(100));
  ASSERT_NE(p, nullptr);
  EXPECT_GE(malloc_usable_size(p), 100u);
  EXPECT_TRUE(WritableUsable(p, 100, 3));
  free(p);
  // realloc(NULL, 0) is malloc(0): a unique, freeable, non-NULL pointer.
  void* z = realloc(nullptr, Opaque(0));
  EXPECT_NE(z, nullptr);
  free(z);
}

TEST(Realloc, ZeroSizeFreesAndReturnsNull) {
  // glibc 2.36 (REALLOC_ZERO_BYTES_FREES): realloc(p, 0) frees p, returns NULL.
  for (size_t n : {size_t{1}, size_t{100}, 5000 * size_t{1}, 300 * KiB, 5 * MiB}) {
    void* p = malloc(n);
    ASSERT_NE(p, nullptr);
    memset(p, 0xab, n);
    errno = 0;
    void* q = realloc(p, Opaque(0));
    EXPECT_EQ(q, nullptr) << "realloc(p[" << n << "], 0)";
    EXPECT_EQ(errno, 0) << "realloc(p, 0) is not a failure";
    if (q) free(q);
  }
}

TEST(Realloc, PreservesContentsAcrossEverySizeTransition) {
  const size_t up[] = {1, 7, 16, 24, 100, 1000, 1 * KiB, 4000, 64 * KiB, 300 * KiB,
                       1 * MiB, 5 * MiB, 64 * MiB};
  std::vector<size_t> seq(std::begin(up), std::end(up));
  for (int i = static_cast<int>(std::size(up)) - 2; i >= 0; --i) seq.push_back(up[i]);
  // Zig-zags: every pair (a, b) of the ladder in both directions.
  for (size_t a : up)
    for (size_t b : up)
      if (a != b && a <= 5 * MiB && b <= 5 * MiB) {
        seq.push_back(a);
        seq.push_back(b);
      }
  seq.push_back(64 * MiB);
  seq.push_back(1);
  seq.push_back(64 * MiB + 4097);
  seq.push_back(64 * MiB - 1);
  seq.push_back(300 * KiB + 3);

  uint64_t id = 77;
  size_t cur = seq[0];
  void* p = malloc(cur);
  ASSERT_NE(p, nullptr);
  FillPattern(p, cur, id);
  for (size_t i = 1; i < seq.size(); ++i) {
    size_t next = seq[i];
    void* q = realloc(p, next);
    ASSERT_NE(q, nullptr) << "realloc " << cur << " -> " << next;
    size_t keep = std::min(cur, next);
    size_t bad = FindPatternMismatch(q, keep, id);
    ASSERT_EQ(bad, SIZE_MAX) << "realloc " << cur << " -> " << next << " lost byte " << bad;
    ASSERT_GE(malloc_usable_size(q), next);
    EXPECT_TRUE(IsAligned(q, alignof(max_align_t)));
    p = q;
    cur = next;
    FillPattern(p, cur, ++id);
  }
  free(p);
}

TEST(Realloc, SameSizeAndInPlaceGrowthKeepContents) {
  for (size_t n : {size_t{24}, size_t{1000}, 100 * KiB, 2 * MiB}) {
    void* p = malloc(n);
    ASSERT_NE(p, nullptr);
    size_t u = malloc_usable_size(p);
    FillPattern(p, u, n);
    void* q = realloc(p, n);
    ASSERT_NE(q, nullptr);
    ASSERT_TRUE(CheckPattern(q, n, n));
    // Growing within the usable size must keep every usable byte.
    void* r = realloc(q, u);
    ASSERT_NE(r, nullptr);
    ASSERT_TRUE(CheckPattern(r, std::min(u, malloc_usable_size(r)), n));
    free(r);
  }
}

TEST(Realloc, OfAlignedBlocksKeepsContents) {
  // Over-aligned blocks may sit at an offset inside a bigger allocation;
  // realloc and malloc_usable_size must still find their real extent.
  uint64_t id = 4000;
  for (size_t a : {size_t{64}, size_t{4096}, size_t{65536}, 2 * MiB}) {
    for (size_t n : {size_t{24}, size_t{3000}, 200 * KiB, 3 * MiB}) {
      for (size_t to : {size_t{10}, size_t{5000}, 1 * MiB, 9 * MiB}) {
        void* p = nullptr;
        ASSERT_EQ(posix_memalign(&p, a, n), 0);
        ASSERT_TRUE(IsAligned(p, a));
        size_t u = malloc_usable_size(p);
        ASSERT_GE(u, n);
        FillPattern(p, u, id);
        void* q = realloc(p, to);
        ASSERT_NE(q, nullptr);
        size_t bad = FindPatternMismatch(q, std::min(u, to), id);
        ASSERT_EQ(bad, SIZE_MAX) << "realloc of a " << a << "-aligned " << n << "-byte block to "
                                 << to << " lost byte " << bad;
        EXPECT_TRUE(WritableUsable(q, to, id + 1));
        free(q);
        ++id;
      }
    }
  }
}

TEST(Realloc, FailureKeepsOldBlockAndContents) {
  for (size_t n : {size_t{10}, size_t{1000}, 64 * KiB, 5 * MiB}) {
    void* p = malloc(n);
    ASSERT_NE(p, nullptr);
    FillPattern(p, n, n + 5);
    for (size_t huge : {SIZE_MAX, SIZE_MAX - 8, static_cast<size_t>(PTRDIFF_MAX) + 1,
                        size_t{1} << 48}) {
      errno = 0;
      void* q = realloc(p, Opaque(huge));
      EXPECT_EQ(q, nullptr) << "realloc(p[" << n << "], " << huge << ")";
      EXPECT_EQ(errno, ENOMEM);
      if (q) {
        p = q;
        continue;
      }
      ASSERT_TRUE(CheckPattern(p, n, n + 5)) << "old block changed by failed realloc";
    }
    // The old block is still a valid allocation.
    void* q = realloc(p, n * 2);
    ASSERT_NE(q, nullptr);
    ASSERT_TRUE(CheckPattern(q, n, n + 5));
    free(q);
  }
}

TEST(ReallocArray, OverflowFailsWithENOMEMAndKeepsBlock) {
  void* p = malloc(256);
  ASSERT_NE(p, nullptr);
  FillPattern(p, 256, 99);
  struct {
    size_t c, n;
  } cases[] = {{SIZE_MAX / 2, 3}, {size_t{1} << 32, size_t{1} << 32}, {SIZE_MAX, 2}, {2, SIZE_MAX}};
  for (auto c : cases) {
    errno = 0;
    void* q = reallocarray(p, Opaque(c.c), Opaque(c.n));
    EXPECT_EQ(q, nullptr) << "reallocarray(p, " << c.c << ", " << c.n << ")";
    EXPECT_EQ(errno, ENOMEM);
    if (q) p = q;
    ASSERT_TRUE(CheckPattern(p, 256, 99)) << "old block changed";
  }
  void* q = reallocarray(p, 1000, 10);
  ASSERT_NE(q, nullptr);
  ASSERT_TRUE(CheckPattern(q, 256, 99));
  EXPECT_GE(malloc_usable_size(q), 10000u);
  EXPECT_TRUE(WritableUsable(q, 10000, 5));
  // reallocarray(p, 0, n) behaves like realloc(p, 0) on glibc: frees, NULL.
  errno = 0;
  void* z = reallocarray(q, Opaque(0), 16);
  EXPECT_EQ(z, nullptr);
  if (z) free(z);
  void* fresh = reallocarray(nullptr, 10, 10);
  ASSERT_NE(fresh, nullptr);
  EXPECT_GE(malloc_usable_size(fresh), 100u);
  free(fresh);
}

// ---------------------------------------------------------------- aligned

TEST(PosixMemalign, BadAlignmentReturnsEINVALAndLeavesErrno) {
  const size_t bad[] = {0, 1, 2, 3, 4, 5, 12, 24, 48, 100, 4097, (size_t{1} << 20) + 8,
                        SIZE_MAX, SIZE_MAX / 2, (SIZE_MAX / 2) + 2};
  for (size_t a : bad) {
    void* out = reinterpret_cast<void*>(0x1234);
    errno = EDOM;
    int rc = posix_memalign(&out, Opaque(a), 64);
    EXPECT_EQ(rc, EINVAL) << "posix_memalign(alignment " << a << ")";
    EXPECT_EQ(errno, EDOM) << "posix_memalign must report through its return value";
    EXPECT_EQ(out, reinterpret_cast<void*>(0x1234)) << "*memptr modified on failure";
    if (rc == 0) free(out);
  }
}

TEST(PosixMemalign, ImpossibleSizeReturnsENOMEM) {
  for (size_t a : {size_t{8}, size_t{64}, size_t{4096}, size_t{1} << 21}) {
    for (size_t n : {SIZE_MAX, SIZE_MAX - a, static_cast<size_t>(PTRDIFF_MAX), size_t{1} << 48}) {
      void* out = reinterpret_cast<void*>(0x1234);
      int rc = posix_memalign(&out, a, Opaque(n));
      EXPECT_EQ(rc, ENOMEM) << "posix_memalign(" << a << ", " << n << ")";
      EXPECT_EQ(out, reinterpret_cast<void*>(0x1234)) << "*memptr modified on failure";
      if (rc == 0) free(out);
    }
  }
}

TEST(PosixMemalign, ZeroSizeSucceeds) {
  void* out = nullptr;
  ASSERT_EQ(posix_memalign(&out, 64, Opaque(0)), 0);
  EXPECT_NE(out, nullptr);
  EXPECT_TRUE(IsAligned(out, 64));
  free(out);
}

enum class AlignFn { kPosixMemalign, kAlignedAlloc, kMemalign };

void* AllocAligned(AlignFn fn, size_t a, size_t n) {
  switch (fn) {
    case AlignFn::kPosixMemalign: {
      void* p = nullptr;
      if (a < sizeof(void*)) a = sizeof(void*);
      int rc = posix_memalign(&p, a, n);
      return rc == 0 ? p : nullptr;
    }
    case AlignFn::kAlignedAlloc:
      return aligned_alloc(a, n);
    case AlignFn::kMemalign:
      return memalign(a, n);
  }
  return nullptr;
}

const char* Name(AlignFn fn) {
  switch (fn) {
    case AlignFn::kPosixMemalign:
      return "posix_memalign";
    case AlignFn::kAlignedAlloc:
      return "aligned_alloc";
    case AlignFn::kMemalign:
      return "memalign";
  }
  return "?";
}

void CheckAllAlignments(AlignFn fn) {
  uint64_t id = 5000;
  for (int k = 0; k <= 30; ++k) {
    size_t a = size_t{1} << k;
    std::vector<size_t> sizes = {1, 24, 1000};
    if (a <= 4 * MiB) sizes.push_back(a);
    if (a <= 1 * MiB) sizes.push_back(a + a / 2 + 1);
    if (a >= 64 * KiB) sizes.push_back(2 * MiB + 3);
    for (size_t n : sizes) {
      void* p = AllocAligned(fn, a, n);
      ASSERT_NE(p, nullptr) << Name(fn) << "(" << a << ", " << n << ")";
      ASSERT_TRUE(IsAligned(p, a)) << Name(fn) << "(" << a << ", " << n << ") = " << p;
      ASSERT_TRUE(WritableUsable(p, n, id++)) << Name(fn) << "(" << a << ", " << n << ")";
      free(p);
    }
    // Several live blocks with the same alignment must not overlap.
    if (a <= 256 * KiB) {
      std::vector<void*> live;
      for (int i = 0; i < 8; ++i) {
        void* p = AllocAligned(fn, a, 100 + i * 40);
        ASSERT_NE(p, nullptr);
        ASSERT_TRUE(IsAligned(p, a));
        FillPattern(p, malloc_usable_size(p), id + i);
        live.push_back(p);
      }
      for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(CheckPattern(live[i], malloc_usable_size(live[i]), id + i))
            << Name(fn) << " alignment " << a << " block " << i << " overwritten";
        free(live[i]);
      }
      id += 8;
    }
  }
}

TEST(Alignment, PosixMemalignEveryPowerOfTwoUpTo1GiB) {
  ASSERT_NO_FATAL_FAILURE(CheckAllAlignments(AlignFn::kPosixMemalign));
}
TEST(Alignment, AlignedAllocEveryPowerOfTwoUpTo1GiB) {
  ASSERT_NO_FATAL_FAILURE(CheckAllAlignments(AlignFn::kAlignedAlloc));
}
TEST(Alignment, MemalignEveryPowerOfTwoUpTo1GiB) {
  ASSERT_NO_FATAL_FAILURE(CheckAllAlignments(AlignFn::kMemalign));
}

TEST(AlignedAlloc, MatchesGlibc236) {
  // glibc 2.36 (as installed here) treats aligned_alloc like memalign: an
  // alignment that is not a power of two is rounded up, 0 means "default";
  // only an alignment above SIZE_MAX/2 + 1 is EINVAL.
  struct {
    size_t a, expect_aligned;
  } ok[] = {{0, 1}, {1, 1}, {2, 2}, {3, 4}, {48, 64}, {1000, 1024}, {4097, 8192}};
  for (auto c : ok) {
    errno = 0;
    void* p = aligned_alloc(Opaque(c.a), 16);
    ASSERT_NE(p, nullptr) << "aligned_alloc(" << c.a << ", 16)";
    EXPECT_TRUE(IsAligned(p, c.expect_aligned)) << "aligned_alloc(" << c.a << ", 16) = " << p;
    EXPECT_TRUE(WritableUsable(p, 16, c.a));
    free(p);
  }
  for (size_t a : {(SIZE_MAX / 2) + 2, SIZE_MAX}) {
    errno = 0;
    void* p = aligned_alloc(Opaque(a), 16);
    EXPECT_EQ(p, nullptr) << "aligned_alloc(" << a << ", 16)";
    EXPECT_EQ(errno, EINVAL) << "aligned_alloc(" << a << ", 16)";
    if (p) free(p);
  }
  for (size_t n : {SIZE_MAX, static_cast<size_t>(PTRDIFF_MAX), size_t{1} << 48}) {
    errno = 0;
    void* p = aligned_alloc(64, Opaque(n));
    EXPECT_EQ(p, nullptr) << "aligned_alloc(64, " << n << ")";
    EXPECT_EQ(errno, ENOMEM) << "aligned_alloc(64, " << n << ")";
    if (p) free(p);
  }
}

TEST(Memalign, NonPowerOfTwoRoundsUpAndErrors) {
  struct {
    size_t a, expect_aligned;
  } ok[] = {{0, 1}, {3, 4}, {24, 32}, {48, 64}, {100, 128}, {1000, 1024}, {3 * 4096, 16384},
            {(size_t{1} << 20) + 1, size_t{1} << 21}};
  for (auto c : ok) {
    void* p = memalign(Opaque(c.a), 16);
    ASSERT_NE(p, nullptr) << "memalign(" << c.a << ", 16)";
    EXPECT_TRUE(IsAligned(p, c.expect_aligned)) << "memalign(" << c.a << ", 16) = " << p;
    EXPECT_TRUE(WritableUsable(p, 16, c.a));
    free(p);
  }
  errno = 0;
  void* p = memalign(Opaque((SIZE_MAX / 2) + 2), 16);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  p = memalign(4096, Opaque(SIZE_MAX));
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(Valloc, PageAlignedAndWritable) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, kPage - 1, kPage, kPage + 1, 100 * KiB, 3 * MiB}) {
    void* p = valloc(Opaque(n));
    ASSERT_NE(p, nullptr) << "valloc(" << n << ")";
    EXPECT_TRUE(IsAligned(p, kPage)) << "valloc(" << n << ") = " << p;
    EXPECT_TRUE(WritableUsable(p, n, n + 1));
    free(p);
  }
  errno = 0;
  void* p = valloc(Opaque(SIZE_MAX));
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(Pvalloc, RoundsSizeUpToWholePages) {
  for (size_t n : {size_t{1}, size_t{100}, kPage - 1, kPage, kPage + 1, 100 * KiB + 5, 3 * MiB + 1}) {
    void* p = pvalloc(Opaque(n));
    ASSERT_NE(p, nullptr) << "pvalloc(" << n << ")";
    EXPECT_TRUE(IsAligned(p, kPage)) << "pvalloc(" << n << ") = " << p;
    size_t rounded = (n + kPage - 1) / kPage * kPage;
    EXPECT_GE(malloc_usable_size(p), rounded) << "pvalloc(" << n << ")";
    EXPECT_TRUE(WritableUsable(p, rounded, n + 2));
    free(p);
  }
  void* z = pvalloc(Opaque(0));
  EXPECT_NE(z, nullptr);
  EXPECT_TRUE(IsAligned(z, kPage));
  free(z);
  for (size_t n : {SIZE_MAX, SIZE_MAX - kPage, SIZE_MAX - 2 * kPage + 1}) {
    errno = 0;
    void* p = pvalloc(Opaque(n));
    EXPECT_EQ(p, nullptr) << "pvalloc(" << n << ") must not wrap around";
    EXPECT_EQ(errno, ENOMEM);
  }
}

// ---------------------------------------------------------------- glibc extras

TEST(MallocTrim, ReturnsZeroOrOneAndAllocatorKeepsWorking) {
  std::vector<void*> v;
  for (int i = 0; i < 20000; ++i) {
    void* p = malloc(16 + (i % 64) * 16);
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, 16);
    v.push_back(p);
  }
  for (int i = 0; i < 8; ++i) {
    void* p = malloc(4 * MiB);
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, 4 * MiB);
    v.push_back(p);
  }
  for (size_t i = 0; i < v.size(); i += 2) free(v[i]);
  for (size_t pad : {size_t{0}, size_t{4096}, 64 * MiB}) {
    int r = malloc_trim(pad);
    EXPECT_TRUE(r == 0 || r == 1) << "malloc_trim(" << pad << ") = " << r;
  }
  for (size_t i = 1; i < v.size(); i += 2) {
    ASSERT_EQ(static_cast<unsigned char*>(v[i])[0], 0x5a) << "live block damaged by malloc_trim";
    free(v[i]);
  }
  int r = malloc_trim(0);
  EXPECT_TRUE(r == 0 || r == 1);
  for (size_t n : {size_t{32}, 8 * KiB, 5 * MiB}) {
    void* p = malloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(WritableUsable(p, n, n));
    free(p);
    void* z = calloc(1, n);
    ASSERT_NE(z, nullptr);
    EXPECT_EQ(FindNonZero(z, n), SIZE_MAX);
    free(z);
  }
}

TEST(Mallopt, AcceptsGlibcParametersWithoutHarm) {
  struct {
    int param;
    int value;
    const char* name;
  } params[] = {
      {M_MXFAST, 64, "M_MXFAST"},
      {M_TRIM_THRESHOLD, 128 * 1024, "M_TRIM_THRESHOLD"},
      {M_TOP_PAD, 0, "M_TOP_PAD"},
      {M_MMAP_THRESHOLD, 128 * 1024, "M_MMAP_THRESHOLD"},
      {M_MMAP_MAX, 65536, "M_MMAP_MAX"},
      {M_CHECK_ACTION, 3, "M_CHECK_ACTION"},
      {M_ARENA_TEST, 8, "M_ARENA_TEST"},
      {M_ARENA_MAX, 4, "M_ARENA_MAX"},
      {M_PERTURB, 0xa5, "M_PERTURB"},
      {M_MMAP_THRESHOLD, 32 * 1024 * 1024, "M_MMAP_THRESHOLD"},
      {M_TRIM_THRESHOLD, 0, "M_TRIM_THRESHOLD"},
      {M_TOP_PAD, 16 * 1024 * 1024, "M_TOP_PAD"},
  };
  for (auto p : params) EXPECT_EQ(mallopt(p.param, p.value), 1) << p.name << " = " << p.value;
  // With M_PERTURB set, calloc still zeroes and malloc still works.
  for (int i = 0; i < 4; ++i)
    for (size_t n : {size_t{40}, size_t{5000}, 300 * KiB, 2 * MiB}) {
      void* p = malloc(n);
      ASSERT_NE(p, nullptr);
      FillPattern(p, n, n);
      ASSERT_TRUE(CheckPattern(p, n, n));
      free(p);
      void* z = calloc(1, n);
      ASSERT_NE(z, nullptr);
      ASSERT_EQ(FindNonZero(z, n), SIZE_MAX) << "calloc(1, " << n << ") after mallopt";
      free(z);
    }
  EXPECT_EQ(mallopt(M_PERTURB, 0), 1);
}

TEST(MallocStats, PrintsToStderr) {
  void* keep = malloc(1000);
  std::string out = lmt::CaptureStderr([] { malloc_stats(); });
  free(keep);
  EXPECT_FALSE(out.empty()) << "malloc_stats() wrote nothing to stderr";
}

std::string MallocInfoString(int options, int* rc, int* err) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return "<open_memstream failed>";
  errno = 0;
  *rc = malloc_info(options, f);
  *err = errno;
  fclose(f);
  std::string s(buf ? buf : "", len);
  free(buf);
  return s;
}

TEST(MallocInfo, WritesXmlAndReturnsZero) {
  void* keep = malloc(5000);
  int rc = -2, err = 0;
  std::string xml = MallocInfoString(0, &rc, &err);
  free(keep);
  EXPECT_EQ(rc, 0);
  size_t start = xml.find_first_not_of(" \t\r\n");
  ASSERT_NE(start, std::string::npos) << "malloc_info wrote nothing";
  EXPECT_EQ(xml.compare(start, 7, "<malloc"), 0) << "XML should start with <malloc ...>:\n" << xml;
  size_t end = xml.find_last_not_of(" \t\r\n");
  EXPECT_TRUE(end != std::string::npos && end + 1 >= 9 && xml.compare(end + 1 - 9, 9, "</malloc>") == 0)
      << "XML should end with </malloc>:\n"
      << xml;
  // Balanced tags: count "<x" opening tags (not "</", not "<?", not "/>"-closed).
  int depth = 0;
  for (size_t i = 0; i < xml.size(); ++i) {
    if (xml[i] != '<') continue;
    size_t close = xml.find('>', i);
    ASSERT_NE(close, std::string::npos) << "unterminated tag";
    if (xml[i + 1] == '?' || xml[i + 1] == '!') continue;
    if (xml[i + 1] == '/') {
      --depth;
      ASSERT_GE(depth, 0) << "unbalanced closing tag at " << i;
    } else if (xml[close - 1] != '/') {
      ++depth;
    }
  }
  EXPECT_EQ(depth, 0) << "unbalanced XML:\n" << xml;
}

TEST(MallocInfo, NonZeroOptionsIsEINVAL) {
  int rc = 0, err = 0;
  std::string out = MallocInfoString(1, &rc, &err);
  // glibc 2.36's code returns EINVAL itself (errno untouched); its manual
  // page documents -1 with errno = EINVAL.  Both tell a caller "error".
  EXPECT_TRUE(rc == EINVAL || (rc == -1 && err == EINVAL))
      << "malloc_info(1, f) returned " << rc << ", errno " << err;
  EXPECT_TRUE(out.empty()) << "nothing should be written on error, got: " << out;
}

// Live bytes, not the memory that holds them: the 100-byte objects below
// fill the holes that freeing every other one of 20,000 left in memory the
// allocator already holds (as any heap reuses freed space), and still count.
TEST(Mallinfo2, CountsLiveBytes) {
  std::vector<void*> holes(20000);
  for (auto& p : holes) {
    p = malloc(100);
    ASSERT_NE(p, nullptr);
  }
  for (size_t i = 0; i < holes.size(); i += 2) {
    free(holes[i]);
    holes[i] = nullptr;
  }
  struct mallinfo2 before = mallinfo2();
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) {
    void* p = malloc(1 * MiB);
    ASSERT_NE(p, nullptr);
    memset(p, 1, 1 * MiB);
    v.push_back(p);
  }
  for (int i = 0; i < 10000; ++i) {
    void* p = malloc(100);
    ASSERT_NE(p, nullptr);
    v.push_back(p);
  }
  struct mallinfo2 during = mallinfo2();
  size_t in_use_before = before.uordblks + before.hblkhd;
  size_t in_use_during = during.uordblks + during.hblkhd;
  EXPECT_GE(in_use_during, in_use_before + 8 * MiB + 10000 * 100)
      << "uordblks+hblkhd: before " << in_use_before << ", with ~9 MiB more live " << in_use_during;
  for (void* p : v) free(p);
  struct mallinfo2 after = mallinfo2();
  size_t in_use_after = after.uordblks + after.hblkhd;
  EXPECT_LE(in_use_after + 8 * MiB, in_use_during)
      << "freeing ~9 MiB did not lower uordblks+hblkhd (" << in_use_during << " -> "
      << in_use_after << ")";
  for (void* p : holes) free(p);
}

// ---------------------------------------------------------------- exhaustion

TEST(Exhaustion, RlimitAsGivesENOMEMThenRecovers) {
  std::string r = lmt::RunInChild([]() -> int {
    // Pointer storage that does not come from malloc.
    const size_t kSlots = 4 * 1024 * 1024;
    void** slots = static_cast<void**>(
        mmap(nullptr, kSlots * sizeof(void*), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    LMT_CHILD_CHECK(slots != MAP_FAILED);
    // Warm up so the allocator's own metadata exists before the limit.
    void* warm = malloc(100);
    LMT_CHILD_CHECK(warm != nullptr);
    free(warm);
    // An allocator may hold reserved address space already (VmSize counts
    // it), so it can hand out more than the headroom before failing; but
    // never more than the whole limit.
    const size_t limit = lmt::CurrentVmSize() + 256 * MiB;
    LMT_CHILD_CHECK(lmt::LimitAddressSpace(256 * MiB));
    size_t count = 0;
    size_t bytes = 0;
    int last_errno = 0;
    // Large blocks until failure.
    for (;;) {
      LMT_CHILD_CHECK(count < kSlots);
      errno = 0;
      void* p = malloc(1 * MiB);
      if (!p) {
        last_errno = errno;
        break;
      }
      static_cast<unsigned char*>(p)[0] = 1;
      slots[count++] = p;
      bytes += 1 * MiB;
      LMT_CHILD_CHECK(bytes <= limit);
    }
    if (last_errno != ENOMEM) {
      fprintf(stderr, "malloc(1 MiB) failed with errno %d, expected ENOMEM\n", last_errno);
      return 1;
    }
    LMT_CHILD_CHECK(bytes >= 64 * MiB);  // a sane share of the 256 MiB headroom
    // Then small blocks until failure (or a bound, the allocator may keep
    // enough small-object space).
    size_t small_start = count;
    for (; count < small_start + 2 * 1024 * 1024; ++count) {
      errno = 0;
      void* p = malloc(64);
      if (!p) {
        LMT_CHILD_CHECK(errno == ENOMEM);
        break;
      }
      static_cast<unsigned char*>(p)[0] = 2;
      slots[count] = p;
    }
    // calloc, realloc, aligned also fail cleanly now.
    errno = 0;
    void* c = calloc(1, 64 * MiB);
    LMT_CHILD_CHECK(c == nullptr && errno == ENOMEM);
    errno = 0;
    void* q = realloc(slots[0], 128 * MiB);
    LMT_CHILD_CHECK(q == nullptr && errno == ENOMEM);
    LMT_CHILD_CHECK(static_cast<unsigned char*>(slots[0])[0] == 1);
    void* a = nullptr;
    LMT_CHILD_CHECK(posix_memalign(&a, 4096, 64 * MiB) == ENOMEM);
    // Free everything; allocating works again.
    for (size_t i = 0; i < count; ++i) free(slots[i]);
    malloc_trim(0);
    void* big = malloc(32 * MiB);
    LMT_CHILD_CHECK(big != nullptr);
    memset(big, 3, 32 * MiB);
    void* small = malloc(64);
    LMT_CHILD_CHECK(small != nullptr);
    void* z = calloc(1, 1 * MiB);
    LMT_CHILD_CHECK(z != nullptr && lmt::FindNonZero(z, 1 * MiB) == SIZE_MAX);
    free(big);
    free(small);
    free(z);
    // And the same amount again as before.
    size_t again = 0;
    for (size_t i = 0; i < bytes / MiB / 2; ++i) {
      slots[i] = malloc(1 * MiB);
      LMT_CHILD_CHECK(slots[i] != nullptr);
      ++again;
    }
    for (size_t i = 0; i < again; ++i) free(slots[i]);
    return 0;
  });
  EXPECT_EQ(r, "");
}

}  // namespace
