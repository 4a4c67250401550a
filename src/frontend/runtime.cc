// The frontend's runtime: the composition root's globals, process init,
// fork handlers, thread exit and the heap pool, and the process-wide API
// (limits, purging, statistics, discardable memory).
#include <errno.h>

#include <new>

#include "core/format.h"
#include "core/options.h"
#include "frontend/internal.h"
#include "pal/pal.h"

namespace lazymalloc {

namespace detail {

constinit Heap g_empty_heap;
constinit Global g;
int g_stats_fd = 2;
bool g_secure = false;
const Platform* g_platform = nullptr;
bool g_heap_fence = false;

constinit __attribute__((tls_model("initial-exec"))) thread_local Heap* tl_heap = &g_empty_heap;
constinit __attribute__((tls_model("initial-exec"))) thread_local bool tl_initializing = false;
constinit __attribute__((tls_model("initial-exec"))) thread_local bool tl_exited = false;

TimelinePage* g_timeline_page = nullptr;

namespace {

void report_stderr(const char* msg, size_t len) { g_platform->write(g_platform->ctx, 2, msg, len); }

void heap_thread_exit(void* arg) {
  Heap* h = static_cast<Heap*>(arg);
  if (!h || h != tl_heap) return;
  tl_exited = true;
  bins_return_all(h, true);
  quarantine_flush(h);
  {
    HeapGuard guard(h);
    heap_collect(h);
  }
  large_peak_reset(h, true);
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
  g.collect_lock.lock();
  g.purger.fork_prepare();
  g.discard.fork_prepare();
  g.heaps_lock.lock();
  // No heap's spans are half-changed at the fork: every heap is claimed,
  // and the threads in a slow path are let finish first (they take none of
  // the locks held here; the wait is short).
  for (Heap* h = g.all_heaps; h; h = h->next_all) h->claimed.store(1, std::memory_order_relaxed);
  // Registered at start-up, the barrier does not fail afterwards; if it
  // did, this thread's fence is the best left.
  if (!heaps_barrier()) std::atomic_thread_fence(std::memory_order_seq_cst);
  for (Heap* h = g.all_heaps; h; h = h->next_all) {
    while (h->busy.load(std::memory_order_acquire) != 0) g_platform->wait(g_platform->ctx, &h->busy, 1, 20000);
  }
  g.heap_records.lock().lock();
  g.releaser.fork_prepare();
  g.backend.fork_prepare();
}

void fork_parent() {
  g.backend.fork_parent();
  g.releaser.fork_parent();
  g.heap_records.lock().unlock();
  for (Heap* h = g.all_heaps; h; h = h->next_all) heap_unclaim(h);
  g.heaps_lock.unlock();
  g.discard.fork_parent();
  g.purger.fork_parent();
  g.collect_lock.unlock();
}

void fork_child() {
  g.backend.fork_child();
  g.releaser.fork_child();
  g.heap_records.lock().reset();
  for (Heap* h = g.all_heaps; h; h = h->next_all) {
    h->busy.store(0, std::memory_order_relaxed);
    h->claimed.store(0, std::memory_order_relaxed);
  }
  g.heaps_lock.reset();
  g.collect_lock.reset();
  g.discard.fork_child();
  g.purger.fork_child();
  g.background.fork_child();
  g.stats.set(Stat::background_threads, 0);
  // Only the forking thread lives on: every other owned heap is orphaned,
  // and forgets its thread's bins (a collector must not take from them:
  // their memory may become a new thread's).
  for (Heap* h = g.all_heaps; h; h = h->next_all) {
    if (h->owned && h != tl_heap) {
      h->owned = false;
      h->thread_bins = nullptr;
      h->thread_bin_bytes = nullptr;
      h->next_pool = g.pool;
      g.pool = h;
      g.stats.add(Stat::heaps_pooled, 1);
    }
  }
}

// lazymalloc-run --timeline (core/timeline.h): maps the page named by
// Opt::timeline_fd and publishes on it, if it is a timeline page meant for
// this process; anything else is left alone (the descriptor number may have
// been inherited by a descendant, or reused for another file).
void timeline_attach(int fd) {
  void* p = g_platform->map_shared_fd(g_platform->ctx, fd, TimelinePage::kSize);
  if (!p) return;
  auto* page = static_cast<TimelinePage*>(p);
  if (page->magic != TimelinePage::kMagic || page->pid.load(std::memory_order_acquire) != g_platform->process_id(g_platform->ctx)) {
    g_platform->unmap(g_platform->ctx, p, TimelinePage::kSize);
    return;
  }
  g.backend.set_timeline(page);
  g_timeline_page = page;
}

}  // namespace

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

void heap_record_touch(Heap* h, size_t from, size_t to) {
  uint32_t pages = 0;
  for (size_t pg = from / kOsPageSize; pg * kOsPageSize < to; ++pg) pages |= uint32_t(1) << pg;
  const uint32_t fresh = pages & ~h->record_pages;
  if (!fresh) return;
  h->record_pages |= fresh;
  g.stats.add(Stat::metadata_bytes, uint64_t(__builtin_popcount(fresh)) * kOsPageSize);
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
      h->class_stats = r->class_stats;
      h->bin_fbase = r->bin_fbase;
      heap_record_touch(h, 0, sizeof(Heap));
      const size_t at = size_t(reinterpret_cast<char*>(r->class_stats) - reinterpret_cast<char*>(r));
      heap_record_touch(h, at, at + sizeof r->class_stats + sizeof r->bin_fbase);
      h->owner = uint8_t(1 + g.heaps_made++ % kOwners);
      if (g_secure) h->rng = g_platform->random(g_platform->ctx) | 1;
      h->next_all = g.all_heaps;
      g.all_heaps = h;
      g.stats.add(Stat::heaps, 1);
    }
    h->owned = true;
  }
  tl_heap = h;
  if (!g_secure) bins_attach(h);
  pal::set_thread_value(h);
  return h;
}

}  // namespace detail

