// Heaps, span queues and remote frees: each heap's queue of spans per size
// class, the full list and the delayed list, the xfree protocol between a
// span's owner and other threads (backend/span.h has the state bits), the
// refill of a bin from its spans, and the return of free objects to their
// spans (docs/design.md, "Frontend").
#include <errno.h>

#include <algorithm>
#include <atomic>

#include "frontend/internal.h"
#include "pal/pal.h"

namespace lazymalloc::detail {

void heap_enter_wait(Heap* h) {
  do {
    h->busy.store(0, std::memory_order_release);
    uint32_t c = h->claimed.load(std::memory_order_acquire);
    while (c != 0) {
      // 2 tells heap_unclaim to wake this thread.
      if (c == 1 && !h->claimed.compare_exchange_weak(c, 2, std::memory_order_acquire,
                                                      std::memory_order_relaxed)) {
        continue;
      }
      g_platform->wait(g_platform->ctx, &h->claimed, 2, -1);
      c = h->claimed.load(std::memory_order_acquire);
    }
    heap_announce(h);
  } while (h->claimed.load(std::memory_order_acquire) != 0);
}

bool heaps_barrier() {
  if (!g_heap_fence) return g_platform->process_barrier(g_platform->ctx, false);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return true;
}

unsigned heaps_claim(Heap** hs, unsigned n) {
  for (unsigned i = 0; i < n; ++i) hs[i]->claimed.store(1, std::memory_order_relaxed);
  if (!heaps_barrier()) {
    for (unsigned i = 0; i < n; ++i) heap_unclaim(hs[i]);
    return 0;
  }
  unsigned held = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (hs[i]->busy.load(std::memory_order_acquire) != 0) {
      heap_unclaim(hs[i]);
    } else {
      hs[held++] = hs[i];
    }
  }
  return held;
}

void heap_unclaim(Heap* h) {
  if (h->claimed.exchange(0, std::memory_order_release) == 2) g_platform->wake_one(g_platform->ctx, &h->claimed);
}

constinit std::atomic<uint8_t> g_class_residency[kSmallClasses] = {};
constinit std::atomic<uint8_t> g_class_samples[kSmallClasses] = {};

constinit std::atomic<uint32_t> g_probe_class{kSmallClasses};
constinit std::atomic<uint32_t> g_probe_age{0};

bool class_sparse_now(unsigned c) {
  if (kClasses.units[c] <= 1) return false;
  if (g_class_samples[c].load(std::memory_order_relaxed) != 0) {
    return g_class_residency[c].load(std::memory_order_relaxed) <= kSparseResidencyMax;
  }
  // One span in flight probes its class: the others are ordinary.
  uint32_t probe = g_probe_class.load(std::memory_order_relaxed);
  if (probe != kSmallClasses && g_probe_age.fetch_add(1, std::memory_order_relaxed) < kProbeExpiry) return false;
  // No probe, or an expired one: this span is the next probe.
  if (!g_probe_class.compare_exchange_strong(probe, c, std::memory_order_relaxed)) return false;
  g_probe_age.store(0, std::memory_order_relaxed);
  return true;
}

void class_residency_reset() {
  g_probe_class.store(kSmallClasses, std::memory_order_relaxed);
  g_probe_age.store(0, std::memory_order_relaxed);
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    g_class_residency[c].store(0, std::memory_order_relaxed);
    g_class_samples[c].store(0, std::memory_order_relaxed);
  }
}

namespace {

// Resident pages of span s (its class's verdict takes the sample), or -1
// if the kernel would not say.  Races between threads lose a sample at
// worst (relaxed loads and stores: a heuristic).
long span_residency(const Span* s) {
  const unsigned c = s->cls;
  const size_t pages = s->bytes / kOsPageSize;
  const long resident = g_platform->resident_pages(g_platform->ctx, s->start, s->bytes);
  if (resident < 0) return resident;
  const unsigned share = unsigned(uint64_t(resident) * 255 / pages);
  const unsigned n = g_class_samples[c].load(std::memory_order_relaxed);
  const unsigned r = g_class_residency[c].load(std::memory_order_relaxed);
  g_class_residency[c].store(uint8_t(n == 0 ? share : (3 * r + share) / 4), std::memory_order_relaxed);
  if (n < 255) g_class_samples[c].store(uint8_t(n + 1), std::memory_order_relaxed);
  uint32_t probe = c;
  g_probe_class.compare_exchange_strong(probe, kSmallClasses, std::memory_order_relaxed);  // measured
  return resident;
}

// An empty small span goes back to the backend (no lock held, the heap let
// go).  An ordinary span of a class above 8 KiB on 4 KiB pages may give its
// class a sample (class_sparse_now).  A sparse span is asked how many of its
// pages are resident (span_residency): at most half, or its class now
// judged dense, it goes back with MADV_DONTNEED (its units CLEAN), so that
// the few pages it touched do not stay RETAINED in holes that other spans
// would touch at other offsets.
void release_small(Span* s) {
  bool gone = false;
  const unsigned c = s->cls;
  if (!s->sparse && kClasses.units[c] > 1 && !g.backend.arenas_huge() &&
      g_class_samples[c].load(std::memory_order_relaxed) < kResidencySamples) {
    span_residency(s);
  } else if (s->sparse) {
    const size_t pages = s->bytes / kOsPageSize;
    const long resident = span_residency(s);
    // A span of a class now judged dense goes back CLEAN whatever its
    // residency: only sparse spans reuse a sparse slot's units, and its
    // RETAINED units would wait partial_decay_ms beside the slot's live spans.
    if (resident >= 0 && (size_t(resident) * 2 <= pages || !class_sparse_now(c)) &&
        g_platform->advise(g_platform->ctx, s->start, s->bytes, Advice::kDontNeed) == 0) {
      gone = true;
      g.stats.add(Stat::sparse_span_dontneed_bytes, s->bytes);
    }
  }
  release_to_backend(s, gone);
}

}  // namespace

