// Thread caches: refill, flush, idle bins, overflow, enabling and
// disabling a thread's bins (bins.h has the bins and the fast-path parts).
#include "frontend/bins.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "frontend/internal.h"

namespace lazymalloc::detail {

constinit __attribute__((tls_model("initial-exec"))) thread_local Bin tl_bins[kSmallClasses] = {};
constinit __attribute__((tls_model("initial-exec"))) thread_local Block*** tl_bin_fbase = nullptr;
constinit __attribute__((tls_model("initial-exec"))) thread_local uint8_t tl_bin_cap[kSmallClasses] = {};
constinit __attribute__((tls_model("initial-exec"))) thread_local uint8_t tl_bin_mallocs[kSmallClasses] = {};
constinit __attribute__((tls_model("initial-exec"))) thread_local TradeMins tl_bin_trade_min = no_trades();

namespace {

inline uint32_t bin_count(const Bin& bin, unsigned c) {
  return uint32_t((bin.top - bin.base) + (bin.ftop - bin_fbase(c)));
}

// Idle bins (bin_event): every kBinIdleEvents refills and overflows of a
// thread, a bin that has not changed since the last look (the same stack
// tops, and no refill or overflow of its class), at as many looks in a row
// as its class's patience asks (IdleState, below), goes back to its spans,
// and its class's empty current span to the backend (class_idle), so a
// thread that moved on to other sizes keeps neither.  64, not 256 (issue
// #16: batch, whose ~20 classes each kept a span and a cache between its
// batches of one size: peak RSS 6.95-7.34 MiB at 256, 6.43-6.65 at 64,
// glibc's 5.2-5.4), and 16, not 64 (issue #16, fifth round: batch's
// classes each kept their span for 64-128 events after their last batch,
// peak RSS 6.2-6.4 MiB at 64, 5.6-5.8 at 16); the looks between two
// growth looks walk only the bins set up (tl_bins_on), so that four times
// as many cost about what they did.
inline constexpr uint32_t kBinIdleEvents = 16;
// Each bin's fingerprint at the last look (bin_fingerprint).
__attribute__((tls_model("initial-exec"))) thread_local uint32_t tl_bin_seen[kSmallClasses];
__attribute__((tls_model("initial-exec"))) thread_local uint32_t tl_bin_events;
// Bytes of each bin last published in the heap's cache_bytes.
__attribute__((tls_model("initial-exec"))) thread_local uint32_t tl_bin_bytes[kSmallClasses];

// Whether this thread's bin c has anything to return: an empty bin
// published as empty has not.
inline bool bin_holds(unsigned c) { return bin_count(tl_bins[c], c) != 0 || tl_bin_bytes[c] != 0; }

// Growing bins (bin_event, bin_grow): a bin starts at bin_cap_first (4
// objects) and doubles at every miss (refill or overflow) of its class up
// to bin_cap (16 KiB of objects: it "warms"), so that a thread that uses a
// class a little takes and gives back a little (issue #16: a short thread's
// first refill took 128 objects of 128 B, and its exit returned them,
// about 4k of the 7k instructions it cost in the allocator).  From there a
// class with at least kBinGrowMisses refills and overflows among
// kBinGrowEvents of the thread's doubles its capacity, up to bin_cap_max
// (heap.h): a bin too small for the program's swings between mallocs and
// frees of its class misses over and over (random-size and larson missed
// on one malloc in ten with 16 KiB bins), while a class used now and then
// grows no further.
inline constexpr uint32_t kBinGrowMisses = 4;
inline constexpr uint32_t kBinGrowEvents = 256;
// Each class's idle state, a byte (the thread's static TLS block is
// touched by every thread: a bigger one cost mleak's short threads a page
// fault each).  `active`: the class made a refill or overflow since the
// last look (a bin whose every event is a refill, a phase that only
// allocates, is back at the same stack top at each look, and is not idle).
// Idle patience: a bin goes back once found unchanged at 1 << `patience`
// looks in a row (`quiet` counts them), at first one.  A class that comes
// back (a refill or an overflow) within as many looks as it waited went
// back too soon (a false idle: its cache refilled, its current span taken
// anew, a sparse span's pages faulted in again), and its patience doubles,
// up to kBinPatienceMax (4 looks); one that stays away more than twice as
// long halves it.  `idled`: the bin went back at look tl_bin_idled_look
// (modulo 256) and its class has not been back since.  Why: `mixed`
// (sizes to 256 KiB, the larger classes used once in a few hundred
// allocations) flushed its 640 B-32 KiB classes as idle at a third of their
// refills and overflows, 250,000 flushes in a 2 s run; `batch`, whose
// classes come back after more looks than they waited, keeps the patience
// of one look that its peak RSS needs (issue #16).
struct IdleState {
  uint8_t active : 1;
  uint8_t idled : 1;
  uint8_t patience : 2;
  uint8_t quiet : 3;
};
inline constexpr unsigned kBinPatienceMax = 2;
inline constexpr unsigned kBinQuietMax = 7;
static_assert(1u << kBinPatienceMax <= kBinQuietMax);
__attribute__((tls_model("initial-exec"))) thread_local IdleState tl_bin_idle[kSmallClasses];
__attribute__((tls_model("initial-exec"))) thread_local uint8_t tl_bin_idled_look[kSmallClasses];
// The number of the thread's current idle look, modulo 256 (tl_bin_idled_look).
inline uint8_t idle_look() { return uint8_t(tl_bin_events / kBinIdleEvents); }
static_assert(kBinGrowEvents % kBinIdleEvents == 0);
__attribute__((tls_model("initial-exec"))) thread_local uint8_t tl_bin_misses[kSmallClasses];
// The classes above kCachedMax (heap.h), which have no bin: a bit each.
// Their current span's phantom keeps a malloc/free of one object off the
// backend; the idle looks give back the span once the class is left.
constexpr uint64_t uncached_classes() {
  uint64_t m = 0;
  for (unsigned c = 0; c < kSmallClasses; ++c)
    if (bin_cap(c) == 0) m |= uint64_t(1) << c;
  return m;
}
inline constexpr uint64_t kUncachedClasses = uncached_classes();
static_assert(kUncachedClasses != 0 && (kUncachedClasses >> (kSmallClasses - 1)) == 1);
// The classes whose bins are set up (bin_enable), for thread exit.
__attribute__((tls_model("initial-exec"))) thread_local uint64_t tl_bins_on;
static_assert(kSmallClasses <= 64);

// REQUIRES bin c enabled, and at most `cap` objects in each of its stacks
// (this thread only: no collector reads or writes flimit or the
// capacity).  Bin c's capacity becomes `cap`: its free stack's limit moves
// (flimit lies the capacity above the start of its half, which a
// collector's take does not move).  Below bin_cap the bin warms: a dry
// allocation stack is refilled, never traded for the free stack, so that
// the bin's count grows with the refills (a trade keeps it, and a program
// with one object in flight would otherwise trade a bin of 4 objects for
// ever).
void bin_set_cap(unsigned c, uint32_t cap) {
  Bin& bin = tl_bins[c];
  bin.flimit = bin.flimit - tl_bin_cap[c] + cap;
  tl_bin_cap[c] = uint8_t(cap);
  tl_bin_trade_min.m[c] = bin_warming(c) ? kNoTrade : kClasses.trade_min[c];
}

// REQUIRES bin c enabled.  Doubles bin c's capacity, up to `limit`.
void bin_grow(unsigned c, uint32_t limit) {
  bin_set_cap(c, std::min<uint32_t>(2u * tl_bin_cap[c], limit));
}

// REQUIRES bin c enabled, each stack holding at most max(bin_cap, held).
// A bin grown past bin_cap(c) goes back to it, or to `held` if more (what
// its stacks still hold); a warming bin keeps its capacity.
void bin_shrink(unsigned c, uint32_t held = 0) {
  if (tl_bin_cap[c] > kClasses.bin_cap[c]) bin_set_cap(c, std::max<uint32_t>(kClasses.bin_cap[c], held));
}

// Bin c's stack tops and the objects on them: a class whose mallocs and
// frees balance (served by trades, no refill or overflow) walks its stack
// tops over a few values and came back to the ones of the last look, by
// chance, about once per 40,000 operations of random-size (a false idle:
// its cache flushed, a grown bin put back to bin_cap, its misses again);
// the objects on top changed meanwhile.  REQUIRES the heap held (no
// collector moves the stacks).
// Folded to 32 bits (TLS: tl_bin_seen).
inline uint32_t bin_fingerprint(const Bin& b, unsigned c) {
  uint64_t f = reinterpret_cast<uintptr_t>(b.top) ^ (reinterpret_cast<uintptr_t>(b.ftop) << 1);
  if (b.top > b.base) f ^= reinterpret_cast<uintptr_t>(b.top[-1]) << 2;
  if (b.ftop > bin_fbase(c)) f ^= reinterpret_cast<uintptr_t>(b.ftop[-1]) << 3;
  return uint32_t(f ^ (f >> 32));
}

// REQUIRES h held.  A bin's bytes are now `bytes`: the heap's cache_bytes
// (and the timeline page) get the difference from `published`, the bytes
// last published for that bin, which becomes `bytes`.
void cache_bytes_now(Heap* h, uint32_t* published, uint32_t bytes) {
  if (bytes == *published) return;  // (a thread exit's empty bins: most of them)
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
// allocation list, then from its never-used objects by address
// (span_take_tail), up to its capacity (not in secure mode: its bins have
// none).  The list's first object ends on top, so objects go out in list
// order, then in address order.
void bin_refill(Bin& bin, unsigned c, Span* s) {
  const uint32_t want = tl_bin_cap[c];
  if (!bin.base) return;
  uint32_t n = 0;
  if (s->free) {
    n = list_take(s, bin.base, want);
    std::reverse(bin.base, bin.base + n);
  }
  // Never-used objects only when the list gave under a quarter of the bin:
  // at most a carve's worth (kCarveBytes: memory is touched as it is
  // needed), and not while the owner's frees wait on local_free: those are
  // reused first (span_collect).  A list that fills a quarter of the bin
  // or more is not topped up with never-used objects (issue #16, sixth
  // round): topped up, a class's refills touched fresh objects while freed
  // ones waited on the span's lists, so that the pages a class touched
  // followed the objects its bins and remote frees held, not those live
  // (`xmalloc --queue 1`, 130 KiB live: 5.9-6.0 MiB peak RSS, 5.45-5.6
  // without).  The next refill takes them if the list is empty by then; a
  // shorter list is still topped up, so that a refill hands out at least a
  // quarter of the bin (a trickle of remote frees would otherwise make a
  // refill every few mallocs).
  uint32_t k = (s->local_free || 4 * n >= want) ? 0 : std::min({want - n, s->capacity - s->reserved, carve_objects(s)});
  if (k) {
    // Below the listed objects: they go out first.
    if (n) memmove(bin.base + k, bin.base, n * sizeof(Block*));
    span_take_tail(s, bin.base, k);
  }
  bin.top = bin.base + n + k;
}

// Out of line: a refill's walk (bin_refill, inlined into alloc_refill) kept
// its registers (batch: one instruction per object more with it inline).
Block* bin_absorb_free(Bin& bin, unsigned c, Block* b) {
  Block** fbase = bin_fbase(c);
  const size_t k = size_t(bin.ftop - fbase);
  Block* hot = fbase[k - 1];
  set_free_tag(b);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  Block** t = bin.top;
  t[0] = b;
  for (size_t i = 0; i + 1 < k; ++i) t[1 + i] = fbase[i];
  bin.top = t + k;
  bin.ftop = fbase;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if constexpr (kChecks) tag_word(hot) = 0;
  return hot;
}

// This thread's bins, all disabled, will be set up in heap h's slots, one
// class at a time (bin_enable); the heap learns where they are
// (bins_take_idle).  Setting up all 52 at once, and disabling them all at
// exit, cost a short thread about 2.5k instructions (issue #16, mleak).
void bins_attach(Heap* h) {
  HeapGuard guard(h);
  tl_bins_on = 0;
  h->thread_bins = tl_bins;
  // The record's free-stack bases: none set up (a heap orphaned by fork
  // kept its thread's).
  for (unsigned c = 0; c < kSmallClasses; ++c) h->bin_fbase[c] = nullptr;
  tl_bin_fbase = h->bin_fbase;
  h->thread_bin_bytes = tl_bin_bytes;
  h->bins_taken = false;
}

bool bin_enable(Heap* h, unsigned c) {
  Bin& bin = tl_bins[c];
  if (LM_LIKELY(bin.flimit)) return true;
  const uint32_t cap = kClasses.bin_cap_first[c];
  if (!cap || h->thread_bins != tl_bins) return false;
  Block** a = h->bin_slots + kClasses.bin_offset[c];
  Block** f = a + kClasses.bin_cap_max[c];
  const size_t at = size_t(reinterpret_cast<char*>(a) - reinterpret_cast<char*>(h));  // the record starts with h
  heap_record_touch(h, at, at + 2 * size_t(kClasses.bin_cap_max[c]) * sizeof(Block*));
  bin.top = bin.base = a;
  bin.ftop = tl_bin_fbase[c] = f;
  bin.flimit = f;
  tl_bin_cap[c] = 0;
  bin_set_cap(c, cap);
  tl_bin_misses[c] = 0;
  tl_bin_seen[c] = 0;
  tl_bin_idle[c].quiet = 0;
  tl_bin_idle[c].idled = 0;
  tl_bins_on |= uint64_t(1) << c;
  return true;
}

// REQUIRES h held.  The bins' stacks moved down to the start of their
// halves of the slots, where bins_take_idle took their older entries (it
// moves fbase, and an allocation stack's base, up and sets
// h->bins_taken): the free stack fills its half up to flimit, and the
// stacks trade places by swapping halves (bins_trade), refills fill the
// allocation stack from its base (bin_refill).  The free stack's half is
// the one flimit ends (the bin's capacity above its start); the
// allocation stack has the other.  A grown bin goes back to its starting
// capacity, or to what its stacks still hold if more: the thread was
// quiet, and a collector took its cache.
void bins_to_start(Heap* h) {
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    Bin& bin = tl_bins[c];
    if (!bin.flimit) continue;
    const uint32_t half = kClasses.bin_cap_max[c];
    Block** const slots = h->bin_slots + kClasses.bin_offset[c];
    Block** const fstart = bin.flimit - tl_bin_cap[c];
    Block** const astart = fstart == slots ? slots + half : slots;
    if (bin.base != astart) {
      // At most one entry left (the top, which the thread may still pop),
      // and never below base outside a collector's take.
      size_t n = bin.top > bin.base ? size_t(bin.top - bin.base) : 0;
      memmove(astart, bin.base, n * sizeof(Block*));
      bin.base = astart;
      bin.top = astart + n;
    }
    Block** fbase = bin_fbase(c);
    if (fbase != fstart) {
      size_t n = size_t(bin.ftop - fbase);
      memmove(fstart, fbase, n * sizeof(Block*));
      tl_bin_fbase[c] = fstart;
      bin.ftop = fstart + n;
    }
    bin_shrink(c, std::max(uint32_t(bin.top - bin.base), uint32_t(bin.ftop - fstart)));
  }
  h->bins_taken = false;
}

// Returns objects of bin c to their spans until at most `keep` remain: all
// of the allocation stack (refilled or older) and of the free stack all but
// the `keep` most recent.  The bin is brought to its final state before any
// object goes back.  REQUIRES h held; true if another heap got work.
// Never inlined: its 2 KiB array stays in its own frame, off the stack of
// callers that return a cache without it (bins_return_all at thread exit).
static LM_NOINLINE bool bin_flush_held(Heap* h, unsigned c, uint32_t keep) {
  Bin& bin = tl_bins[c];
  if (!bin.flimit) return false;
  if (h->bins_taken) bins_to_start(h);
  Block** fbase = bin_fbase(c);
  uint32_t in_free = uint32_t(bin.ftop - fbase);
  if (keep > in_free) keep = in_free;
  uint32_t from_alloc = uint32_t(bin.top - bin.base);
  uint32_t n = from_alloc + in_free - keep;
  if (n == 0) {
    bin_published(h, c);
    return false;
  }
  Block* out[2 * kBinCapMax];
  // The allocation stack bottom up is the order its objects would have gone
  // out in reversed (a refill's first object on top): copied top down, a
  // refill's stretch of consecutive objects goes back as one run
  // (return_objects_held), and the free stack's oldest follow.
  for (uint32_t i = 0; i < from_alloc; ++i) out[i] = bin.top[-1 - int64_t(i)];
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

// A consumer's overflow of bin c (bin_overflow): the thread frees objects
// of the class that other heaps own and allocates none of it, so the
// objects a flush leaves (half the bin, for a thread that allocates them
// again) would only wait here while their owner takes new memory.  The
// whole bin goes back, and a bin grown before goes back to its starting
// capacity: its overflows count as no misses (bin_event), as a bigger bin
// would only hold the objects longer.
void bin_freeing(Heap* h, unsigned c) {
  bool pending;
  {
    HeapGuard guard(h);
    pending = bin_flush_held(h, c, 0);
    bin_shrink(c);
  }
  if (pending) heap_work_arrived();
}

void bin_warm(unsigned c) { bin_grow(c, kClasses.bin_cap[c]); }

// Counts a refill or overflow of class c (a miss, unless a consumer's
// overflow: a bigger bin would only hold its objects longer, or a warming
// bin's, doubled at the miss itself: bin_warm; so growth past bin_cap
// counts only the misses of a bin at bin_cap or above).  Every kBinIdleEvents, returns
// the bins that have not changed since the last time (and a bin grown past
// bin_cap goes back to it, and their class's empty current span to the
// backend), and every kBinGrowEvents doubles the capacity of those that
// missed kBinGrowMisses times or more meanwhile and ages the classes'
// malloc marks (tl_bin_mallocs).
void bin_event(Heap* h, unsigned c, bool miss) {
  if (miss && tl_bin_misses[c] < 255) ++tl_bin_misses[c];
  IdleState& idle = tl_bin_idle[c];
  idle.active = 1;
  if (idle.idled) {
    // Back after an idle flush: was it too soon?
    idle.idled = 0;
    const unsigned looks = uint8_t(idle_look() - tl_bin_idled_look[c]);
    const unsigned waited = 1u << idle.patience;
    if (looks <= waited) {
      if (idle.patience < kBinPatienceMax) ++idle.patience;
    } else if (looks > 2 * waited && idle.patience != 0) {
      --idle.patience;
    }
  }
  if (++tl_bin_events % kBinIdleEvents != 0) return;
  const bool grow = tl_bin_events % kBinGrowEvents == 0;
  bool pending = false;
  {
    HeapGuard guard(h);
    // A growth look ages every class's marks; the others only look at the
    // bins set up (a bin not set up has nothing to flush) and at the
    // uncached classes with a span (their current span's phantom), while
    // the arenas carry no hugepage advice: under it a span lies in 2 MiB
    // pages that stay resident while any span in them is live, and one
    // given back alone is purged as a piece of a hugepage.
    const uint64_t uncached_looked = g.backend.arenas_huge() ? 0 : kUncachedClasses;
    const uint64_t walk = grow ? ~uint64_t(0) >> (64 - kSmallClasses)
                               : tl_bins_on | (h->queued_classes & uncached_looked);
    for (uint64_t m = walk; m; m &= m - 1) {
      const unsigned k = unsigned(__builtin_ctzll(m));
      const Bin& bin = tl_bins[k];
      const uint32_t misses = tl_bin_misses[k];
      if (grow) {
        tl_bin_misses[k] = 0;
        if (tl_bin_mallocs[k]) --tl_bin_mallocs[k];
      }
      IdleState& idle = tl_bin_idle[k];
      const bool active = idle.active;
      idle.active = 0;
      const bool uncached = (uncached_looked >> k) & 1;
      if (!bin.flimit && !uncached) continue;
      // An uncached class has no bin: quiet is no malloc of it since the
      // last look (bin_event's `active`; its frees go straight to the
      // span), and idle gives back its empty current span (class_idle).
      uint32_t seen = uncached ? 0 : bin_fingerprint(bin, k);
      const bool quiet = seen == tl_bin_seen[k] && !active;
      if (!quiet) {
        idle.quiet = 0;
      } else if (idle.quiet < kBinQuietMax) {
        ++idle.quiet;
      }
      if (quiet && idle.quiet >= 1u << idle.patience) {
        bool idled = false;
        if (!uncached && bin_count(bin, k) != 0) {
          pending |= bin_flush_held(h, k, 0);
          heap_count(h, HeapStat::cache_idle_flushes);
          bin_shrink(k);  // (empty now)
          seen = bin_fingerprint(bin, k);
          idled = true;
        }
        idled |= class_idle(h, k);
        if (idled) {
          idle.idled = 1;
          tl_bin_idled_look[k] = idle_look();
        }
      } else if (grow && misses >= kBinGrowMisses && tl_bin_cap[k] < kClasses.bin_cap_max[k]) {
        bin_grow(k, kClasses.bin_cap_max[k]);
      }
      tl_bin_seen[k] = seen;
    }
  }
  if (pending) heap_work_arrived();
}

// REQUIRES h held (so no collector takes from the bins meanwhile: it
// claims the heap first).  Thread exit: bin c takes nothing more (a bin
// of capacity 0: every malloc takes the slow path, every free goes
// straight to its span, bin_overflow), and what its two stacks held goes
// back to the spans from where it lies, the heap's slots, which nothing
// writes once the bin is disabled (bin_return_disabled).  No copy onto the
// stack (bin_flush_held's, 2 KiB: a short-lived thread's exit touched
// fresh stack pages with it, issue #16).  true if another heap got work.
static bool bin_return_disabled(Heap* h, unsigned c, const Bin& bin, Block** fbase);
static inline bool bin_disable_held(Heap* h, unsigned c) {
  // Most of an exiting thread's bins are empty and published as empty.
  const bool holds = bin_holds(c);
  const Bin bin = tl_bins[c];
  Block** const fbase = bin_fbase(c);
  tl_bins[c] = Bin{};
  tl_bin_fbase[c] = nullptr;
  tl_bin_trade_min.m[c] = kNoTrade;
  return holds && bin_return_disabled(h, c, bin, fbase);
}

// The two stacks lie in the two halves of the bin's slots, either way
// round (a collector's take may have left an allocation stack's base
// above the start of its half, bins_take_idle, never above its top): the
// upper one moves down onto the lower one's top, and the one run goes
// back.
static bool bin_return_disabled(Heap* h, unsigned c, const Bin& bin, Block** fbase) {
  cache_bytes_now(h, &tl_bin_bytes[c], 0);
  Block** a0 = bin.base;
  Block** a1 = bin.top > bin.base ? bin.top : bin.base;
  Block** f0 = fbase;
  Block** f1 = bin.ftop;
  if (f0 < a0) {
    std::swap(a0, f0);
    std::swap(a1, f1);
  }
  if (f1 != f0 && a1 != f0) memmove(a1, f0, size_t(f1 - f0) * sizeof(Block*));
  const uint32_t n = uint32_t((a1 - a0) + (f1 - f0));
  return n != 0 && return_objects_held(h, a0, n);
}

// Returns every object of this thread's bins to their spans; with
// `exiting`, the bins are disabled first and take nothing more (thread
// exit: bin_disable_held), and the heap forgets them.
void bins_return_all(Heap* h, bool exiting) {
  bool pending = false;
  {
    HeapGuard guard(h);
    if (!exiting && h->bins_taken) bins_to_start(h);
    // Only the bins set up can hold anything (bin_enable).
    for (uint64_t on = tl_bins_on; on; on &= on - 1) {
      const unsigned c = unsigned(__builtin_ctzll(on));
      if (exiting) {
        pending |= bin_disable_held(h, c);
      } else if (bin_holds(c)) {
        pending |= bin_flush_held(h, c, 0);
      }
    }
    if (exiting) tl_bins_on = 0;
    if (exiting && h != &g_empty_heap) {
      tl_bin_fbase = nullptr;
      h->thread_bins = nullptr;
      h->thread_bin_bytes = nullptr;
      h->bins_taken = false;
    }
  }
  if (pending) heap_work_arrived();
}

// Taking a quiet thread's cache (lm_collect_idle_heaps), with h claimed
// by the collector throughout, so that none of the thread's slow paths
// runs (they are the only other code that writes a bin's base or top, or
// moves entries).  The thread may be running its fast paths meanwhile:
// they are not excluded, so that they stay as they are.
//
// Free stacks: a free writes an entry at ftop and then publishes ftop (a
// release store), and nothing but a slow path reads or writes below ftop,
// or reads fbase; so the entries below the ftop read here are the
// collector's to take, and moving fbase up to it hands them over.
//
// Allocation stacks: a malloc loads top and base, pops `*--top` if top >
// base (bin_ready; `>`, so that a base at or above top reads as empty),
// and stores top; nothing else on the fast paths touches them.  The
// collector, for every bin with two entries or more:
//   1. (bins_take_begin) reads T0 = top, keeps the old base B, and stores
//      base = T0 - 1, for every bin of every heap of the batch;
//   2. (the caller) one process barrier (membarrier: every thread of the
//      process executes a full memory barrier before it returns);
//   3. (bins_take_idle) reads T1 = top, takes the entries [B, K) with
//      K = max(B, T1 - 1), and stores base = K.
// A pop is a sequence of instructions on the owner thread, and the
// barrier interrupts it at one point.  Pops that completed before that
// point are in T1 (the barrier publishes their stores of top).  A pop
// whose loads come after it sees base T0 - 1 (or, later, K): it pops only
// while top >= T0, that is top == T1 == T0, and takes entry T0 - 1 =
// T1 - 1 = K; top never rises while the heap is claimed.  At most one pop
// straddles the point: it loaded the old base and top == T1 before it
// (top is written by the owner only), and takes entry T1 - 1, storing
// top = T1 - 1 before or after the collector reads T1.  If after, it took
// K; if before, the collector read T1 = T - 1 where T is what the pop
// read, so the pop took entry T1, above K, and the owner may pop K itself
// once base is K (top is T1 = K + 1).  Either way the owner gets only
// entries at or above K, and top never drops below K: storing base = K
// leaves a valid stack of at most one entry.  So the collector takes all
// but one entry of the allocation stack; a class whose stack holds at most
// one object keeps it.  Without the
// barrier (the platform has none: g_heap_fence; or it failed), step 3
// puts base back to B and takes nothing from the allocation stacks.
//
// The slow paths see a stack that no longer starts at its half of the
// slots (h->bins_taken: bins_to_start moves it back before anything
// reads or fills it), or one entry where a malloc came to the slow path
// because it read a raised base (bins_trade and alloc_class pop it).
bool bins_take_begin(Heap* h) {
  Bin* bins = h->thread_bins;
  if (!bins) return false;
  bool any = false;
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    Block** base = bins[c].base;  // written by no one else meanwhile
    Block** top = __atomic_load_n(&bins[c].top, __ATOMIC_RELAXED);
    if (!base || top - base < 2) {
      h->bins_taking[c] = nullptr;
      continue;
    }
    h->bins_taking[c] = base;
    __atomic_store_n(&bins[c].base, top - 1, __ATOMIC_RELAXED);
    any = true;
  }
  return any;
}

bool bins_take_idle(Heap* h, uint64_t* bytes, bool fenced) {
  Bin* bins = h->thread_bins;
  Block*** fbases = h->bin_fbase;  // the owner's while thread_bins is set
  if (!bins) return false;
  bool pending = false;
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    Block* out[2 * kBinCapMax];
    uint32_t n = 0;
    // The allocation stack (bins_take_begin moved its base up).
    Block** b = h->bins_taking[c];
    if (b) {
      h->bins_taking[c] = nullptr;
      Block** keep = b;
      if (fenced) {
        Block** t1 = __atomic_load_n(&bins[c].top, __ATOMIC_RELAXED);
        if (t1 - b > 1) keep = t1 - 1;
      }
      n = uint32_t(keep - b);
      memcpy(out, b, n * sizeof(Block*));
      __atomic_store_n(&bins[c].base, keep, __ATOMIC_RELAXED);
    }
    // The free stack.
    Block** fbase = fbases[c];
    Block** ftop = __atomic_load_n(&bins[c].ftop, __ATOMIC_ACQUIRE);
    if (fbase && ftop != fbase) {
      uint32_t k = uint32_t(ftop - fbase);
      memcpy(out + n, fbase, k * sizeof(Block*));
      n += k;
      __atomic_store_n(&fbases[c], ftop, __ATOMIC_RELAXED);
    }
    if (n == 0) continue;
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
// or its span.  So does the free that gives a thread its heap: a new
// thread's cache does not start with an object another thread allocated,
// whose cache line that thread's other objects share (a worker handed
// small objects by the thread that started it would otherwise write, in
// its first allocations, the lines its neighbours write: cache-scratch).
LM_NOINLINE void bin_overflow(Span* s, void* p) {
  const bool had_heap = tl_heap != &g_empty_heap;
  Heap* h = heap_on_demand(tl_heap);
  const unsigned c = s->cls;
  Bin& bin = tl_bins[c];
  if (!bin.flimit || !had_heap) {
    bool cached = false;
    if (had_heap) {
      HeapGuard guard(h);
      cached = bin_enable(h, c);  // (not in secure mode, nor for uncached classes)
    }
    if (!cached) {
      if (g_secure) {
        secure_free(h, s, p);
      } else {
        return_object(h, s, p);
      }
      return;
    }
  }
  if (bin.ftop == bin.flimit) {
    if (LM_UNLIKELY(bin_warming(c))) {
      // A warming bin keeps what it was freed: its free stack's limit
      // moves up.
      {
        HeapGuard guard(h);
        bin_warm(c);
        bin_published(h, c);
      }
      bin_event(h, c, false);  // (the doubling was the miss's answer)
    } else {
      // No malloc of the class for two looks at the bins (tl_bin_mallocs),
      // and the object is another heap's: a consumer of the class, whose
      // whole bin goes back (bin_freeing).
      const bool consumer = tl_bin_mallocs[c] == 0 && __atomic_load_n(&s->heap, __ATOMIC_RELAXED) != h;
      if (consumer) {
        bin_freeing(h, c);
      } else {
        bin_flush(h, c, tl_bin_cap[c] / 2);
      }
      heap_count(h, HeapStat::cache_flushes);
      class_count(h, c, ClassStat::flushes);
      bin_event(h, c, !consumer);
    }
  }
  Block** t = bin.ftop;
  if (LM_UNLIKELY(t == bin.flimit)) {
    // Full again: after a collector's take, bins_to_start puts the stacks
    // back and a grown bin back to bin_cap, which can leave the free stack
    // at its new limit.  It runs in the flush (which keeps half the
    // capacity it was called with, the old one) and in bin_event's look at
    // the bins, with the heap let go since the flush.  p goes to its span.
    // (Pushed, it went one entry past the limit, which no later push tests
    // for: the stack ran on into the next class's slots and the next heap
    // record.)
    return_object(h, s, p);
    return;
  }
  *t = static_cast<Block*>(p);
  publish_ftop(bin, t + 1);
}

}  // namespace lazymalloc::detail