using namespace detail;

int lm_stats_fd() { return g_stats_fd; }

const char* lm_check_invariants() { return g.backend.check_invariants(); }

const Platform* lm_platform() { return g_platform ? g_platform : &pal::linux_platform(); }

void lm_set_platform(const Platform* platform) {
  g_platform = platform;
  if (g.init_state.load(std::memory_order_acquire) != 2) return;
  g.backend.init(platform, &g.stats, size_t(option(Opt::arena_reserve)), unsigned(option(Opt::hugepages)));
  g.purger.init(&g.backend, platform, &g.stats);
  g.releaser.init(&g.backend, &g.purger, platform, &g.stats);
}

void lm_init() {
  if (LM_LIKELY(g.init_state.load(std::memory_order_acquire) == 2)) return;
  int expected = 0;
  if (!g.init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    while (g.init_state.load(std::memory_order_acquire) != 2) cpu_relax();
    return;
  }
  if (!g_platform) g_platform = &pal::linux_platform();
  if (options_load(pal::environment(), report_stderr) && option(Opt::abort_on_bad_option)) {
    static const char kMsg[] = "lazymalloc: aborting: LAZYMALLOC_ABORT_ON_BAD_OPTION is set\n";
    pal::fatal(kMsg, sizeof kMsg - 1);
  }
  g_secure = option(Opt::secure) != 0;
  // Collectors of idle heaps use the process barrier; without it, threads
  // fence in their slow paths (heap_enter).
  g_heap_fence = !g_platform->process_barrier(g_platform->ctx, true);
  if (kChecks || g_secure) g_free_key = g_platform->random(g_platform->ctx) | 1;
  // Links: a key of their own in secure mode; with checks the tag's key.
  g_link_key = g_secure ? g_platform->random(g_platform->ctx) | 1 : kChecks ? g_free_key : 0;
  g.backend.init(g_platform, &g.stats, size_t(option(Opt::arena_reserve)), unsigned(option(Opt::hugepages)));
  g.purger.init(&g.backend, g_platform, &g.stats);
  g.releaser.init(&g.backend, &g.purger, g_platform, &g.stats);
  g.discard.init(&g.backend, g_platform, &g.stats);
  g.purger.attach(&g.discard);
  g.purger.set_heap_collector([](uint64_t now, uint64_t idle_ns, uint64_t span_idle_ns, uint64_t until,
                                  uint64_t span_lazy_ns, uint64_t lazy_until) {
    uint64_t due;
    lm_collect_idle_heaps(now, idle_ns, &due, span_idle_ns, until, span_lazy_ns, lazy_until);
    return due;
  });
  g.backend.set_hard_limit(uint64_t(option(Opt::memory_limit_hard)));
  pal::register_thread_exit(heap_thread_exit);
  // Statistics at exit go to a copy of stderr taken now: programs such as
  // coreutils close fd 2 in their own exit handlers.
  if (option(Opt::stats)) g_stats_fd = g_platform->dup_fd(g_platform->ctx, 2);
  if (option(Opt::timeline_fd) > 0) timeline_attach(int(option(Opt::timeline_fd)));
  g.init_state.store(2, std::memory_order_release);
  // May allocate: only now that malloc works.
  pal::register_fork(fork_prepare, fork_parent, fork_child);
}

