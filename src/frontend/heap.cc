#include "frontend/heap.h"

#include <errno.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "core/format.h"
#include "core/options.h"
#include "pal/lock.h"
#include "pal/pal.h"
#include "purge/discard.h"
#include "purge/purger.h"
#include "purge/release.h"

namespace lazymalloc {

namespace {

// ------------------------------------------------------------ global state

constinit Heap g_empty_heap;  // tl_heap of a thread that has none

// A heap and the slots of its thread's bins, allocated together.  The
// record comes zero-filled and only the heap is constructed, so a slot page
// is touched only once a class on it is used.
struct HeapRecord {
  Heap heap;
  Block* bin_slots[kBinSlots];
};

struct Global {
  Stats stats;
  Backend backend;
  Purger purger;
  BackgroundPurger background;
  Releaser releaser;
  Discardable discard;
  MetaPool<HeapRecord> heap_records;
  Mutex heaps_lock;
  Heap* all_heaps = nullptr;
  Heap* pool = nullptr;
  std::atomic<int> init_state{0};  // 0 none, 1 running, 2 done
};
constinit Global g;
int g_stats_fd = 2;
bool g_secure = false;    // Opt::secure, fixed by lm_init before any span exists
uint64_t g_link_key = 0;  // free-list links are xor'ed with it and their address (0: plain)
const Platform* g_platform = nullptr;  // the Linux platform unless a test sets one

__attribute__((tls_model("initial-exec"))) thread_local Heap* tl_heap = &g_empty_heap;
__attribute__((tls_model("initial-exec"))) thread_local bool tl_initializing = false;
// heap_thread_exit ran: a free no longer gives the thread a heap.
__attribute__((tls_model("initial-exec"))) thread_local bool tl_exited = false;

// A thread's cache of free objects of one size class (heap.h): two stacks
// of their addresses, in the thread's heap (Heap::bin_slots), each of at
// most bin_cap(c) entries.  malloc pops from the allocation stack
// [base, top); free pushes onto the free stack [fbase, ftop), full at
// flimit; when the allocation stack runs dry the two trade places.  Two
// stacks, so that a malloc does not read what the last free of its class
// just wrote (one list made every malloc/free pair a chain of
// store-to-load forwards: alloc-pair-1t measured 58-67M pairs/s against
// 87M with two intrusive lists).  The objects hold no link while cached:
// nothing a program writes into a freed object can misdirect a bin.  All
// null (a bin of capacity 0) until the thread has a heap, from thread exit
// on, for classes above kCachedMax, and always in secure mode: then every
// malloc takes the slow path and every free "overflows" (bin_overflow).
struct alignas(32) Bin {
  Block** top;
  Block** base;
  Block** ftop;
  Block** flimit;
};
__attribute__((tls_model("initial-exec"))) thread_local Bin tl_bins[kSmallClasses];
// Where each free stack starts (slow paths only).
__attribute__((tls_model("initial-exec"))) thread_local Block** tl_bin_fbase[kSmallClasses];

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

// Sizes the malloc fast path serves and bins cache: up to kDirectMax by
// 16-byte steps, then up to kCachedMax (heap.h) by 256-byte steps (every
// class above 1 KiB is a multiple of 256, so rounding up to one keeps the
// class).
inline constexpr unsigned kMidSlots = kCachedMax / 256 + 1;

struct ClassTable {
  uint8_t slot_class[kDirectSlots];  // (size + 15) / 16 -> class, sizes <= kDirectMax
  uint8_t mid_class[kMidSlots];      // (size + 255) / 256 -> class, sizes <= kCachedMax
  uint8_t units[kSmallClasses];
  uint8_t bin_cap[kSmallClasses];
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
    t.bin_cap[c] = uint8_t(bin_cap(c));
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
static_assert(fast_classes_match());

void report_stderr(const char* msg, size_t len) { pal::write_fd(2, msg, len); }

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

// Counts on heap h's statistics; a thread without a heap (h is the shared
// empty heap) counts nothing.
inline void heap_count(Heap* h, HeapStat stat, uint64_t n = 1) {
  if (h != &g_empty_heap) h->stats.inc(stat, n);
}

// Large and huge blocks start `lead` bytes into their span (secure mode
// puts them against the guard page).
inline char* block_start(const Span* s) { return s->start + s->lead; }


// ------------------------------------------------------------ checks

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
uintptr_t g_free_key = 1;

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
// tag) instead of following it.  link_set tags too.
inline uintptr_t link_mask(const void* b) {
  return g_link_key ? g_link_key ^ reinterpret_cast<uintptr_t>(b) : 0;
}
inline Block* link_get(const Block* b) {
  return reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(b->next) ^ link_mask(b));
}
inline void link_set(Block* b, Block* next) {
  b->next = reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(next) ^ link_mask(b));
  set_free_tag(b);
}

// True if `b` (any value: maybe a corrupted link) lies inside span s, so
// that it may be read.
inline bool in_span(const Span* s, const void* b) {
  return reinterpret_cast<uintptr_t>(b) - reinterpret_cast<uintptr_t>(s->start) < s->bytes;
}

[[noreturn]] LM_NOINLINE void corrupt_list(const void* b) {
  lm_invalid_pointer("malloc", b,
                     "corrupted free list (a freed object was overwritten: use after free or overflow)");
}

// The link of list entry `b` of span s, for the slow paths that walk a
// list: with checks, `b` must lie in the span and carry its tag, and a walk
// longer than the span's capacity (a corrupted list that loops) aborts.
inline Block* walk_link(const Span* s, Block* b, uint32_t& steps) {
  if constexpr (kChecks) {
    if (LM_UNLIKELY(!in_span(s, b) || !has_free_tag(b) || ++steps > s->capacity)) corrupt_list(b);
  }
  return link_get(b);
}

// The failure path of the pops below, a tail call (LM_FAILURE_PATH).
LM_FAILURE_PATH
Block* take_failed(const Block* b) { corrupt_list(b); }

// Pops `b`, the head of span s's allocation list (slow paths: refills and
// secure mode).  With checks, `b` must lie in the span and carry its tag.
// The unlink comes before the tag is cleared, so an owner stopped in
// between by fork() leaks the object in the child rather than leaving it
// listed untagged.
LM_INLINE Block* take(Span* s, Block* b) {
  if constexpr (kChecks) {
    if (LM_UNLIKELY(!in_span(s, b))) return take_failed(b);
    if (LM_UNLIKELY(!has_free_tag(b))) return take_failed(b);
    s->free = link_get(b);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    tag_word(b) = 0;
  } else {
    s->free = link_get(b);
  }
  s->used++;
  return b;
}

// Pops the top of bin's allocation stack, which is not empty (the malloc
// fast path).  With checks, clears the object's tag.
LM_INLINE Block* bin_pop(Bin& bin) {
  Block** t = bin.top - 1;
  Block* b = *t;
  bin.top = t;
  if constexpr (kChecks) tag_word(b) = 0;
  return b;
}

// Aborts unless object i, at p, of small span s may be freed (or
// reallocated): it must have been carved and must not carry its tag.
void check_live(const char* fn, const Span* s, size_t i, void* p) {
  if constexpr (kChecks) {
    if (i >= __atomic_load_n(&s->reserved, __ATOMIC_RELAXED)) {
      lm_invalid_pointer(fn, p, "not allocated (never handed out)");
    }
    if (LM_UNLIKELY(has_free_tag(p))) lm_invalid_pointer(fn, p, "double free (already freed)");
  }
}

// ------------------------------------------------------------ span queues

void queue_push_front(SpanQueue& q, Span* s) {
  s->prev = nullptr;
  s->next = q.head;
  if (q.head) q.head->prev = s; else q.tail = s;
  q.head = s;
}

void queue_remove(SpanQueue& q, Span* s) {
  if (s->prev) s->prev->next = s->next; else q.head = s->next;
  if (s->next) s->next->prev = s->prev; else q.tail = s->prev;
  s->next = s->prev = nullptr;
}

void full_push(Heap* h, Span* s) {
  s->prev = nullptr;
  s->next = h->full;
  if (h->full) h->full->prev = s;
  h->full = s;
  s->in_full = 1;
}

void full_remove(Heap* h, Span* s) {
  if (s->prev) s->prev->next = s->next; else h->full = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = nullptr;
  s->in_full = 0;
}

// Moves class c's head reference to its current span.  The current span of
// a class, if it is one unit, counts one phantom object in `used`, so that
// a bin flush that returns its last object does not look like the span
// emptying (a bin oscillating at its bound would otherwise hand its span
// back and forth): an empty span goes back to the backend only once it is
// no longer current.  A multi-unit span holds no reference and goes back
// as soon as it empties, so a quiet thread holds at most 64 KiB per class
// in empty spans.
void move_head_ref(Heap* h, unsigned c, Span* to) {
  Span* from = h->head_ref[c];
  if (from == to) return;
  if (from) from->used--;
  if (to) to->used++;
  h->head_ref[c] = to;
}

// After class c's queue changed: moves the head reference.
void queue_changed(Heap* h, unsigned c) {
  Span* head = h->queue[c].head;
  move_head_ref(h, c, head && head->bytes <= kUnitSize ? head : nullptr);
}

// Sets the xfree state bits from `from` to `to`, keeping the list.
bool xfree_transition(Span* s, uintptr_t from, uintptr_t to) {
  uintptr_t old = s->xfree.load(std::memory_order_relaxed);
  for (;;) {
    if ((old & kXfreeMask) != from) return false;
    if (s->xfree.compare_exchange_weak(old, (old & ~kXfreeMask) | to, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
      return true;
    }
  }
}

// Moves remote frees into the allocation list.  Owner only.
void collect_remote(Span* s) {
  uintptr_t old = s->xfree.load(std::memory_order_relaxed);
  if (!(old & ~kXfreeMask)) return;
  while (!s->xfree.compare_exchange_weak(old, old & kXfreeMask, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
  }
  Block* list = reinterpret_cast<Block*>(old & ~kXfreeMask);
  s->used -= s->xfree_count.exchange(0, std::memory_order_acquire);
  if (s->free) {
    // Entries are validated as they are walked (and again when popped).
    uint32_t steps = 0;
    Block* last = list;
    while (Block* next = walk_link(s, last, steps)) last = next;
    link_set(last, s->free);
  }
  s->free = list;
}

// Carves never-used objects from the span's tail, a few pages at a time so
// memory is touched only as it is needed.
void carve(Span* s) {
  uint32_t left = s->capacity - s->reserved;
  uint32_t n = uint32_t(16384 / s->obj_size);
  if (n < 1) n = 1;
  if (n > left) n = left;
  char* p = s->start + size_t(s->reserved) * s->obj_size;
  auto obj = [&](uint32_t i) { return reinterpret_cast<Block*>(p + size_t(i) * s->obj_size); };
  // link_set tags each object before the batch is listed (fork: see take).
  if (g_secure) {
    // Secure mode: the batch is linked in a random order (Fisher-Yates).
    uint16_t order[16384 / 16];
    Heap* h = s->heap;
    for (uint32_t i = 0; i < n; ++i) order[i] = uint16_t(i);
    for (uint32_t i = n; i > 1; --i) {
      h->rng ^= h->rng << 13;
      h->rng ^= h->rng >> 7;
      h->rng ^= h->rng << 17;
      uint32_t j = uint32_t(h->rng % i);
      uint16_t t = order[i - 1];
      order[i - 1] = order[j];
      order[j] = t;
    }
    for (uint32_t i = 0; i + 1 < n; ++i) link_set(obj(order[i]), obj(order[i + 1]));
    link_set(obj(order[n - 1]), s->free);
    s->free = obj(order[0]);
  } else {
    for (uint32_t i = 0; i + 1 < n; ++i) link_set(obj(i), obj(i + 1));
    link_set(obj(n - 1), s->free);
    s->free = obj(0);
  }
  // Atomic: remote frees read it (check_live).
  __atomic_store_n(&s->reserved, s->reserved + n, __ATOMIC_RELAXED);
}

// Refills the allocation list from every source.  Owner only.
void span_collect(Span* s) {
  if (!s->free && s->local_free) {
    s->free = s->local_free;
    s->local_free = nullptr;
  }
  if (!s->free) collect_remote(s);
  if (!s->free && s->reserved < s->capacity) carve(s);
}

// Gives a span back, then lets the purger act (limits, eager policy, inline
// decay) and makes sure the background thread runs.  No lock held.
void release_to_backend(Span* s, bool contents_gone = false) {
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
  g.purger.after_release(now, g.background.ensure_started(&g.purger, g.backend.platform(), &g.stats));
}

void span_release(Heap* h, Span* s) {
  h->stats.inc(HeapStat::spans_released);
  g.stats.sub(Stat::small_spans, 1);
  s->heap = nullptr;
  release_to_backend(s);
}

// Revives the spans other threads freed into while they were full.
void process_delayed(Heap* h) {
  Span* s = h->delayed.exchange(nullptr, std::memory_order_acquire);
  while (s) {
    Span* next = s->next_delayed;
    s->next_delayed = nullptr;
    xfree_transition(s, kXfreeNotified, kXfreeNormal);
    if (s->in_full) {
      full_remove(h, s);
      queue_push_front(h->queue[s->cls], s);
      queue_changed(h, s->cls);
      h->stats.inc(HeapStat::delayed_spans);
    }
    s = next;
  }
}

Span* span_new(Heap* h, unsigned c) {
  Span* s = g.backend.alloc_units_span(kClasses.units[c]);
  if (!s) return nullptr;
  g.stats.add(Stat::small_spans, 1);
  s->kind = SpanKind::kSmall;
  s->cls = uint8_t(c);
  s->obj_size = uint32_t(class_size(c));
  s->div_magic = kClasses.magic[c];
  s->capacity = uint32_t(s->bytes / s->obj_size);
  s->reserved = 0;
  s->used = 0;
  s->free = s->local_free = nullptr;
  s->xfree.store(0, std::memory_order_relaxed);
  s->xfree_count.store(0, std::memory_order_relaxed);
  s->heap = h;
  h->stats.inc(HeapStat::spans_acquired);
  return s;
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

void bin_event(Heap* h);

// The slow path of small allocation: pops from the thread's bin (aligned
// requests come here first), else finds or makes a span with a free
// object, takes one and refills the bin from the rest.
LM_NOINLINE void* alloc_class(Heap* h, unsigned c) {
  Bin& bin = tl_bins[c];
  Block** fbase = tl_bin_fbase[c];
  if (bin.top == bin.base && bin.ftop != fbase) {
    // The free stack becomes the allocation stack and the other way round.
    Block** empty = bin.base;
    bin.base = fbase;
    bin.top = bin.ftop;
    tl_bin_fbase[c] = bin.ftop = empty;
    bin.flimit = empty + kClasses.bin_cap[c];
  }
  if (bin.top != bin.base) return bin_pop(bin);
  if (g_secure) {
    // Secure mode's fast path (its bins are always empty).
    Span* head = h->queue[c].head;
    if (head && head->free) return take(head, head->free);
  }
  h->stats.inc(HeapStat::span_refills);
  if (h->delayed.load(std::memory_order_relaxed)) process_delayed(h);
  SpanQueue& q = h->queue[c];
  Span* s = q.head;
  while (s) {
    span_collect(s);
    if (s->free) break;
    Span* next = s->next;
    // Nothing left: park it on the full list, asking remote frees to notify.
    // Only with no remote free pending (xfree exactly empty and normal);
    // otherwise the next pass collects them.
    uintptr_t expected = kXfreeNormal;
    if (s->xfree.compare_exchange_strong(expected, kXfreeNotify, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
      queue_remove(q, s);
      full_push(h, s);
    }
    s = next;
  }
  if (s) {
    if (q.head != s) {
      queue_remove(q, s);
      queue_push_front(q, s);
    }
  } else {
    s = span_new(h, c);
    if (!s) {
      queue_changed(h, c);
      return nullptr;
    }
    span_collect(s);
    queue_push_front(q, s);
  }
  queue_changed(h, c);
  Block* b = take(s, s->free);
  bin_refill(bin, c, s);
  bin_event(h);
  return b;
}

// ------------------------------------------------------------ heaps

void quarantine_flush(Heap* h);
void bins_return_all(Heap* h, bool disable);

void heap_collect(Heap* h, bool release_empty) {
  process_delayed(h);
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    SpanQueue& q = h->queue[c];
    move_head_ref(h, c, nullptr);  // queue_changed gives it back
    for (Span* s = q.head; s;) {
      Span* next = s->next;
      collect_remote(s);
      if (release_empty && s->used == 0) {
        queue_remove(q, s);
        span_release(h, s);
      }
      s = next;
    }
    queue_changed(h, c);
  }
}

void heap_thread_exit(void* arg) {
  Heap* h = static_cast<Heap*>(arg);
  if (!h || h != tl_heap) return;
  tl_exited = true;
  bins_return_all(h, true);
  quarantine_flush(h);
  heap_collect(h, true);
  tl_heap = &g_empty_heap;
  LockGuard guard(g.heaps_lock);
  h->owned = false;
  h->next_pool = g.pool;
  g.pool = h;
  g.stats.add(Stat::heaps_pooled, 1);
  g.stats.add(Stat::thread_exits, 1);
  g.background.thread_exited();  // it looks whether a thread of the program is left
}

void fork_prepare() {
  g.purger.fork_prepare();
  g.discard.fork_prepare();
  g.heaps_lock.lock();
  g.heap_records.lock().lock();
  g.releaser.fork_prepare();
  g.backend.fork_prepare();
}

void fork_parent() {
  g.backend.fork_parent();
  g.releaser.fork_parent();
  g.heap_records.lock().unlock();
  g.heaps_lock.unlock();
  g.discard.fork_parent();
  g.purger.fork_parent();
}

void fork_child() {
  g.backend.fork_child();
  g.releaser.fork_child();
  g.heap_records.lock().reset();
  g.heaps_lock.reset();
  g.discard.fork_child();
  g.purger.fork_child();
  g.background.fork_child();
  g.stats.set(Stat::background_threads, 0);
  // Only the forking thread lives on: every other owned heap is orphaned.
  for (Heap* h = g.all_heaps; h; h = h->next_all) {
    if (h->owned && h != tl_heap) {
      h->owned = false;
      h->next_pool = g.pool;
      g.pool = h;
      g.stats.add(Stat::heaps_pooled, 1);
    }
  }
}

Heap* heap_for_thread();

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

// Gives a thread without a heap one where it needs one outside malloc (its
// first overflowing free, so that a thread that only frees caches its frees
// and returns them to their spans in runs; discardable locks); not while
// the thread sets up or after it exited.
Heap* heap_on_demand(Heap* h) {
  if (LM_LIKELY(h != &g_empty_heap) || tl_initializing || tl_exited) return h;
  tl_initializing = true;
  Heap* got = heap_for_thread();
  tl_initializing = false;
  return got ? got : h;
}

Heap* heap_for_thread() {
  lm_init();
  Heap* h = nullptr;
  {
    LockGuard guard(g.heaps_lock);
    if (g.pool) {
      h = g.pool;
      g.pool = h->next_pool;
      h->next_pool = nullptr;
      g.stats.sub(Stat::heaps_pooled, 1);
      g.stats.add(Stat::heap_adoptions, 1);
    } else {
      HeapRecord* r = g.heap_records.alloc(*g.backend.platform(), &g.stats);
      if (!r) return nullptr;
      h = new (&r->heap) Heap();
      h->bin_slots = r->bin_slots;
      if (g_secure) h->rng = pal::random_seed() | 1;
      h->next_all = g.all_heaps;
      g.all_heaps = h;
      g.stats.add(Stat::heaps, 1);
    }
    h->owned = true;
  }
  tl_heap = h;
  if (!g_secure) bins_enable(h);
  pal::set_thread_value(h);
  return h;
}

// ------------------------------------------------------------ large blocks

Span* backend_alloc(size_t size, size_t align, bool growing) {
  if (LM_UNLIKELY(g.releaser.inflight_bytes() != 0)) {
    // Address space is on its way back: rather than reserve and fault in
    // fresh memory, help finish the releases and reuse it.
    if (Span* s = g.backend.alloc(size, align, growing, false)) return s;
    g.releaser.help(true);
  }
  return g.backend.alloc(size, align, growing);
}

void* alloc_large(size_t size, size_t align, bool* zero, bool growing = false) {
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
    if (pal::protect(guard, kOsPageSize, false)) {
      s->guard = 1;
      s->lead = size_t(align_down(uintptr_t(guard - s->start) - size, align < kMinAlign ? kMinAlign : align));
    }
  }
  return block_start(s);
}

LM_NOINLINE void* malloc_generic(size_t size, size_t align, bool* zero) {
  Heap* h = tl_heap;
  if (LM_UNLIKELY(h == &g_empty_heap)) {
    if (tl_initializing) {
      // Re-entered while setting this thread up: serve from the backend.
      return alloc_large(size, align < kUnitSize ? kUnitSize : align, zero);
    }
    tl_initializing = true;
    h = heap_for_thread();
    tl_initializing = false;
    if (!h) {
      pal::set_errno(ENOMEM);
      return nullptr;
    }
  }
  if (LM_UNLIKELY(size > kMaxRequest)) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  unsigned c = align <= kMinAlign ? (size <= kMaxSmall ? size_class(size) : kSmallClasses)
                                  : (align <= kUnitSize ? class_for_aligned(size, align) : kSmallClasses);
  if (c < kSmallClasses) {
    if (zero) *zero = false;
    void* p = alloc_class(h, c);
    if (!p) pal::set_errno(ENOMEM);
    return p;
  }
  return alloc_large(size, align, zero);
}

// After an owner's free was pushed on local_free: a span that was full goes
// back in its queue; an empty one goes back to the backend (the current
// span never looks empty: see move_head_ref).
void local_free_attention(Heap* h, Span* s) {
  if (s->in_full) {
    if (!xfree_transition(s, kXfreeNotify, kXfreeNormal)) {
      // Notified: it is on the delayed list; process_delayed skips it
      // once it is back in the queue.
    }
    full_remove(h, s);
    queue_push_front(h->queue[s->cls], s);
    queue_changed(h, s->cls);
  }
  if (s->used == 0) {
    uintptr_t x = s->xfree.load(std::memory_order_acquire);
    if ((x & kXfreeMask) == kXfreeNormal) {
      queue_remove(h->queue[s->cls], s);
      queue_changed(h, s->cls);
      span_release(h, s);
    }
  }
}

// Remote free of a run of objects of span s, first..last (n objects, linked):
// one CAS onto the span's xfree list.  Acquire too: the free that finds
// NOTIFY writes `next_delayed`, which the owner (parking the span with
// acq_rel after it last read that field in process_delayed) must be ordered
// before.
void remote_push(Heap* h, Span* s, Block* first, Block* last, uint32_t n) {
  uintptr_t old = s->xfree.load(std::memory_order_relaxed);
  uintptr_t state;
  do {
    state = old & kXfreeMask;
    link_set(last, reinterpret_cast<Block*>(old & ~kXfreeMask));
  } while (!s->xfree.compare_exchange_weak(
      old, reinterpret_cast<uintptr_t>(first) | (state == kXfreeNotify ? kXfreeNotified : state),
      std::memory_order_acq_rel, std::memory_order_relaxed));
  s->xfree_count.fetch_add(n, std::memory_order_release);
  if (state == kXfreeNotify) {
    Heap* owner = s->heap;
    Span* head = owner->delayed.load(std::memory_order_relaxed);
    do {
      s->next_delayed = head;
    } while (!owner->delayed.compare_exchange_weak(head, s, std::memory_order_release,
                                                   std::memory_order_relaxed));
  }
  heap_count(h, HeapStat::remote_frees, n);
}

// Returns a run of free objects of span s, first..last (n objects, linked,
// tagged) to their span: the local list if heap h owns it, else the remote
// one.
void return_run(Heap* h, Span* s, Block* first, Block* last, uint32_t n) {
  if (s->heap == h) {
    link_set(last, s->local_free);
    s->local_free = first;
    s->used -= n;
    if (s->used == 0 || s->in_full) local_free_attention(h, s);
  } else {
    remote_push(h, s, first, last, n);
  }
}

// Returns one free object (tagged) of span s to it.
void return_object(Heap* h, Span* s, void* p) {
  Block* b = static_cast<Block*>(p);
  return_run(h, s, b, b, 1);
}

// Returns free objects v[0..n) (cached: tagged, not linked) to their
// spans, one run of consecutive entries of the same span at a time.
void return_objects(Heap* h, Block* const* v, uint32_t n) {
  for (uint32_t i = 0; i < n;) {
    Span* s = g.backend.span_of(v[i]);
    uint32_t j = i + 1;
    while (j < n && in_span(s, v[j])) {
      link_set(v[j - 1], v[j]);
      ++j;
    }
    return_run(h, s, v[i], v[j - 1], j - i);
    i = j;
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
  if (n == 0) return;
  Block* out[2 * kBinCapMax];
  memcpy(out, bin.base, from_alloc * sizeof(Block*));
  memcpy(out + from_alloc, fbase, (in_free - keep) * sizeof(Block*));
  memmove(fbase, bin.ftop - keep, keep * sizeof(Block*));
  bin.top = bin.base;
  bin.ftop = fbase + keep;
  return_objects(h, out, n);
}

inline uint64_t bin_fingerprint(const Bin& b) {
  return reinterpret_cast<uintptr_t>(b.top) ^ (reinterpret_cast<uintptr_t>(b.ftop) << 1);
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

void secure_free(Heap* h, Span* s, void* p);

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

// Secure mode: a quarantined object leaves the FIFO for its free list.
void quarantine_release(Heap* h, void* p) {
  Span* s = g.backend.span_of(p);
  h->quarantine_bytes -= s->obj_size;
  return_object(h, s, p);
}

void quarantine_flush(Heap* h) {
  for (unsigned k = 0; k < kQuarantineSlots; ++k) {
    void* p = h->quarantine[k];
    h->quarantine[k] = nullptr;
    if (p) quarantine_release(h, p);
  }
  h->quarantine_next = 0;
}

// Secure mode's small free, after lm_free's checks: fill with 0xdf, tag,
// and hold in the heap's FIFO (at most kQuarantineSlots objects and
// kQuarantineBytes) before it goes on a free list.
void secure_free(Heap* h, Span* s, void* p) {
  memset(p, 0xdf, s->obj_size);
  set_free_tag(p);  // after the fill
  if (h == &g_empty_heap) {
    return_object(h, s, p);
    return;
  }
  unsigned k = h->quarantine_next;
  void* oldest = h->quarantine[k];
  h->quarantine[k] = p;
  h->quarantine_next = (k + 1) % kQuarantineSlots;
  h->quarantine_bytes += s->obj_size;
  if (oldest) quarantine_release(h, oldest);
  while (h->quarantine_bytes > kQuarantineBytes) {
    unsigned j = h->quarantine_next;
    void* q = h->quarantine[j];
    h->quarantine[j] = nullptr;
    h->quarantine_next = (j + 1) % kQuarantineSlots;
    if (q) quarantine_release(h, q);
  }
}

// free() of a large or huge block.
LM_NOINLINE void free_generic(Span* s, void* p) {
  if (s->discard) lm_invalid_pointer("free", p, "discardable memory (use lazymalloc_discardable_free)");
  if (p != block_start(s)) lm_invalid_pointer("free", p, "points inside a block");
  heap_count(tl_heap, HeapStat::large_frees);
  if (s->kind == SpanKind::kLarge) g.stats.sub(Stat::large_blocks, 1);
  if (s->guard) pal::protect(s->start + s->bytes - kOsPageSize, kOsPageSize, true);
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
  if (!pal::move_pages(s->start, s->bytes, q, option(Opt::hugepages) != 0)) return false;
  g.stats.add(Stat::mremap_moves, 1);
  g.stats.add(Stat::mremap_bytes, s->bytes);
  heap_count(tl_heap, HeapStat::large_frees);
  release_to_backend(s, true);
  return true;
}

// The failure path of lm_free's small-object tests (a tail call): says what
// was wrong and aborts.
LM_FAILURE_PATH
void free_failed(Span* s, void* p) {
  check_live("free", s, object_index("free", s, p), p);
  lm_invalid_pointer("free", p, "failed a check");  // not reached
}

// Reports a pointer in no span.
LM_FAILURE_PATH
Span* unknown_pointer(const char* fn, const void* p) {
  lm_invalid_pointer(fn, p, g.backend.owns_address(p) ? "not allocated (double free?)"
                                                     : "not allocated by lazymalloc");
}

// lm_free's path for a pointer in no span (a tail call): free(NULL) does
// nothing, anything else is reported.
LM_FAILURE_PATH
void free_unknown(const void* p) {
  if (p) unknown_pointer("free", p);
}

inline Span* checked_span(const char* fn, const void* p) {
  Span* s = g.backend.span_of(p);
  if (LM_UNLIKELY(!s)) return unknown_pointer(fn, p);
  return s;
}

inline size_t usable_of(const Span* s, const void* p) {
  if (s->kind == SpanKind::kSmall) return s->obj_size;
  return s->bytes - size_t(static_cast<const char*>(p) - s->start) - (s->guard ? kOsPageSize : 0);
}

}  // namespace

// ------------------------------------------------------------ entry points

int lm_stats_fd() { return g_stats_fd; }

const char* lm_check_invariants() { return g.backend.check_invariants(); }

void lm_set_platform(const Platform* platform) {
  g_platform = platform;
  if (g.init_state.load(std::memory_order_acquire) != 2) return;
  g.backend.init(platform, &g.stats, size_t(option(Opt::arena_reserve)), option(Opt::hugepages) != 0);
  g.purger.init(&g.backend, platform, &g.stats);
  g.releaser.init(&g.backend, &g.purger, platform, &g.stats, unsigned(pal::cpu_count()));
}

uintptr_t lm_free_tag(const void* p) { return free_tag(p); }

void lm_init() {
  if (LM_LIKELY(g.init_state.load(std::memory_order_acquire) == 2)) return;
  int expected = 0;
  if (!g.init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    while (g.init_state.load(std::memory_order_acquire) != 2) __builtin_ia32_pause();
    return;
  }
  options_load(pal::environment(), report_stderr);
  if (!g_platform) g_platform = &pal::linux_platform();
  g_secure = option(Opt::secure) != 0;
  if (kChecks || g_secure) g_free_key = pal::random_seed() | 1;
  // Links: a key of their own in secure mode; with checks the tag's key.
  g_link_key = g_secure ? pal::random_seed() | 1 : kChecks ? g_free_key : 0;
  g.backend.init(g_platform, &g.stats, size_t(option(Opt::arena_reserve)), option(Opt::hugepages) != 0);
  g.purger.init(&g.backend, g_platform, &g.stats);
  g.releaser.init(&g.backend, &g.purger, g_platform, &g.stats, unsigned(pal::cpu_count()));
  g.discard.init(&g.backend, g_platform, &g.stats);
  g.purger.attach(&g.discard);
  g.backend.set_hard_limit(uint64_t(option(Opt::memory_limit_hard)));
  pal::register_thread_exit(heap_thread_exit);
  // Statistics at exit go to a copy of stderr taken now: programs such as
  // coreutils close fd 2 in their own exit handlers.
  if (option(Opt::stats)) g_stats_fd = pal::dup_fd(2);
  g.init_state.store(2, std::memory_order_release);
  // May allocate: only now that malloc works.
  pal::register_fork(fork_prepare, fork_parent, fork_child);
}

void* lm_malloc(size_t size) {
  unsigned c;  // cached_class, with the common case tested first
  if (LM_LIKELY(size <= kDirectMax)) {
    c = direct_class(size);
  } else if (size <= kCachedMax) {
    c = mid_class_of(size);
  } else {
    return malloc_generic(size, 0, nullptr);
  }
  Bin& bin = tl_bins[c];
  if (LM_LIKELY(bin.top != bin.base)) return bin_pop(bin);
  return malloc_generic(size, 0, nullptr);
}

void lm_free(void* p) {
  // With checks, the object's line, which they read and write, is fetched
  // while the page map is walked (a prefetch never faults).
  if constexpr (kChecks) __builtin_prefetch(p, 1);
  Span* s = g.backend.span_of(p);  // nullptr for nullptr (no test on the fast path)
  if (LM_UNLIKELY(!s)) return free_unknown(p);
  if (LM_LIKELY(s->kind == SpanKind::kSmall)) {
    ObjectPos pos = block_pos(s, p);
    if (LM_UNLIKELY(!pos.start)) return free_failed(s, p);
    if constexpr (kChecks) {
      // A carved object that does not carry its tag (separate branches:
      // cheaper than combining the tests).
      if (LM_UNLIKELY(pos.index >= __atomic_load_n(&s->reserved, __ATOMIC_RELAXED))) return free_failed(s, p);
      uintptr_t tag = free_tag(p);
      if (LM_UNLIKELY(tag_word(p) == tag)) return free_failed(s, p);
      tag_word(p) = tag;
      std::atomic_signal_fence(std::memory_order_seq_cst);  // tagged before cached
    }
    // Onto this thread's bin, whichever heap owns the span.
    Bin& bin = tl_bins[s->cls];
    Block** t = bin.ftop;
    if (LM_UNLIKELY(t == bin.flimit)) return bin_overflow(s, p);
    *t = static_cast<Block*>(p);
    bin.ftop = t + 1;
    return;
  }
  free_generic(s, p);
}

void* lm_aligned(size_t size, size_t align) {
  if (align <= kMinAlign) return lm_malloc(size);
  if (LM_UNLIKELY(size > kMaxRequest || align > kMaxRequest)) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  return malloc_generic(size, align, nullptr);
}

void* lm_calloc(size_t count, size_t size) {
  size_t total;
  if (LM_UNLIKELY(__builtin_mul_overflow(count, size, &total))) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  bool zero = false;
  void* p;
  if (total <= kDirectMax) {
    p = lm_malloc(total);
  } else {
    p = malloc_generic(total, 0, &zero);
  }
  // Only memory known to be fresh from the kernel (never touched, or given
  // MADV_DONTNEED) skips the memset: MADV_FREE'd memory may hold old bytes.
  if (p && !zero) memset(p, 0, total);
  return p;
}

size_t lm_usable_size(const void* p) {
  if (!p) return 0;
  Span* s = g.backend.span_of(p);
  return s ? usable_of(s, p) : 0;
}

void* lm_realloc(void* p, size_t size) {
  if (!p) return lm_malloc(size);
  if (size == 0) {
    // glibc (REALLOC_ZERO_BYTES_FREES): free and return NULL.
    lm_free(p);
    return nullptr;
  }
  Span* s = checked_span("realloc", p);
  if (s->kind == SpanKind::kSmall) {
    check_live("realloc", s, object_index("realloc", s, p), p);
  } else if (s->discard) {
    lm_invalid_pointer("realloc", p, "discardable memory");
  } else if (p != block_start(s)) {
    lm_invalid_pointer("realloc", p, "points inside a block");
  }
  size_t old = usable_of(s, p);
  if (size <= old && (size >= old / 2 || (s->kind == SpanKind::kSmall && old <= 64))) return p;
  // Large and huge blocks grow and shrink in place where their neighbours
  // allow (large ones stay large, huge ones stay huge).
  if (s->kind != SpanKind::kSmall && size > kMaxSmall && !s->guard) {
    SpanKind before = s->kind;
    if (g.backend.resize(s, size)) {
      if (before == SpanKind::kLarge && s->kind == SpanKind::kHuge) g.stats.sub(Stat::large_blocks, 1);
      return p;
    }
  }
  if (size > kMaxRequest) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  void* q = size > kMaxSmall ? alloc_large(size, 0, nullptr, true) : lm_malloc(size);
  if (!q) return nullptr;
  if (s->kind == SpanKind::kHuge && size > old && move_huge(s, q)) return q;
  memcpy(q, p, size < old ? size : old);
  lm_free(p);
  return q;
}

void lm_thread_collect() {
  Heap* h = tl_heap;
  bins_return_all(h, false);
  if (h == &g_empty_heap) return;
  quarantine_flush(h);
  heap_collect(h, true);
}

size_t lm_purge(bool now) {
  lm_init();
  lm_thread_collect();
  g.releaser.help(true);
  return g.purger.purge_all(now);
}

int lm_trim() { return lm_purge(true) > 0 ? 1 : 0; }

size_t lm_pressure_notify() {
  lm_init();
  lm_thread_collect();
  g.stats.add(Stat::pressure_events_api, 1);
  return g.purger.relieve(~uint64_t(0));
}

void lm_limits(uint64_t* soft, uint64_t* hard) {
  lm_init();
  *soft = uint64_t(option(Opt::memory_limit));
  *hard = g.backend.hard_limit();
}

bool lm_set_limits(uint64_t soft, uint64_t hard) {
  lm_init();
  if (!option_set(unsigned(Opt::memory_limit), int64_t(soft)) ||
      !option_set(unsigned(Opt::memory_limit_hard), int64_t(hard))) {
    return false;
  }
  g.backend.set_hard_limit(hard);
  uint64_t held = g.purger.footprint();
  if (soft && held > soft) g.purger.relieve(held - soft);
  return true;
}

void lm_memory_state(uint64_t out[5]) {
  lm_init();
  MemoryState m = g.backend.memory_state();
  out[0] = m.reserved;
  out[1] = m.active;
  out[2] = m.retained;
  out[3] = m.lazy;
  out[4] = m.clean;
}

namespace {
void snapshot(uint64_t* global, uint64_t* heap) {
  g.discard.refresh_stats();
  for (unsigned i = 0; i < kStatCount; ++i) global[i] = g.stats.v[i].load(std::memory_order_relaxed);
  for (unsigned i = 0; i < kHeapStatCount; ++i) heap[i] = 0;
  LockGuard guard(g.heaps_lock);
  for (Heap* h = g.all_heaps; h; h = h->next_all) {
    for (unsigned i = 0; i < kHeapStatCount; ++i) heap[i] += h->stats.v[i].load(std::memory_order_relaxed);
  }
}
}  // namespace

size_t lm_stats_write(char* buf, size_t len, bool json) {
  lm_init();
  uint64_t global[kStatCount], heap[kHeapStatCount];
  snapshot(global, heap);
  Writer w(buf, len);
  stats_write(w, global, heap, json);
  return w.finish();
}

void lm_stats_print(bool json, int fd) {
  char buf[16384];
  size_t n = lm_stats_write(buf, sizeof buf, json);
  pal::write_fd(fd, buf, n < sizeof buf ? n : sizeof buf - 1);
}

int lm_stat_get(const char* name, uint64_t* value) {
  bool heap_stat;
  unsigned index;
  if (!name || !value || !stat_find(name, &heap_stat, &index)) {
    pal::set_errno(ENOENT);
    return -1;
  }
  lm_init();
  uint64_t global[kStatCount], heap[kHeapStatCount];
  snapshot(global, heap);
  *value = heap_stat ? heap[index] : global[index];
  return 0;
}

// ------------------------------------------------------------ discardable memory

void* lm_discardable_alloc(size_t size) {
  lm_init();
  void* p = g.discard.alloc(size);
  if (!p) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  // The discardable_limit and pressure are watched from the background thread.
  g.background.ensure_started(&g.purger, g.backend.platform(), &g.stats);
  return p;
}

bool lm_discardable_free(void* p) {
  uint64_t released;
  if (!g.discard.free(p, &released)) return false;
  if (released) {
    g.purger.after_release(released, g.background.ensure_started(&g.purger, g.backend.platform(), &g.stats));
  }
  return true;
}

int lm_discardable_lock(void* p) {
  LockResult r = g.discard.lock(p);
  if (LM_LIKELY(r == LockResult::kIntact || r == LockResult::kDiscarded)) {
    // Counted per heap (no atomic read-modify-write on a shared line).
    Heap* h = heap_on_demand(tl_heap);
    if (LM_LIKELY(h != &g_empty_heap)) {
      h->stats.inc(r == LockResult::kIntact ? HeapStat::discardable_lock_hits : HeapStat::discardable_lock_misses);
    }
    return int(r);
  }
  pal::set_errno(r == LockResult::kOverflow ? EOVERFLOW : EINVAL);
  return -1;
}

bool lm_discardable_unlock(void* p) { return g.discard.unlock(p); }

size_t lm_discardable_size(const void* p) { return g.discard.size(p); }

size_t lm_discardable_purge() {
  lm_init();
  return g.discard.discard(~uint64_t(0), size_t(option(Opt::purge_batch)));
}

void lm_invalid_pointer(const char* fn, const void* p, const char* why) {
  char buf[256];
  Writer w(buf, sizeof buf);
  w.put("lazymalloc: ");
  w.put(fn);
  w.put("(): invalid pointer ");
  w.put_hex(reinterpret_cast<uintptr_t>(p));
  w.put(": ");
  w.put(why);
  w.put('\n');
  pal::fatal(buf, w.finish());
}

}  // namespace lazymalloc
