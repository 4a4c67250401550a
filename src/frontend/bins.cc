// Thread caches: refill, flush, idle bins, overflow, enabling and
// disabling a thread's bins (bins.h has the bins and the fast-path parts).
#include "frontend/bins.h"

#include <algorithm>
#include <cstring>

#include "frontend/internal.h"

namespace lazymalloc::detail {

constinit __attribute__((tls_model("initial-exec"))) thread_local Bin tl_bins[kSmallClasses] = {};
constinit __attribute__((tls_model("initial-exec"))) thread_local Block** tl_bin_fbase[kSmallClasses] = {};

namespace {

inline uint32_t bin_count(const Bin& bin, unsigned c) {
  return uint32_t((bin.top - bin.base) + (bin.ftop - tl_bin_fbase[c]));
}

// Idle bins (bin_event): every kBinGcEvents refills and overflows of a
// thread, a bin that has not changed since the last look (the same stack
// tops) goes back to its spans, so a thread that moved on to other
// sizes does not keep the old ones.
inline constexpr uint32_t kBinGcEvents = 256;
__attribute__((tls_model("initial-exec"))) thread_local uint64_t tl_bin_seen[kSmallClasses];
__attribute__((tls_model("initial-exec"))) thread_local uint32_t tl_bin_events;
// Bytes of each bin last published in the heap's cache_bytes.
__attribute__((tls_model("initial-exec"))) thread_local uint32_t tl_bin_bytes[kSmallClasses];

inline uint64_t bin_fingerprint(const Bin& b) {
  return reinterpret_cast<uintptr_t>(b.top) ^ (reinterpret_cast<uintptr_t>(b.ftop) << 1);
}

// REQUIRES h held.  A bin's bytes are now `bytes`: the heap's cache_bytes
// (and the timeline page) get the difference from `published`, the bytes
// last published for that bin, which becomes `bytes`.
void cache_bytes_now(Heap* h, uint32_t* published, uint32_t bytes) {
  h->stats.add(HeapStat::cache_bytes, uint64_t(bytes) - *published);
  timeline_cached(int64_t(bytes) - int64_t(*published));
  *published = bytes;
}

}  // namespace

void bin_published(Heap* h, unsigned c) {
  if (h == &g_empty_heap) return;
  cache_bytes_now(h, &tl_bin_bytes[c], bin_count(tl_bins[c], c) * uint32_t(class_size(c)));
}

// Fills bin c's empty allocation stack from the head of span s's
// allocation list, up to its capacity (not in secure mode: its bins have
// none).  The list's first object ends on top, so objects go out in list
// order (carve lists them in address order).
void bin_refill(Bin& bin, unsigned c, Span* s) {
  uint32_t want = kClasses.bin_cap[c];
  if (!bin.base || !s->free) return;
  uint32_t n = 0, steps = 0;
  Block* b = s->free;
  while (b && n < want) {
    bin.base[n++] = b;
    b = walk_link(s, b, steps);  // validated as it is walked
  }
  s->free = b;
  s->used += n;
  std::reverse(bin.base, bin.base + n);
  bin.top = bin.base + n;
}

// Points this thread's bins, which are empty, at heap h's slots, and
// tells the heap where they are (bins_take_idle).
void bins_enable(Heap* h) {
  HeapGuard guard(h);
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    Bin& bin = tl_bins[c];
    uint32_t cap = kClasses.bin_cap[c];
    if (!cap) continue;
    Block** a = h->bin_slots + kClasses.bin_offset[c];
    bin.top = bin.base = a;
    bin.ftop = tl_bin_fbase[c] = a + cap;
    bin.flimit = a + 2 * cap;
  }
  h->thread_bins = tl_bins;
  h->thread_fbase = tl_bin_fbase;
  h->thread_bin_bytes = tl_bin_bytes;
}

// REQUIRES h held.  The bins' free stacks moved down to the start of
// their slots, where bins_take_idle took their older entries (it moves
// fbase up and sets h->bins_taken).
void free_stacks_to_start(Heap* h) {
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    Bin& bin = tl_bins[c];
    if (!bin.flimit) continue;
    Block** start = bin.flimit - kClasses.bin_cap[c];
    Block** fbase = tl_bin_fbase[c];
    if (fbase == start) continue;
    size_t n = size_t(bin.ftop - fbase);
    memmove(start, fbase, n * sizeof(Block*));
    tl_bin_fbase[c] = start;
    bin.ftop = start + n;
  }
  h->bins_taken = false;
}

// Returns objects of bin c to their spans until at most `keep` remain: all
// of the allocation stack (refilled or older) and of the free stack all but
// the `keep` most recent.  The bin is brought to its final state before any
// object goes back.  REQUIRES h held; true if another heap got work.
static bool bin_flush_held(Heap* h, unsigned c, uint32_t keep) {
  Bin& bin = tl_bins[c];
  if (!bin.flimit) return false;
  if (h->bins_taken) free_stacks_to_start(h);
  Block** fbase = tl_bin_fbase[c];
  uint32_t in_free = uint32_t(bin.ftop - fbase);
  if (keep > in_free) keep = in_free;
  uint32_t from_alloc = uint32_t(bin.top - bin.base);
  uint32_t n = from_alloc + in_free - keep;
  if (n == 0) {
    bin_published(h, c);
    return false;
  }
  Block* out[2 * kBinCapMax];
  memcpy(out, bin.base, from_alloc * sizeof(Block*));
  memcpy(out + from_alloc, fbase, (in_free - keep) * sizeof(Block*));
  memmove(fbase, bin.ftop - keep, keep * sizeof(Block*));
  bin.top = bin.base;
  bin.ftop = fbase + keep;
  bin_published(h, c);
  return return_objects_held(h, out, n);
}

