// Thread caches ("bins", heap.h) and the class table the malloc fast path
// reads.  Inline here: what lm_malloc and lm_free use (the bins, the class
// lookups, bin_pop); the slow paths are in bins.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/span.h"
#include "core/bits.h"
#include "frontend/checks.h"
#include "frontend/heap.h"
#include "frontend/size_class.h"

#pragma GCC visibility push(hidden)

namespace lazymalloc::detail {

// A thread's cache of free objects of one size class (heap.h): two stacks
// of their addresses, in the thread's heap (Heap::bin_slots), each of at
// most the bin's capacity (tl_bin_cap) entries.  malloc pops from the allocation stack
// [base, top) while top > base (bin_ready); free pushes onto the free stack
// [fbase, ftop), full at flimit; when the allocation stack runs dry the two
// trade places (bins_trade), or, if the free stack holds fewer than
// trade_min(c) objects, the allocation stack is refilled (heap.h).  A collector may take both stacks of a quiet thread
// (bins_take_begin, bins_take_idle: base moves up, so top may lie below it
// for a while).  Two
// stacks, so that a malloc does not read what the last free of its class
// just wrote (one list made every malloc/free pair a chain of
// store-to-load forwards: alloc-pair-1t measured 58-67M pairs/s against
// 87M with two intrusive lists).  The objects hold no link while cached:
// nothing a program writes into a freed object can misdirect a bin.  All
// null (a bin of capacity 0) until the thread's first slow path of the
// class with a heap (a refill or an overflow sets it up: bin_enable), from
// thread exit on, for classes above kCachedMax, and always in secure mode:
// then every malloc takes the slow path and every free "overflows"
// (bin_overflow).
struct alignas(32) Bin {
  Block** top;
  Block** base;
  Block** ftop;
  Block** flimit;
};
// Defined in bins.cc; constinit, so other files reach them without a TLS
// init wrapper.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local Bin tl_bins[kSmallClasses];
// Where each free stack starts (slow paths only): the heap's record holds
// them (HeapRecord::bin_fbase), this thread's heap's while its bins are
// attached (bins_attach), else nullptr: kSmallClasses pointers of static
// TLS per thread were a page fault for every new thread once the classes
// grew (issue #16, fourteenth round).  Read with bin_fbase.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local Block*** tl_bin_fbase;
inline Block** bin_fbase(unsigned c) {
  Block*** const a = tl_bin_fbase;
  return a ? a[c] : nullptr;
}
// Each bin's capacity now (slow paths only): each stack holds at most
// this many, and a free stack's flimit lies this far above the start of
// its half of the slots.  From kClasses.bin_cap_first up to bin_cap_max
// (heap.h); written only by the thread (bin_set_cap), never by a collector.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local uint8_t tl_bin_cap[kSmallClasses];
// Whether the thread allocated from each class lately: 2 when a malloc
// of the class came to alloc_class (every malloc does that once an
// overflow or a refill's end emptied the allocation stack), one less at
// each look at the bins that judges growth (bin_event, every kBinGrowEvents refills and
// overflows of the thread), so 0 after two looks with no such malloc
// (slow paths only; bin_overflow reads it).
extern constinit __attribute__((tls_model("initial-exec"))) thread_local uint8_t tl_bin_mallocs[kSmallClasses];
// The fewest objects each free stack must hold to trade places with its
// allocation stack (bins_trade): trade_min(c), or kNoTrade while the bin
// warms (its capacity below bin_cap: bin_set_cap), and for a bin not set
// up (so bins_trade never trades its null stacks).
inline constexpr uint8_t kNoTrade = 255;  // above any capacity (kBinCapMax)
static_assert(kNoTrade > kBinCapMax);
struct TradeMins {
  uint8_t m[kSmallClasses];
};
constexpr TradeMins no_trades() {
  TradeMins t{};
  for (uint8_t& m : t.m) m = kNoTrade;
  return t;
}
extern constinit __attribute__((tls_model("initial-exec"))) thread_local TradeMins tl_bin_trade_min;

// Sizes the malloc fast path serves and bins cache: up to kDirectMax by
// 16-byte steps, then up to kCachedMax (heap.h) by 256-byte steps (every
// class above 1 KiB is a multiple of 256, so rounding up to one keeps the
// class).
inline constexpr unsigned kMidSlots = kCachedMax / 256 + 1;

struct ClassTable {
  uint8_t slot_class[kDirectSlots];  // (size + 15) / 16 -> class, sizes <= kDirectMax
  uint8_t mid_class[kMidSlots];      // (size + 255) / 256 -> class, sizes <= kCachedMax
  uint8_t units[kSmallClasses];
  uint8_t bin_cap_first[kSmallClasses];  // a bin's first capacity
  uint8_t bin_cap[kSmallClasses];      // what it grows to at every miss (warming)
  uint8_t bin_cap_max[kSmallClasses];  // and the most it grows to (each stack's half of the slots)
  uint8_t trade_min[kSmallClasses];
  uint16_t bin_offset[kSmallClasses];  // into Heap::bin_slots
  uint64_t magic[kSmallClasses];
};
// Fills table[i] with the smallest class of at least i * step bytes.
constexpr void fill_slot_classes(uint8_t* table, unsigned slots, size_t step) {
  unsigned c = 0;
  for (unsigned i = 0; i < slots; ++i) {
    while (class_size(c) < i * step) ++c;
    table[i] = uint8_t(c);
  }
}

constexpr ClassTable make_class_table() {
  ClassTable t{};
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    t.units[c] = uint8_t(span_units(c));
    t.bin_cap_first[c] = uint8_t(bin_cap_first(c));
    t.bin_cap[c] = uint8_t(bin_cap(c));
    t.bin_cap_max[c] = uint8_t(bin_cap_max(c));
    t.trade_min[c] = uint8_t(trade_min(c));
    t.bin_offset[c] = uint16_t(bin_slot_offset(c));
    t.magic[c] = class_magic(class_size(c));
  }
  fill_slot_classes(t.slot_class, kDirectSlots, 16);
  fill_slot_classes(t.mid_class, kMidSlots, 256);
  return t;
}
constexpr ClassTable kClasses = make_class_table();

