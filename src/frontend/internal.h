// The frontend's shared internals: the composition root (Global: the one
// backend, purger, releaser and discardable engine of the process, and the
// heaps), the thread's heap, and what each frontend file offers the others.
// Hidden from the library's users (visibility push below: a hidden
// declaration lets the compiler address these globals directly).
//
// Where things live (docs/design.md, "Frontend"):
//   heap.h        Heap, the bins' geometry, the lm_* API
//   checks.{h,cc} free tags, link encoding, misuse checks, failure paths
//   bins.{h,cc}   thread caches and the class table of the fast path
//   spans.cc      span queues, remote frees, refills, returns to spans
//   span_purge.cc free pages inside spans: purge, dormant objects, revival
//   large.cc      large and huge blocks, giving spans back
//   quarantine.cc secure mode's quarantine
//   runtime.cc    this file's globals, init, fork, thread exit, heap pool,
//                 statistics, limits, discardable API
//   malloc.cc     malloc, free, calloc, realloc, aligned, usable size
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/meta_pool.h"
#include "backend/span.h"
#include "core/stats.h"
#include "frontend/bins.h"
#include "frontend/checks.h"
#include "frontend/heap.h"
#include "pal/lock.h"
#include "pal/pal.h"
#include "purge/discard.h"
#include "purge/purger.h"
#include "purge/release.h"

#pragma GCC visibility push(hidden)

