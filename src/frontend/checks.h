// Misuse checks (LAZYMALLOC_CHECKS) and free tags: what a free small object
// carries, how span free-list links are encoded, and the tests that trust
// neither before checking it (docs/design.md, "Misuse detection").  Inline
// here because the fast paths (lm_free, take, the walks) use them; the
// failure paths, out of line, are in checks.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/span.h"
#include "core/bits.h"
#include "core/config.h"
#include "frontend/heap.h"
#include "frontend/size_class.h"

#pragma GCC visibility push(hidden)

namespace lazymalloc::detail {

// Free tags (checks on).  A free small object carries in its second word
// (objects are >= 16 bytes) its tag, g_free_key ^ its own address: the free
// fast path writes it before caching the object, every list insertion
// (link_set) before listing it, carve tags never-used objects, and malloc
// clears the word when it hands the object out.  So "tag present" means "free, not
// handed out since".  The key is odd and random per process, and objects
// are 16-byte aligned, so live data matches by chance with probability
// 2^-64 per free; being address-bound, a tag copied elsewhere (memmove of
// stale bytes) is no tag.  free() tests the tag without reading the first
// word, which the program has often just written in a narrower store.
extern uintptr_t g_free_key;
extern uint64_t g_link_key;  // free-list links are xor'ed with it and their address (0: plain)

// Where p falls in small span s (size_class.h).
LM_INLINE ObjectPos block_pos(const Span* s, const void* p) {
  return object_pos(reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(s->start), s->div_magic);
}

// The index of the object p points to in small span s; aborts, naming
// `fn`, if p is not an object's first byte.
inline size_t object_index(const char* fn, const Span* s, const void* p) {
  ObjectPos pos = block_pos(s, p);
  if (!pos.start) lm_invalid_pointer(fn, p, "points inside an object");
  return size_t(pos.index);
}

inline uintptr_t& tag_word(void* p) { return static_cast<uintptr_t*>(p)[1]; }
inline uintptr_t free_tag(const void* p) { return g_free_key ^ reinterpret_cast<uintptr_t>(p); }
inline bool has_free_tag(void* p) { return tag_word(p) == free_tag(p); }
// Tags p; the fence keeps the tag ahead of the store that lists p (fork:
// see take).
inline void set_free_tag(void* p) {
  if constexpr (kChecks) tag_word(p) = free_tag(p);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// Span free-list links (bins hold no links).  With checks, or in secure
// mode, a link is stored xor'ed with g_link_key and its own address (with
// checks and not secure, the key is g_free_key, so the mask equals the tag;
// secure mode has a key of its own).  A link overwritten after the free
// then decodes to garbage, which the pops and walks reject (in_span and the
// tag) instead of following it.  link_set tags too; link_put, for objects
// tagged already (a cache's: return_objects_held), does not.
inline uintptr_t link_mask(const void* b) {
  return g_link_key ? g_link_key ^ reinterpret_cast<uintptr_t>(b) : 0;
}
inline Block* link_get(const Block* b) {
  return reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(b->next) ^ link_mask(b));
}
inline void link_put(Block* b, Block* next) {
  b->next = reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(next) ^ link_mask(b));
}
inline void link_set(Block* b, Block* next) {
  link_put(b, next);
  set_free_tag(b);
}

// True if `b` (any value: maybe a corrupted link) lies inside span s, so
// that it may be read.
inline bool in_span(const Span* s, const void* b) {
  return reinterpret_cast<uintptr_t>(b) - reinterpret_cast<uintptr_t>(s->start) < s->bytes;
}

// Reports a corrupted span free list at `b` and aborts (checks.cc).
[[noreturn]] LM_NOINLINE void corrupt_list(const void* b);