void lm_thread_collect() {
  Heap* h = tl_heap;
  bins_return_all(h, false);
  if (h == &g_empty_heap) return;
  quarantine_flush(h);
  HeapGuard guard(h);
  heap_collect(h);
  large_peak_reset(h, false);
}

namespace {

// When a stage's next pass over a heap's spans is due: `delay` after
// `since`, or the longer `wait` its spans' hysteresis asked for, which ends
// when the process turns idle (`until`).
uint64_t stage_due(uint64_t since, uint64_t wait, uint64_t delay, uint64_t until) {
  uint64_t plain = since + delay;
  if (wait <= delay) return plain;
  uint64_t longer = since + wait;
  uint64_t idle = until > plain ? until : plain;
  return longer < idle ? longer : idle;
}

// When idle heap h's next pass over the free pages inside its spans is due
// (kNoDeadline: none): span_idle_ns after it went quiet, or the longer wait
// its spans' hysteresis asked for (span_purge_wait) until hysteresis_until.
uint64_t span_purge_due(const Heap* h, uint64_t span_idle_ns, uint64_t hysteresis_until) {
  if (span_idle_ns == kNoSpanPurge || h->span_purge_wait == kNoDeadline) return kNoDeadline;
  return stage_due(h->idle_seen_ns, h->span_purge_wait, span_idle_ns, hysteresis_until);
}

// When its second stage is due (kNoDeadline: nothing LAZY in its spans):
// span_lazy_ns after its last MADV_FREE, or the longer LAZY age its spans'
// hysteresis asked for (span_lazy_wait) until lazy_until.
uint64_t span_lazy_due(const Heap* h, uint64_t span_lazy_ns, uint64_t lazy_until) {
  if (span_lazy_ns == kNoSpanPurge || h->span_lazy_ns == 0) return kNoDeadline;
  return stage_due(h->span_lazy_ns, h->span_lazy_wait, span_lazy_ns, lazy_until);
}

}  // namespace

