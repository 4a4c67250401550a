// Every replaceable operator new/delete form: alignment, usable memory,
// std::bad_alloc, nothrow, and the std::new_handler protocol.
#include <gtest/gtest.h>

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <new>
#include <string>
#include <vector>

#include "test_util.h"

using lmt::Opaque;

namespace {

constexpr size_t MiB = 1024 * 1024;
const size_t kDefaultAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;

bool IsAligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// The block really is n usable bytes of ours: fill and check it, and in the
// lazymalloc build check that lazymalloc owns it.
::testing::AssertionResult Usable(void* p, size_t n, uint64_t id) {
  if (!p) return ::testing::AssertionFailure() << "null";
#if LMT_HAVE_LAZYMALLOC
  size_t u = lazymalloc_usable_size(p);
  if (u < n)
    return ::testing::AssertionFailure() << "lazymalloc_usable_size " << u << " < " << n
                                         << " (not a lazymalloc block?)";
#endif
  lmt::FillPattern(p, n, id);
  if (!lmt::CheckPattern(p, n, id)) return ::testing::AssertionFailure() << "pattern mismatch";
  return ::testing::AssertionSuccess();
}

const size_t kSizes[] = {0, 1, 8, 15, 16, 17, 100, 1000, 4096, 70000, 1 * MiB, 3 * MiB + 1};
const size_t kAligns[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 4096, 65536, 2 * MiB, 16 * MiB};

TEST(OperatorNew, PlainFormsAreAlignedAndUsable) {
  uint64_t id = 1;
  for (size_t n : kSizes) {
    size_t need = n ? n : 1;
    void* p = ::operator new(n);
    EXPECT_TRUE(IsAligned(p, kDefaultAlign)) << "new(" << n << ")";
    EXPECT_TRUE(Usable(p, need, id++));
    ::operator delete(p);

    p = ::operator new(n);
    EXPECT_TRUE(Usable(p, need, id++));
    ::operator delete(p, n);  // sized

    p = ::operator new[](n);
    EXPECT_TRUE(IsAligned(p, kDefaultAlign)) << "new[](" << n << ")";
    EXPECT_TRUE(Usable(p, need, id++));
    ::operator delete[](p);

    p = ::operator new[](n);
    EXPECT_TRUE(Usable(p, need, id++));
    ::operator delete[](p, n);  // sized

    p = ::operator new(n, std::nothrow);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p, kDefaultAlign)) << "new(" << n << ", nothrow)";
    EXPECT_TRUE(Usable(p, need, id++));
    ::operator delete(p, std::nothrow);

    p = ::operator new[](n, std::nothrow);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p, kDefaultAlign)) << "new[](" << n << ", nothrow)";
    EXPECT_TRUE(Usable(p, need, id++));
    ::operator delete[](p, std::nothrow);
  }
}

TEST(OperatorNew, AlignedFormsAreAlignedAndUsable) {
  uint64_t id = 1000;
  for (size_t a : kAligns) {
    std::align_val_t al{a};
    for (size_t n : kSizes) {
      size_t need = n ? n : 1;
      void* p = ::operator new(n, al);
      EXPECT_TRUE(IsAligned(p, a)) << "new(" << n << ", align " << a << ") = " << p;
      EXPECT_TRUE(Usable(p, need, id++));
      ::operator delete(p, al);

      p = ::operator new(n, al);
      EXPECT_TRUE(IsAligned(p, a));
      EXPECT_TRUE(Usable(p, need, id++));
      ::operator delete(p, n, al);  // sized + aligned

      p = ::operator new[](n, al);
      EXPECT_TRUE(IsAligned(p, a)) << "new[](" << n << ", align " << a << ") = " << p;
      EXPECT_TRUE(Usable(p, need, id++));
      ::operator delete[](p, al);

      p = ::operator new[](n, al);
      EXPECT_TRUE(IsAligned(p, a));
      EXPECT_TRUE(Usable(p, need, id++));
      ::operator delete[](p, n, al);  // sized + aligned

      p = ::operator new(n, al, std::nothrow);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(IsAligned(p, a)) << "new(" << n << ", align " << a << ", nothrow)";
      EXPECT_TRUE(Usable(p, need, id++));
      ::operator delete(p, al, std::nothrow);

      p = ::operator new[](n, al, std::nothrow);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(IsAligned(p, a)) << "new[](" << n << ", align " << a << ", nothrow)";
      EXPECT_TRUE(Usable(p, need, id++));
      ::operator delete[](p, al, std::nothrow);
    }
  }
}

