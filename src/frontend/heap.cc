#include "frontend/heap.h"

#include <errno.h>

#include <cstring>
#include <new>

#include "core/format.h"
#include "core/options.h"
#include "pal/lock.h"
#include "pal/pal.h"
#include "purge/purger.h"

namespace lazymalloc {

namespace {

// ------------------------------------------------------------ global state

Span g_empty_span{};  // free == nullptr: every fast path through it misses
constinit Heap g_empty_heap(&g_empty_span);

struct Global {
  Stats stats;
  Backend backend;
  Purger purger;
  BackgroundPurger background;
  MetaPool<Heap> heap_records;
  Mutex heaps_lock;
  Heap* all_heaps = nullptr;
  Heap* pool = nullptr;
  std::atomic<int> init_state{0};  // 0 none, 1 running, 2 done
};
constinit Global g;
int g_stats_fd = 2;
const Platform* g_platform = nullptr;  // the Linux platform unless a test sets one

__attribute__((tls_model("initial-exec"))) thread_local Heap* tl_heap = &g_empty_heap;
__attribute__((tls_model("initial-exec"))) thread_local bool tl_initializing = false;

// Direct-lookup range of each class: direct[i] serves sizes (i-1)*16+1..i*16.
struct DirectRange {
  uint8_t lo, hi;
};
struct ClassTable {
  DirectRange direct[kSmallClasses];
  uint8_t units[kSmallClasses];
  uint64_t magic[kSmallClasses];
};
constexpr ClassTable make_class_table() {
  ClassTable t{};
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    t.direct[c] = {255, 0};
    t.units[c] = uint8_t(span_units(c));
    t.magic[c] = ((uint64_t(1) << 40) + class_size(c) - 1) / class_size(c);
  }
  for (unsigned i = 0; i < kDirectSlots; ++i) {
    size_t size = i * 16;
    unsigned c = size <= 128 ? (size ? unsigned((size - 1) >> 4) : 0) : 0;
    if (size > 128) {
      size_t s = size - 1;
      unsigned b = 63 - unsigned(__builtin_clzll(s));
      c = 8 + (b - 7) * 4 + unsigned((s >> (b - 2)) & 3);
    }
    if (t.direct[c].lo == 255) t.direct[c].lo = uint8_t(i);
    t.direct[c].hi = uint8_t(i);
  }
  return t;
}
constexpr ClassTable kClasses = make_class_table();

void report_stderr(const char* msg, size_t len) { pal::write_fd(2, msg, len); }

inline size_t block_index(const Span* s, const void* p) {
  uintptr_t off = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(s->start);
  return size_t((uint64_t(off) * s->div_magic) >> 40);
}

inline bool is_block_start(const Span* s, const void* p) {
  return s->start + block_index(s, p) * s->obj_size == static_cast<const char*>(p);
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

// Points the direct slots of class `c` at its queue head.
void update_direct(Heap* h, unsigned c) {
  Span* s = h->queue[c].head ? h->queue[c].head : &g_empty_span;
  const DirectRange r = kClasses.direct[c];
  if (r.lo == 255) return;
  for (unsigned i = r.lo; i <= r.hi; ++i) h->direct[i] = s;
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
    Block* last = list;
    while (last->next) last = last->next;
    last->next = s->free;
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
  for (uint32_t i = 0; i + 1 < n; ++i) {
    reinterpret_cast<Block*>(p + size_t(i) * s->obj_size)->next =
        reinterpret_cast<Block*>(p + size_t(i + 1) * s->obj_size);
  }
  reinterpret_cast<Block*>(p + size_t(n - 1) * s->obj_size)->next = s->free;
  s->free = reinterpret_cast<Block*>(p);
  s->reserved += n;
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
void release_to_backend(Span* s) {
  uint64_t now = g.backend.release(s);
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
      update_direct(h, s->cls);
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

// The slow path of small allocation: find or make a span with a free object.
LM_NOINLINE void* alloc_class(Heap* h, unsigned c) {
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
      update_direct(h, c);
      return nullptr;
    }
    span_collect(s);
    queue_push_front(q, s);
  }
  update_direct(h, c);
  Block* b = s->free;
  s->free = b->next;
  s->used++;
  return b;
}

// ------------------------------------------------------------ heaps

void heap_collect(Heap* h, bool release_empty) {
  process_delayed(h);
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    SpanQueue& q = h->queue[c];
    for (Span* s = q.head; s;) {
      Span* next = s->next;
      collect_remote(s);
      if (release_empty && s->used == 0) {
        queue_remove(q, s);
        span_release(h, s);
      }
      s = next;
    }
    update_direct(h, c);
  }
}

void heap_thread_exit(void* arg) {
  Heap* h = static_cast<Heap*>(arg);
  if (!h || h != tl_heap) return;
  heap_collect(h, true);
  tl_heap = &g_empty_heap;
  LockGuard guard(g.heaps_lock);
  h->owned = false;
  h->next_pool = g.pool;
  g.pool = h;
  g.stats.add(Stat::heaps_pooled, 1);
  g.stats.add(Stat::thread_exits, 1);
}

void fork_prepare() {
  g.purger.fork_prepare();
  g.heaps_lock.lock();
  g.heap_records.lock().lock();
  g.backend.fork_prepare();
}

void fork_parent() {
  g.backend.fork_parent();
  g.heap_records.lock().unlock();
  g.heaps_lock.unlock();
  g.purger.fork_parent();
}

void fork_child() {
  g.backend.fork_child();
  g.heap_records.lock().reset();
  g.heaps_lock.reset();
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
      h = g.heap_records.alloc(*g.backend.platform(), &g.stats);
      if (!h) return nullptr;
      new (h) Heap(&g_empty_span);
      h->next_all = g.all_heaps;
      g.all_heaps = h;
      g.stats.add(Stat::heaps, 1);
    }
    h->owned = true;
  }
  tl_heap = h;
  pal::set_thread_value(h);
  return h;
}