size_t lm_collect_idle_heaps(uint64_t now, uint64_t idle_ns, uint64_t* next_due, uint64_t span_idle_ns,
                             uint64_t hysteresis_until, uint64_t span_lazy_ns, uint64_t lazy_until) {
  uint64_t due = kNoDeadline;
  if (next_due) *next_due = due;
  if (g.init_state.load(std::memory_order_acquire) != 2) return 0;
  LockGuard collecting(g.collect_lock);
  // Revivals measure their hysteresis against it (span_purge.cc).
  if (span_idle_ns != kNoSpanPurge) g.span_delay_ns.store(span_idle_ns, std::memory_order_relaxed);
  // Heaps are never freed and new ones are pushed at the head, so the list
  // from the head read here can be walked without heaps_lock.
  Heap* h;
  {
    LockGuard guard(g.heaps_lock);
    h = g.all_heaps;
  }
  auto due_at = [&](uint64_t t) { due = t < due ? t : due; };
  // When heap d's spans next need a pass of either stage.
  auto pages_due = [&](const Heap* d) {
    uint64_t a = span_purge_due(d, span_idle_ns, hysteresis_until), b = span_lazy_due(d, span_lazy_ns, lazy_until);
    return a < b ? a : b;
  };
  uint64_t released = 0, cache_bytes = 0;
  bool pending = false;
  while (h) {
    // The heaps due, in batches that share one process barrier.
    Heap* batch[64];
    unsigned n = 0;
    for (; h && n < 64; h = h->next_all) {
      // A clock behind the last MADV_FREE's (a test's): the LAZY age restarts.
      if (h->span_lazy_ns > now) h->span_lazy_ns = now ? now : 1;
      uint64_t events = __atomic_load_n(&h->slow_events, __ATOMIC_RELAXED);
      if (events != h->idle_seen_events || h->idle_seen_ns == 0 || now < h->idle_seen_ns) {
        // Busy since the last look (or a clock behind the last look's: a
        // test's): collected once it has been quiet.
        h->idle_seen_events = events;
        h->idle_seen_ns = now ? now : 1;
        h->idle_collected = false;
        h->span_purge_wait = 0;
        due_at(now + idle_ns);
        continue;
      }
      if (!h->idle_collected || h->remote_pending.load(std::memory_order_relaxed)) {
        // Remote frees and empty spans (then the free pages inside spans).
        if (now - h->idle_seen_ns < idle_ns) {
          due_at(h->idle_seen_ns + idle_ns);
          continue;
        }
      } else {
        // Collected: only the free pages inside its spans may be left.
        uint64_t pages = pages_due(h);
        if (pages > now) {
          due_at(pages);
          continue;
        }
      }
      batch[n++] = h;
    }
    if (n == 0) continue;
    // A heap whose thread is in a slow path is not idle: looked at again later.
    unsigned held = heaps_claim(batch, n);
    if (held < n) due_at(now + idle_ns);
    // The heaps to collect; their threads' allocation stacks are taken
    // around one more process barrier for the batch (bins_take_begin),
    // where there is one: threads that fence themselves do not fence their
    // fast paths.
    bool collecting[64];
    bool raised = false;
    for (unsigned i = 0; i < held; ++i) {
      Heap* d = batch[i];
      collecting[i] = !d->idle_collected || d->remote_pending.load(std::memory_order_relaxed);
      if (collecting[i] && !g_heap_fence) raised |= bins_take_begin(d);
    }
    const bool fenced = raised && heaps_barrier();
    // Collections first, each heap let go at once: quick.
    Heap* passes[64];
    unsigned np = 0;
    for (unsigned i = 0; i < held; ++i) {
      Heap* d = batch[i];
      {
        HeapGuard guard(d, HeapGuard::kClaimed);
        if (collecting[i]) {
          uint64_t before = d->stats.v[unsigned(HeapStat::spans_released)].load(std::memory_order_relaxed);
          d->remote_pending.store(false, std::memory_order_relaxed);
          pending |= bins_take_idle(d, &cache_bytes, fenced);
          heap_collect(d);
          released += d->stats.v[unsigned(HeapStat::spans_released)].load(std::memory_order_relaxed) - before;
          d->idle_collected = true;
          // Objects came back: their pages are worth a pass again.
          d->span_purge_wait = 0;
          g.stats.add(Stat::idle_heap_collections, 1);
        }
      }
      uint64_t pages = pages_due(d);
      if (pages <= now) {
        passes[np++] = d;
      } else {
        due_at(pages);
      }
    }
    // Then the passes over free pages inside spans, which advise and may
    // take a while: each heap claimed alone, so that no other heap's thread
    // waits for one (a second process barrier, once per quiet episode).
    for (unsigned i = 0; i < np; ++i) {
      Heap* d = passes[i];
      if (heaps_claim(&d, 1) == 0) {
        due_at(now + idle_ns);  // its thread is in a slow path
        continue;
      }
      HeapGuard guard(d, HeapGuard::kClaimed);
      if (__atomic_load_n(&d->slow_events, __ATOMIC_RELAXED) != d->idle_seen_events) {
        due_at(now + idle_ns);  // it ran since the collection: not idle
        continue;
      }
      // The second stage first: a first-stage purge now restarts the LAZY age.
      uint64_t next_wait;
      bool woke = false;
      if (span_lazy_due(d, span_lazy_ns, lazy_until) <= now) {
        SpanPurgeArgs args{now, now - d->idle_seen_ns, span_lazy_ns, lazy_until};
        woke = !heap_clean_spans(d, args, &next_wait);
      }
      if (!woke && span_purge_due(d, span_idle_ns, hysteresis_until) <= now) {
        SpanPurgeArgs args{now, now - d->idle_seen_ns, span_idle_ns, hysteresis_until};
        woke = !heap_purge_spans(d, args, &next_wait);
        if (!woke) d->span_purge_wait = next_wait;
      }
      due_at(woke ? now + idle_ns : pages_due(d));  // woke: looked at again
    }
  }
  g.stats.add(Stat::idle_spans_released, released);
  g.stats.add(Stat::idle_cache_bytes, cache_bytes);
  // Objects of other heaps' spans went to them: theirs to collect.
  if (pending) heap_work_arrived();
  if (next_due) *next_due = due;
  return size_t(released);
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
// The statistics now; `heap_cache` (if given) gets each heap's cache_bytes,
// newest heap first, at most kMaxHeapsShown (*nheaps: how many heaps), and
// `classes` (if given) the per-class statistics summed over heaps
// (kSmallClasses rows of kClassStatCount).
constexpr unsigned kMaxHeapsShown = 64;
void snapshot(uint64_t* global, uint64_t* heap, uint64_t* heap_cache = nullptr, unsigned* nheaps = nullptr,
              uint64_t* classes = nullptr) {
  g.discard.refresh_stats();
  for (unsigned i = 0; i < kStatCount; ++i) global[i] = g.stats.v[i].load(std::memory_order_relaxed);
  for (unsigned i = 0; i < kHeapStatCount; ++i) heap[i] = 0;
  if (classes) {
    for (unsigned c = 0; c < kSmallClasses; ++c) {
      uint64_t* row = classes + size_t(c) * kClassStatCount;
      for (unsigned k = 0; k < kClassStatCount; ++k) row[k] = 0;
      row[unsigned(ClassStat::returned_bytes)] = g.class_orphan_returned[c].load(std::memory_order_relaxed);
    }
  }
  LockGuard guard(g.heaps_lock);
  unsigned n = 0;
  for (Heap* h = g.all_heaps; h; h = h->next_all, ++n) {
    for (unsigned i = 0; i < kHeapStatCount; ++i) heap[i] += h->stats.v[i].load(std::memory_order_relaxed);
    if (classes) {
      for (unsigned c = 0; c < kSmallClasses; ++c) {
        for (unsigned k = 0; k < kClassStatCount; ++k) {
          classes[size_t(c) * kClassStatCount + k] += h->class_stats[c].v[k].load(std::memory_order_relaxed);
        }
      }
    }
    for (unsigned i = 0; i < kFoldedCount; ++i) {
      global[unsigned(kFoldedStat[i])] += h->stats.folded[i].load(std::memory_order_relaxed);
    }
    if (heap_cache && n < kMaxHeapsShown) {
      heap_cache[n] = h->stats.v[unsigned(HeapStat::cache_bytes)].load(std::memory_order_relaxed);
    }
  }
  if (nheaps) *nheaps = n;
}

// The origin of a report: this process, now.  `name` receives the program
// name (/proc/self/comm: at most 15 characters; "?" without /proc).
StatsOrigin origin_now(char* name, size_t len) {
  lm_init();  // the platform
  long n = g_platform->read_file(g_platform->ctx, "/proc/self/comm", name, len);
  while (n > 0 && (name[n - 1] == '\n' || name[n - 1] == '\0')) name[--n] = '\0';
  if (n <= 0) {
    name[0] = '?';
    name[1] = '\0';
  }
  return StatsOrigin{g_platform->process_id(g_platform->ctx), name, g_platform->wall_clock_ms(g_platform->ctx)};
}

size_t render_stats(char* buf, size_t len, bool json, const StatsOrigin& origin) {
  lm_init();
  uint64_t global[kStatCount], heap[kHeapStatCount], heap_cache[kMaxHeapsShown];
  uint64_t classes[kSmallClasses * kClassStatCount];
  unsigned nheaps = 0;
  snapshot(global, heap, heap_cache, &nheaps, classes);
  uint32_t sizes[kSmallClasses];
  for (unsigned c = 0; c < kSmallClasses; ++c) sizes[c] = uint32_t(class_size(c));
  const ClassRows rows{kSmallClasses, sizes, classes};
  Writer w(buf, len);
  stats_write(w, origin, global, heap, json, heap_cache, nheaps, &rows);
  return w.finish();
}

// A report is rendered into a mapping of its own (kStatsReportBytes), or,
// where none is had, into a stack buffer that may cut it short.
void write_stats(bool json, int fd, const StatsOrigin& origin) {
  char local[24576];
  char* mapped = static_cast<char*>(g_platform->map(g_platform->ctx, kStatsReportBytes));
  char* buf = mapped ? mapped : local;
  const size_t cap = mapped ? kStatsReportBytes : sizeof local;
  size_t n = render_stats(buf, cap, json, origin);
  g_platform->write(g_platform->ctx, fd, buf, n < cap ? n : cap - 1);
  if (mapped) g_platform->unmap(g_platform->ctx, mapped, kStatsReportBytes);
}
}  // namespace