// The class of a size the malloc fast path serves: direct_class up to
// kDirectMax, mid_class_of above it up to kCachedMax.
constexpr unsigned direct_class(size_t size) { return kClasses.slot_class[(size + 15) >> 4]; }
constexpr unsigned mid_class_of(size_t size) { return kClasses.mid_class[(size + 255) >> 8]; }
constexpr unsigned cached_class(size_t size) {
  return size <= kDirectMax ? direct_class(size) : mid_class_of(size);
}

// The fast path's class of every size it serves is the smallest that fits.
constexpr bool fast_classes_match() {
  unsigned want = 0;  // found incrementally (compilers' constexpr step limits)
  for (size_t size = 1; size <= kCachedMax; ++size) {
    while (class_size(want) < size) ++want;
    if (cached_class(size) != want) return false;
  }
  return true;
}

// Publishes a free stack's new top after the entry below it was written
// (a release store: the background thread takes what lies below the top,
// bins_take_idle).  On x86, whose stores are not reordered with each
// other, a compiler barrier and a plain store: GCC gives the atomic store
// a fresh thread-local address computation, three more instructions on
// the free fast path.  Elsewhere, and under TSan, which must see it, an
// atomic release store.
LM_INLINE void publish_ftop(Bin& bin, Block** top) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(std::memory_order_release);
  bin.ftop = top;
#else
  __atomic_store_n(&bin.ftop, top, __ATOMIC_RELEASE);
#endif
}

// The allocation stack's base and top as the pops (bin_ready, bin_pop)
// read and write them while a collector may read top and move base
// (bins_take_begin, bins_take_idle): relaxed atomics.  On x86 plain
// accesses, which compile to the same loads and stores: GCC gives the
// atomic ones a fresh thread-local address computation, more instructions
// on the malloc fast path.  Under TSan, which must see them, atomics.
LM_INLINE Block** bin_base(const Bin& bin) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  return bin.base;
#else
  return __atomic_load_n(&bin.base, __ATOMIC_RELAXED);
#endif
}
LM_INLINE void bin_set_top(Bin& bin, Block** top) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  bin.top = top;
#else
  __atomic_store_n(&bin.top, top, __ATOMIC_RELAXED);
#endif
}

// bin's allocation stack holds an object for this thread's malloc: top
// above base, not just different (a collector that takes the stack moves
// base up to or past top: bins_take_begin).  The same cmp and one
// conditional jump as `!=`.
LM_INLINE bool bin_ready(const Bin& bin) { return bin.top > bin_base(bin); }

// Pops the top of bin's allocation stack, which is ready (the malloc fast
// path).  With checks, clears the object's tag.  The new top is stored
// before the entry is read: GCC then reads the entry straight into the
// return register (read first, it goes elsewhere and costs a move).  (The
// collector never takes the entry a pop reads, whichever order: see
// bins_take_begin.)
LM_INLINE Block* bin_pop(Bin& bin) {
  Block** t = bin.top - 1;
  bin_set_top(bin, t);
  Block* b = *t;
  if constexpr (kChecks) tag_word(b) = 0;
  return b;
}

LM_NOINLINE void bin_overflow(Span* s, void* p);

