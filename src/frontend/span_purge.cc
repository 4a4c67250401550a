// Free pages inside spans (docs/design.md, "Frontend"): when a heap's
// thread has been quiet for partial_decay_ms, the collector (runtime.cc,
// lm_collect_idle_heaps) gives back the whole page groups of its spans that
// hold only free objects, with the advice decay uses.
//
// A purged page may read as zero (MADV_DONTNEED) or as zero or its old
// bytes (MADV_FREE), so nothing in it can be trusted: the free objects
// whose first byte lies in it, and so their link and tag, become
// "dormant": they leave the span's lists and are known only from the
// span's `purged` mask (a bit per page group) until the span revives the
// group, when its allocation list runs dry (span_collect): the revival
// lists them again, tagged, which is the page's refault.  Free objects that
// only extend into a purged page stay listed (their first 16 bytes lie
// outside it).  Objects in any thread's cache, quarantine or remote list
// are not on the span's lists, so they count as used: their pages stay.
//
// Everything here runs with the heap held (HeapGuard): revivals by its
// thread in its slow paths, purges by the collector that claimed the heap
// alone (the madvise too, a batch at a time: a thread that wakes meanwhile
// waits for at most one batch, then the pass stops), so no revival races
// with a purge.  The fast paths touch no span list, and objects cached in
// bins count as used, so a purge never takes an object a bin holds.
// free() compares an object's index with `check_limit`, lowered to the
// first dormant object, and sends every object from there on to its
// failure path (checks.cc), which tells a double free of a dormant object
// (its tag may be gone) from a valid free.
//
// The second stage: groups given MADV_FREE stay resident (LazyFree) until
// the kernel needs the memory, and Rss, what people read, counts them.  A
// later pass (heap_clean_spans), once the heap's last MADV_FREE has been
// LAZY for lazy_decay_ms, gives them MADV_DONTNEED, as the backend's lazy
// stage does for free units.  They stay purged (dormant): only the advice
// changes.
//
// Hysteresis: a span revived sooner than its delay after its purge doubles
// that delay (purge_shift, at most kMaxPurgeShift); revived more than 8x
// its delay after, it halves it (on the platform clock).  The delay is
// span_idle_ns << purge_shift of heap quiet time, while the process is busy
// (hysteresis_until); an idle process gets its pages back after plain
// span_idle_ns.
#include "core/options.h"
#include "frontend/internal.h"