size_t lm_stats_write(char* buf, size_t len, bool json) {
  char name[64];
  return render_stats(buf, len, json, origin_now(name, sizeof name));
}

void lm_stats_print(bool json, int fd) {
  char name[64];
  write_stats(json, fd, origin_now(name, sizeof name));
}

void lm_stats_at_exit(bool json) {
  char name[64];
  const StatsOrigin origin = origin_now(name, sizeof name);
  int fd = g_stats_fd;
  bool opened = false;
  const char* pattern = env_find(pal::environment(), "LAZYMALLOC_STATS_FILE");
  if (pattern && *pattern) {
    char path[4096];
    Writer p(path, sizeof path);
    stats_path(p, pattern, origin);
    const bool fits = p.finish() < sizeof path;
    const int f = fits ? g_platform->open_append(g_platform->ctx, path) : -ENAMETOOLONG;
    if (f >= 0) {
      fd = f;
      opened = true;
    } else {
      char msg[4096 + 160];
      Writer m(msg, sizeof msg);
      m.put("lazymalloc: LAZYMALLOC_STATS_FILE=");
      m.put(pattern);
      m.put(": cannot open ");
      m.put(fits ? path : "(path too long)");
      m.put(" (errno ");
      m.put_i64(-f);
      m.put("); statistics on stderr\n");
      const size_t n = m.finish();
      g_platform->write(g_platform->ctx, g_stats_fd, msg, n < sizeof msg ? n : sizeof msg - 1);
    }
  }
  write_stats(json, fd, origin);
  if (opened) g_platform->close_fd(g_platform->ctx, fd);
}

