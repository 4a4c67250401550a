// The allocation entry points: malloc, free, calloc, realloc, aligned
// allocation and the usable size.  lm_malloc and lm_free are the fast paths
// (docs/design.md, "Frontend"): everything they use is inline in bins.h and
// checks.h, and every way off them is a tail call to a noinline function.
#include <errno.h>

#include <cstring>

#include "frontend/internal.h"
#include "pal/pal.h"

namespace lazymalloc {

using namespace detail;

namespace {

LM_NOINLINE void* malloc_generic(size_t size, size_t align, bool* zero) {
  Heap* h = tl_heap;
  if (LM_UNLIKELY(h == &g_empty_heap)) {
    if (tl_initializing) {
      // Re-entered while setting this thread up: serve from the backend.
      return alloc_large(size, align < kUnitSize ? kUnitSize : align, zero);
    }
    tl_initializing = true;
    h = heap_for_thread();
    tl_initializing = false;
    if (!h) {
      pal::set_errno(ENOMEM);
      return nullptr;
    }
  }
  if (LM_UNLIKELY(size > kMaxRequest)) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  unsigned c = align <= kMinAlign ? (size <= kMaxSmall ? size_class(size) : kSmallClasses)
                                  : (align <= kUnitSize ? class_for_aligned(size, align) : kSmallClasses);
  if (c < kSmallClasses) {
    if (zero) *zero = false;
    return alloc_class(h, c);  // sets errno when out of memory
  }
  return alloc_large(size, align, zero);
}

// lm_malloc's way off its fast path for a cached size (class c): a thread
// with a heap goes straight to alloc_class, which trades the bin's stacks
// or refills it (malloc_generic would find the class again).
LM_NOINLINE void* malloc_cached(size_t size, unsigned c) {
  Heap* h = tl_heap;
  if (LM_UNLIKELY(h == &g_empty_heap)) return malloc_generic(size, 0, nullptr);
  return alloc_class(h, c);
}

inline Span* checked_span(const char* fn, const void* p) {
  Span* s = g.backend.span_of(p);
  if (LM_UNLIKELY(!s)) return unknown_pointer(fn, p);
  return s;
}

inline size_t usable_of(const Span* s, const void* p) {
  if (s->kind == SpanKind::kSmall) return s->obj_size;
  return s->bytes - size_t(static_cast<const char*>(p) - s->start) - (s->guard ? kOsPageSize : 0);
}

}  // namespace

void* lm_malloc(size_t size) {
  unsigned c;  // cached_class, with the common case tested first
  if (LM_LIKELY(size <= kDirectMax)) {
    c = direct_class(size);
  } else if (size <= kCachedMax) {
    c = mid_class_of(size);
  } else {
    return malloc_generic(size, 0, nullptr);
  }
  Bin& bin = tl_bins[c];
  if (LM_LIKELY(bin_ready(bin))) return bin_pop(bin);
  return malloc_cached(size, c);
}

// The tail calls off this path take p first: it stays in the register it
// arrived in, and the span goes to the second (as (s, p) they cost a move of
// p on the hit path; bin_overflow's swap is on its own, cold, path).
void lm_free(void* p) {
  // With checks, the object's line, which they read and write, is fetched
  // while the page map is walked (a prefetch never faults).
  if constexpr (kChecks) __builtin_prefetch(p, 1);
  Span* s = g.backend.span_of(p);  // nullptr for nullptr (no test on the fast path)
  if (LM_UNLIKELY(!s)) return free_unknown(p);
  // The kind is tested only off the hit path: a large or huge span has
  // div_magic 0 (span.h), so no pointer is an object's start in it.
  ObjectPos pos = block_pos(s, p);
  if (LM_UNLIKELY(!pos.start)) {
    if (s->kind != SpanKind::kSmall) return free_generic(p, s);
    return free_failed(p, s);
  }
  if constexpr (kChecks) {
    // A carved object that does not carry its tag (separate branches:
    // cheaper than combining the tests).
    // check_limit: carved, and not in a purged page (span_purge.cc).
    if (LM_UNLIKELY(uint32_t(pos.index) >= check_limit_of(s))) return free_failed(p, s);
    uintptr_t tag = free_tag(p);
    if (LM_UNLIKELY(tag_word(p) == tag)) return free_failed(p, s);
    tag_word(p) = tag;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // tagged before cached
  }
  bin_push(s, p);
}

void* lm_aligned(size_t size, size_t align) {
  if (align <= kMinAlign) return lm_malloc(size);
  if (LM_UNLIKELY(size > kMaxRequest || align > kMaxRequest)) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  return malloc_generic(size, align, nullptr);
}

void* lm_calloc(size_t count, size_t size) {
  size_t total;
  if (LM_UNLIKELY(__builtin_mul_overflow(count, size, &total))) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  bool zero = false;
  void* p;
  if (total <= kDirectMax) {
    p = lm_malloc(total);
  } else {
    p = malloc_generic(total, 0, &zero);
  }
  // Only memory known to be fresh from the kernel (never touched, or given
  // MADV_DONTNEED) skips the memset: MADV_FREE'd memory may hold old bytes.
  if (p && !zero) memset(p, 0, total);
  return p;
}

size_t lm_usable_size(const void* p) {
  if (!p) return 0;
  Span* s = g.backend.span_of(p);
  return s ? usable_of(s, p) : 0;
}

void* lm_realloc(void* p, size_t size) {
  if (!p) return lm_malloc(size);
  if (size == 0) {
    // glibc (REALLOC_ZERO_BYTES_FREES): free and return NULL.
    lm_free(p);
    return nullptr;
  }
  Span* s = checked_span("realloc", p);
  if (s->kind == SpanKind::kSmall) {
    check_live("realloc", s, object_index("realloc", s, p), p);
  } else if (s->discard) {
    lm_invalid_pointer("realloc", p, "discardable memory");
  } else if (s->cached) {
    lm_invalid_pointer("realloc", p, "double free (the block is already free)");
  } else if (p != block_start(s)) {
    lm_invalid_pointer("realloc", p, "points inside a block");
  }
  size_t old = usable_of(s, p);
  if (size <= old && (size >= old / 2 || (s->kind == SpanKind::kSmall && old <= 64))) return p;
  if (size > kMaxRequest) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  // Large and huge blocks grow and shrink in place where their neighbours
  // allow (large ones stay large, huge ones stay huge).
  if (large_resize(s, size)) return p;
  void* q = size > kMaxSmall ? alloc_large(size, 0, nullptr, true) : lm_malloc(size);
  if (!q) return nullptr;
  if (s->kind == SpanKind::kHuge && size > old && move_huge(s, q)) return q;
  memcpy(q, p, size < old ? size : old);
  lm_free(p);
  return q;
}

}  // namespace lazymalloc