namespace lazymalloc::detail {

// ---- the composition root (runtime.cc)

extern constinit Heap g_empty_heap;  // tl_heap of a thread that has none

// A heap and the slots of its thread's bins, allocated together.  The
// record comes zero-filled and only the heap is constructed, so a slot page
// is touched only once a class on it is used: page-aligned, so that its
// pages are its own and count as metadata as they are touched
// (Heap::record_pages).
struct alignas(kOsPageSize) HeapRecord {
  Heap heap;
  Block* bin_slots[kBinSlots];
  // Heap::class_stats and Heap::bin_fbase, on a page of their own (counted
  // with the heap's).
  alignas(kOsPageSize) ClassStats class_stats[kSmallClasses];
  Block** bin_fbase[kSmallClasses];
};

static_assert(sizeof(HeapRecord) / kOsPageSize <= 32, "Heap::record_pages has a bit per page");

// Counts in metadata_bytes the pages of h's record that [from, to) (bytes
// from the record's start) lies on and that were not counted yet.
void heap_record_touch(Heap* h, size_t from, size_t to);

struct Global {
  Stats stats;
  Backend backend;
  Purger purger;
  BackgroundPurger background;
  Releaser releaser;
  Discardable discard;
  MetaPool<HeapRecord, false> heap_records;  // pages counted by the heaps (record_pages)
  Mutex heaps_lock;
  Mutex collect_lock;  // one collector of heaps at a time (heaps_claim)
  Heap* all_heaps = nullptr;
  // Where span adoption's walk of all_heaps goes on (adopt_spans; under
  // collect_lock): nullptr, from the head.
  Heap* adopt_cursor = nullptr;
  Heap* pool = nullptr;
  unsigned heaps_made = 0;  // REQUIRES heaps_lock: gives each new heap its owner (Heap::owner)
  std::atomic<int> init_state{0};  // 0 none, 1 running, 2 done
  // The collector's last span_idle_ns (0: none yet): in-span purging's
  // hysteresis (span_purge.cc) measures revivals against it.
  std::atomic<uint64_t> span_delay_ns{0};
  // Bytes of each class's objects returned to their spans by threads
  // without a heap (orphan_return_bytes by class: ClassStat::returned_bytes).
  std::atomic<uint64_t> class_orphan_returned[kSmallClasses] = {};
};
extern constinit Global g;
extern int g_stats_fd;
extern bool g_secure;  // Opt::secure, fixed by lm_init before any span exists
extern const Platform* g_platform;  // the Linux platform unless a test sets one
// The process barrier (Platform::process_barrier) is unavailable: a thread
// entering a slow path fences itself (heap_enter).
extern bool g_heap_fence;

extern constinit __attribute__((tls_model("initial-exec"))) thread_local Heap* tl_heap;
extern constinit __attribute__((tls_model("initial-exec"))) thread_local bool tl_initializing;
// heap_thread_exit ran: a free no longer gives the thread a heap.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local bool tl_exited;

// Counts on heap h's statistics; a thread without a heap (h is the shared
// empty heap) counts nothing.
inline void heap_count(Heap* h, HeapStat stat, uint64_t n = 1) {
  if (h != &g_empty_heap) h->stats.inc(stat, n);
}
// The same for the statistics of heap h's class c.  REQUIRES h held.
inline void class_count(Heap* h, unsigned c, ClassStat stat, uint64_t n = 1) {
  if (h->class_stats) h->class_stats[c].inc(stat, n);
}

// Counts a folded global statistic (core/stats.h, Folded) on heap h, or,
// for a thread without a heap, on the global value.  REQUIRES h's only
// writer of f: its thread, or whoever holds h for the large cache's.
inline void large_count(Heap* h, Folded f, uint64_t n) {
  if (LM_LIKELY(h != &g_empty_heap)) h->stats.fold(f, n);
  else g.stats.add(kFoldedStat[unsigned(f)], n);
}

// Large and huge blocks start `lead` bytes into their span (secure mode
// puts them against the guard page).
inline char* block_start(const Span* s) { return s->start + s->lead; }

Heap* heap_for_thread();
Heap* heap_on_demand(Heap* h);

// Makes sure the background thread runs (started on the first need: a
// release to the backend, a remote free into another heap, a discardable
// block); true if it does.  No lock held: starting a thread may allocate.
inline bool background_ensure() {
  return g.background.ensure_started(&g.purger, g.backend.platform(), &g.stats);
}

// The timeline page (core/timeline.h) when lazymalloc-run --timeline asked
// for one, else nullptr: the caches report their bytes there.
extern TimelinePage* g_timeline_page;
inline void timeline_cached(int64_t delta) {
  if (LM_UNLIKELY(g_timeline_page != nullptr)) g_timeline_page->cached_add(delta);
}

// ---- span queues and remote frees (spans.cc)

// The heap's thread enters a slow path (heap.h, "Exclusion"): announces
// itself, then backs off while a collector holds the heap.  Counts a
// slow-path event (Heap::slow_events).
void heap_enter_wait(Heap* h);
// The thread's side of the handshake: `busy`, ordered before its next load
// of `claimed` by the collector's process barrier, or, without one, by a
// fence here.
inline void heap_announce(Heap* h) {
  h->busy.store(1, std::memory_order_relaxed);
  if (LM_UNLIKELY(g_heap_fence)) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
}
inline void heap_leave(Heap* h) { h->busy.store(0, std::memory_order_release); }
// Holds h for a moment that is no slow-path event (the bins' stacks
// trading places, alloc_class), unless a collector holds it: then lets go
// at once and returns false (the caller takes its slow path, which waits;
// no call here, so the caller needs no frame).  Let go with heap_leave.
inline bool heap_try_hold(Heap* h) {
  heap_announce(h);
  if (LM_LIKELY(h->claimed.load(std::memory_order_acquire) == 0)) return true;
  heap_leave(h);
  return false;
}
inline void heap_enter(Heap* h) {
  heap_announce(h);
  if (LM_UNLIKELY(h->claimed.load(std::memory_order_acquire) != 0)) heap_enter_wait(h);
  __atomic_store_n(&h->slow_events, h->slow_events + 1, __ATOMIC_RELAXED);
}

// A collector (REQUIRES g.collect_lock) claims heaps hs[0..n): returns how
// many it holds, moved to the front of hs; a heap whose thread is in a slow
// path is left alone (that thread is not idle).
unsigned heaps_claim(Heap** hs, unsigned n);
void heap_unclaim(Heap* h);
// The collector's side: after its stores of `claimed`, before its loads of
// `busy` (the process barrier, or a fence where threads fence themselves).
// false: the kernel refused the barrier.
bool heaps_barrier();

// A heap held for a scope, by its thread (heap_enter) or by a collector
// that claimed it; on leaving, gives the spans found empty meanwhile back
// to the backend, with the heap let go.  The shared empty heap owns no
// span: nothing to hold.
class HeapGuard {
 public:
  explicit HeapGuard(Heap* h) : h_(h != &g_empty_heap ? h : nullptr) {
    if (h_) heap_enter(h_);
  }
  enum Claimed { kClaimed };
  HeapGuard(Heap* h, Claimed) : h_(h), collector_(true) {}
  ~HeapGuard();
  HeapGuard(const HeapGuard&) = delete;
  HeapGuard& operator=(const HeapGuard&) = delete;

