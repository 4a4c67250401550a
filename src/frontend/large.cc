// Large and huge blocks: allocation from the backend (with secure mode's
// guard page), free, realloc in place and by moving pages, and giving any
// span back to the backend and the purger.
#include <errno.h>

#include "core/accounting.h"
#include "frontend/internal.h"
#include "pal/pal.h"

namespace lazymalloc::detail {

namespace {

Span* backend_alloc(size_t size, size_t align, bool growing) {
  if (LM_UNLIKELY(g.releaser.inflight_bytes() != 0)) {
    // Address space is on its way back: rather than reserve and fault in
    // fresh memory, help finish the releases and reuse it.
    if (Span* s = g.backend.alloc(size, align, growing, false)) return s;
    g.releaser.help(true);
  }
  return g.backend.alloc(size, align, growing);
}

// The thread's cache of freed large blocks (Heap::large_cache): a free
// puts the block there, a malloc takes the most recent block that fits it
// within 2x (the request uses at least half of it, as with power-of-two
// size classes; its tail is idle while it serves), neither takes the
// backend's lock, which two threads churning large blocks otherwise queue
// on, nor writes a process-wide counter (their statistics are folded per
// heap: large_count).  The cache is heap state: the thread holds the heap
// to use it, so a collector (a quiet thread's, lm_collect_idle_heaps, and
// thread exit, both through heap_collect) can empty it; blocks it lets go
// are given back to the backend once the heap is let go (HeapGuard).
inline bool large_cacheable(size_t size, size_t align, Heap* h) {
  return size > kMaxSmall && size <= kMaxLarge && align <= kUnitSize && !g_secure && h != &g_empty_heap;
}

// REQUIRES h held: entry i leaves the cache (the later ones move down).
Span* large_cache_remove(Heap* h, uint32_t i) {
  Span* s = h->large_cache[i];
  for (uint32_t k = i; k + 1 < h->large_cached; ++k) h->large_cache[k] = h->large_cache[k + 1];
  h->large_cached--;
  h->large_cache_bytes -= s->bytes;
  s->cached = 0;
  large_count(h, Folded::large_cache_bytes, -s->bytes);
  timeline_cached(-int64_t(s->bytes));
  return s;
}

Span* large_cache_take(Heap* h, size_t size) {
  HeapGuard guard(h);
  for (uint32_t i = h->large_cached; i-- > 0;) {
    const Span* s = h->large_cache[i];
    if (s->bytes < size || s->bytes > 2 * size) continue;
    large_count(h, Folded::large_cache_hits, 1);
    return large_cache_remove(h, i);
  }
  return nullptr;
}

// REQUIRES h held: the oldest cached block leaves the cache, to the
// backend once h is let go.
void large_cache_evict(Heap* h) {
  Span* s = large_cache_remove(h, 0);
  s->next = h->to_release;
  h->to_release = s;
}

bool large_cache_put(Heap* h, Span* s) {
  uint64_t cap = uint64_t(option(Opt::large_cache));
  if (s->bytes > cap) return false;
  HeapGuard guard(h);
  while (h->large_cached == kLargeCacheSlots || h->large_cache_bytes + s->bytes > cap) large_cache_evict(h);
  s->cached = 1;
  s->zero = 0;
  h->large_cache[h->large_cached++] = s;
  h->large_cache_bytes += s->bytes;
  large_count(h, Folded::large_cache_bytes, s->bytes);
  timeline_cached(int64_t(s->bytes));
  return true;
}

}  // namespace

void large_cache_drain(Heap* h) {
  while (h->large_cached) large_cache_evict(h);
}

void* alloc_large(size_t size, size_t align, bool* zero, bool growing) {
  Span* s = nullptr;
  if (large_cacheable(size, align, tl_heap)) s = large_cache_take(tl_heap, size);
  // Secure mode: room for the guard page (size <= kMaxRequest: no overflow).
  if (!s) s = backend_alloc(g_secure ? size + kOsPageSize : size, align, growing);
  if (!s) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  s->heap = nullptr;
  s->obj_size = 0;
  s->lead = 0;
  s->guard = 0;
  if (s->kind == SpanKind::kLarge) {
    large_count(tl_heap, Folded::large_allocs, 1);
    large_count(tl_heap, Folded::large_blocks, 1);
  }
  if (zero) *zero = s->zero;
  if (g_secure) {
    // The block ends just below a PROT_NONE page at the end of its span.
    char* guard = s->start + s->bytes - kOsPageSize;
    if (g_platform->protect(g_platform->ctx, guard, kOsPageSize, false)) {
      s->guard = 1;
      s->lead = size_t(align_down(uintptr_t(guard - s->start) - size, align < kMinAlign ? kMinAlign : align));
    }
  }
  return block_start(s);
}

// Gives a span back, then lets the purger act (limits, eager policy, inline
// decay) and makes sure the background thread runs.  No lock held.
void release_to_backend(Span* s, bool contents_gone) {
  uint64_t now;
  if (s->nslots && !contents_gone) {
    // A huge block: kept for reuse within the budget, else released at once
    // by the release workers (purge/release.h).
    SlotRun run;
    uint64_t budget = g.purger.huge_retain_budget(g.backend.last_activity_ns());
    if (g.backend.release_huge(s, budget, &run, &now)) {
      g.stats.add(Stat::huge_kept, 1);
    } else {
      g.releaser.submit(run, g.purger.release_dontneed(now), now);
      // The eager policy gives memory back before free() returns.
      if (option(Opt::purge) == kPurgeEager) g.releaser.help(true);
    }
  } else {
    now = g.backend.release(s, contents_gone);
  }
  g.purger.after_release(now, background_ensure());
}

// free() of a large or huge block.
LM_NOINLINE void free_generic(void* p, Span* s) {
  if (s->discard) lm_invalid_pointer("free", p, "discardable memory (use lazymalloc_discardable_free)");
  if (p != block_start(s)) lm_invalid_pointer("free", p, "points inside a block");
  if (s->cached) lm_invalid_pointer("free", p, "double free (the block is already free)");
  Heap* h = tl_heap;
  heap_count(h, HeapStat::large_frees);
  if (s->kind == SpanKind::kLarge) {
    large_count(h, Folded::large_blocks, uint64_t(-1));
    if (large_cacheable(s->bytes, 0, h) && !s->guard && large_cache_put(h, s)) return;
  }
  if (s->guard) g_platform->protect(g_platform->ctx, s->start + s->bytes - kOsPageSize, kOsPageSize, true);
  release_to_backend(s);
}

// realloc of a huge block to a bigger huge block `q`: moves the pages with
// mremap instead of copying them, and frees the old block, whose range now
// reads as zero.  false: copy instead.  Each move leaves the moved range as
// its own kernel mapping (VMA), which never merges back: moves stop after
// kMaxMremapMoves so that a realloc-heavy process stays far from
// vm.max_map_count (65530 by default).
constexpr uint64_t kMaxMremapMoves = 8192;
namespace {
constinit Gauge g_mremap_moves;  // moves made (the cap's count; Stat::mremap_moves reports them)
}  // namespace
bool move_huge(Span* s, void* q) {
  // Secure mode: blocks sit against a guard page, never moved wholesale.
  if (g_secure || g_mremap_moves.get() >= kMaxMremapMoves) return false;
  if (!g_platform->move_pages(g_platform->ctx, s->start, s->bytes, q, option(Opt::hugepages) != 0)) return false;
  g_mremap_moves.add(1);
  g.stats.add(Stat::mremap_moves, 1);
  g.stats.add(Stat::mremap_bytes, s->bytes);
  heap_count(tl_heap, HeapStat::large_frees);
  release_to_backend(s, true);
  return true;
}

// realloc: large and huge blocks grow and shrink in place where their
// neighbours allow (large ones stay large, huge ones stay huge, except a
// large block alone in its slot, which Backend::resize promotes).  false:
// not such a block (small or guarded), a small new size, or no room.
bool large_resize(Span* s, size_t size) {
  if (s->kind == SpanKind::kSmall || size <= kMaxSmall || s->guard) return false;
  SpanKind before = s->kind;
  if (!g.backend.resize(s, size)) return false;
  if (before == SpanKind::kLarge && s->kind == SpanKind::kHuge) {
    large_count(tl_heap, Folded::large_blocks, uint64_t(-1));
  }
  return true;
}

}  // namespace lazymalloc::detail