namespace lazymalloc::detail {

namespace {

constexpr uint32_t max_capacity() {
  uint32_t m = 0;
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    uint32_t n = uint32_t(span_units(c) * kUnitSize / class_size(c));
    if (n > m) m = n;
  }
  return m;
}
constexpr uint32_t kMaxCapacity = max_capacity();
static_assert(kMaxCapacity <= 4096, "FreeMap lives on the stack");
constexpr unsigned kMaxPurgeShift = 5;  // 32x span_idle_ns
// Spans planned between two looks at whether the heap's thread waits.
constexpr unsigned kSpansPerHold = 256;

// Pages purged inside live spans: the statistic, and the backend's books
// (its hugepage advice reads what spans really hold).
void purged_add(uint64_t n) {
  g.stats.add(Stat::span_purged_bytes, n);
  g.backend.span_purged().add(n);
}
void purged_sub(uint64_t n) {
  g.stats.sub(Stat::span_purged_bytes, n);
  g.backend.span_purged().sub(n);
}

size_t group_bytes(const Span* s) { return kOsPageSize << s->purge_group_shift; }

bool mask_test(const uint64_t* m, unsigned grp) { return (m[grp / 64] >> (grp % 64)) & 1; }

void mask_store(Span* s, unsigned w, uint64_t v) { __atomic_store_n(&s->purged[w], v, __ATOMIC_RELAXED); }

unsigned mask_count(const uint64_t* m) {
  return unsigned(__builtin_popcountll(m[0]) + __builtin_popcountll(m[1]));
}

// The runs of consecutive groups in mask m: the ranges a batch gets.
unsigned mask_runs(const uint64_t* m) {
  unsigned runs = 0;
  bool prev = false;
  for (unsigned grp = 0; grp < kSpanPurgeBits; ++grp) {
    bool in = mask_test(m, grp);
    if (in && !prev) ++runs;
    prev = in;
  }
  return runs;
}

// The carved objects whose first byte lies in page group grp: [*a, *b).
void group_objects(const Span* s, unsigned grp, uint32_t* a, uint32_t* b) {
  size_t lo = size_t(grp) * group_bytes(s), hi = lo + group_bytes(s);
  size_t sz = s->obj_size;
  uint32_t x = uint32_t((lo + sz - 1) / sz), y = uint32_t((hi + sz - 1) / sz);
  uint32_t r = s->reserved;
  *a = x < r ? x : r;
  *b = y < r ? y : r;
}

unsigned group_of(const Span* s, const void* p) {
  size_t off = size_t(static_cast<const char*>(p) - s->start);
  return unsigned((off / kOsPageSize) >> s->purge_group_shift);
}

// A bit per carved object of a span: set for free ones.
struct FreeMap {
  uint64_t w[kMaxCapacity / 64 + 1];
  void clear(uint32_t n) {
    for (uint32_t i = 0; i <= n / 64; ++i) w[i] = 0;
  }
  void set(uint32_t i) { w[i / 64] |= uint64_t(1) << (i % 64); }
  // True if objects lo..hi (inclusive) are all free.
  bool all(uint32_t lo, uint32_t hi) const {
    for (uint32_t i = lo; i <= hi;) {
      uint32_t k = i % 64;
      uint32_t n = hi - i + 1 < 64 - k ? hi - i + 1 : 64 - k;
      uint64_t want = (n == 64 ? ~uint64_t(0) : ((uint64_t(1) << n) - 1)) << k;
      if ((w[i / 64] & want) != want) return false;
      i += n;
    }
    return true;
  }
};

// The page groups of span s to purge now (none already purged): those
// wholly inside the carved objects whose objects (every one overlapping
// the group) are free.  *nranges: the runs of consecutive groups.  False if
// there are none.
bool plan(Span* s, FreeMap& map, uint64_t add[2], unsigned* nranges) {
  const uint32_t r = s->reserved;
  const size_t sz = s->obj_size, gb = group_bytes(s);
  const size_t carved = size_t(r) * sz;
  if (carved < gb) return false;
  // Listed objects: at most the carved ones less the used (one of which
  // may be the head reference's phantom) and the dormant.  The objects
  // starting in a group cover more than its bytes less one object.
  int64_t listed = int64_t(r) - int64_t(s->used) + 1 - int64_t(s->dormant);
  if (listed <= 0 || uint64_t(listed + 1) * sz <= gb) return false;
  // Nothing changed since a pass that found nothing here.
  if (s->purge_seen == s->used + 1) return false;
  map.clear(r);
  uint32_t steps = 0;
  for (Block* list : {s->free, s->local_free}) {
    for (Block* b = list; b;) {
      uint32_t count;
      Block* next = walk_node(s, b, steps, &count);
      const uint32_t i = uint32_t(size_t(reinterpret_cast<char*>(b) - s->start) / sz);
      for (uint32_t m = 0; m < count; ++m) map.set(i + m);
      b = next;
    }
  }
  for (unsigned grp = 0; grp < kSpanPurgeBits; ++grp) {
    if (!mask_test(s->purged, grp)) continue;
    uint32_t a, b;
    group_objects(s, grp, &a, &b);
    for (uint32_t i = a; i < b; ++i) map.set(i);
  }
  add[0] = add[1] = 0;
  size_t groups = carved / gb;
  if (groups > kSpanPurgeBits) groups = kSpanPurgeBits;
  for (unsigned grp = 0; grp < groups; ++grp) {
    size_t lo = grp * gb, hi = lo + gb;
    if (!mask_test(s->purged, grp) && map.all(uint32_t(lo / sz), uint32_t((hi - 1) / sz))) {
      add[grp / 64] |= uint64_t(1) << (grp % 64);
    }
  }
  unsigned runs = mask_runs(add);
  if (!runs) {
    s->purge_seen = s->used + 1;
    return false;
  }
  *nranges = runs;
  return true;
}

// Unlinks from list *head the objects whose first byte lies in a group of
// `add`, keeping the order of the others.  Returns how many it unlinked.
uint32_t filter(Span* s, Block** head, const uint64_t add[2], uint32_t* steps) {
  uint32_t removed = 0;
  Block* first = nullptr;
  Block* last = nullptr;
  Block* last_next = nullptr;  // last's link as it is now
  for (Block* b = *head; b;) {
    Block* next = walk_link(s, b, *steps);
    if (mask_test(add, group_of(s, b))) {
      ++removed;
    } else {
      if (!last) {
        first = b;
      } else if (last_next != b) {
        link_set(last, b);
      }
      last = b;
      last_next = next;
    }
    b = next;
  }
  if (last && last_next) link_set(last, nullptr);
  *head = first;
  return removed;
}

// Adds the ranges of span s's groups in mask m (mask_runs(m) of them) to
// `batch`.
void add_ranges(const Span* s, const uint64_t m[2], PurgeBatch* batch) {
  const size_t gb = group_bytes(s);
  for (unsigned grp = 0; grp < kSpanPurgeBits;) {
    if (!mask_test(m, grp)) {
      ++grp;
      continue;
    }
    unsigned end = grp + 1;
    while (end < kSpanPurgeBits && mask_test(m, end)) ++end;
    size_t len = (end - grp) * gb;
    batch->ranges[batch->nranges++] = {s->start + grp * gb, len};
    batch->bytes += len;
    grp = end;
  }
}

// Marks the groups of `add` purged in span s (`lazy`: they get MADV_FREE):
// their objects go dormant, the free check's limit drops, and their ranges
// join `batch` (advised before the heap is let go).
void mark(Span* s, const uint64_t add[2], uint64_t now, bool lazy, PurgeBatch* batch) {
  uint32_t steps = 0;
  // The filter unlinks single objects: runs are listed one by one first.
  list_expand(s, s->free);
  list_expand(s, s->local_free);
  uint32_t removed = filter(s, &s->free, add, &steps);
  removed += filter(s, &s->local_free, add, &steps);
  s->dormant += removed;
  for (unsigned w = 0; w < 2; ++w) {
    mask_store(s, w, s->purged[w] | add[w]);
    s->lazy[w] = (s->lazy[w] & ~add[w]) | (lazy ? add[w] : 0);
  }
  s->purged_ns = now ? now : 1;
  s->purge_seen = 0;
  span_set_check_limit(s);
  add_ranges(s, add, batch);
  purged_add(mask_count(add) * group_bytes(s));
}

// Advises the batch (the heap held).  The first stage: MADV_FREE, or
// MADV_DONTNEED where decay would use it; a failed advice leaves the groups
// marked: their objects are revived as any others (nothing was lost,
// nothing was freed).  The second stage (`second`): MADV_DONTNEED on
// groups already purged.
void flush(PurgeBatch* batch, bool second) {
  if (!batch->nranges) return;
  bool clean = false;
  if (g.purger.adviser().advise(batch->ranges, batch->nranges, batch->bytes,
                                second || g.purger.decay_uses_dontneed(), &clean) == 0) {
    if (second) {
      g.stats.add(Stat::span_lazy_decay_bytes, batch->bytes);
    } else {
      g.stats.add(Stat::span_page_purges, batch->bytes / kOsPageSize);
      g.stats.add(Stat::span_page_purge_bytes, batch->bytes);
    }
    g.backend.review_hugepages();
  }
  batch->nranges = 0;
  batch->bytes = 0;
}

// The heap's thread entered a slow path and waits for the collector to let
// the heap go (heap_enter_wait).
bool thread_waits(const Heap* h) { return h->claimed.load(std::memory_order_relaxed) == 2; }

// One pass of a stage over heap h's spans (REQUIRES h claimed by the
// collector): choose(s, m, &nranges) picks span s's groups (false: none),
// apply(s, m, batch) records them and adds their ranges.  Advises a batch
// at a time (purge_batch bytes, kMaxRanges ranges); false if it stopped
// because the heap's thread woke and waits for it.
template <class Choose, class Apply>
bool walk_spans(Heap* h, bool second, Choose choose, Apply apply) {
  PurgeBatch batch;
  const size_t max_bytes = size_t(option(Opt::purge_batch));
  unsigned planned = 0;
  for (unsigned c = 0; c < kSmallClasses; ++c) {
    for (Span* s = h->queue[c].head; s;) {
      uint64_t m[2];
      unsigned nranges = 0;
      bool found = choose(s, m, &nranges);
      bool full = found && (batch.nranges + nranges > PurgeBatch::kMaxRanges || batch.bytes >= max_bytes);
      if (full || ++planned % kSpansPerHold == 0) {
        // Bounds the time a waking thread waits: advise what is marked, and
        // let the heap go if its thread waits for it.
        flush(&batch, second);
        if (thread_waits(h)) return false;
        if (full) continue;  // chooses for s again
      }
      if (found) apply(s, m, &batch);
      s = s->next;
    }
  }
  flush(&batch, second);
  return true;
}

}  // namespace

