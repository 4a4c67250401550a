// Large and huge blocks: allocation from the backend (with secure mode's
// guard page), free, realloc in place and by moving pages, and giving any
// span back to the backend and the purger.
#include <errno.h>

#include "core/accounting.h"
#include "frontend/internal.h"
#include "pal/pal.h"

namespace lazymalloc::detail {

namespace {

// After blocks went back through Backend::alloc: what release_to_backend
// does after Backend::release (the purger's limits and inline decay, the
// background thread).
void give_back_done(Span* given) {
  if (given) g.purger.after_release(g.backend.last_activity_ns(), background_ensure());
}

// `give_back`: blocks the large cache lets go on a miss (a list through
// Span::next), released in the same lock hold (Backend::alloc), then handed
// to the purger as release_to_backend does.
Span* backend_alloc(size_t size, size_t align, bool growing, Span* give_back, unsigned owner) {
  Span* s = nullptr;
  if (LM_UNLIKELY(g.releaser.inflight_bytes() != 0)) {
    // Address space is on its way back: rather than reserve and fault in
    // fresh memory, help finish the releases and reuse it.
    s = g.backend.alloc(size, align, growing, false, give_back, owner);
    give_back_done(give_back);
    if (s) return s;
    give_back = nullptr;
    g.releaser.help(true);
  }
  s = g.backend.alloc(size, align, growing, true, give_back, owner);
  give_back_done(give_back);
  return s;
}

// The thread's cache of freed large blocks (Heap::large_cache): a free
// puts the block there, a malloc takes the smallest block that fits it
// within 2x (the request uses at least half of it, as with power-of-two
// size classes; its tail is idle while it serves; the smallest, so that big
// blocks stay for big requests), neither takes the
// backend's lock, which two threads churning large blocks otherwise queue
// on, nor writes a process-wide counter (their statistics are folded per
// heap: large_count).  The cache is heap state: the thread holds the heap
// to use it, so a collector (a quiet thread's, lm_collect_idle_heaps, and
// thread exit, both through heap_collect) can empty it; blocks it lets go
// are given back to the backend once the heap is let go (HeapGuard).
inline bool large_cacheable(size_t size, size_t align, Heap* h) {
  return size > kMaxSmall && size <= kMaxLarge && align <= kUnitSize && !g_secure && h != &g_empty_heap;
}

// A cached (or evicted) block is no longer counted as cached.
void large_uncount(Heap* h, Span* s) {
  s->cached = 0;
  large_count(h, Folded::large_cache_bytes, -s->bytes);
  timeline_cached(-int64_t(s->bytes));
}

// REQUIRES h held: entry i leaves the cache (the later ones move down),
// still counted in large_cache_bytes (the statistic).
Span* large_cache_unlist(Heap* h, uint32_t i) {
  Span* s = h->large_cache[i];
  for (uint32_t k = i; k + 1 < h->large_cached; ++k) h->large_cache[k] = h->large_cache[k + 1];
  h->large_cached--;
  h->large_cache_bytes -= s->bytes;
  return s;
}

// REQUIRES h held: the evicted block, if any, leaves the heap; the caller
// gives it back to the backend.
Span* large_evicted_take(Heap* h) {
  Span* s = h->large_evicted;
  if (s) {
    h->large_evicted = nullptr;
    large_uncount(h, s);
  }
  return s;
}

// The cache's byte bound for h when the thread holds `live` large bytes
// (Heap::large_live, or what it will be once a miss's block is live):
//  - the option;
//  - at most the large bytes the thread holds live (and at least the
//    largest block), so that it grows with the thread's use and costs a
//    thread with few large blocks little: a thread churning 5 MiB of large
//    blocks held 4 MiB more in its cache, a third of its peak
//    (large-churn-1t), before the peak bound below.  Half of them until
//    issue #16's ninth round: under the peak bound the whole live bytes
//    cost large-churn no peak RSS (18.3-18.6 / 30.6-31.7 MiB against
//    17.6-19.5 / 31.3-31.6) and took cache hits from 76% to 85% of its
//    large mallocs, 1.31M -> 1.47M operations a second at one thread,
//    2.48M -> 2.74M at two (docs/benchmarks.md);
//  - at most the thread's peak of live large bytes less its live ones
//    (Heap::large_peak), so that its blocks and its cache together hold no
//    more than its blocks did at their peak: with the smallest fit and the
//    miss's give-back, large-churn-1t's peak RSS went 21.2 -> 17.3 MiB.
//    A put of the thread's own block always has room (the bound held
//    before the free); a miss gives back the oldest blocks beyond it.
uint64_t large_cache_cap(const Heap* h, uint64_t live) {
  uint64_t cap = uint64_t(option(Opt::large_cache));
  uint64_t by_live = live < kMaxLarge ? kMaxLarge : live;
  if (by_live < cap) cap = by_live;
  uint64_t room = h->large_peak > live ? h->large_peak - live : 0;
  return room < cap ? room : cap;
}

// REQUIRES h held: entry i leaves the cache for the list *out (the blocks
// a miss gives back).
void large_cache_give(Heap* h, uint32_t i, Span** out) {
  Span* s = large_cache_unlist(h, i);
  large_uncount(h, s);
  s->next = *out;
  *out = s;
}

// The fewest units a large block has (above kMaxSmall): a cached block
// is cut only if the rest can serve a large malloc.
constexpr unsigned kLargeMinUnits = unsigned(kMaxSmall / kUnitSize) + 1;

// REQUIRES h held: a record no longer used (a join's) is kept for the
// next split, or goes back to the pool if one is kept already.
void large_spare_put(Heap* h, Span* rec) {
  if (h->large_spare) g.backend.span_record_free(rec);
  else h->large_spare = rec;
}

// A hit, or nullptr and *give_back: the blocks for the backend allocation
// that follows (Backend::alloc releases them in the same lock hold, so that
// a miss costs one lock hold, not two): the evicted block; the cached blocks
// smaller than the request, which could not serve it (the thread's demand
// has moved to bigger blocks; the new run may take their units); and the
// oldest ones beyond the cap once the new block is live.
//
// A hit is the smallest block within 2x of the request, taken whole; else
// the smallest block larger than that, inside one slot, is cut
// (Backend::split_units): the request's units go, the rest (a large block
// still, kLargeMinUnits or more) stays cached where the block was.  Blocks
// come back joined with their cached neighbours (large_cache_put), so that
// the cache's bytes serve the big requests too: a miss, one backend lock
// hold, is what a request finds no run for in the thread's own free bytes.
Span* large_cache_take(Heap* h, size_t size, Span** give_back) {
  HeapGuard guard(h);
  const unsigned units = unsigned(align_up(size, kUnitSize) >> kUnitShift);
  uint32_t best = kLargeCacheSlots, cut = kLargeCacheSlots;
  for (uint32_t i = h->large_cached; i-- > 0;) {
    const Span* s = h->large_cache[i];
    if (s->bytes < size) continue;
    if (s->bytes <= 2 * size) {
      if (best == kLargeCacheSlots || s->bytes < h->large_cache[best]->bytes) best = i;
    } else if (s->nunits >= units + kLargeMinUnits && Backend::in_one_slot(s) &&
               (cut == kLargeCacheSlots || s->bytes < h->large_cache[cut]->bytes)) {
      cut = i;
    }
  }
  if (best != kLargeCacheSlots) {
    large_count(h, Folded::large_cache_hits, 1);
    Span* hit = large_cache_unlist(h, best);
    large_uncount(h, hit);
    return hit;
  }
  if (cut != kLargeCacheSlots) {
    Span* hit = h->large_cache[cut];
    Span* spare = h->large_spare;
    if (Span* rest = g.backend.split_units(hit, units, spare)) {
      if (rest == spare) h->large_spare = nullptr;
      h->large_cache[cut] = rest;
      h->large_cache_bytes -= hit->bytes;
      large_count(h, Folded::large_cache_hits, 1);
      large_count(h, Folded::large_cache_splits, 1);
      large_uncount(h, hit);
      return hit;
    }
  }
  // A large malloc after a large free: the thread reuses large blocks,
  // and its cache takes them from now on (large_cache_put).
  if (h->large_freed) h->large_warm = true;
  Span* list = large_evicted_take(h);
  if (list) list->next = nullptr;
  for (uint32_t i = h->large_cached; i-- > 0;) {
    if (h->large_cache[i]->bytes < size) large_cache_give(h, i, &list);
  }
  const uint64_t cap = large_cache_cap(h, h->large_live + align_up(size, kUnitSize));
  while (h->large_cache_bytes > cap) large_cache_give(h, 0, &list);
  *give_back = list;
  return nullptr;
}

// REQUIRES h held: the oldest cached block leaves the cache and waits for
// the next miss as the evicted block; the one that waited goes to the
// backend once h is let go.
void large_cache_evict(Heap* h) {
  Span* older = large_evicted_take(h);
  if (older) {
    older->next = h->to_release;
    h->to_release = older;
  }
  h->large_evicted = large_cache_unlist(h, 0);
}

// A large block of `bytes` leaves h's thread's hands: others' blocks that
// it frees take its count down to 0 at most (a consumer thread's cache would
// otherwise stay at its least for good).
inline void large_live_sub(Heap* h, uint64_t bytes) { h->large_live = h->large_live > bytes ? h->large_live - bytes : 0; }

// A large block of `bytes` comes into h's thread's hands: its live large
// bytes and their peak (the cache's bound, large_cache_cap).
inline void large_live_add(Heap* h, uint64_t bytes) {
  if (h == &g_empty_heap) return;
  h->large_live += bytes;
  if (h->large_live > h->large_peak) h->large_peak = h->large_live;
}

// A cold cache (no large malloc since the thread's first large free) takes
// nothing: the block goes back to the backend, where any span of any heap
// reuses its units, resident.  A thread that frees a large block it will
// not allocate again (a table built at start-up, a temporary copy) would
// otherwise keep it resident beside everything it allocates later:
// lazybench's random-size peaked 0.35-0.4 MiB higher with the block a
// vector's prototype left in the main thread's cache while the worker's
// spans took fresh units (issue #16, fifth round).  The first reuse costs
// one backend allocation more; from then on the cache serves as before.
bool large_cache_put(Heap* h, Span* s) {
  if (!h->large_warm) {
    h->large_freed = true;
    return false;
  }
  uint64_t cap = large_cache_cap(h, h->large_live);
  if (s->bytes > cap) return false;
  HeapGuard guard(h);
  s->cached = 1;
  s->zero = 0;
  large_count(h, Folded::large_cache_bytes, s->bytes);
  timeline_cached(int64_t(s->bytes));
  // Joined with the cached blocks it adjoins in its slot (one on each side
  // at most; a join leaves the other side's boundary where it was), as long
  // as the whole stays within the cap and a large block (kMaxLarge: the
  // backend's resize and promotion take a large span for at most that).
  if (Backend::in_one_slot(s)) {
    for (uint32_t i = h->large_cached; i-- > 0;) {
      Span* c = h->large_cache[i];
      const uint64_t joined = c->bytes + s->bytes;
      if (c->slot != s->slot || !Backend::in_one_slot(c) || joined > cap || joined > kMaxLarge) continue;
      const bool below = c->first_unit + c->nunits == s->first_unit;
      if (!below && s->first_unit + s->nunits != c->first_unit) continue;
      large_cache_unlist(h, i);
      large_spare_put(h, below ? g.backend.join_units(c, s) : g.backend.join_units(s, c));
      if (below) s = c;
      large_count(h, Folded::large_cache_joins, 1);
    }
  }
  while (h->large_cached && (h->large_cached == kLargeCacheSlots || h->large_cache_bytes + s->bytes > cap)) {
    large_cache_evict(h);
  }
  h->large_cache[h->large_cached++] = s;
  h->large_cache_bytes += s->bytes;
  return true;
}

// A block that the thread allocated and frees while its cache is cold
// (large_cache_put took nothing: no large malloc since its first large
// free) goes back to the backend CLEAN, its pages given back with
// MADV_DONTNEED first, as glibc unmaps a block of that size at its free.
// RETAINED, its units are reused in place by small spans, which touch 1-8
// of each unit's 16 pages while all 16 stay resident: `lazybench run
// random-size` freed a vector's 512 KiB prototype before its worker ran,
// and with one object live at a time peaked 0.3 MiB higher with the block
// retained (issue #16, sixth round).  The thread's next large malloc warms
// the cache (large_cache_take), so a thread that reuses large blocks pays
// this once; a thread that frees blocks it did not allocate (a consumer:
// Span::heap, the allocating heap, is not its own) leaves them RETAINED,
// resident for their producer's next malloc.  Only while this is the one
// thread with a heap: with others, one of them may take the units next (a
// thread per request that allocates a buffer, frees it and exits, never
// warm: each thread's free given back and its successor's faults cost
// 2-3x the thread, 256 KiB buffers), and the advice interrupts the CPUs
// they run on (TLB shootdowns).  Not on hugepages (the advice would split
// a 2 MiB page that other units share).
bool large_release_cold(Span* s) {
  if (g.backend.arenas_huge()) return false;
  if (g.stats.get(Stat::heaps) - g.stats.get(Stat::heaps_pooled) > 1) return false;
  if (g_platform->advise(g_platform->ctx, s->start, s->bytes, Advice::kDontNeed) != 0) return false;
  g.stats.add(Stat::large_cold_dontneed_bytes, s->bytes);
  release_to_backend(s, true);
  return true;
}

// Where a large block starts in its span: a few cache lines in, where the
// unit rounding leaves room (issue #16, eighth round).  Spans start on 64
// KiB units, so without it the same offset of every page of every large
// block falls into the same few sets of each cache: a program that writes
// a header, or the first bytes of each page, of several live blocks evicts
// its own lines (large-churn-1t, a byte per page of 8 live 256 KiB-1 MiB
// blocks: 0.51M operations a second at offset 0, 1.66M with this).  The
// lead is a hash of the span's address, so a block reused from the same
// memory (the large cache's LIFO) starts where it did, on the lines it
// left warm; it is at most 63 lines, within the slack of the span's last
// unit (a size that fills its units exactly starts at 0), and only for
// blocks with the default alignment.  A block that realloc moves (`growing`)
// starts at its span: it is likely to grow on, into a huge block that the
// next move hands to mremap, which moves pages, not a lead (move_huge).
// Huge blocks start at their slot.
constexpr size_t kCacheLine = 64;
size_t large_lead(const Span* s, size_t size, size_t align) {
  if (align > kCacheLine) return 0;
  size_t room = s->bytes - size;
  if (room > kOsPageSize - kCacheLine) room = kOsPageSize - kCacheLine;
  size_t lead = size_t((uint64_t(uintptr_t(s->start) >> kUnitShift) * 0x9E3779B97F4A7C15ull) >> 58) * kCacheLine;
  return lead <= room ? lead : align_down(room, kCacheLine);
}

// Whose slots a large block the backend gives h goes into (Backend::alloc's
// `owner`): h's own once h reuses large blocks (its cache warm) and has held
// at least a slot's worth of them at once (its peak), else the shared ones.
// A thread that keeps what it allocates, or churns a block or two, shares
// slots with the others, so that a thread per block, or 64 threads that
// each reuse a 300 KiB buffer, do not open a slot each (a 2 MiB page under
// the hugepage advice: 64 such threads held up to 42 MiB at a barrier, 26
// MiB of it in hugepages, against 28 with the slots shared).
unsigned large_owner(const Heap* h) { return h->large_warm && h->large_peak >= kSlotSize ? h->owner : 0; }

}  // namespace

// The thread gave back what it holds (lm_thread_collect): its peak starts
// again from its live bytes, so that its cache is bounded by its use from
// now on.  `exiting` (thread exit): the next thread to adopt the heap
// starts from nothing, live bytes included (those of the exited thread's
// blocks count on the heaps of the threads that free them), and with a cold
// cache (large_cache_put).  The thread's own call: the peak, the live bytes
// and the warmth are the thread's to write.
void large_peak_reset(Heap* h, bool exiting) {
  if (exiting) {
    h->large_live = 0;
    h->large_freed = h->large_warm = false;
  }
  h->large_peak = h->large_live;
}

void large_cache_drain(Heap* h) {
  if (h->large_spare) {
    g.backend.span_record_free(h->large_spare);
    h->large_spare = nullptr;
  }
  while (h->large_cached) large_cache_evict(h);
  if (Span* s = large_evicted_take(h)) {
    s->next = h->to_release;
    h->to_release = s;
  }
}

void* alloc_large(size_t size, size_t align, bool* zero, bool growing) {
  Span* s = nullptr;
  Span* give_back = nullptr;
  if (large_cacheable(size, align, tl_heap)) s = large_cache_take(tl_heap, size, &give_back);
  // Secure mode: room for the guard page (size <= kMaxRequest: no overflow).
  if (!s) s = backend_alloc(g_secure ? size + kOsPageSize : size, align, growing, give_back, large_owner(tl_heap));
  if (!s) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  s->heap = s->kind == SpanKind::kLarge ? tl_heap : nullptr;  // the allocating heap (large_release_cold)
  s->obj_size = 0;
  s->lead = 0;
  s->guard = 0;
  if (s->kind == SpanKind::kLarge) {
    large_count(tl_heap, Folded::large_allocs, 1);
    large_count(tl_heap, Folded::large_blocks, 1);
    large_live_add(tl_heap, s->bytes);
    if (!g_secure && !growing) s->lead = large_lead(s, size, align);
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
  // Cached first: a block joined to the cached one below it (large_cache_put)
  // lies inside that one, and its second free is a double free.
  if (s->cached) lm_invalid_pointer("free", p, "double free (the block is already free)");
  if (p != block_start(s)) lm_invalid_pointer("free", p, "points inside a block");
  Heap* h = tl_heap;
  heap_count(h, HeapStat::large_frees);
  if (s->kind == SpanKind::kLarge) {
    large_count(h, Folded::large_blocks, uint64_t(-1));
    if (h != &g_empty_heap) large_live_sub(h, s->bytes);
    if (large_cacheable(s->bytes, 0, h) && !s->guard) {
      if (large_cache_put(h, s)) return;
      if (s->heap == h && !h->large_warm && large_release_cold(s)) return;
    }
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
  // Secure mode: blocks sit against a guard page, never moved wholesale;
  // nor is a block promoted from a large one that starts past its slot's
  // first byte (large_lead), since `q` starts at its own.
  if (g_secure || s->lead || g_mremap_moves.get() >= kMaxMremapMoves) return false;
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
// `size` is at most kMaxRequest (lm_realloc checks it first), so that
// size + lead cannot wrap around.
bool large_resize(Span* s, size_t size) {
  if (s->kind == SpanKind::kSmall || size <= kMaxSmall || s->guard) return false;
  SpanKind before = s->kind;
  size_t bytes = s->bytes;
  if (!g.backend.resize(s, size + s->lead)) return false;
  if (before == SpanKind::kLarge) {
    if (s->kind == SpanKind::kHuge) {
      large_count(tl_heap, Folded::large_blocks, uint64_t(-1));
      s->heap = nullptr;
    }
    if (tl_heap != &g_empty_heap) {
      large_live_sub(tl_heap, bytes);
      if (s->kind == SpanKind::kLarge) large_live_add(tl_heap, s->bytes);
    }
  }
  return true;
}

}  // namespace lazymalloc::detail