// A walk of span s's list: link(b) is the link of entry `b`, for the slow
// paths that walk a list: with checks, `b` must lie in the span and carry
// its tag, and a walk longer than the span's capacity (a corrupted list
// that loops) aborts.  A long walk (list_take) keeps one ListWalk, so that
// the keys and the span's bounds are read once, not again after every
// store the walk makes; walk_link is one step of a walk.
struct ListWalk {
  uintptr_t start, bytes, free_key, link_key;
  uint32_t capacity, steps = 0;
  explicit ListWalk(const Span* s)
      : start(reinterpret_cast<uintptr_t>(s->start)), bytes(s->bytes), free_key(g_free_key),
        link_key(g_link_key), capacity(s->capacity) {}
  Block* link(Block* b) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(b);
    if constexpr (kChecks) {
      if (LM_UNLIKELY(a - start >= bytes || tag_word(b) != (free_key ^ a) || ++steps > capacity)) corrupt_list(b);
    }
    return reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(b->next) ^ (link_key ? link_key ^ a : 0));
  }
};
inline Block* walk_link(const Span* s, Block* b, uint32_t& steps) {
  ListWalk walk(s);
  walk.steps = steps;
  Block* next = walk.link(b);
  steps = walk.steps;
  return next;
}

// Runs (issue #16, `batch`): objects at consecutive addresses of one span
// listed as one node.  A flush that returns objects of the owner's span in
// address order (a batch freed in the order it was allocated) lists each
// stretch of consecutive ones as a run: the first object's link carries
// kRunFlag (links are 16-byte aligned), and the second object's first word
// holds the count, encoded as a link; the others are not written, and a
// refill takes them by address (list_take).  Every object of a run keeps
// its free tag, so the free check sees it as before.  Only the owner's
// lists (free, local_free) hold runs: remote lists (xfree) and secure
// mode's lists never do.
inline constexpr uintptr_t kRunFlag = 1;
inline bool is_run(const Block* link) { return reinterpret_cast<uintptr_t>(link) & kRunFlag; }
inline Block* run_next(const Block* link) {
  return reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(link) & ~kRunFlag);
}
// Lists objects b, b + size, ..., count of them (tagged), as one node
// linked to `next`: a plain node for one object, else a run.
inline void node_put(Block* b, uint32_t count, Block* next, size_t size) {
  if (count == 1) return link_put(b, next);
  link_put(b, reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(next) | kRunFlag));
  Block* b2 = reinterpret_cast<Block*>(reinterpret_cast<char*>(b) + size);
  b2->next = reinterpret_cast<Block*>(uintptr_t(count) ^ link_mask(b2));
}
// The count of run b of span s (b's link carried kRunFlag; b walked).
// With checks the run must lie within the span's carved objects, and its
// objects count as steps of the walk (a corrupted count aborts).
inline uint32_t run_count(const Span* s, const Block* b, uint32_t& steps) {
  const char* b2 = reinterpret_cast<const char*>(b) + s->obj_size;
  if constexpr (kChecks) {
    if (LM_UNLIKELY(!in_span(s, b2))) corrupt_list(b);
  }
  const uintptr_t n = reinterpret_cast<uintptr_t>(reinterpret_cast<const Block*>(b2)->next) ^ link_mask(b2);
  if constexpr (kChecks) {
    const uintptr_t end = reinterpret_cast<uintptr_t>(s->start) + uintptr_t(s->reserved) * s->obj_size;
    if (LM_UNLIKELY(n < 2 || n > s->capacity || reinterpret_cast<uintptr_t>(b) + n * s->obj_size > end ||
                    (steps += uint32_t(n - 1)) > s->capacity)) {
      corrupt_list(b);
    }
  }
  return uint32_t(n);
}
// One node of a walk of span s's list at `b`: returns its successor, and in
// *count the objects it lists (1, or a run's count), validated as walked.
inline Block* walk_node(const Span* s, Block* b, uint32_t& steps, uint32_t* count) {
  Block* next = walk_link(s, b, steps);
  *count = 1;
  if (is_run(next)) {
    *count = run_count(s, b, steps);
    next = run_next(next);
  }
  return next;
}