 private:
  Heap* h_;
  bool collector_ = false;
};

// An object of small class c for h's thread (bins, else spans); nullptr and
// errno ENOMEM when out of memory.
LM_NOINLINE void* alloc_class(Heap* h, unsigned c);
// REQUIRES h held (HeapGuard): every remote free and empty span of h.
void heap_collect(Heap* h);
void return_object(Heap* h, Span* s, void* p);
// REQUIRES h held: returns cached objects v[0..n) to their spans; true if
// another heap got work (heap_work_arrived once h is let go).
bool return_objects_held(Heap* h, Block* const* v, uint32_t n);
// Another heap's owner may stay quiet: the background collector is due.
void heap_work_arrived();
// The most objects link_objects lists at once: a carve (16 KiB) or a
// revived page group (at most 16 KiB: span_purge.cc) of 16-byte objects.
inline constexpr uint32_t kMaxLinkBatch = 16384 / 16;
// Lists objects first..first+n-1 (n <= kMaxLinkBatch) of span s (tagged; in a random order in
// secure mode) onto its allocation list.  REQUIRES the heap held.
void link_objects(Span* s, uint32_t first, uint32_t n);
// Never-used objects are touched a carve's worth at a time (kCarveBytes,
// at least one object): a refill takes at most that many from a span's
// tail (bin_refill), secure mode's carve lists as many (spans.cc).
inline constexpr uint32_t kCarveBytes = 16384;
inline uint32_t carve_objects(const Span* s) { return s->obj_size >= kCarveBytes ? 1 : kCarveBytes / s->obj_size; }
// The objects of span s carved since it was made (ClassStat::carved_bytes):
// a restart (span_restart_if_empty) carves again from the first, below the
// most carved before it (carved_max).
inline uint32_t span_carved(const Span* s) { return s->reserved > s->carved_max ? s->reserved : s->carved_max; }
// Takes n never-used objects of span s (from `reserved` on) by address: no
// link is written or read.  out[n - 1] is the lowest, so a stack filled
// from out pops them in address order; each is tagged free; `used` and the
// carve limit move past them.  REQUIRES the heap held, n <= capacity -
// reserved.
void span_take_tail(Span* s, Block** out, uint32_t n);
// list_take's part for run b (its link `link` flagged): its objects go to
// out[n..) by address up to `want`, each tested for its tag as a walk tests
// every node; a rest not taken stays listed as a node.  Returns what the
// list continues with, how many `out` holds and the walk's steps.  Out of
// line, and by value: list_take's walk of single nodes keeps its registers.
struct RunTaken {
  Block* next;
  uint32_t n, steps;
};
LM_NOINLINE RunTaken take_run(Span* s, Block* b, Block* link, Block** out, uint32_t n, uint32_t want,
                              uint32_t steps);
// Takes up to `want` objects from the head of span s's allocation list
// into out[0..), in list order (a run's objects by address: checks.h,
// kRunFlag), validated as they are walked; a run taken in part leaves its
// rest listed.  `used` counts them; their tags stay.  Returns how many.
// REQUIRES the heap held.
inline uint32_t list_take(Span* s, Block** out, uint32_t want) {
  ListWalk walk(s);
  uint32_t n = 0;
  Block* b = s->free;
  while (b && n < want) {
    Block* next = walk.link(b);  // validated as it is walked
    if (LM_UNLIKELY(is_run(next))) {
      const RunTaken t = take_run(s, b, next, out, n, want, walk.steps);
      b = t.next;
      n = t.n;
      walk.steps = t.steps;
      continue;
    }
    out[n++] = b;
    b = next;
  }
  s->free = b;
  span_used_add(s, n);
  return n;
}
// Lists every object of the runs on list `head` of span s one by one (the
// purge's filter unlinks single objects).  REQUIRES the heap held.
void list_expand(Span* s, Block* head);
// Heap h's thread stopped using class c (its cache went back idle,
// bin_event): the class's current span goes back to the backend if it is
// empty; true if it went.  REQUIRES h held.
bool class_idle(Heap* h, unsigned c);

// ---- free pages inside spans (span_purge.cc)

// Sets s->check_limit from `reserved` and the purged page groups.
void span_set_check_limit(Span* s);
// A new span: nothing purged; the group size for its page count.
void span_purge_init(Span* s);
// Span s leaves its heap (empty): forgets its purged groups (statistics).
void span_purge_forget(Span* s);
// Revives s's lowest purged page group: lists its dormant objects on the
// empty allocation list.  REQUIRES the heap held; s->purged not empty.
void span_revive(Span* s);
// Objects v[0..n) of span s were taken from its lists to be handed out:
// the purged groups they overlap are revived (they are about to be
// written), so that a purged group never holds a handed-out object's bytes.
// REQUIRES the heap held.
void span_objects_taken(Span* s, Block* const* v, uint32_t n);
inline bool span_has_purged(const Span* s) { return (s->purged[0] | s->purged[1]) != 0; }
// One pass over heap h's spans, whose thread has been quiet for
// `quiet_ns`: purges the page groups that hold only free objects, except in
// spans whose hysteresis asks for more quiet time while now_ns <
// hysteresis_until.  REQUIRES h claimed by the collector (heaps_claim);
// advises a batch at a time and returns false if it stopped because the
// heap's thread woke and waits for it.  *next_wait: the quiet time a span
// skipped for hysteresis needs (kNoDeadline: none).
struct SpanPurgeArgs {
  uint64_t now_ns;
  uint64_t quiet_ns;
  uint64_t delay_ns;  // span_idle_ns
  uint64_t hysteresis_until;
};
bool heap_purge_spans(Heap* h, const SpanPurgeArgs& args, uint64_t* next_wait);
// The second stage over heap h's spans: the purged groups given MADV_FREE
// get MADV_DONTNEED, except in spans whose hysteresis asks for a longer
// LAZY age (args.delay_ns, lazy_decay_ms, << the span's shift; the age runs
// from h->span_lazy_ns) while now_ns < hysteresis_until (quiet_ns unused).
// REQUIRES h claimed by the collector.  Returns false if it stopped because
// the heap's thread woke and waits for it; else h->span_lazy_ns is 0 when
// nothing LAZY is left.  *next_wait: the LAZY age a skipped span needs
// (kNoDeadline: none).
bool heap_clean_spans(Heap* h, const SpanPurgeArgs& args, uint64_t* next_wait);

// ---- sparse spans (spans.cc)

// Spans of the classes above 8 KiB (more than one unit) whose pages the
// program touches sparsely (`mixed`: 32-256 KiB objects written on their
// first and last page) get slots of their own, advised MADV_NOHUGEPAGE
// (Backend::alloc_units_span); a heap keeps up to kKeptSpans empty ones
// per class, at most its sparse bytes in all, for the class's next span;
// and an empty sparse span goes back with MADV_DONTNEED when at most half
// its pages are resident.  The verdict per class (class_sparse_now) is
// measured on 4 KiB pages only, where residency is the program's touch
// pattern (a hugepage is resident whole): the first kResidencySamples
// ordinary spans of the class that go back while the arenas carry no
// hugepage advice, and sparse spans as they go back to the backend, and
// as they are kept while the class has fewer than kResidencySamples
// samples, with Platform::resident_pages.  g_class_residency is the
// resident share in 1/255ths, a moving average (a quarter per sample).  A
// class is sparse once measured at most half resident; above half
// (`phases` writes its blocks whole) its spans are ordinary.  An unmeasured
// class's spans are ordinary too, but one span at a time, in the whole
// process, is a probe (g_probe_class: its class): sparse, measured when it
// is kept or goes back.  A probe that has seen kProbeExpiry new spans of
// unmeasured classes made without a sample (its objects live long) gives
// way to the next class's.  One probe
// per unmeasured class (tried first) put a span of each of `phases`' 17
// classes above 8 KiB on 4 KiB pages at once, in its first phase, which
// passes hugepage_threshold before it frees anything: the probes' slots
// kept their 4 KiB page tables when huge blocks reused them (500 faults
// more per run, 0.7 MiB more held); with no probe at all, `mixed`'s
// classes that emptied no span before the threshold stayed ordinary (peak
// 23 MiB in one compare against 19.9-22.9 with one probe).
inline constexpr unsigned kKeptSpans = 8;
inline constexpr unsigned kSparseResidencyMax = 128;
inline constexpr unsigned kResidencySamples = 8;
inline constexpr uint32_t kProbeExpiry = 64;
extern std::atomic<uint8_t> g_class_residency[kSmallClasses];
extern std::atomic<uint8_t> g_class_samples[kSmallClasses];
// The class probed now (kSmallClasses: none), and the spans of other
// unmeasured classes made since it started.
extern std::atomic<uint32_t> g_probe_class;
extern std::atomic<uint32_t> g_probe_age;
// Whether class c's next span is sparse (a new span: it may start a probe).
bool class_sparse_now(unsigned c);
// Tests: every class unmeasured again.
void class_residency_reset();

// ---- large and huge blocks (large.cc)

void* alloc_large(size_t size, size_t align, bool* zero, bool growing = false);
// REQUIRES h held: the thread's cached large blocks go back to the backend
// once h is let go.
void large_cache_drain(Heap* h);
void large_peak_reset(Heap* h, bool exiting);
void release_to_backend(Span* s, bool contents_gone = false);
LM_NOINLINE void free_generic(void* p, Span* s);
bool move_huge(Span* s, void* q);
bool large_resize(Span* s, size_t size);

// ---- secure mode's quarantine (quarantine.cc)

void quarantine_flush(Heap* h);
void secure_free(Heap* h, Span* s, void* p);

}  // namespace lazymalloc::detail

#pragma GCC visibility pop