void span_set_check_limit(Span* s) {
  // The first object of the first purged group that holds any, found by
  // the purged groups' set bits: a span with none (every carve of a fresh
  // span) costs two tests, not a walk of all 128 groups (about 1,000
  // instructions per carve, 11 per malloc/free pair on lazybench's batch
  // pattern, whose spans empty and are carved again).
  uint32_t limit = s->reserved;
  bool found = false;
  for (unsigned w = 0; w < kSpanPurgeBits / 64 && !found; ++w) {
    for (uint64_t m = s->purged[w]; m != 0 && !found; m &= m - 1) {
      uint32_t a, b;
      group_objects(s, w * 64 + unsigned(__builtin_ctzll(m)), &a, &b);
      found = a < b;
      if (found && a < limit) limit = a;
    }
  }
  __atomic_store_n(&s->check_limit, limit, __ATOMIC_RELAXED);
}

void span_purge_init(Span* s) {
  size_t pages = s->bytes / kOsPageSize;
  uint8_t shift = 0;
  while (((pages + (size_t(1) << shift) - 1) >> shift) > kSpanPurgeBits) ++shift;
  s->purge_group_shift = shift;
  s->purged[0] = s->purged[1] = 0;
  s->lazy[0] = s->lazy[1] = 0;
  s->dormant = 0;
  s->purged_ns = 0;
  s->purge_seen = 0;
  s->purge_shift = 0;
  s->check_limit = s->reserved;
}