// ------------------------------------------------------------ large blocks

void* alloc_large(size_t size, size_t align, bool* zero, bool growing = false) {
  Span* s = g.backend.alloc(size, align, growing);
  if (!s) {
    pal::set_errno(ENOMEM);
    return nullptr;
  }
  s->heap = nullptr;
  s->obj_size = 0;
  if (s->kind == SpanKind::kLarge) {
    g.stats.add(Stat::large_allocs, 1);
    g.stats.add(Stat::large_blocks, 1);
  }
  if (zero) *zero = s->zero;
  return s->start;
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

LM_NOINLINE void free_generic(Span* s, void* p) {
  if (s->kind == SpanKind::kSmall) {
    if (!is_block_start(s, p)) lm_invalid_pointer("free", p, "points inside an object");
    Heap* h = tl_heap;
    if (s->heap == h) {
      // Local free that needs attention: the span was full or is now empty.
      if (s->in_full) {
        if (!xfree_transition(s, kXfreeNotify, kXfreeNormal)) {
          // Notified: it is on the delayed list; process_delayed skips it
          // once it is back in the queue.
        }
        full_remove(h, s);
        queue_push_front(h->queue[s->cls], s);
        update_direct(h, s->cls);
      }
      // An empty span goes back unless it is its class's current span; a
      // current span of more than one unit goes back too, so a quiet thread
      // holds at most 64 KiB per class in empty spans.
      if (s->used == 0 && (h->queue[s->cls].head != s || s->bytes > kUnitSize)) {
        uintptr_t x = s->xfree.load(std::memory_order_acquire);
        if ((x & kXfreeMask) == kXfreeNormal) {
          queue_remove(h->queue[s->cls], s);
          update_direct(h, s->cls);
          span_release(h, s);
        }
      }
      return;
    }
    // Remote free: one CAS onto the owner's span.
    Block* b = static_cast<Block*>(p);
    uintptr_t old = s->xfree.load(std::memory_order_relaxed);
    uintptr_t state;
    do {
      state = old & kXfreeMask;
      b->next = reinterpret_cast<Block*>(old & ~kXfreeMask);
    } while (!s->xfree.compare_exchange_weak(
        old, reinterpret_cast<uintptr_t>(b) | (state == kXfreeNotify ? kXfreeNotified : state),
        std::memory_order_release, std::memory_order_relaxed));
    s->xfree_count.fetch_add(1, std::memory_order_release);
    if (state == kXfreeNotify) {
      Heap* owner = s->heap;
      Span* head = owner->delayed.load(std::memory_order_relaxed);
      do {
        s->next_delayed = head;
      } while (!owner->delayed.compare_exchange_weak(head, s, std::memory_order_release,
                                                     std::memory_order_relaxed));
    }
    if (h != &g_empty_heap) h->stats.inc(HeapStat::remote_frees);
    return;
  }
  if (p != s->start) lm_invalid_pointer("free", p, "points inside a block");
  Heap* h = tl_heap;
  if (h != &g_empty_heap) h->stats.inc(HeapStat::large_frees);
  if (s->kind == SpanKind::kLarge) g.stats.sub(Stat::large_blocks, 1);
  release_to_backend(s);
}

inline Span* checked_span(const char* fn, const void* p) {
  Span* s = g.backend.span_of(p);
  if (LM_UNLIKELY(!s)) {
    lm_invalid_pointer(fn, p, g.backend.owns_address(p) ? "not allocated (double free?)"
                                                       : "not allocated by lazymalloc");
  }
  return s;
}

inline size_t usable_of(const Span* s, const void* p) {
  if (s->kind == SpanKind::kSmall) return s->obj_size;
  return s->bytes - size_t(static_cast<const char*>(p) - s->start);
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
}

void lm_init() {
  if (LM_LIKELY(g.init_state.load(std::memory_order_acquire) == 2)) return;
  int expected = 0;
  if (!g.init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    while (g.init_state.load(std::memory_order_acquire) != 2) __builtin_ia32_pause();
    return;
  }
  options_load(pal::environment(), report_stderr);
  if (!g_platform) g_platform = &pal::linux_platform();
  g.backend.init(g_platform, &g.stats, size_t(option(Opt::arena_reserve)), option(Opt::hugepages) != 0);
  g.purger.init(&g.backend, g_platform, &g.stats);
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
  if (LM_LIKELY(size <= kDirectMax)) {
    Heap* h = tl_heap;
    Span* s = h->direct[(size + 15) >> 4];
    Block* b = s->free;
    if (LM_LIKELY(b)) {
      s->free = b->next;
      s->used++;
      return b;
    }
  }
  return malloc_generic(size, 0, nullptr);
}

void lm_free(void* p) {
  if (LM_UNLIKELY(!p)) return;
  Span* s = checked_span("free", p);
  Heap* h = tl_heap;
  if (LM_LIKELY(s->heap == h)) {
    if (LM_UNLIKELY(!is_block_start(s, p))) lm_invalid_pointer("free", p, "points inside an object");
    Block* b = static_cast<Block*>(p);
    b->next = s->local_free;
    s->local_free = b;
    if (LM_LIKELY((--s->used != 0) & !s->in_full)) return;
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
    if (!is_block_start(s, p)) lm_invalid_pointer("realloc", p, "points inside an object");
  } else if (p != s->start) {
    lm_invalid_pointer("realloc", p, "points inside a block");
  }
  size_t old = usable_of(s, p);
  if (size <= old && (size >= old / 2 || (s->kind == SpanKind::kSmall && old <= 64))) return p;
  // Large and huge blocks grow and shrink in place where their neighbours
  // allow (large ones stay large, huge ones stay huge).
  if (s->kind != SpanKind::kSmall && size > kMaxSmall) {
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
  memcpy(q, p, size < old ? size : old);
  lm_free(p);
  return q;
}

void lm_thread_collect() {
  Heap* h = tl_heap;
  if (h != &g_empty_heap) heap_collect(h, true);
}

size_t lm_purge(bool now) {
  lm_init();
  lm_thread_collect();
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