struct alignas(64) Line {
  unsigned char b[64];
};
struct alignas(4096) PageObj {
  unsigned char b[100];
};

TEST(OperatorNew, NewExpressionsUseTheRightForms) {
  std::vector<void*> keep;
  for (int i = 0; i < 100; ++i) {
    Line* l = new Line;
    EXPECT_TRUE(IsAligned(l, 64));
    memset(l, i, sizeof *l);
    keep.push_back(l);
    PageObj* p = new PageObj[3];
    EXPECT_TRUE(IsAligned(p, 4096));
    memset(p, i, sizeof(PageObj) * 3);
    delete[] p;
    std::string* s = new std::string(1000 + i, 'x');
    EXPECT_EQ(s->size(), 1000u + i);
    delete s;
  }
  for (void* v : keep) delete static_cast<Line*>(v);
}

// Every delete form with a null pointer changes nothing: not errno, not the
// allocator's books, and no null (or anything else) lands on a free list,
// from which the next allocations would hand out null or one block twice.
TEST(OperatorNew, NullDeleteIsNoOp) {
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(::operator new(48));  // warm the size class
  for (void* p : blocks) ::operator delete(p);
  blocks.clear();
#if LMT_HAVE_LAZYMALLOC
  lazymalloc_memory_state before;
  lazymalloc_memory_state_get(&before);
  uint64_t large_frees = 0;
  ASSERT_EQ(lazymalloc_stat_get("large_frees", &large_frees), 0);
#endif
  errno = EDOM;
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, std::nothrow);
  ::operator delete[](nullptr, std::nothrow);
  ::operator delete(nullptr, size_t{48});
  ::operator delete[](nullptr, size_t{48});
  ::operator delete(nullptr, std::align_val_t{64});
  ::operator delete[](nullptr, std::align_val_t{64});
  ::operator delete(nullptr, std::align_val_t{64}, std::nothrow);
  ::operator delete[](nullptr, std::align_val_t{64}, std::nothrow);
  ::operator delete(nullptr, size_t{48}, std::align_val_t{64});
  ::operator delete[](nullptr, size_t{48}, std::align_val_t{64});
  EXPECT_EQ(errno, EDOM);
#if LMT_HAVE_LAZYMALLOC
  lazymalloc_memory_state after;
  lazymalloc_memory_state_get(&after);
  EXPECT_EQ(after.active, before.active);
  EXPECT_EQ(after.reserved, before.reserved);
  uint64_t large_frees_after = 0;
  ASSERT_EQ(lazymalloc_stat_get("large_frees", &large_frees_after), 0);
  EXPECT_EQ(large_frees_after, large_frees);
#endif
  uint64_t id = 900;
  for (int i = 0; i < 64; ++i) {
    void* p = i % 2 ? ::operator new(48) : ::operator new(48, std::align_val_t{64});
    ASSERT_TRUE(Usable(p, 48, id + i)) << i;
    blocks.push_back(p);
  }
  for (int i = 0; i < 64; ++i) {
    EXPECT_TRUE(lmt::CheckPattern(blocks[i], 48, id + i)) << "block " << i << " handed out twice";
  }
  for (int i = 0; i < 64; ++i) {
    if (i % 2) ::operator delete(blocks[i]);
    else ::operator delete(blocks[i], std::align_val_t{64});
  }
}

const size_t kImpossible[] = {SIZE_MAX, SIZE_MAX / 2 + 1, static_cast<size_t>(PTRDIFF_MAX),
                              size_t{1} << 48};