void span_purge_forget(Span* s) {
  if (!span_has_purged(s)) return;
  purged_sub(mask_count(s->purged) * group_bytes(s));
  mask_store(s, 0, 0);
  mask_store(s, 1, 0);
  s->dormant = 0;
}

namespace {

// Revives purged group grp of span s: lists its dormant objects (tagged)
// onto the allocation list.  Writing them is the page's refault.
void revive_group(Span* s, unsigned grp) {
  unsigned w = grp / 64;
  mask_store(s, w, s->purged[w] & ~(uint64_t(1) << (grp % 64)));
  uint32_t a, b;
  group_objects(s, grp, &a, &b);
  for (uint32_t i = a; i < b;) {
    uint32_t n = b - i < kMaxLinkBatch ? b - i : kMaxLinkBatch;
    link_objects(s, i, n);
    i += n;
  }
  s->dormant -= b - a;
  size_t gb = group_bytes(s);
  purged_sub(gb);
  g.stats.add(Stat::span_page_revivals, gb / kOsPageSize);
  // Hysteresis, once per purge (purged_ns is on the same platform clock).
  if (s->purged_ns) {
    const Platform* p = g.backend.platform();
    uint64_t now = p->now_ns(p->ctx);
    uint64_t wait = g.span_delay_ns.load(std::memory_order_relaxed) << s->purge_shift;
    uint64_t since = now > s->purged_ns ? now - s->purged_ns : 0;
    if (since < wait) {
      if (s->purge_shift < kMaxPurgeShift) ++s->purge_shift;
      g.stats.add(Stat::span_refaults, 1);
    } else if (s->purge_shift && since / 8 > wait) {
      --s->purge_shift;
    }
    s->purged_ns = 0;
  }
}

}  // namespace