void bin_flush(Heap* h, unsigned c, uint32_t keep) {
  bool pending;
  {
    HeapGuard guard(h);
    pending = bin_flush_held(h, c, keep);
  }
  if (pending) heap_work_arrived();
}

// Counts a refill or overflow; every kBinGcEvents, returns the bins that
// have not changed since the last time.
void bin_event(Heap* h) {
  if (++tl_bin_events % kBinGcEvents != 0) return;
  bool pending = false;
  {
    HeapGuard guard(h);
    for (unsigned c = 0; c < kSmallClasses; ++c) {
      const Bin& bin = tl_bins[c];
      if (bin_fingerprint(bin) == tl_bin_seen[c] && bin_count(bin, c) != 0) {
        pending |= bin_flush_held(h, c, 0);
        heap_count(h, HeapStat::cache_idle_flushes);
      }
      tl_bin_seen[c] = bin_fingerprint(bin);
    }
  }
  if (pending) heap_work_arrived();
}

// Returns every object of this thread's bins to their spans; with
// `disable`, the bins take nothing more (thread exit: every free then goes
// straight to its span) and the heap forgets them.
void bins_return_all(Heap* h, bool disable) {
  bool pending = false;
  {
    HeapGuard guard(h);
    for (unsigned c = 0; c < kSmallClasses; ++c) {
      pending |= bin_flush_held(h, c, 0);
      if (disable) {
        tl_bins[c] = Bin{};
        tl_bin_fbase[c] = nullptr;
      }
    }
    if (disable && h != &g_empty_heap) {
      h->thread_bins = nullptr;
      h->thread_fbase = nullptr;
      h->thread_bin_bytes = nullptr;
    }
  }
  if (pending) heap_work_arrived();
}

// REQUIRES h claimed by a collector (lm_collect_idle_heaps).  Takes the
// free stacks of h's thread's bins: what it freed and has not allocated
// again.  The thread may be running its fast paths meanwhile (they are
// not excluded, so that they stay as they are): a free writes an entry at
// ftop and then publishes ftop (a release store), and nothing but a slow
// path reads or writes below ftop, or reads fbase; so the entries below
// the ftop read here are the collector's to take, and moving fbase up to
// it hands them over.  The allocation stacks stay: a malloc pops from
// them with no check a collector could use (at most bin_cap objects per
// class, whose spans' other pages the in-span purge reaches).
bool bins_take_idle(Heap* h, uint64_t* bytes) {
  Bin* bins = h->thread_bins;
  Block*** fbases = h->thread_fbase;
  if (!bins) return false;
  bool pending = false;
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    Block** fbase = fbases[c];
    Block** ftop = __atomic_load_n(&bins[c].ftop, __ATOMIC_ACQUIRE);
    if (!fbase || ftop == fbase) continue;
    uint32_t n = uint32_t(ftop - fbase);
    Block* out[kBinCapMax];
    memcpy(out, fbase, n * sizeof(Block*));
    __atomic_store_n(&fbases[c], ftop, __ATOMIC_RELAXED);
    h->bins_taken = true;
    // What the thread last published for this bin (its TLS record, which
    // the collector may write while it holds the heap) loses what was taken.
    const uint32_t taken = n * uint32_t(class_size(c));
    uint32_t* published = &h->thread_bin_bytes[c];
    cache_bytes_now(h, published, taken < *published ? *published - taken : 0);
    *bytes += taken;
    heap_count(h, HeapStat::cache_idle_takes);
    pending |= return_objects_held(h, out, n);
  }
  return pending;
}

// A free of object p of span s found its bin's free stack full: the older
// half of the bin goes back to the spans, and p goes on.  A bin of
// capacity 0 (classes above kCachedMax, secure mode, a thread with no heap,
// which heap_on_demand gives one if it may) sends p on to the quarantine
// or its span.
LM_NOINLINE void bin_overflow(Span* s, void* p) {
  Heap* h = heap_on_demand(tl_heap);
  const unsigned c = s->cls;
  Bin& bin = tl_bins[c];
  if (!bin.flimit) {
    if (g_secure) {
      secure_free(h, s, p);
    } else {
      return_object(h, s, p);
    }
    return;
  }
  if (bin.ftop == bin.flimit) {
    bin_flush(h, c, kClasses.bin_cap[c] / 2);
    heap_count(h, HeapStat::cache_flushes);
    bin_event(h);
  }
  Block** t = bin.ftop;
  *t = static_cast<Block*>(p);
  publish_ftop(bin, t + 1);
}

}  // namespace lazymalloc::detail