void lm_held_state(uint64_t* held, uint64_t* huge) {
  lm_init();
  uint64_t global[kStatCount], heap[kHeapStatCount];
  snapshot(global, heap);
  held_rows(global, heap, held);
  if (huge) *huge = global[unsigned(Stat::huge_bytes)];
}

// A statistic first: a held row of the same name (large_blocks: the
// statistic counts blocks, the row bytes) is read from the report.
int lm_stat_get(const char* name, uint64_t* value) {
  bool heap_stat;
  unsigned index;
  if (!name || !value) {
    pal::set_errno(ENOENT);
    return -1;
  }
  uint64_t size;
  if (class_stat_parse(name, &size, &index)) {
    unsigned c = 0;
    while (c < kSmallClasses && class_size(c) != size) ++c;
    if (c == kSmallClasses) {
      pal::set_errno(ENOENT);
      return -1;
    }
    lm_init();
    uint64_t global[kStatCount], heap[kHeapStatCount], classes[kSmallClasses * kClassStatCount];
    snapshot(global, heap, nullptr, nullptr, classes);
    const uint64_t* row = classes + size_t(c) * kClassStatCount;
    *value = index < kClassStatCount
                 ? row[index]
                 : row[unsigned(ClassStat::taken_bytes)] - row[unsigned(ClassStat::returned_bytes)];
    return 0;
  }
  if (!stat_find(name, &heap_stat, &index)) {
    if (!held_find(name, &index)) {
      pal::set_errno(ENOENT);
      return -1;
    }
    uint64_t held[kHeldCount];
    lm_held_state(held);
    *value = held[index];
    return 0;
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
  background_ensure();
  return p;
}

bool lm_discardable_free(void* p) {
  uint64_t released;
  if (!g.discard.free(p, &released)) return false;
  if (released) {
    g.purger.after_release(released, background_ensure());
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

}  // namespace lazymalloc