void span_revive(Span* s) {
  unsigned w = s->purged[0] ? 0 : 1;
  revive_group(s, w * 64 + unsigned(__builtin_ctzll(s->purged[w])));
  span_set_check_limit(s);
}

void span_objects_taken(Span* s, Block* const* v, uint32_t n) {
  if (!span_has_purged(s)) return;
  for (uint32_t i = 0; i < n; ++i) {
    unsigned g0 = group_of(s, v[i]), g1 = group_of(s, reinterpret_cast<char*>(v[i]) + s->obj_size - 1);
    for (unsigned grp = g0; grp <= g1 && grp < kSpanPurgeBits; ++grp) {
      if (mask_test(s->purged, grp)) revive_group(s, grp);
    }
  }
  span_set_check_limit(s);
}

bool heap_purge_spans(Heap* h, const SpanPurgeArgs& args, uint64_t* next_wait) {
  *next_wait = kNoDeadline;
  FreeMap map;  // 512 bytes
  const bool hysteresis = args.now_ns < args.hysteresis_until;
  const bool lazy = !g.purger.decay_uses_dontneed();
  bool marked = false;
  bool done = walk_spans(
      h, false,
      [&](Span* s, uint64_t add[2], unsigned* nranges) {
        bool found = plan(s, map, add, nranges);
        if (found && hysteresis) {
          uint64_t wait = args.delay_ns << s->purge_shift;
          if (args.quiet_ns < wait) {
            g.stats.add(Stat::span_purges_suppressed, 1);
            if (wait < *next_wait) *next_wait = wait;
            found = false;
          }
        }
        return found;
      },
      [&](Span* s, const uint64_t add[2], PurgeBatch* batch) {
        mark(s, add, args.now_ns, lazy, batch);
        marked = true;
      });
  if (marked && lazy) {
    // The second stage counts the LAZY age from the heap's latest MADV_FREE.
    h->span_lazy_ns = args.now_ns ? args.now_ns : 1;
    h->span_lazy_wait = 0;
  }
  return done;
}

bool heap_clean_spans(Heap* h, const SpanPurgeArgs& args, uint64_t* next_wait) {
  *next_wait = kNoDeadline;
  const bool hysteresis = args.now_ns < args.hysteresis_until;
  const uint64_t age = args.now_ns > h->span_lazy_ns ? args.now_ns - h->span_lazy_ns : 0;
  bool done = walk_spans(
      h, true,
      [&](Span* s, uint64_t m[2], unsigned* nranges) {
        m[0] = s->purged[0] & s->lazy[0];
        m[1] = s->purged[1] & s->lazy[1];
        if (!(m[0] | m[1])) return false;
        if (hysteresis) {
          uint64_t wait = args.delay_ns << s->purge_shift;
          if (age < wait) {
            g.stats.add(Stat::span_purges_suppressed, 1);
            if (wait < *next_wait) *next_wait = wait;
            return false;
          }
        }
        *nranges = mask_runs(m);
        return true;
      },
      [&](Span* s, const uint64_t m[2], PurgeBatch* batch) {
        s->lazy[0] &= ~m[0];
        s->lazy[1] &= ~m[1];
        add_ranges(s, m, batch);
      });
  if (done && *next_wait == kNoDeadline) {
    h->span_lazy_ns = 0;  // nothing LAZY left in its spans
    h->span_lazy_wait = 0;
  } else if (done) {
    h->span_lazy_wait = *next_wait;
  }
  return done;
}

}  // namespace lazymalloc::detail