// Caches free object p (tagged) of small span s on this thread's bin of
// its class, whichever heap owns the span (the free fast path), or
// overflows.
LM_INLINE void bin_push(Span* s, void* p) {
  Bin& bin = tl_bins[s->cls];
  Block** t = bin.ftop;
  if (LM_UNLIKELY(t == bin.flimit)) return bin_overflow(s, p);
  *t = static_cast<Block*>(p);
  publish_ftop(bin, t + 1);
}

// The slow paths (bins.cc).
void bins_to_start(Heap* h);

// REQUIRES the thread's heap h held, with no collector's take left in its
// bins (!h->bins_taken: bins_to_start first): if bin c's allocation stack
// is empty and its free stack holds at least trade_min(c) objects (a
// warming bin never trades: tl_bin_trade_min), they trade places; true if
// they did.  The allocation stack may hold an entry
// although the malloc that came here saw none (a collector had moved its
// base up meanwhile, and put it back: bins_take_idle): then nothing trades.
inline bool bins_trade(unsigned c) {
  Bin& bin = tl_bins[c];
  Block** fbase = bin_fbase(c);
  if (bin.ftop - fbase < tl_bin_trade_min.m[c] || bin.top != bin.base) return false;
  Block** empty = bin.base;
  bin.base = fbase;
  bin.top = bin.ftop;
  tl_bin_fbase[c] = bin.ftop = empty;
  bin.flimit = empty + tl_bin_cap[c];
  return true;
}

// REQUIRES the thread's heap held, bin's free stack not empty, and b an
// object just taken from a span (untagged): b takes the place of the free
// stack's top, which is returned, the object freed last and likely in
// cache (alloc_refill: a free stack too short to trade still hands out
// what it holds first).  b is tagged before it is listed, and the top
// untagged after it is not (fork: see take).
inline Block* bin_swap_free_top(Bin& bin, Block* b) {
  Block** slot = bin.ftop - 1;
  Block* hot = *slot;
  set_free_tag(b);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  *slot = b;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if constexpr (kChecks) tag_word(hot) = 0;
  return hot;
}

// Bin c warms: its capacity is below bin_cap(c) (heap.h, bins.cc: bin_set_cap).
inline bool bin_warming(unsigned c) { return tl_bin_cap[c] < kClasses.bin_cap[c]; }
// REQUIRES bin c set up and warming (this thread only): a miss (a refill
// or an overflow) doubles its capacity, up to bin_cap(c).
void bin_warm(unsigned c);

// REQUIRES the thread's heap held, bin c warming and just refilled, its
// free stack not empty, and b an object just taken from a span (untagged).
// The free stack's objects go on top of the allocation stack, above b, the
// most recently freed on top, and that one is returned (there is room: each
// stack's half of the slots holds twice a warming capacity, heap.h).  A
// warming bin does not trade (a trade keeps the bin's count, and one
// object in flight would trade a bin of a few objects for ever); it keeps
// what it was freed all the same, and what was freed last comes back first.
LM_NOINLINE Block* bin_absorb_free(Bin& bin, unsigned c, Block* b);

void bin_refill(Bin& bin, unsigned c, Span* s);
void bin_flush(Heap* h, unsigned c, uint32_t keep);

// A collector's take of a quiet thread's cache, in two steps around one
// process barrier (bins.cc explains why it is safe).  REQUIRES h claimed by
// a collector, from bins_take_begin until bins_take_idle: bins_take_begin
// moves up the base of each allocation stack of h's thread that holds two
// objects or more (true if it moved any); then, once every thread has
// executed a memory barrier (`fenced`: heaps_barrier returned true),
// bins_take_idle takes the free stacks and all but the top entry of those
// allocation stacks back to their spans (adds their bytes to *bytes);
// without the barrier it puts the bases back and takes the free stacks
// only.  true if another heap got work.
bool bins_take_begin(Heap* h);
bool bins_take_idle(Heap* h, uint64_t* bytes, bool fenced);
void bin_event(Heap* h, unsigned c, bool miss = true);
void bin_freeing(Heap* h, unsigned c);
// Publishes the bytes bin c holds now in heap h's cache_bytes (slow paths
// only: the fast paths never count).
void bin_published(Heap* h, unsigned c);
// Tells heap h, which this thread now owns, where the thread's bins are
// (bins_take_idle); they are set up one class at a time (bin_enable).
void bins_attach(Heap* h);
// REQUIRES h (this thread's) held.  If this thread's bin c is not set up
// and may be (a class that is cached, bins attached to h: not in secure
// mode, nor after the thread's exit), points it at h's slots with its
// first capacity; true if bin c is set up (now or before).
bool bin_enable(Heap* h, unsigned c);
void bins_return_all(Heap* h, bool exiting);

}  // namespace lazymalloc::detail

#pragma GCC visibility pop
