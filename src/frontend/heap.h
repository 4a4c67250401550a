// Thread heaps and the allocation entry points of lazymalloc.
//
// Each thread keeps a cache of free small objects per size class (a "bin":
// two bounded stacks of addresses, outside the objects): malloc pops from
// one and free pushes onto the other whichever thread's span the object
// came from, with no lock and no atomic read-modify-write.  An empty bin
// refills with a batch from the thread's spans; a full one returns the
// older part to the objects' spans: the owner's go on the span's local
// list, other threads' on the span's atomic `xfree` list (one CAS per run
// of objects of one span), so cross-thread frees never take a global lock.
//
// Each heap keeps, per size class, a queue of spans with free objects;
// spans that ran out wait on the heap's full list; the first remote free
// into one pushes it on the heap's lock-free `delayed` list, from which the
// owner revives it (the xfree state bits in span.h).
//
// Heaps outlive threads: at thread exit the bins go back to their spans, a
// heap returns its empty spans to the backend and goes to a pool; the next
// new thread adopts it, so thread churn reuses warm spans.  After fork() the
// child pools every heap but the forking thread's (the objects other
// threads' bins held stay allocated there).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/span.h"
#include "core/stats.h"
#include "frontend/size_class.h"

namespace lazymalloc {
namespace detail {
struct Bin;
}

struct SpanQueue {
  Span* head = nullptr;
  Span* tail = nullptr;
};

// Secure mode: freed small objects wait in a per-heap FIFO before they go
// back on a free list (delayed reuse).
inline constexpr unsigned kQuarantineSlots = 128;
inline constexpr size_t kQuarantineBytes = size_t(1) << 20;

// Thread caches (bins.h, bins.cc): sizes up to kCachedMax are cached.  A
// bin is two stacks of free objects' addresses, each of at most the
// bin's capacity (at most 128 objects, and at least kBinCapMin), in its
// heap's `bin_slots`.  A thread's bin of a class is set up at the class's
// first slow path in the thread (bin_enable, bins.cc), with capacity
// bin_cap_first(c) (4 objects), and grows by doubling (bin_grow): while it
// is below bin_cap(c) (16 KiB of objects: the bin "warms"), at every miss
// (refill or overflow), and from there, for a class that keeps missing
// (kBinGrowMisses in a window of the thread's slow paths), up to
// bin_cap_max(c) (64 KiB).  An idle flush or a collector's take puts a bin
// grown past bin_cap(c) back to it (bins.cc: bin_event, bins_to_start).
// A short-lived thread takes and returns a few objects per class, where a
// first refill of bin_cap objects cost it about 4k instructions (issue
// #16, mleak).  The slots are sized for bin_cap_max.
//
// Classes above 4 KiB hold kBinCapMin objects, more than 16 KiB (issue
// #16, fourteenth round): with one object above 8 KiB (two or three from
// 5 KiB), `mixed`'s 8-32 KiB objects took a slow path at every other malloc
// and free (1.3-1.6 objects a refill, per-class statistics), and its rate
// was 0.90x tcmalloc's; with four, 0.93x, its peak RSS 17.7 MiB against
// 16.7 (glibc's 25).
inline constexpr size_t kCachedMax = 32768;
inline constexpr uint32_t kBinCapMax = 128;
inline constexpr uint32_t kBinCapMin = 4;
constexpr uint32_t bin_cap_bytes(unsigned c, size_t bytes) {
  size_t size = class_size(c);
  if (size > kCachedMax) return 0;
  size_t n = bytes / size;
  return uint32_t(n > kBinCapMax ? kBinCapMax : n < kBinCapMin ? kBinCapMin : n);
}
constexpr uint32_t bin_cap(unsigned c) { return bin_cap_bytes(c, 16384); }
constexpr uint32_t bin_cap_max(unsigned c) { return bin_cap_bytes(c, 65536); }
inline constexpr uint32_t kBinCapFirst = 4;
constexpr uint32_t bin_cap_first(unsigned c) { return bin_cap(c) < kBinCapFirst ? bin_cap(c) : kBinCapFirst; }
// The fewest objects class c's free stack must hold for the two stacks to
// trade places when the allocation stack runs dry: two (one for the classes
// not cached, whose bin_cap is 0).  A free stack of one object is not traded: the allocation stack
// is refilled from the spans, and the free stack's object is handed out
// (the refill's first object takes its place: alloc_refill, spans.cc).  A trade keeps the bin's count, and so does a
// program that allocates as much as it frees (p = malloc(n); free(q);
// q = p: one object in flight): a bin holding one object (after a
// collector's take, or a refill from a span with one free object) traded
// on every malloc, for ever (issue #16).  Refilled instead, it keeps what
// the refill brought (up to bin_cap objects, as a first refill), and
// trades once per that many mallocs (after an overflow, bin_cap / 2 + 1).
// At most what an overflow leaves in the free stack (bin_flush), so that a
// bin that overflows and runs dry in turn trades rather than refills.
constexpr uint32_t trade_min(unsigned c) { return bin_cap(c) <= 1 ? 1 : 2; }
// (A warming bin does not trade: bin_set_cap.)
constexpr bool trade_min_below_overflow_rest() {
  for (unsigned c = 0; c < kSmallClasses; ++c)
    if (trade_min(c) > bin_cap(c) / 2 + 1 || bin_cap_first(c) > bin_cap(c)) return false;
  return true;
}
static_assert(trade_min_below_overflow_rest());
// A warming bin (capacity below bin_cap, doubling at every miss) may hold
// twice its capacity in one stack for a moment (bin_absorb_free, an
// overflow's growth): each stack's half of the slots (bin_cap_max) has room.
constexpr bool warming_fits() {
  for (unsigned c = 0; c < kSmallClasses; ++c)
    for (uint32_t cap = bin_cap_first(c); cap < bin_cap(c); cap *= 2)
      if (2 * cap > bin_cap_max(c)) return false;
  return true;
}
static_assert(warming_fits());
// Where class c's two stacks start in bin_slots, and how many slots a heap has.
constexpr size_t bin_slot_offset(unsigned c) {
  size_t n = 0;
  for (unsigned k = 0; k < c; ++k) n += 2 * size_t(bin_cap_max(k));
  return n;
}
inline constexpr size_t kBinSlots = bin_slot_offset(kSmallClasses);

// A thread's cache of freed large blocks (above kMaxSmall up to kMaxLarge)
// holds at most this many, and at most option large_cache bytes, the large
// bytes the thread holds live, and its peak of them less those
// (large.cc).
inline constexpr uint32_t kLargeCacheSlots = 8;

inline constexpr uint64_t kBackgroundAfterBytes = uint64_t(1) << 20;

// A refill about to take a new span from the backend first looks for
// parked spans other threads freed into in heaps whose thread has made no
// slow-path event since the previous look (adopt_spans, spans.cc): at most
// once per this many of its own slow-path events, at most kAdoptProbeHeaps
// heaps with parked spans, among at most kAdoptProbeWalk heap records from
// where the previous look stopped.
inline constexpr uint64_t kAdoptProbeEvents = 16;
inline constexpr unsigned kAdoptProbeHeaps = 16;
inline constexpr unsigned kAdoptProbeWalk = 64;
// Only a parked span with at most capacity >> kAdoptLiveShift objects
// still live (or cached) is adopted (adoptable, spans.cc); the others stay
// with their owner, on its delayed stack.  Taking over a span its owner
// still mostly uses makes the owner take a fresh one at its next refill,
// and the adopter's objects in it pin it: two threads that pause in turn
// (rptest) then hand spans back and forth and both keep growing.
inline constexpr unsigned kAdoptLiveShift = 2;

// Exclusion: a heap's spans (queues, the full list, each span's lists and
// `used`) belong to its thread while it is in a slow path (refills, cache
// flushes, collection: `busy`), or to a collector that claimed the heap
// (`claimed`: the background thread taking back a quiet or exited thread's
// remote frees and empty spans and purging the free pages inside its spans,
// lm_collect_idle_heaps; fork).  An
// asymmetric Dekker handshake (HeapGuard and heaps_claim,
// frontend/internal.h): the thread only stores `busy` and loads `claimed`,
// no atomic read-modify-write and no fence, because the collector, which
// is rare, makes every thread execute a memory barrier (membarrier(2))
// between its store of `claimed` and its load of `busy`.  The fast paths
// touch only the thread's bins, never these.  Empty spans found go on
// `to_release` and back to the backend once the heap is let go: the
// backend may start a thread, which may allocate.
struct Heap {
  std::atomic<uint32_t> busy{0};     // written by the heap's thread only
  std::atomic<uint32_t> claimed{0};  // 0; 1: a collector holds the heap; 2: and its thread waits
  Span* to_release = nullptr;       // REQUIRES busy or claimed: empty spans, linked by `next`
  // Slow-path events (refills and flushes, counted by HeapGuard); the background
  // thread compares them across its passes to see that the heap is idle.
  uint64_t slow_events = 0;
  uint64_t idle_seen_events = 0;    // background thread only
  uint64_t idle_seen_ns = 0;        // background thread only: when slow_events last changed
  bool idle_collected = false;      // background thread only: collected in this idle episode
  // Background thread only: how long the heap must have been quiet for the
  // next pass over its spans' free pages (span_purge.cc): 0 for the first
  // pass of an idle episode (the collector's span_idle_ns), ~0 for none.
  uint64_t span_purge_wait = 0;
  // Background thread only: when its last pass gave pages inside its spans
  // MADV_FREE (0: none LAZY since the last second-stage pass), and the
  // longer LAZY age that pass's hysteresis asked for (0: lazy_decay_ms).
  uint64_t span_lazy_ns = 0;
  uint64_t span_lazy_wait = 0;
  // Another thread returned objects to one of this heap's spans since the
  // last collection (remote_push): an idle heap is collected again.
  std::atomic<bool> remote_pending{false};
  // A remote free left a span that was already on the delayed stack
  // (NOTIFIED) with at most capacity >> kAdoptLiveShift objects outstanding
  // (remote_push): a span the last adoption look kept may be adoptable now.
  // Cleared by the adopter that claims the heap (adopt_spans).
  std::atomic<bool> adopt_ready{false};
  // Bytes of objects returned to this heap's own spans since the collector
  // was last told (REQUIRES busy or claimed): every kBackgroundAfterBytes
  // the background collector is made due (heap_work_arrived), so that the
  // free pages inside the spans (span_purge.cc) of a program that frees most
  // of its objects but empties no span go back.
  uint64_t returned_bytes = 0;
  SpanQueue queue[kSmallClasses] = {};
  // The classes whose queue may hold spans (REQUIRES busy or claimed; a
  // superset: set by queue_changed, cleared by heap_collect once empty),
  // so that collecting a short thread's heap walks only its classes.
  uint64_t queued_classes = 0;
  Span* head_ref[kSmallClasses] = {};  // holds a phantom object (queue_changed)
  // Sparse spans (spans.cc, span_keep): empty ones kept with their class
  // (linked by `next`, at most kKeptSpans a class, and at most
  // `sparse_bytes` in all) for the class's next span, which then touches the
  // same pages again; bytes of the heap's sparse spans not kept.  REQUIRES
  // busy or claimed.
  Span* kept[kSmallClasses] = {};
  uint8_t kept_count[kSmallClasses] = {};
  uint64_t kept_bytes = 0;
  uint64_t sparse_bytes = 0;
  Span* full = nullptr;             // spans with no free object (doubly linked)
  std::atomic<Span*> delayed{nullptr};
  // Span adoption (spans.cc, adopt_spans): this heap's slow_events as the
  // last thread that looked for spans to adopt saw them (written by any
  // adopter, under g.collect_lock); and, for this heap's own thread, its
  // slow_events at its last look (it looks at most every
  // kAdoptProbeEvents).
  uint64_t adopt_seen_events = 0;
  uint64_t adopt_probe_events = 0;
  // The delayed stack's head as the last adopter that claimed this heap
  // left it, when it left only spans it had judged and kept (nullptr:
  // none, or the stack changed hands since).  Written by that adopter (heap
  // claimed), by an adopter that saw the heap's events change, and by
  // process_delayed, which empties the stack; read by adopters unclaimed
  // (atomic builtins, relaxed).
  Span* adopt_kept = nullptr;
  HeapStats stats;
  Heap* next_all = nullptr;         // every heap ever made
  Heap* next_pool = nullptr;        // heaps without a thread
  bool owned = false;
  // The heap's owner of unit slots (1..kOwners, given in turn as heaps are
  // made; 0: the empty heap, shared slots only): its large blocks go into
  // its own slots first once its large cache is warm and it has held 2 MiB
  // of them at once (large_owner; Backend::alloc, choose_units), and its
  // small spans may go there.  A
  // thread that adopts the heap adopts its slots.
  uint8_t owner = 0;
  // Secure mode only.
  void* quarantine[kQuarantineSlots] = {};
  unsigned quarantine_next = 0;     // oldest entry (the next to leave)
  size_t quarantine_bytes = 0;
  uint64_t rng = 0;                 // carve shuffles (xorshift)
  // kBinSlots entries for the owning thread's bins, in the heap's record
  // (HeapRecord, frontend/internal.h).
  Block** bin_slots = nullptr;
  // The statistics of each size class (kSmallClasses), in the heap's record
  // too; nullptr for the shared empty heap (class_count).
  ClassStats* class_stats = nullptr;
  // The free-stack bases of its thread's bins (kSmallClasses), in the
  // heap's record too (bins.h, tl_bin_fbase); nullptr for the shared empty
  // heap.
  Block*** bin_fbase = nullptr;
  // The pages of the heap's record (bit i: page i) counted in
  // metadata_bytes: the heap's own, then those its classes' stacks lie on,
  // from each class's first use by a thread of the heap (bin_enable).
  // Written by the thread that holds the heap.
  uint32_t record_pages = 0;
  // The owning thread's bins (its thread-local tl_bins, and bin_fbase),
  // for a collector (bins_take_idle); null when no thread owns the heap.
  // Written with the heap held.
  detail::Bin* thread_bins = nullptr;
  uint32_t* thread_bin_bytes = nullptr;  // its tl_bin_bytes (bins.cc, bin_published)
  // REQUIRES busy or claimed: bins_take_idle moved an fbase or a base up
  // (bins_to_start moves the stacks back to the start of their slots).
  bool bins_taken = false;
  // Collector only: the base of each allocation stack that bins_take_begin
  // moved up, until bins_take_idle (null: none).
  Block** bins_taking[kSmallClasses] = {};
  // Freed large blocks kept for the thread's next large mallocs, most recent
  // last (large.cc).  REQUIRES busy or claimed.
  Span* large_cache[kLargeCacheSlots] = {};
  uint32_t large_cached = 0;
  uint64_t large_cache_bytes = 0;  // of the blocks in large_cache (not large_evicted)
  // The block the cache evicted last, still marked cached (a second free
  // aborts): the next miss gives it back in the same backend lock hold as
  // its allocation, whose run may then take its units.
  Span* large_evicted = nullptr;
  // A span record left over from a join in the cache, for the next split
  // (large.cc): a thread that cuts and joins its blocks in turn takes no
  // record from the process-wide pool.  Freed with the cache.
  Span* large_spare = nullptr;
  // Large bytes the thread allocated less those it freed, never below 0
  // (others' frees of its blocks count on their heaps, down to 0; 0 again
  // when the thread exits): the cache holds at most as much
  // (large_cache_cap).  Written by the thread.
  uint64_t large_live = 0;
  // The most large_live has been since the last lm_thread_collect or thread
  // exit (large_peak_reset): the cache holds at most large_peak -
  // large_live (large_cache_cap).  Written by the thread.
  uint64_t large_peak = 0;
  // The cache warms (large_cache_put): it takes blocks only once the thread
  // has allocated a large block after freeing one (`large_freed`, then a
  // miss sets `large_warm`); both false again when the thread exits.
  // Written by the thread.
  bool large_freed = false;
  bool large_warm = false;
};

// ---- allocation API (what override/ exports under the standard names) ----
void* lm_malloc(size_t size);
void* lm_calloc(size_t count, size_t size);
void* lm_realloc(void* p, size_t size);
void* lm_aligned(size_t size, size_t align);  // align: power of two
void lm_free(void* p);
size_t lm_usable_size(const void* p);

// ---- process-wide services ----
void lm_init();  // idempotent; called on first use
int lm_trim();   // malloc_trim: collect this thread's heap, purge all (DONTNEED)
size_t lm_purge(bool now);
size_t lm_pressure_notify();  // as if the system reported memory pressure
void lm_limits(uint64_t* soft, uint64_t* hard);
bool lm_set_limits(uint64_t soft, uint64_t hard);  // false if out of range
void lm_thread_collect();
// Background thread (and tests): returns the remote frees and empty spans
// of heaps whose thread has made no refill or flush for `idle_ns`, or has
// exited, to the backend; of those quiet for `span_idle_ns` (kNoSpanPurge:
// never) it also purges the whole pages of their spans that hold only free
// objects (span_purge.cc), each span waiting span_idle_ns << its
// hysteresis shift until `hysteresis_until` (0: no hysteresis).  Pages
// it gave MADV_FREE get MADV_DONTNEED once they have been LAZY for
// `span_lazy_ns` (lazy_decay_ms; kNoSpanPurge: never), each span waiting
// span_lazy_ns << its shift until `lazy_until` (the second stage).  Returns
// the spans released; *next_due (if given) gets when a heap will next be
// due (~0: none has anything to give).
inline constexpr uint64_t kNoSpanPurge = ~uint64_t(0);
size_t lm_collect_idle_heaps(uint64_t now_ns, uint64_t idle_ns, uint64_t* next_due = nullptr,
                             uint64_t span_idle_ns = kNoSpanPurge, uint64_t hysteresis_until = 0,
                             uint64_t span_lazy_ns = kNoSpanPurge, uint64_t lazy_until = 0);
void lm_memory_state(uint64_t out[5]);
size_t lm_stats_write(char* buf, size_t len, bool json);
void lm_stats_print(bool json, int fd = 2);
// The report at exit: to LAZYMALLOC_STATS_FILE if set (and openable), else
// to the copy of stderr taken at start-up.
void lm_stats_at_exit(bool json);
int lm_stats_fd();
// Tests: every OS effect of the process-wide allocator goes through
// `platform` from now on (a fake one injects faults); arenas already
// reserved stay valid.
void lm_set_platform(const Platform* platform);
// The platform every OS effect of the process-wide allocator goes through.
const Platform* lm_platform();
const char* lm_check_invariants();  // tests: nullptr, or the first broken invariant  // where statistics at exit go (a copy of stderr)
int lm_stat_get(const char* name, uint64_t* value);  // a statistic or a held row
// The held rows (kHeldCount values: where the bytes are) from one snapshot
// of the statistics; *huge (if given) gets huge_bytes from the same one.
void lm_held_state(uint64_t* held, uint64_t* huge = nullptr);
// Discardable memory (purge/discard.h).  lock: 0 intact, 1 discarded, -1
// with errno EINVAL (not a block) or EOVERFLOW.
void* lm_discardable_alloc(size_t size);
bool lm_discardable_free(void* p);   // false: not a block
int lm_discardable_lock(void* p);
bool lm_discardable_unlock(void* p);  // false: not a block or not locked
size_t lm_discardable_size(const void* p);
size_t lm_discardable_purge();        // discards every unlocked block now
// Tests: the word a freed small object at p carries in its second word
// while it is free (checks on).
uintptr_t lm_free_tag(const void* p);
// Report an invalid pointer passed to `fn` and abort.
[[noreturn]] void lm_invalid_pointer(const char* fn, const void* p, const char* why);

}  // namespace lazymalloc