// The failure path of the pops below, a tail call (LM_FAILURE_PATH).
LM_FAILURE_PATH Block* take_failed(const Block* b);

// Pops `b`, the head of span s's allocation list (slow paths: refills and
// secure mode).  With checks, `b` must lie in the span and carry its tag.
// The unlink comes before the tag is cleared, so an owner stopped in
// between by fork() leaks the object in the child rather than leaving it
// listed untagged.
// Span::used is written only by whoever holds the span's heap, and read by
// remote frees too (remote_push: does this run empty the span?), so its
// writes are relaxed atomic stores (plain moves on x86).
LM_INLINE void span_used_add(Span* s, uint32_t delta) {
  __atomic_store_n(&s->used, s->used + delta, __ATOMIC_RELAXED);
}

// The head of a run: b (its link `link` flagged) leaves it, and the rest,
// from b's neighbour on, is listed as a node (a run, or one object); returns
// the rest (spans.cc).
LM_NOINLINE Block* run_rest(Span* s, Block* b, Block* link);

LM_INLINE Block* take(Span* s, Block* b) {
  if constexpr (kChecks) {
    if (LM_UNLIKELY(!in_span(s, b))) return take_failed(b);
    if (LM_UNLIKELY(!has_free_tag(b))) return take_failed(b);
  }
  Block* next = link_get(b);
  if (LM_UNLIKELY(is_run(next))) next = run_rest(s, b, next);
  s->free = next;
  if constexpr (kChecks) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    tag_word(b) = 0;
  }
  span_used_add(s, 1);
  return b;
}

// True if object i of small span s is dormant: free, off the span's lists,
// its first byte in a purged page group (span_purge.cc), where its tag may
// be gone.  Relaxed loads: the bits change while the heap is held.
inline bool span_dormant(const Span* s, size_t i) {
  size_t group = (i * s->obj_size / kOsPageSize) >> s->purge_group_shift;
  return group < kSpanPurgeBits &&
         (__atomic_load_n(&s->purged[group / 64], __ATOMIC_RELAXED) >> (group % 64)) & 1;
}

// s->check_limit as the frees read it (carving, purging and reviving store
// it atomically, relaxed).  On x86 a plain load, the same instruction,
// which GCC then folds into the 32-bit compare with the index (an object's
// index fits: p lies in the span's units): one instruction less per free.
// Under TSan, which must see it, and elsewhere, an atomic load.
LM_INLINE uint32_t check_limit_of(const Span* s) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  return s->check_limit;
#else
  return __atomic_load_n(&s->check_limit, __ATOMIC_RELAXED);
#endif
}

// The precise test of an object at or above the span's check_limit
// (checks.cc): aborts if it was never carved or is dormant.
LM_FAILURE_PATH void check_above_limit(const char* fn, const Span* s, size_t i, void* p);

// Aborts unless object i, at p, of small span s may be freed (or
// reallocated): it must have been carved, must not be dormant and must not
// carry its tag.  Below check_limit the first two hold.
inline void check_live(const char* fn, const Span* s, size_t i, void* p) {
  if constexpr (kChecks) {
    if (LM_UNLIKELY(uint32_t(i) >= check_limit_of(s))) check_above_limit(fn, s, i, p);
    if (LM_UNLIKELY(has_free_tag(p))) lm_invalid_pointer(fn, p, "double free (already freed)");
  }
}

// The failure paths of lm_free and lm_realloc (checks.cc): tail calls that
// say what was wrong and abort.  free_failed tests precisely and completes
// the free of a live object that lies at or above check_limit (a span with
// purged pages).
LM_FAILURE_PATH void free_failed(void* p, Span* s);
LM_FAILURE_PATH Span* unknown_pointer(const char* fn, const void* p);
LM_FAILURE_PATH void free_unknown(const void* p);

}  // namespace lazymalloc::detail

#pragma GCC visibility pop