// libstdc++ 12's aligned operator new rounds the size up to the alignment
// without an overflow check, so new(SIZE_MAX, align 64) wraps to a 0-byte
// request and "succeeds".  lazymalloc replaces these operators and must not
// do that; only the standalone glibc reference build skips the case.
bool AlignedCaseApplies(size_t n) { return LMT_HAVE_LAZYMALLOC || n < SIZE_MAX - 65536; }
const size_t kHugeAligned = LMT_HAVE_LAZYMALLOC ? SIZE_MAX : size_t{1} << 48;

TEST(OperatorNew, ThrowingFormsThrowBadAlloc) {
  std::set_new_handler(nullptr);
  for (size_t n : kImpossible) {
    EXPECT_THROW(lmt::Escape(::operator new(Opaque(n))), std::bad_alloc) << n;
    EXPECT_THROW(lmt::Escape(::operator new[](Opaque(n))), std::bad_alloc) << n;
    if (!AlignedCaseApplies(n)) continue;
    EXPECT_THROW(lmt::Escape(::operator new(Opaque(n), std::align_val_t{64})), std::bad_alloc) << n;
    EXPECT_THROW(lmt::Escape(::operator new[](Opaque(n), std::align_val_t{4096})), std::bad_alloc)
        << n;
  }
}

TEST(OperatorNew, NothrowFormsReturnNull) {
  std::set_new_handler(nullptr);
  for (size_t n : kImpossible) {
    EXPECT_EQ(::operator new(Opaque(n), std::nothrow), nullptr) << n;
    EXPECT_EQ(::operator new[](Opaque(n), std::nothrow), nullptr) << n;
    if (!AlignedCaseApplies(n)) continue;
    EXPECT_EQ(::operator new(Opaque(n), std::align_val_t{64}, std::nothrow), nullptr) << n;
    EXPECT_EQ(::operator new[](Opaque(n), std::align_val_t{64}, std::nothrow), nullptr) << n;
  }
}

int g_handler_calls = 0;
struct HandlerGaveUp {};

void ThrowingHandler() {
  ++g_handler_calls;
  throw HandlerGaveUp{};
}
void BadAllocHandler() {
  ++g_handler_calls;
  throw std::bad_alloc();
}
void UninstallingHandler() {
  ++g_handler_calls;
  std::set_new_handler(nullptr);
}

template <typename F>
void ExpectHandlerException(F f, const char* what) {
  g_handler_calls = 0;
  std::set_new_handler(ThrowingHandler);
  bool caught = false;
  try {
    lmt::Escape(f());
  } catch (const HandlerGaveUp&) {
    caught = true;
  } catch (const std::bad_alloc&) {
    ADD_FAILURE() << what << ": bad_alloc instead of the handler's exception";
  }
  std::set_new_handler(nullptr);
  EXPECT_TRUE(caught) << what << ": the new_handler's exception did not propagate";
  EXPECT_EQ(g_handler_calls, 1) << what;
}

TEST(NewHandler, ThrowingHandlerIsCalledAndItsExceptionPropagates) {
  ExpectHandlerException([] { return ::operator new(Opaque(SIZE_MAX)); }, "new");
  ExpectHandlerException([] { return ::operator new[](Opaque(SIZE_MAX)); }, "new[]");
  ExpectHandlerException([] { return ::operator new(Opaque(kHugeAligned), std::align_val_t{64}); },
                         "new aligned");
  ExpectHandlerException([] { return ::operator new[](Opaque(size_t{1} << 48), std::align_val_t{256}); },
                         "new[] aligned");
}

TEST(NewHandler, UninstallingHandlerLeadsToBadAlloc) {
  g_handler_calls = 0;
  std::set_new_handler(UninstallingHandler);
  EXPECT_THROW(lmt::Escape(::operator new(Opaque(SIZE_MAX))), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 1);
  g_handler_calls = 0;
  std::set_new_handler(UninstallingHandler);
  EXPECT_THROW(lmt::Escape(::operator new(Opaque(kHugeAligned), std::align_val_t{128})), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 1);
  std::set_new_handler(nullptr);
}

