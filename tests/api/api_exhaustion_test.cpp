// Exhaustion with the real kernel: under RLIMIT_AS, and under lazymalloc's
// hard limit, every allocation function fails the way glibc's does (NULL
// with errno ENOMEM, posix_memalign returns ENOMEM, throwing operator new
// throws std::bad_alloc, nothrow new returns nullptr), blocks allocated
// before are untouched, and everything works again once memory comes back.
// Each case runs in a forked child so that the limit does not leak.
#include <gtest/gtest.h>

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <new>
#include <string>

#include "test_util.h"

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;

enum Fn {
  kMalloc, kCalloc, kRealloc, kReallocArray, kPosixMemalign, kAlignedAlloc, kMemalign, kValloc,
  kPvalloc, kNew, kNewArray, kNewAligned, kNothrowNew, kNothrowNewArray, kNothrowNewAligned, kFnCount
};
const char* const kFnNames[kFnCount] = {
    "malloc", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc", "memalign",
    "valloc", "pvalloc", "new", "new[]", "new(align_val_t)", "new(nothrow)", "new[](nothrow)",
    "new(align_val_t, nothrow)"};
constexpr size_t kAlign = 256;

bool Throws(int fn) { return fn == kNew || fn == kNewArray || fn == kNewAligned; }

// One allocation through `fn`.  On failure returns nullptr and says whether
// it failed the expected way for that function (in *why otherwise).
void* Allocate(int fn, size_t n, bool* failed_right, std::string* why) {
  errno = 0;
  void* p = nullptr;
  int rc = 0;
  bool threw = false;
  try {
    switch (fn) {
      case kMalloc: p = malloc(n); break;
      case kCalloc: p = calloc(1, n); break;
      case kRealloc: p = realloc(nullptr, n); break;
      case kReallocArray: p = reallocarray(nullptr, n / 8, 8); break;
      case kPosixMemalign: rc = posix_memalign(&p, kAlign, n); break;
      case kAlignedAlloc: p = aligned_alloc(kAlign, n); break;
      case kMemalign: p = memalign(kAlign, n); break;
      case kValloc: p = valloc(n); break;
      case kPvalloc: p = pvalloc(n); break;
      case kNew: p = ::operator new(n); break;
      case kNewArray: p = ::operator new[](n); break;
      case kNewAligned: p = ::operator new(n, std::align_val_t{kAlign}); break;
      case kNothrowNew: p = ::operator new(n, std::nothrow); break;
      case kNothrowNewArray: p = ::operator new[](n, std::nothrow); break;
      case kNothrowNewAligned: p = ::operator new(n, std::align_val_t{kAlign}, std::nothrow); break;
    }
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  int err = errno;
  if (p) {
    lmt::Escape(p);
    return p;
  }
  if (Throws(fn)) {
    *failed_right = threw;
    if (!threw) *why = "returned nullptr without throwing std::bad_alloc";
  } else if (fn == kPosixMemalign) {
    *failed_right = rc == ENOMEM;
    if (rc != ENOMEM) *why = "returned " + std::to_string(rc) + ", not ENOMEM";
  } else if (fn >= kNothrowNew) {
    *failed_right = true;
  } else {
    *failed_right = err == ENOMEM;
    if (err != ENOMEM) *why = "errno " + std::to_string(err) + ", not ENOMEM";
  }
  return nullptr;
}

void Release(int fn, void* p) {
  switch (fn) {
    case kNew: case kNothrowNew: ::operator delete(p); break;
    case kNewArray: case kNothrowNewArray: ::operator delete[](p); break;
    case kNewAligned: case kNothrowNewAligned: ::operator delete(p, std::align_val_t{kAlign}); break;
    default: free(p);
  }
}

// Blocks kept through the test, chained through their first word (nothing
// else may allocate while memory is exhausted).
struct Chain {
  void* head = nullptr;
  size_t count = 0;
  void Push(void* p) {
    *static_cast<void**>(p) = head;
    head = p;
    ++count;
  }
  void FreeAll(int fn) {
    while (head) {
      void* next = *static_cast<void**>(head);
      Release(fn, head);
      head = next;
    }
    count = 0;
  }
};

// Blocks of every tier, with patterns, allocated before memory runs out.
struct Earlier {
  static constexpr size_t kSizes[3] = {100, 300 * KiB, 5 * MiB};
  void* p[3] = {};
  bool Make() {
    for (int i = 0; i < 3; ++i) {
      p[i] = malloc(kSizes[i]);
      if (!p[i]) return false;
      lmt::FillPattern(p[i], kSizes[i], 7000 + uint64_t(i));
    }
    return true;
  }
  bool Intact() const {
    for (int i = 0; i < 3; ++i) {
      if (!lmt::CheckPattern(p[i], kSizes[i], 7000 + uint64_t(i))) return false;
    }
    return true;
  }
  void Free() {
    for (void* q : p) free(q);
  }
};

// With memory exhausted: `fn` fails the right way for a huge size, and
// (allocating `small` bytes until it fails, at most `bound` times) for a
// small one.  Returns 0 or 1 (child status).
int ExpectExhausted(int fn, size_t small, size_t bound, Chain* kept) {
  bool right = false;
  std::string why;
  void* big = Allocate(fn, 64 * MiB, &right, &why);
  if (big || !right) {
    fprintf(stderr, "%s(64 MiB) under exhaustion: %s\n", kFnNames[fn], big ? "succeeded" : why.c_str());
    return 1;
  }
  for (size_t i = 0;; ++i) {
    if (i == bound) {
      fprintf(stderr, "%s(%zu) still succeeds after %zu calls\n", kFnNames[fn], small, bound);
      return 1;
    }
    void* p = Allocate(fn, small, &right, &why);
    if (!p) {
      if (!right) {
        fprintf(stderr, "%s(%zu) under exhaustion: %s\n", kFnNames[fn], small, why.c_str());
        return 1;
      }
      break;
    }
    kept->Push(p);
  }
  return 0;
}

// Memory is back: `fn` works for small and huge sizes, the whole block is
// ours, and the earlier blocks are intact.
int ExpectWorking(int fn, const Earlier& earlier) {
  for (size_t n : {size_t(64), size_t(200 * KiB), size_t(64 * MiB)}) {
    bool right = false;
    std::string why;
    void* p = Allocate(fn, n, &right, &why);
    if (!p) {
      fprintf(stderr, "%s(%zu) after recovery: failed (%s)\n", kFnNames[fn], n, why.c_str());
      return 1;
    }
    memset(p, 0x5a, n);
    Release(fn, p);
  }
  LMT_CHILD_CHECK(earlier.Intact());
  // realloc keeps contents when it must move a block.
  void* r = malloc(100);
  LMT_CHILD_CHECK(r != nullptr);
  lmt::FillPattern(r, 100, 9);
  r = realloc(r, 8 * MiB);
  LMT_CHILD_CHECK(r != nullptr && lmt::CheckPattern(r, 100, 9));
  free(r);
  return 0;
}

// Under RLIMIT_AS (the soft limit only, so it can be raised again).
int RlimitChild(int fn) {
  Earlier earlier;
  LMT_CHILD_CHECK(earlier.Make());
  struct rlimit old;
  LMT_CHILD_CHECK(getrlimit(RLIMIT_AS, &old) == 0);
  struct rlimit low = old;
  low.rlim_cur = lmt::CurrentVmSize() + 64 * MiB;
  LMT_CHILD_CHECK(setrlimit(RLIMIT_AS, &low) == 0);
  // Use up the address space: the reserved arenas first, then whatever
  // reservations still fit under the limit.
  Chain fill;
  for (;;) {
    void* p = malloc(1 * MiB);
    if (!p) {
      LMT_CHILD_CHECK(errno == ENOMEM);
      break;
    }
    fill.Push(p);
    LMT_CHILD_CHECK(fill.count < (size_t(1) << 22));
  }
  LMT_CHILD_CHECK(fill.count >= 16);
  Chain kept;
  if (ExpectExhausted(fn, 64, size_t(1) << 22, &kept)) return 1;
  // realloc of a live block fails and keeps it.
  errno = 0;
  LMT_CHILD_CHECK(realloc(earlier.p[1], 256 * MiB) == nullptr && errno == ENOMEM);
  LMT_CHILD_CHECK(earlier.Intact());
  // Memory comes back: the limit is raised, nothing is freed first.
  LMT_CHILD_CHECK(setrlimit(RLIMIT_AS, &old) == 0);
  if (ExpectWorking(fn, earlier)) return 1;
  kept.FreeAll(fn);
  fill.FreeAll(kMalloc);
  malloc_trim(0);
  if (ExpectWorking(fn, earlier)) return 1;
  earlier.Free();
  return 0;
}

#if LMT_HAVE_LAZYMALLOC
// Under lazymalloc's hard limit (lazymalloc_limit_set).
int HardLimitChild(int fn) {
  Earlier earlier;
  LMT_CHILD_CHECK(earlier.Make());
  uint64_t active = 0;
  LMT_CHILD_CHECK(lazymalloc_stat_get("active_bytes", &active) == 0);
  LMT_CHILD_CHECK(lazymalloc_limit_set(0, active + 16 * MiB) == 0);
  Chain kept;
  if (ExpectExhausted(fn, 1000, size_t(1) << 20, &kept)) return 1;
  uint64_t refused = 0;
  LMT_CHILD_CHECK(lazymalloc_stat_get("limit_failures", &refused) == 0 && refused >= 2);
  errno = 0;
  LMT_CHILD_CHECK(realloc(earlier.p[1], 32 * MiB) == nullptr && errno == ENOMEM);
  LMT_CHILD_CHECK(earlier.Intact());
  LMT_CHILD_CHECK(lazymalloc_limit_set(0, 0) == 0);
  if (ExpectWorking(fn, earlier)) return 1;
  kept.FreeAll(fn);
  earlier.Free();
  return 0;
}
#endif

class Exhaustion : public ::testing::TestWithParam<int> {};

TEST_P(Exhaustion, RlimitAsFailsCleanlyAndRecovers) {
  int fn = GetParam();
  EXPECT_EQ(lmt::RunInChild([fn] { return RlimitChild(fn); }), "") << kFnNames[fn];
}

#if LMT_HAVE_LAZYMALLOC
TEST_P(Exhaustion, HardLimitFailsCleanlyAndRecovers) {
  int fn = GetParam();
  EXPECT_EQ(lmt::RunInChild([fn] { return HardLimitChild(fn); }), "") << kFnNames[fn];
}
#endif

INSTANTIATE_TEST_SUITE_P(EveryFunction, Exhaustion, ::testing::Range(0, int(kFnCount)),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string n = kFnNames[info.param];
                           std::string out;
                           for (char c : n) {
                             if (isalnum(static_cast<unsigned char>(c))) out += c;
                             else if (c == '[') out += "Array";
                             else if (c == '(' || c == ',') out += '_';
                           }
                           return out;
                         });

}  // namespace