HeapGuard::~HeapGuard() {
  if (!h_) return;
  Span* s = h_->to_release;
  h_->to_release = nullptr;
  if (collector_) {
    heap_unclaim(h_);
  } else {
    h_->busy.store(0, std::memory_order_release);
  }
  while (s) {
    Span* next = s->next;
    s->next = nullptr;
    if (s->kind == SpanKind::kSmall) {
      release_small(s);
    } else {
      release_to_backend(s);
    }
    s = next;
  }
}

namespace {

void queue_push_front(SpanQueue& q, Span* s) {
  s->prev = nullptr;
  s->next = q.head;
  if (q.head) q.head->prev = s; else q.tail = s;
  q.head = s;
}

void queue_push_back(SpanQueue& q, Span* s) {
  s->next = nullptr;
  s->prev = q.tail;
  if (q.tail) q.tail->next = s; else q.head = s;
  q.tail = s;
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

// A heap's sparse spans not kept (Heap::sparse_bytes), down by `bytes`.
void sparse_sub(Heap* h, uint64_t bytes) { h->sparse_bytes = h->sparse_bytes > bytes ? h->sparse_bytes - bytes : 0; }

// Empty sparse span s of heap h stays with its class for the class's next
// span (span_new), which then touches the pages this one touched rather
// than new offsets of units another span left: at most kKeptSpans a class,
// and the kept bytes at most the heap's sparse spans in use.  True if kept.
// REQUIRES h held; s off every list.
bool span_keep(Heap* h, Span* s) {
  const unsigned c = s->cls;
  sparse_sub(h, s->bytes);
  if (h->kept_count[c] >= kKeptSpans || h->kept_bytes + s->bytes > h->sparse_bytes) return false;
  // The class's first samples (a syscall): its kept spans may be all that
  // goes back for a while.
  if (g_class_samples[c].load(std::memory_order_relaxed) < kResidencySamples) span_residency(s);
  s->next = h->kept[c];
  s->prev = nullptr;
  h->kept[c] = s;
  ++h->kept_count[c];
  h->kept_bytes += s->bytes;
  return true;
}

// Hands empty span s of heap h to the backend (HeapGuard gives it back
// once the heap is let go).  REQUIRES h held.
void span_to_backend(Heap* h, Span* s) {
  h->stats.inc(HeapStat::spans_released);
  g.stats.sub(Stat::small_spans, 1);
  g.stats.sub(Stat::small_span_bytes, s->bytes);
  class_count(h, s->cls, ClassStat::spans, uint64_t(-1));
  class_count(h, s->cls, ClassStat::span_bytes, -uint64_t(s->bytes));
  class_count(h, s->cls, ClassStat::carved_bytes, -uint64_t(span_carved(s)) * s->obj_size);
  s->heap = nullptr;
  s->next = h->to_release;
  h->to_release = s;
}

// Unlinks empty span s of heap h: kept with its class if it is sparse and
// the bounds allow (span_keep), else for the backend.  REQUIRES h held
// (HeapGuard).
void span_release(Heap* h, Span* s) {
  span_purge_forget(s);
  if (s->sparse && span_keep(h, s)) return;
  span_to_backend(h, s);
}

// Every kept span of heap h goes to the backend (collections, thread exit).
void kept_release_all(Heap* h) {
  if (h->kept_bytes == 0) return;  // none kept (span_keep counts each one's bytes)
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    while (Span* s = h->kept[c]) {
      h->kept[c] = s->next;
      span_to_backend(h, s);
    }
    h->kept_count[c] = 0;
  }
  h->kept_bytes = 0;
}

// True if span s (in its class queue) may go back to the backend: no object
// is live or cached, and no other thread is pushing to it.
bool span_empty(const Span* s) {
  return s->used == 0 && !s->in_full &&
         (s->xfree.load(std::memory_order_acquire) & kXfreeMask) == kXfreeNormal;
}

// Moves class c's head reference to its current span.  The current span of
// a class counts one phantom object in `used`, so that a bin flush that
// returns its last object, or the free of the one object of a big class's
// span, does not look like the span emptying (a bin oscillating at its
// bound, or a malloc/free of one big object, would otherwise hand its span
// back and forth through the backend's lock): an empty span goes back to the
// backend only once it is no longer current, which is when the reference
// leaves it.  Spans are at most 5 units (span_units), so a quiet thread
// holds at most that per class in empty spans, until the collector takes
// them.
void move_head_ref(Heap* h, unsigned c, Span* to) {
  Span* from = h->head_ref[c];
  if (from == to) return;
  if (to) span_used_add(to, 1);
  h->head_ref[c] = to;
  if (from) span_used_add(from, uint32_t(-1));
  if (from && from->used == 0 && span_empty(from)) {
    queue_remove(h->queue[c], from);
    span_release(h, from);
  }
}

// After class c's queue changed: moves the head reference.
void queue_changed(Heap* h, unsigned c) {
  Span* head = h->queue[c].head;
  if (head) h->queued_classes |= uint64_t(1) << c;
  move_head_ref(h, c, head);
}

}  // namespace