TEST(NewHandler, NothrowFormsCallHandlerAndReturnNull) {
  struct {
    const char* name;
    void* (*fn)();
  } forms[] = {
      {"new nothrow", [] { return ::operator new(Opaque(SIZE_MAX), std::nothrow); }},
      {"new[] nothrow", [] { return ::operator new[](Opaque(SIZE_MAX), std::nothrow); }},
      {"new aligned nothrow",
       [] { return ::operator new(Opaque(kHugeAligned), std::align_val_t{64}, std::nothrow); }},
      {"new[] aligned nothrow",
       [] { return ::operator new[](Opaque(kHugeAligned), std::align_val_t{64}, std::nothrow); }},
  };
  for (auto f : forms) {
    g_handler_calls = 0;
    std::set_new_handler(BadAllocHandler);
    void* p = f.fn();
    std::set_new_handler(nullptr);
    EXPECT_EQ(p, nullptr) << f.name;
    EXPECT_EQ(g_handler_calls, 1) << f.name << ": the new_handler was not called exactly once";
  }
}

// A handler that releases a reserve lets the retried allocation succeed.
// The allocation must really fail first: in a forked child the address
// space is limited (RLIMIT_AS), a reserve block is set aside, and the rest
// is used up by 1 MiB blocks (the allocator may have reserved address space
// before the limit, so it is filled until malloc fails).
void* g_reserve = nullptr;
void ReleaseReserveHandler() {
  ++g_handler_calls;
  free(g_reserve);
  g_reserve = nullptr;
  std::set_new_handler(nullptr);  // a second failure would throw
}

int ReserveChild(int form) {
  const size_t kBlock = 64 * MiB;
  void* warm = ::operator new(100);
  ::operator delete(warm);
  LMT_CHILD_CHECK(lmt::LimitAddressSpace(kBlock + 128 * MiB));
  g_reserve = malloc(kBlock);
  LMT_CHILD_CHECK(g_reserve != nullptr);
  memset(g_reserve, 1, 4096);
  // Use up the rest of the address space; the pointer list is a chain
  // through the blocks themselves (nothing else may allocate).
  void* chain = nullptr;
  size_t filled = 0;
  for (;;) {
    void* p = malloc(1 * MiB);
    if (!p) break;
    *static_cast<void**>(p) = chain;
    chain = p;
    LMT_CHILD_CHECK(++filled < (size_t{1} << 22));
  }
  void* probe = malloc(kBlock);
  LMT_CHILD_CHECK(probe == nullptr);  // the allocation below fails first
  g_handler_calls = 0;
  std::set_new_handler(ReleaseReserveHandler);
  void* p = nullptr;
  try {
    switch (form) {
      case 0:
        p = ::operator new(kBlock);
        break;
      case 1:
        p = ::operator new[](kBlock);
        break;
      case 2:
        p = ::operator new(kBlock, std::align_val_t{4096});
        break;
      case 3:
        p = ::operator new(kBlock, std::nothrow);
        break;
      case 4:
        p = ::operator new(kBlock, std::align_val_t{64}, std::nothrow);
        break;
    }
  } catch (const std::bad_alloc&) {
    fprintf(stderr, "form %d: bad_alloc although the handler freed the reserve (calls=%d)\n", form,
            g_handler_calls);
    return 1;
  }
  LMT_CHILD_CHECK(p != nullptr);
  LMT_CHILD_CHECK(g_handler_calls == 1);
  LMT_CHILD_CHECK(g_reserve == nullptr);
  memset(p, 2, kBlock);  // all of it is ours
  switch (form) {
    case 1:
      ::operator delete[](p);
      break;
    case 2:
      ::operator delete(p, std::align_val_t{4096});
      break;
    case 4:
      ::operator delete(p, std::align_val_t{64});
      break;
    default:
      ::operator delete(p);
  }
  while (chain) {
    void* next = *static_cast<void**>(chain);
    free(chain);
    chain = next;
  }
  return 0;
}

TEST(NewHandler, HandlerFreesReserveThenRetrySucceeds) {
  for (int form = 0; form < 5; ++form)
    EXPECT_EQ(lmt::RunInChild([form] { return ReserveChild(form); }), "") << "form " << form;
}

}  // namespace
