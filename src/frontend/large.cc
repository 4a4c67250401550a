// Large and huge blocks: allocation from the backend (with secure mode's
// guard page), free, realloc in place and by moving pages, and giving any
// span back to the backend and the purger.
#include <errno.h>

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

}  // namespace

void* alloc_large(size_t size, size_t align, bool* zero, bool growing) {
  // Secure mode: room for the guard page (size <= kMaxRequest: no overflow).
  Span* s = backend_alloc(g_secure ? size + kOsPageSize : size, align, growing);
  if (!s) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  s->heap = nullptr;
  s->obj_size = 0;
  s->lead = 0;
  s->guard = 0;
  if (s->kind == SpanKind::kLarge) {
    g.stats.add(Stat::large_allocs, 1);
    g.stats.add(Stat::large_blocks, 1);
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
LM_NOINLINE void free_generic(Span* s, void* p) {
  if (s->discard) lm_invalid_pointer("free", p, "discardable memory (use lazymalloc_discardable_free)");
  if (p != block_start(s)) lm_invalid_pointer("free", p, "points inside a block");
  heap_count(tl_heap, HeapStat::large_frees);
  if (s->kind == SpanKind::kLarge) g.stats.sub(Stat::large_blocks, 1);
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
bool move_huge(Span* s, void* q) {
  // Secure mode: blocks sit against a guard page, never moved wholesale.
  if (g_secure || g.stats.get(Stat::mremap_moves) >= kMaxMremapMoves) return false;
  if (!g_platform->move_pages(g_platform->ctx, s->start, s->bytes, q, option(Opt::hugepages) != 0)) return false;
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
  if (before == SpanKind::kLarge && s->kind == SpanKind::kHuge) g.stats.sub(Stat::large_blocks, 1);
  return true;
}

}  // namespace lazymalloc::detail