// The current span is the one an empty span of the class stays as (the
// phantom: move_head_ref); once the thread has left the class (its cache
// found unchanged at its idle looks and flushed, bin_event), nothing
// oscillates there, and the span's units serve other classes and heaps
// instead of staying with it until the collector finds the whole thread
// quiet (issue #16: batch, whose ~20 classes each kept a current span
// touched whole, 1.3 MiB, against glibc's one heap for all sizes).
bool class_idle(Heap* h, unsigned c) {
  Span* s = h->head_ref[c];
  if (!s || s->used != 1) return false;
  move_head_ref(h, c, nullptr);
  queue_changed(h, c);
  if (h->head_ref[c] == s) return false;
  h->stats.inc(HeapStat::idle_class_spans_released);
  return true;
}

namespace {

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
  span_used_add(s, -s->xfree_count.exchange(0, std::memory_order_acquire));
  if (s->free) {
    // Entries are validated as they are walked (and again when popped).
    uint32_t steps = 0;
    Block* last = list;
    while (Block* next = walk_link(s, last, steps)) last = next;
    link_set(last, s->free);
  }
  s->free = list;
}

}  // namespace

void link_objects(Span* s, uint32_t first, uint32_t n) {
  char* p = s->start + size_t(first) * s->obj_size;
  auto obj = [&](uint32_t i) { return reinterpret_cast<Block*>(p + size_t(i) * s->obj_size); };
  // link_set tags each object before the batch is listed (fork: see take).
  if (g_secure) {
    // Secure mode: the batch is linked in a random order (Fisher-Yates).
    uint16_t order[kMaxLinkBatch];
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
}

namespace {
// Objects reserved..reserved+n-1 of span s were handed out, cached or
// listed: the carve limit moves past them (atomic: the failure paths of
// other threads' frees read it).
void span_reserved_add(Span* s, uint32_t n) {
  const uint32_t before = span_carved(s);
  __atomic_store_n(&s->reserved, s->reserved + n, __ATOMIC_RELAXED);
  span_set_check_limit(s);
  class_count(s->heap, s->cls, ClassStat::carved_bytes, uint64_t(span_carved(s) - before) * s->obj_size);
}
}  // namespace

void span_take_tail(Span* s, Block** out, uint32_t n) {
  char* p = s->start + size_t(s->reserved) * s->obj_size;
  const size_t size = s->obj_size;
  // The key read once (set_free_tag's fence would read it again for each
  // object): the objects are listed nowhere until the caller publishes the
  // stack, after the fence below.
  const uintptr_t key = g_free_key;
  auto put = [&](Block** o, char* q) {
    if constexpr (kChecks) tag_word(q) = key ^ reinterpret_cast<uintptr_t>(q);
    *o = reinterpret_cast<Block*>(q);
  };
  Block** o = out + n;
  if (n & 1) {
    put(--o, p);
    p += size;
  }
  // Two a step (most of a refill's cost where the span's list is empty).
  for (; o != out; o -= 2, p += 2 * size) {
    put(o - 1, p);
    put(o - 2, p + size);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  span_used_add(s, n);
  span_reserved_add(s, n);
}

RunTaken take_run(Span* s, Block* b, Block* link, Block** out, uint32_t n, uint32_t want, uint32_t steps) {
  Block* next = run_next(link);
  const size_t size = s->obj_size;
  const uint32_t count = run_count(s, b, steps);
  const uint32_t k = std::min(count, want - n);
  Block** o = out + n;
  char* p = reinterpret_cast<char*>(b);
  *o++ = b;
  for (uint32_t m = 1; m < k; ++m) {
    p += size;
    if constexpr (kChecks) {
      if (LM_UNLIKELY(!has_free_tag(p))) corrupt_list(p);
    }
    *o++ = reinterpret_cast<Block*>(p);
  }
  if (k < count) {
    Block* rest = reinterpret_cast<Block*>(p + size);
    node_put(rest, count - k, next, size);
    next = rest;
  }
  return {next, n + k, steps};
}

Block* run_rest(Span* s, Block* b, Block* link) {
  Block* head;  // b itself: take_run's first object, untested (take tests it)
  return take_run(s, b, link, &head, 0, 1, 0).next;
}

void list_expand(Span* s, Block* b) {
  uint32_t steps = 0;
  while (b) {
    uint32_t count;
    Block* next = walk_node(s, b, steps, &count);
    if (count > 1) {
      const size_t size = s->obj_size;
      char* p = reinterpret_cast<char*>(b);
      for (uint32_t m = 1; m < count; ++m, p += size) link_put(reinterpret_cast<Block*>(p), reinterpret_cast<Block*>(p + size));
      link_put(reinterpret_cast<Block*>(p), next);
    }
    b = next;
  }
}

namespace {

// Carves never-used objects from the span's tail onto its allocation list,
// a few pages at a time so memory is touched only as it is needed: secure
// mode only, whose carves are shuffled (link_objects); elsewhere refills
// take never-used objects by address (span_take_tail).
void carve(Span* s) {
  const uint32_t n = std::min(carve_objects(s), s->capacity - s->reserved);
  link_objects(s, s->reserved, n);
  span_reserved_add(s, n);
}

// Refills the allocation list from its own lists, remote frees and purged
// pages (revived one group at a time: the page's refault); in secure mode
// then from never-used objects (carve).  A span with an uncarved tail has
// something to take either way (span_can_take).  REQUIRES the heap held
// (HeapGuard).
void span_collect(Span* s) {
  if (!s->free && s->local_free) {
    s->free = s->local_free;
    s->local_free = nullptr;
  }
  if (!s->free) collect_remote(s);
  while (!s->free && span_has_purged(s)) span_revive(s);
  if (g_secure && !s->free && s->reserved < s->capacity) carve(s);
}

// Span s has an object to hand out: listed, or never used (span_take_tail).
bool span_can_take(const Span* s) { return s->free || s->reserved < s->capacity; }

// Span s, current in its class (its used counts the phantom: move_head_ref),
// holds no object outside its own lists: none live, none in a cache, none
// in a remote free, none dormant.  Then it starts over from its first
// object, as if new: a refill takes its objects by address
// (span_take_tail) instead of walking the list its flushes linked, and the
// carve limit the checks test (check_limit) drops back, so a free of an
// object from before is reported as the double free it is (carved_max).
// Not in secure mode, whose carves are shuffled.  Nor while remote frees
// wait on `xfree`: collect_remote takes the list and then the count, so a
// run pushed between the two is counted off `used` while it still waits
// on the list, and `used` may read 1 with objects there; a restart would
// then hand them out by address and again from the list when collected
// (xmalloc reported it as a double free).  With the list empty every run
// pushed was taken, and `used` is at least what is outstanding (a count
// not yet taken only adds).  REQUIRES the heap held.
void span_restart_if_empty(Span* s) {
  if (g_secure || (s->xfree.load(std::memory_order_acquire) & ~kXfreeMask) != 0) return;
  if (s->used != 1 || s->reserved == 0 || span_has_purged(s)) return;
  s->free = s->local_free = nullptr;
  if (s->reserved > s->carved_max) __atomic_store_n(&s->carved_max, uint16_t(s->reserved), __ATOMIC_RELAXED);
  __atomic_store_n(&s->reserved, 0u, __ATOMIC_RELAXED);
  span_set_check_limit(s);
  s->heap->stats.inc(HeapStat::span_restarts);
}

// A span of heap h's queues that came off its delayed stack: a remote free
// found that its run left no object of the span outstanding (remote_push),
// or h's own free queued it again after a remote free had notified it; or
// one whose every outstanding object waits on `xfree` after h's own return
// (return_run: the last object back was a local one).  Its remote frees are collected, and an empty span goes back to the
// backend now, where any class of any heap reuses its units, instead of
// waiting in the queue behind spans with free objects, which the owner's
// refills take first (issue #16: rptest held about as many such spans as
// spans with live objects).  REQUIRES h held.
void release_if_emptied(Heap* h, Span* s) {
  collect_remote(s);
  if (span_empty(s)) {
    queue_remove(h->queue[s->cls], s);
    queue_changed(h, s->cls);
    span_release(h, s);
  }
}

// Revives the spans other threads freed into while they were full, and
// releases the ones their frees emptied.
void process_delayed(Heap* h) {
  Span* s = h->delayed.exchange(nullptr, std::memory_order_acquire);
  __atomic_store_n(&h->adopt_kept, nullptr, __ATOMIC_RELAXED);  // the stack changed hands
  while (s) {
    Span* next = s->next_delayed;
    s->next_delayed = nullptr;
    xfree_transition(s, kXfreeNotified, kXfreeNormal);
    if (s->in_full) {
      full_remove(h, s);
      queue_push_front(h->queue[s->cls], s);
      queue_changed(h, s->cls);
      h->stats.inc(HeapStat::delayed_spans);
    } else {
      release_if_emptied(h, s);
    }
    s = next;
  }
}

// A new span of class c for heap h: a kept one of the class (span_keep),
// else the backend's, in a sparse slot if the class is sparse now.
Span* span_new(Heap* h, unsigned c) {
  Span* s = h->kept[c];
  if (s) {
    h->kept[c] = s->next;
    --h->kept_count[c];
    h->kept_bytes -= s->bytes;
    s->zero = 0;
    h->stats.inc(HeapStat::sparse_span_reuses);
    // Starts over (below): a kept span of the class is carved anew.
    class_count(h, c, ClassStat::carved_bytes, -uint64_t(span_carved(s)) * s->obj_size);
  } else {
    const bool sparse = class_sparse_now(c);
    s = g.backend.alloc_units_span(kClasses.units[c], sparse, h->owner);
    if (!s) return nullptr;
    s->sparse = sparse;
    g.stats.add(Stat::small_spans, 1);
    g.stats.add(Stat::small_span_bytes, s->bytes);
    class_count(h, c, ClassStat::spans);
    class_count(h, c, ClassStat::span_bytes, s->bytes);
    h->stats.inc(HeapStat::spans_acquired);
  }
  if (s->sparse) h->sparse_bytes += s->bytes;
  s->kind = SpanKind::kSmall;
  s->cls = uint8_t(c);
  s->obj_size = uint32_t(class_size(c));
  s->div_magic = kClasses.magic[c];
  s->capacity = uint32_t(s->bytes / s->obj_size);
  s->reserved = 0;
  s->carved_max = 0;
  span_purge_init(s);
  __atomic_store_n(&s->used, 0u, __ATOMIC_RELAXED);
  s->free = s->local_free = nullptr;
  s->xfree.store(0, std::memory_order_relaxed);
  s->xfree_count.store(0, std::memory_order_relaxed);
  s->next = s->prev = nullptr;
  s->heap = h;
  return s;
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
  if (span_empty(s)) {
    queue_remove(h->queue[s->cls], s);
    queue_changed(h, s->cls);
    span_release(h, s);
  }
}

// Remote free of a run of objects of span s, first..last (n objects, linked):
// one CAS onto the span's xfree list.  Acquire too: the free that moves
// the span to NOTIFIED (from NOTIFY, parked, or from NORMAL when the run
// empties it) writes `next_delayed`, which the owner (parking the span with
// acq_rel after it last read that field in process_delayed) must be ordered
// before.
// Returns true if the owner had nothing pending for the collector before.
// The owner is read after the push and before the count: a span found
// parked (NOTIFY) belongs to the heap that parked it, which may not be the
// one that owned it before (adopt_spans moves parked spans; its store of
// `heap` is ordered before the park this CAS read); and until xfree_count
// counts the run, `used` counts it too, so neither the owner nor a
// collector can find the span empty and release it (span_release clears
// `heap`).  Heaps themselves are never freed, so flagging the owner after
// the count is harmless, and it must come after it so that a collection
// that clears the flag also sees the run.
// A run into a span already NOTIFIED (on the delayed stack: an adoption
// look may have kept it there, adopt_spans) that leaves at most
// capacity >> kAdoptLiveShift of its objects outstanding flags the owner
// (adopt_ready), so that the next look claims the heap again; the count
// is the one fetch_add returns, so that of two racing runs the later sees
// both, and `used` is read after it (a span released meanwhile, its record
// reused, at worst flags the heap for nothing).
bool remote_push(Heap* h, Span* s, Block* first, Block* last, uint32_t n) {
  // Whether this run leaves no object of the span outstanding: then the
  // owner is notified as for a parked span, and releases it
  // (release_if_emptied).  Read before the push: once the run is counted
  // the owner may release the span.  A racing owner or pusher makes the
  // guess wrong either way: a span notified that is not empty is collected
  // and stays; an empty one missed waits for its owner's walk or the
  // collector, as before.
  const bool empties =
      s->xfree_count.load(std::memory_order_relaxed) + n == __atomic_load_n(&s->used, __ATOMIC_RELAXED);
  const uint32_t nearly = s->capacity >> kAdoptLiveShift;  // not read once the run is counted
  uintptr_t old = s->xfree.load(std::memory_order_relaxed);
  uintptr_t state, to;
  do {
    state = old & kXfreeMask;
    to = state == kXfreeNotify || (state == kXfreeNormal && empties) ? kXfreeNotified : state;
    link_set(last, reinterpret_cast<Block*>(old & ~kXfreeMask));
  } while (!s->xfree.compare_exchange_weak(old, reinterpret_cast<uintptr_t>(first) | to,
                                           std::memory_order_acq_rel, std::memory_order_relaxed));
  Heap* owner = __atomic_load_n(&s->heap, __ATOMIC_RELAXED);
  const uint32_t counted = s->xfree_count.fetch_add(n, std::memory_order_release) + n;
  if (state == kXfreeNotified &&
      counted + nearly >= __atomic_load_n(&s->used, __ATOMIC_RELAXED) &&
      !owner->adopt_ready.load(std::memory_order_relaxed)) {
    owner->adopt_ready.store(true, std::memory_order_release);
  }
  bool first_pending = !owner->remote_pending.load(std::memory_order_relaxed) &&
                       !owner->remote_pending.exchange(true, std::memory_order_relaxed);
  if (state != kXfreeNotified && to == kXfreeNotified) {
    Span* head = owner->delayed.load(std::memory_order_relaxed);
    do {
      s->next_delayed = head;
    } while (!owner->delayed.compare_exchange_weak(head, s, std::memory_order_release,
                                                   std::memory_order_relaxed));
  }
  heap_count(h, HeapStat::remote_frees, n);
  return first_pending;
}

// Links v[i], v[i + 1], ... (tagged) one to the next while they lie in
// span s; returns the index past the last one (at least i + 1), whose link
// is left to the caller.
LM_INLINE uint32_t link_in_span(const Span* s, Block* const* v, uint32_t i, uint32_t n) {
  Block* prev = v[i];
  Block* const* q = v + i + 1;
  Block* const* const end = v + n;
  for (; q != end && in_span(s, *q); ++q) {
    link_put(prev, *q);
    prev = *q;
  }
  return uint32_t(q - v);
}

// Counts n objects of span s returned by heap h's thread (or by a thread
// without a heap).
void count_return(Heap* h, const Span* s, uint32_t n) {
  const uint64_t bytes = uint64_t(n) * s->obj_size;
  if (LM_LIKELY(h != &g_empty_heap)) {
    h->stats.inc(HeapStat::span_returned_bytes, bytes);
    class_count(h, s->cls, ClassStat::returned_bytes, bytes);
  } else {
    g.stats.add(Stat::orphan_return_bytes, bytes);
    g.class_orphan_returned[s->cls].fetch_add(bytes, std::memory_order_relaxed);
  }
}

// Counts n objects of span s taken by heap h (to its thread's cache or a
// caller).
void count_taken(Heap* h, const Span* s, uint32_t n) {
  const uint64_t bytes = uint64_t(n) * s->obj_size;
  h->stats.inc(HeapStat::span_taken_bytes, bytes);
  class_count(h, s->cls, ClassStat::taken_bytes, bytes);
}

// Heap h's own span s got n objects back on local_free, whose head is now
// `first` (listed, its last node linked to the old head).
LM_INLINE void return_local(Heap* h, Span* s, Block* first, uint32_t n) {
  count_return(h, s, n);
  s->local_free = first;
  span_used_add(s, -n);
  h->returned_bytes += uint64_t(n) * s->obj_size;
  if (s->used == 0 || s->in_full) {
    local_free_attention(h, s);
  } else if (s->used == s->xfree_count.load(std::memory_order_relaxed)) {
    // Every object still counted in `used` waits on `xfree`: the span
    // is empty once they are collected (remote_push notices only a
    // remote run that empties a span; this local one did).
    release_if_emptied(h, s);
  }
}

// Returns a run of free objects of span s, first..last (n objects, linked,
// tagged) to their span: the local list if heap h owns it, else the remote
// one.  Returns true if the owner has something for the collector now and
// had nothing before (remote_push).
bool return_run(Heap* h, Span* s, Block* first, Block* last, uint32_t n) {
  // Atomic: adopt_spans may be moving a parked span of a third heap.
  if (__atomic_load_n(&s->heap, __ATOMIC_RELAXED) == h) {
    link_set(last, s->local_free);
    return_local(h, s, first, n);
    return false;
  }
  count_return(h, s, n);
  return remote_push(h, s, first, last, n);
}

// Returns the cached objects v[i..) of heap h's own span s that come
// before the first one of another span (at least v[i]) onto its local
// list, each stretch at consecutive addresses as one run (checks.h,
// kRunFlag); returns the index past them.  REQUIRES h held, not in
// secure mode.
uint32_t return_own_runs(Heap* h, Span* s, Block* const* v, uint32_t i, uint32_t n) {
  const size_t size = s->obj_size;
  Block* const first = v[i];
  uint32_t j = i + 1;
  if (j == n || reinterpret_cast<uintptr_t>(v[j]) != reinterpret_cast<uintptr_t>(first) + size) {
    // The objects do not start at consecutive addresses (freed in another
    // order than they were allocated): listed one by one, as a remote
    // return links them, without looking for runs (which costs a compare
    // more per object: rptest's flushes).
    j = link_in_span(s, v, i, n);
    link_put(v[j - 1], s->local_free);
    return_local(h, s, first, j - i);
    return j;
  }
  // The end of the span's last object: a stretch may run on into the
  // span that follows (the same class, adjacent units).
  const uintptr_t obj_end = reinterpret_cast<uintptr_t>(s->start) + uintptr_t(s->capacity) * size;
  j = i;
  for (;;) {
    Block* const seg = v[j];
    uintptr_t expect = reinterpret_cast<uintptr_t>(seg) + size;
    const uintptr_t* q = reinterpret_cast<const uintptr_t*>(v + j + 1);
    const uintptr_t* const end = reinterpret_cast<const uintptr_t*>(v + n);
    // Two entries a step (the loop is most of a flush's cost).
    while (end - q >= 2 && q[0] == expect && q[1] == expect + size) {
      expect += 2 * size;
      q += 2;
    }
    if (q != end && *q == expect) {
      expect += size;
      ++q;
    }
    uint32_t k = uint32_t(reinterpret_cast<Block* const*>(q) - v);
    if (LM_UNLIKELY(expect > obj_end)) k = j + uint32_t((obj_end - reinterpret_cast<uintptr_t>(seg)) / size);
    if (k < n && in_span(s, v[k])) {
      node_put(seg, k - j, v[k], size);
      j = k;
      continue;
    }
    node_put(seg, k - j, s->local_free, size);
    return_local(h, s, first, k - i);
    return k;
  }
}

// True (once per kBackgroundAfterBytes) if heap h's own spans got that many
// bytes back since the collector was last told: a program that frees most
// of its objects may empty no span, and the free pages inside them go back
// only through the collector (span_purge.cc).  REQUIRES h held.
bool returned_enough(Heap* h) {
  if (h->returned_bytes < kBackgroundAfterBytes) return false;
  h->returned_bytes = 0;
  return true;
}


// The first span of queue q (heap h's) with a free object, parking the
// ones before it that have none; nullptr if none has.  REQUIRES h held.
Span* queue_find(Heap* h, SpanQueue& q) {
  Span* s = q.head;
  while (s) {
    span_collect(s);
    if (span_can_take(s)) break;
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
  return s;
}

// Whether parked span s (its remote frees collected) may change hands: at
// most a quarter of its objects (capacity >> kAdoptLiveShift) are still
// live or in its owner's cache.  A span its owner still mostly uses would
// leave the owner to take a fresh span at its next refill while the
// adopter's new objects pin this one: threads that pause in turn (rptest
// --lockstep) adopted each other's spans back and forth and both grew.
namespace {
bool adoptable(const Span* s) { return s->used <= s->capacity >> kAdoptLiveShift; }
}  // namespace

// Span adoption.  Heap h's thread (in a refill, h held) is about to take a
// new span from the backend.  Spans parked full in another heap that other
// threads have freed into since wait on that heap's delayed stack until its
// thread's next refill; a thread that stopped allocating (a main thread
// that filled a data structure and waits for its workers, which free the
// objects and allocate their own) never revives them, and its spans stay
// with it, empty or nearly, until the background collector finds the heap
// quiet for decay_ms, while the other threads' spans grow.  So h takes
// them over: from the heaps (at most kAdoptProbeHeaps) whose thread has
// made no slow-path event since the previous look (at least
// kAdoptProbeEvents of h's own before), claimed as the collector claims
// them (one process barrier for all), it moves every span on the delayed
// stack that is still parked and adoptable (nearly empty) into its own
// queues, behind their current spans; the other parked spans go back on
// the delayed stack, still NOTIFIED, as they came.  A parked span is
// reached only through the delayed stack, which the claim makes h's alone;
// remote frees read the owner after their push (remote_push).  A heap
// whose stack holds only the spans the last look kept (Heap::adopt_kept)
// is not claimed again until a remote free leaves one of them nearly empty
// (adopt_ready), other spans arrive, or its thread runs: nothing else
// changes the verdict, and each claim costs a process barrier.  Never
// waits: skipped while a collector (or another adopter) holds
// g.collect_lock.  True if a span was adopted.
bool adopt_spans(Heap* h) {
  const uint64_t own = h->slow_events;
  if (h == &g_empty_heap || own - h->adopt_probe_events < kAdoptProbeEvents) return false;
  h->adopt_probe_events = own;
  if (!g.collect_lock.try_lock()) return false;
  // Heaps are never freed and new ones are pushed at the head, so the list
  // can be walked from a head read under heaps_lock (not waited for either:
  // fork holds it while it waits for threads in slow paths, such as h's),
  // or from where the last look stopped (g.adopt_cursor): every heap is
  // looked at in turn however many there are (the first look at a heap only
  // notes its events, so a heap past a fixed-length walk from the head was
  // never adopted from: a quiet owner's pooled heap among 32 others).
  Heap* v = g.adopt_cursor;
  Heap* const start = v;
  bool from_head = false;
  Heap* batch[kAdoptProbeHeaps];
  unsigned n = 0;
  for (unsigned walked = 0; n < kAdoptProbeHeaps && walked < kAdoptProbeWalk; ++walked) {
    if (!v) {
      if (from_head || !g.heaps_lock.try_lock()) break;
      v = g.all_heaps;
      g.heaps_lock.unlock();
      from_head = true;
    }
    if (!v || (from_head && v == start)) break;  // once around, at most
    Heap* const cur = v;
    v = v->next_all;
    if (cur == h) continue;
    Span* head = cur->delayed.load(std::memory_order_relaxed);
    if (!head) continue;
    const uint64_t events = __atomic_load_n(&cur->slow_events, __ATOMIC_RELAXED);
    if (events != cur->adopt_seen_events) {
      cur->adopt_seen_events = events;  // ran since the last look
      __atomic_store_n(&cur->adopt_kept, nullptr, __ATOMIC_RELAXED);
      continue;
    }
    if (head == __atomic_load_n(&cur->adopt_kept, __ATOMIC_RELAXED) &&
        !cur->adopt_ready.load(std::memory_order_relaxed)) {
      continue;  // as the last look left it
    }
    batch[n++] = cur;
  }
  g.adopt_cursor = v;
  // A heap whose thread is in a slow path is left alone.
  const unsigned held = n ? heaps_claim(batch, n) : 0;
  uint64_t adopted = 0, kept_spans = 0;
  for (unsigned i = 0; i < held; ++i) {
    Heap* d = batch[i];
    HeapGuard guard(d, HeapGuard::kClaimed);
    // Before the stack is taken: a run flagging a span after it was judged
    // leaves the flag set for the next look.
    d->adopt_ready.exchange(false, std::memory_order_acquire);
    Span* s = d->delayed.exchange(nullptr, std::memory_order_acquire);
    Span* kept = nullptr;
    Span* kept_tail = nullptr;
    while (s) {
      Span* next = s->next_delayed;
      if (s->in_full) {
        collect_remote(s);
        if (!adoptable(s)) {
          // Stays parked and NOTIFIED (remote frees push no second time),
          // so it goes back on d's delayed stack, for d's next refill or a
          // later look once more of its objects are freed.
          s->next_delayed = kept;
          kept = s;
          if (!kept_tail) kept_tail = s;
          ++kept_spans;
          s = next;
          continue;
        }
      }
      s->next_delayed = nullptr;
      xfree_transition(s, kXfreeNotified, kXfreeNormal);
      // Not parked: in d's queue (d's thread freed into it and queued it
      // itself, or remote frees emptied it): d's to release if empty.
      if (s->in_full) {
        full_remove(d, s);
        if (s->sparse) {
          sparse_sub(d, s->bytes);
          h->sparse_bytes += s->bytes;
        }
        __atomic_store_n(&s->heap, h, __ATOMIC_RELAXED);
        queue_push_back(h->queue[s->cls], s);
        queue_changed(h, s->cls);
        ++adopted;
      } else {
        release_if_emptied(d, s);
      }
      s = next;
    }
    Span* left = nullptr;
    if (kept) {
      // Remote frees may have pushed other spans meanwhile.
      Span* head = d->delayed.load(std::memory_order_relaxed);
      do {
        kept_tail->next_delayed = head;
      } while (!d->delayed.compare_exchange_weak(head, kept, std::memory_order_release,
                                                 std::memory_order_relaxed));
      if (!head) left = kept;  // only spans judged here: skipped until something changes
    }
    __atomic_store_n(&d->adopt_kept, left, __ATOMIC_RELAXED);
  }
  g.collect_lock.unlock();
  h->stats.inc(HeapStat::spans_adopted, adopted);
  h->stats.inc(HeapStat::spans_not_adopted, kept_spans);
  return adopted != 0;
}

// Finds or makes a span of class c with a free object, takes one and fills
// bin's allocation stack from the rest (not in secure mode: its bins have
// no stacks).  nullptr when out of memory.  REQUIRES h held (HeapGuard).
Block* refill(Heap* h, unsigned c, Bin& bin) {
  SpanQueue& q = h->queue[c];
  if (g_secure) {
    // Secure mode's fast path (its bins are always empty).
    Span* head = q.head;
    if (head && head->free) {
      Block* b = take(head, head->free);
      span_objects_taken(head, &b, 1);
      count_taken(h, head, 1);
      return b;
    }
  }
  h->stats.inc(HeapStat::span_refills);
  class_count(h, c, ClassStat::refills);
  if (h->delayed.load(std::memory_order_relaxed)) process_delayed(h);
  Span* s = queue_find(h, q);
  if (!s && adopt_spans(h)) s = queue_find(h, q);
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
  span_restart_if_empty(s);
  Block* b;
  if (s->free) {
    b = take(s, s->free);
  } else {
    // Never used: untagged as take leaves what it hands out.
    span_take_tail(s, &b, 1);
    if constexpr (kChecks) tag_word(b) = 0;
  }
  bin_refill(bin, c, s);
  count_taken(h, s, uint32_t(1 + (bin.top - bin.base)));
  if (span_has_purged(s)) {
    span_objects_taken(s, &b, 1);
    if (bin.base) span_objects_taken(s, bin.base, uint32_t(bin.top - bin.base));
  }
  return b;
}

// alloc_class's slow part: the heap held (HeapGuard, a slow-path event),
// the stacks put back after a collector's take, then a pop, a trade, or a
// refill from the heap's spans.  nullptr (errno ENOMEM) when out of memory.
LM_NOINLINE void* alloc_refill(Heap* h, unsigned c) {
  Bin& bin = tl_bins[c];
  Block* b;
  bool warming = false;  // a warming bin's refill doubles it at once: no miss to count
  {
    HeapGuard guard(h);
    // A collector may have taken the stacks, and left the allocation
    // stack's top entry (bins_take_idle): they go back to the start of
    // their slots, and that entry out, before a refill fills the stack.
    if (h->bins_taken) bins_to_start(h);
    // The class's first slow path in this thread sets its bin up.
    if (LM_UNLIKELY(!bin.flimit)) bin_enable(h, c);
    if (bin.top != bin.base || bins_trade(c)) return bin_pop(bin);
    b = refill(h, c, bin);
    if (b) {
      // A free stack too short to trade (trade_min) hands out its object
      // first: what a program freed last comes back next, as after a trade.
      // A warming bin (which never trades) keeps the rest of its free
      // stack too, above the refill (bin_absorb_free): the bin's count
      // grows by the refill.
      if (bin.ftop != bin_fbase(c)) b = bin_warming(c) ? bin_absorb_free(bin, c, b) : bin_swap_free_top(bin, b);
      warming = bin.flimit && bin_warming(c);  // (a bin not set up has capacity 0)
      if (LM_UNLIKELY(warming)) bin_warm(c);  // the next refill takes twice as many
      // Held: a collector's take writes what the thread published.
      bin_published(h, c);
    }
  }
  if (!b) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  // With the heap let go: an idle bin's flush holds it again.
  bin_event(h, c, !warming);
  return b;
}

}  // namespace

// The slow path of small allocation (lm_malloc's when a bin's allocation
// stack is empty; aligned requests come here first): pops from the
// thread's bin, else trades its stacks, else refills it (alloc_refill).
// The trade holds the heap only for the moment it takes (heap_try_hold:
// the background thread may be taking the stacks, bins_take_idle; while
// it holds the heap, alloc_refill waits for it), with no slow-path event: a program with one object in flight per class trades
// once per trade_min(c) mallocs at most (heap.h).  The pop that follows a
// trade needs no test: the stack holds an object, and a collector that
// claims the heap meanwhile leaves the top one (bins_take_begin moves base
// only below top).
LM_NOINLINE void* alloc_class(Heap* h, unsigned c) {
  Bin& bin = tl_bins[c];
  tl_bin_mallocs[c] = 2;  // the thread allocates from the class (bin_overflow)
  if (bin_ready(bin)) return bin_pop(bin);
  if (!heap_try_hold(h)) return alloc_refill(h, c);
  // After a collector's take the slow part puts the stacks back first.
  const bool traded = !h->bins_taken && bins_trade(c);
  heap_leave(h);
  if (traded) return bin_pop(bin);
  return alloc_refill(h, c);
}

void heap_collect(Heap* h) {
  large_cache_drain(h);
  process_delayed(h);
  // Only the classes whose queues may hold spans (most of a short thread's
  // heap's classes have none).
  for (uint64_t on = h->queued_classes; on; on &= on - 1) {
    const unsigned c = unsigned(__builtin_ctzll(on));
    SpanQueue& q = h->queue[c];
    // Releases the current span if it is empty; queue_changed gives the
    // reference back to the new head.
    move_head_ref(h, c, nullptr);
    for (Span* s = q.head; s;) {
      Span* next = s->next;
      collect_remote(s);
      if (span_empty(s)) {
        queue_remove(q, s);
        span_release(h, s);
      }
      s = next;
    }
    queue_changed(h, c);
    if (!q.head) h->queued_classes &= ~(uint64_t(1) << c);
  }
  kept_release_all(h);
}

// Returns one free object (tagged) of span s to it.
void return_object(Heap* h, Span* s, void* p) {
  Block* b = static_cast<Block*>(p);
  bool pending;
  {
    HeapGuard guard(h);
    pending = return_run(h, s, b, b, 1);
    pending |= returned_enough(h);
  }
  if (pending) heap_work_arrived();
}

void heap_work_arrived() {
  const Platform* p = g.backend.platform();
  g.purger.heap_work_arrived(p->now_ns(p->ctx));
  background_ensure();
}

// Returns free objects v[0..n) (cached: tagged, not linked) to their
// spans, one run of consecutive entries of the same span at a time; true
// if another heap got work (heap_work_arrived, once h is let go).
bool return_objects_held(Heap* h, Block* const* v, uint32_t n) {
  bool pending = false;
  for (uint32_t i = 0; i < n;) {
    Span* s = g.backend.span_of(v[i]);
    // Atomic: adopt_spans may be moving a parked span of a third heap (never
    // to or from h, which is held).
    if (__atomic_load_n(&s->heap, __ATOMIC_RELAXED) == h && !g_secure) {
      i = return_own_runs(h, s, v, i, n);
      continue;
    }
    // Cached objects carry their tags (the free that cached them, or the
    // refill): only the links are written.
    const uint32_t j = link_in_span(s, v, i, n);
    pending |= return_run(h, s, v[i], v[j - 1], j - i);
    i = j;
  }
  return pending | returned_enough(h);
}

}  // namespace lazymalloc::detail
