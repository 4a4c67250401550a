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

}  // namespace

void bin_published(Heap* h, unsigned c) {
  if (h == &g_empty_heap) return;
  uint32_t bytes = bin_count(tl_bins[c], c) * uint32_t(class_size(c));
  h->stats.add(HeapStat::cache_bytes, uint64_t(bytes) - tl_bin_bytes[c]);
  tl_bin_bytes[c] = bytes;
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

// Points this thread's bins, which are empty, at heap h's slots.
void bins_enable(Heap* h) {
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    Bin& bin = tl_bins[c];
    uint32_t cap = kClasses.bin_cap[c];
    if (!cap) continue;
    Block** a = h->bin_slots + kClasses.bin_offset[c];
    bin.top = bin.base = a;
    bin.ftop = tl_bin_fbase[c] = a + cap;
    bin.flimit = a + 2 * cap;
  }
}

// Returns objects of bin c to their spans until at most `keep` remain: all
// of the allocation stack (refilled or older) and of the free stack all but
// the `keep` most recent.  The bin is brought to its final state before any
// object goes back: a malloc or free that re-enters (from the backend, the
// purger, or a thread they start) finds a consistent bin.
void bin_flush(Heap* h, unsigned c, uint32_t keep) {
  Bin& bin = tl_bins[c];
  Block** fbase = tl_bin_fbase[c];
  uint32_t in_free = uint32_t(bin.ftop - fbase);
  if (keep > in_free) keep = in_free;
  uint32_t from_alloc = uint32_t(bin.top - bin.base);
  uint32_t n = from_alloc + in_free - keep;
  if (n == 0) return bin_published(h, c);
  Block* out[2 * kBinCapMax];
  memcpy(out, bin.base, from_alloc * sizeof(Block*));
  memcpy(out + from_alloc, fbase, (in_free - keep) * sizeof(Block*));
  memmove(fbase, bin.ftop - keep, keep * sizeof(Block*));
  bin.top = bin.base;
  bin.ftop = fbase + keep;
  bin_published(h, c);
  return_objects(h, out, n);
}


// Counts a refill or overflow; every kBinGcEvents, returns the bins that
// have not changed since the last time.
void bin_event(Heap* h) {
  if (++tl_bin_events % kBinGcEvents != 0) return;
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    const Bin& bin = tl_bins[c];
    if (bin_fingerprint(bin) == tl_bin_seen[c] && bin_count(bin, c) != 0) {
      bin_flush(h, c, 0);
      heap_count(h, HeapStat::cache_idle_flushes);
    }
    tl_bin_seen[c] = bin_fingerprint(bin);
  }
}

// Returns every object of this thread's bins to their spans; with
// `disable`, the bins take nothing more (thread exit: every free then goes
// straight to its span).
void bins_return_all(Heap* h, bool disable) {
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    bin_flush(h, c, 0);
    if (disable) {
      tl_bins[c] = Bin{};
      tl_bin_fbase[c] = nullptr;
    }
  }
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
  *bin.ftop++ = static_cast<Block*>(p);
}

}  // namespace lazymalloc::detail
