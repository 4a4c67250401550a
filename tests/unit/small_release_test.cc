// Small objects go back to the backend (issue #13): spans emptied by their
// own thread, by other threads while their owner is quiet, and under
// concurrent collection; a quiet thread's cached objects (both stacks of
// its bins, taken by the collector, also while the thread pops); the free pages inside spans of a quiet heap go
// back too (in-span purging), and come back intact.  Over the real backend, through the lm_* entry
// points (the test process's own malloc stays glibc's); the background
// thread is off, so the collector runs only when a test calls it, with
// clock values the test chooses.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "core/config.h"
#include "core/options.h"
#include "fixture.h"
#include "phases.h"
#include "frontend/bins.h"
#include "frontend/heap.h"
#include "frontend/internal.h"
#include "json_parse.h"

namespace lazymalloc {
namespace {

const auto stat = test::lm_stat;

constexpr uint64_t kSecond = 1000000000;

// The real kernel with a manual clock (in-span purging's hysteresis reads
// the platform's clock when a span revives its pages).
std::atomic<uint64_t> g_clock{kSecond};
Platform manual_clock_platform() {
  Platform p = pal::linux_platform();
  p.now_ns = [](void*) { return g_clock.load(); };
  return p;
}

// The collector with in-span purging at `now` (the manual clock too), and
// its second stage after `span_lazy` (kNoSpanPurge: none): `hysteresis`
// applies for ever, or not at all.  *due (if given): its next deadline.
size_t collect(uint64_t now, uint64_t idle, uint64_t span_idle, bool hysteresis,
               uint64_t span_lazy = kNoSpanPurge, uint64_t* due = nullptr) {
  g_clock.store(now);
  const uint64_t until = hysteresis ? kNoDeadline : 0;
  return lm_collect_idle_heaps(now, idle, due, span_idle, until, span_lazy, until);
}

class SmallRelease : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    option_set(unsigned(Opt::background), 0);
    lm_init();
  }
  // Enough objects for about 4 MiB of spans.
  size_t count() const { return (size_t(4) << 20) / GetParam(); }
  // Every slot of v gets a new object of the test's size, written whole
  // with `byte` (callers: ASSERT_NO_FATAL_FAILURE).
  void fill(std::vector<void*>& v, int byte) const {
    for (auto& p : v) {
      p = lm_malloc(GetParam());
      ASSERT_NE(p, nullptr);
      memset(p, byte, GetParam());
    }
  }
  // The adoption scenario (AThreadAdoptsTheSpansAQuietOwnerWasFreedInto),
  // its worker's heap behind `heaps_ahead` others if not 0.
  void adopt_from_quiet_owner(unsigned heaps_ahead);
  // Position of h in the list of all heaps (0: the newest).
  static unsigned heap_depth(const Heap* h) {
    unsigned d = 0;
    for (const Heap* x = detail::g.all_heaps; x && x != h; x = x->next_all) ++d;
    return d;
  }
  // n threads get heaps and exit, the one whose heap is the furthest from
  // the newest in the list of all heaps last (each joined before the next
  // goes): that heap is on top of the pool, for the next thread.  Returns it.
  static const Heap* heap_behind(unsigned n) {
    lmt::Phases got;
    std::deque<lmt::Phases> gates(n);
    std::vector<const Heap*> heaps(n);
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        got.wait(int(i));
        lm_free(lm_malloc(16));
        heaps[i] = detail::tl_heap;
        got.set(int(i + 1));
        gates[i].wait(1);
      });
    }
    got.wait(int(n));
    unsigned last = 0;
    for (unsigned i = 1; i < n; ++i) {
      if (heap_depth(heaps[i]) > heap_depth(heaps[last])) last = i;
    }
    for (unsigned i = 0; i <= n; ++i) {
      if (i == last) continue;
      const unsigned k = i == n ? last : i;
      gates[k].set(1);
      threads[k].join();
    }
    return heaps[last];
  }
};

// Every size class fed by the fast path: direct (64), mid (1000, 4000) and
// the largest cached classes (30000).
INSTANTIATE_TEST_SUITE_P(Sizes, SmallRelease, ::testing::Values(64, 1000, 4000, 30000));

// Freeing everything in allocation order gives every span back but the
// class's current one and those the thread's cache still pins (a cache
// holds at most 2 x 16 KiB of a class).  The span that stopped being
// current when another one became so used to stay with no object in it.
TEST_P(SmallRelease, FreeingEverythingReleasesTheSpans) {
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  const uint64_t released0 = stat("spans_released");
  std::vector<void*> v(count());
  ASSERT_NO_FATAL_FAILURE(fill(v, 0x5a));
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  for (void* p : v) lm_free(p);
  EXPECT_LE(stat("small_spans"), spans0 + 3) << "of " << grown << " spans";
  EXPECT_GE(stat("spans_released") - released0, grown - 3);
  // Collecting the thread returns the cache and the current span too.
  lm_thread_collect();
  EXPECT_EQ(stat("small_spans"), spans0);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A worker allocates and then blocks; another thread frees everything.
// The worker never runs its slow path again, so the collector returns
// its spans once it has seen the heap quiet for the idle time, and not
// before.
TEST_P(SmallRelease, AnIdleOwnersRemoteFreesGoBackWithoutIt) {
  lm_thread_collect();
  // Heaps left by earlier tests in this process (remote frees into exited
  // threads' heaps) are collected first, so that only this test's count.
  lm_collect_idle_heaps(500 * kSecond, 0);
  lm_collect_idle_heaps(500 * kSecond, 0);
  const uint64_t spans0 = stat("small_spans");
  std::vector<void*> v(count());
  lmt::Phases phases;  // 1: allocated; 2: worker may exit
  std::thread worker([&] {
    ASSERT_NO_FATAL_FAILURE(fill(v, 0x3c));
    phases.set(1);
    phases.wait(2);
  });
  phases.wait(1);
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  for (void* p : v) lm_free(p);
  lm_thread_collect();  // this thread's cache goes back to the worker's spans
  EXPECT_GE(stat("small_spans"), spans0 + grown - 1) << "nothing collects a quiet owner's spans yet";

  const uint64_t t0 = 1000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);                 // sees the heaps
  lm_collect_idle_heaps(t0 + idle / 2, idle);      // quiet, not yet for long enough
  EXPECT_GE(stat("small_spans"), spans0 + grown - 1);
  const uint64_t collected0 = stat("idle_heap_collections");
  EXPECT_GE(lm_collect_idle_heaps(t0 + idle, idle), grown - 3);
  EXPECT_GE(stat("idle_heap_collections") - collected0, 1u);
  // The worker's cache holds none of these objects: at most its current
  // span per class is left (this thread's are empty and went back).
  EXPECT_LE(stat("small_spans"), spans0 + 1);
  // Collected once per quiet episode: nothing new, nothing done.
  const uint64_t collected1 = stat("idle_heap_collections");
  lm_collect_idle_heaps(t0 + 2 * idle, idle);
  EXPECT_EQ(stat("idle_heap_collections"), collected1);
  phases.set(2);
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

void SmallRelease::adopt_from_quiet_owner(unsigned heaps_ahead) {
  lm_thread_collect();
  const Heap* deep = heaps_ahead ? heap_behind(heaps_ahead) : nullptr;
  std::vector<void*> v(count());
  const Heap* owner = nullptr;
  lmt::Phases phases;  // 1: allocated; 2: worker may exit
  std::thread worker([&] {
    ASSERT_NO_FATAL_FAILURE(fill(v, 0x3c));
    owner = detail::tl_heap;
    phases.set(1);
    phases.wait(2);
  });
  phases.wait(1);
  if (deep) {
    EXPECT_EQ(owner, deep) << "the worker took the heap on top of the pool";
    EXPECT_GT(heap_depth(owner), kAdoptProbeHeaps) << "behind a walk of kAdoptProbeHeaps from the head";
  }
  const std::set<void*> old(v.begin(), v.end());
  for (void* p : v) lm_free(p);
  lm_thread_collect();  // this thread's cache goes back to the worker's spans
  const uint64_t spans0 = stat("small_spans");
  const uint64_t adopted0 = stat("spans_adopted");
  const uint64_t acquired0 = stat("spans_acquired");
  std::vector<void*> w(count());
  size_t reused = 0;
  for (auto& p : w) {
    p = lm_malloc(GetParam());
    ASSERT_NE(p, nullptr);
    memset(p, 0x4d, GetParam());
    reused += old.count(p);
  }
  const uint64_t adopted = stat("spans_adopted") - adopted0;
  const uint64_t grown = stat("spans_acquired") - acquired0;
  // New spans until the second look, kAdoptProbeEvents (16) refills after
  // the first: 2 of 64 B objects (129 a refill, 1024 a span), 4 of 1000 B
  // (17, 64), 5 of 4000 B (5, 16), 8 of 30000 B (2, 4); the worker's
  // current span is not parked, so not adopted.
  const uint64_t before_adoption = 12;
  EXPECT_GE(adopted, 4u);
  EXPECT_LE(grown, before_adoption) << adopted << " spans adopted";
  EXPECT_LE(stat("small_spans"), spans0 + before_adoption);
  EXPECT_GE(reused, w.size() / 2) << "of the worker's objects handed out again";
  EXPECT_EQ(lm_check_invariants(), nullptr);
  for (void* p : w) lm_free(p);
  phases.set(2);
  worker.join();
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A worker allocates and then blocks; this thread frees everything, which
// leaves the worker's spans free but parked with it (on its delayed
// stack), and then allocates as much again.  It takes the worker's spans
// over rather than new ones from the backend (span adoption): after at
// most two looks at the quiet heap (the first only notes its events), and
// without the collector.  The objects it gets are the worker's old ones.
TEST_P(SmallRelease, AThreadAdoptsTheSpansAQuietOwnerWasFreedInto) { adopt_from_quiet_owner(0); }

// The same with the owner's heap behind more than kAdoptProbeHeaps others
// in the list of all heaps (of 40 threads' heaps, the furthest back, pooled
// last and taken over by the worker): each look walks on from where
// the last stopped (g.adopt_cursor), past heaps with nothing parked, so the
// owner is looked at; a walk of 16 heaps from the head never reached it
// (spans_adopted stayed 0 after LargeCacheStress's 32 threads).
TEST_P(SmallRelease, AThreadAdoptsFromAQuietOwnerBehindManyOtherHeaps) { adopt_from_quiet_owner(40); }

// A worker allocates and then blocks (its heap is quiet); this thread frees
// into every parked span of it: most of the objects of every other span
// (all but one in eight: nearly empty), one in eight of the rest (mostly
// used), and then allocates as much again.  It adopts the nearly empty
// spans only: the mostly used ones stay parked with their owner, on its
// delayed stack (adoptable, kAdoptLiveShift), since adopting them made two
// threads that pause in turn trade spans back and forth, both taking fresh
// ones (rptest --lockstep).  The worker, woken, gets them back at its next
// refill and reuses their freed objects.
TEST_P(SmallRelease, AThreadLeavesAQuietOwnerTheSpansItStillMostlyUses) {
  lm_thread_collect();
  std::vector<void*> v(count());
  std::vector<void*> worker_got;
  std::set<void*> mostly_freed;
  std::vector<bool> live(v.size(), true);
  size_t worker_reused = 0;
  lmt::Phases phases;  // 1: allocated; 2: worker allocates again; 3: it did; 4: it frees all
  std::thread worker([&] {
    ASSERT_NO_FATAL_FAILURE(fill(v, 0x3c));
    phases.set(1);
    phases.wait(2);
    worker_got.resize(mostly_freed.size());
    for (auto& p : worker_got) {
      p = lm_malloc(GetParam());
      ASSERT_NE(p, nullptr);
      memset(p, 0x2d, GetParam());
      worker_reused += mostly_freed.count(p);
    }
    phases.set(3);
    // Everything this test made goes: the objects left in the worker's own
    // spans locally, and its spans emptied, before its heap is pooled.
    phases.wait(4);
    for (void* p : worker_got) lm_free(p);
    for (size_t i = 0; i < v.size(); ++i) {
      if (live[i]) lm_free(v[i]);
    }
    lm_thread_collect();
  });
  phases.wait(1);
  // The worker's spans, in allocation order; its current one (the last
  // object's) is not parked and is left alone.
  std::vector<Span*> spans;
  std::vector<std::vector<size_t>> objects;
  for (size_t i = 0; i < v.size(); ++i) {
    Span* sp = detail::g.backend.span_of(v[i]);
    ASSERT_NE(sp, nullptr);
    if (spans.empty() || spans.back() != sp) {
      spans.push_back(sp);
      objects.emplace_back();
    }
    objects.back().push_back(i);
  }
  ASSERT_GE(spans.size(), 8u);
  std::set<void*> nearly_freed;
  for (size_t k = 0; k + 1 < spans.size(); ++k) {
    const bool nearly = k % 2 == 0;
    for (size_t j = 0; j < objects[k].size(); ++j) {
      if ((j % 8 == 0) == nearly) continue;
      const size_t i = objects[k][j];
      (nearly ? nearly_freed : mostly_freed).insert(v[i]);
      lm_free(v[i]);
      live[i] = false;
    }
  }
  lm_thread_collect();  // this thread's cache goes back to the worker's spans
  const uint64_t adopted0 = stat("spans_adopted");
  const uint64_t kept0 = stat("spans_not_adopted");
  std::vector<void*> w(nearly_freed.size() + mostly_freed.size());
  size_t reused_nearly = 0, reused_mostly = 0;
  for (auto& p : w) {
    p = lm_malloc(GetParam());
    ASSERT_NE(p, nullptr);
    memset(p, 0x4d, GetParam());
    reused_nearly += nearly_freed.count(p);
    reused_mostly += mostly_freed.count(p);
  }
  const size_t parked_mostly = (spans.size() - 1) / 2;
  EXPECT_GE(stat("spans_adopted") - adopted0, 4u);
  EXPECT_GE(stat("spans_not_adopted") - kept0, parked_mostly);
  EXPECT_GE(reused_nearly, nearly_freed.size() / 4) << "of the nearly empty spans' freed objects";
  EXPECT_EQ(reused_mostly, 0u) << "of " << mostly_freed.size() << " freed objects of mostly used spans";
  EXPECT_EQ(lm_check_invariants(), nullptr);
  phases.set(2);
  phases.wait(3);
  EXPECT_GE(worker_reused, mostly_freed.size() / 2) << "of " << mostly_freed.size();
  EXPECT_EQ(lm_check_invariants(), nullptr);
  for (void* p : w) lm_free(p);
  phases.set(4);
  worker.join();
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A worker allocates and then blocks (its heap is quiet); this thread frees
// one in eight objects of each of its parked spans (all mostly used: none
// adoptable) and allocates twice as much, looking for spans to adopt many
// times.  It claims the quiet heap once (one process barrier), keeps its
// spans there, and does not claim it again while nothing that could change
// the verdict happens (Heap::adopt_kept): each look used to cost a barrier.
// Then it frees most of the rest of one span, which leaves it nearly empty
// and flags the heap (adopt_ready): the next look claims the heap once
// more and adopts that span, whose freed objects this thread gets back.
TEST_P(SmallRelease, AQuietOwnersKeptSpansAreJudgedAgainOnlyWhenFreesArrive) {
  ASSERT_FALSE(detail::g_heap_fence) << "the process barriers count the claims";
  lm_thread_collect();
  // Heaps earlier tests left with spans on their delayed stacks are
  // collected first, so that only the worker's are claimed.
  lm_collect_idle_heaps(500 * kSecond, 0);
  lm_collect_idle_heaps(500 * kSecond, 0);
  std::vector<void*> v(count());
  std::vector<bool> live(v.size(), true);
  lmt::Phases phases;  // 1: allocated; 2: worker frees the rest and exits
  std::thread worker([&] {
    ASSERT_NO_FATAL_FAILURE(fill(v, 0x3c));
    phases.set(1);
    phases.wait(2);
    for (size_t i = 0; i < v.size(); ++i) {
      if (live[i]) lm_free(v[i]);
    }
    lm_thread_collect();
  });
  phases.wait(1);
  // The worker's spans, in allocation order; its current one (the last
  // object's) is not parked and is left alone.
  std::vector<std::vector<size_t>> objects;
  Span* last = nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    Span* sp = detail::g.backend.span_of(v[i]);
    ASSERT_NE(sp, nullptr);
    if (sp != last) objects.emplace_back();
    last = sp;
    objects.back().push_back(i);
  }
  ASSERT_GE(objects.size(), 8u);
  const size_t parked = objects.size() - 1;
  auto free_where = [&](size_t k, auto&& pred, std::set<void*>* freed) {
    for (size_t j = 0; j < objects[k].size(); ++j) {
      const size_t i = objects[k][j];
      if (!live[i] || !pred(j)) continue;
      if (freed) freed->insert(v[i]);
      lm_free(v[i]);
      live[i] = false;
    }
  };
  for (size_t k = 0; k < parked; ++k) free_where(k, [](size_t j) { return j % 8 == 0; }, nullptr);
  lm_thread_collect();  // this thread's cache goes back to the worker's spans

  test::FakePlatform fake;  // counts the process barriers
  lm_set_platform(fake.get());
  struct Restore {
    ~Restore() { lm_set_platform(&pal::linux_platform()); }
  } restore;
  const uint64_t kept0 = stat("spans_not_adopted");
  const uint64_t adopted0 = stat("spans_adopted");
  std::vector<void*> w(2 * count());
  ASSERT_NO_FATAL_FAILURE(fill(w, 0x4d));
  EXPECT_EQ(fake.barrier_fault.calls, 1u) << "claims of the quiet heap";
  EXPECT_EQ(stat("spans_not_adopted") - kept0, parked) << "spans judged and kept";
  EXPECT_EQ(stat("spans_adopted"), adopted0);

  // Most of the rest of the first parked span: one object in eight stays.
  std::set<void*> freed;
  free_where(0, [](size_t j) { return j % 8 != 1; }, &freed);
  lm_thread_collect();
  const uint64_t barriers1 = fake.barrier_fault.calls;
  std::vector<void*> w2(count());
  ASSERT_NO_FATAL_FAILURE(fill(w2, 0x5e));
  size_t reused = 0;
  for (void* p : w2) reused += freed.count(p);
  EXPECT_EQ(fake.barrier_fault.calls - barriers1, 1u) << "claims of the quiet heap";
  EXPECT_EQ(stat("spans_adopted") - adopted0, 1u);
  EXPECT_EQ(stat("spans_not_adopted") - kept0, 2 * parked - 1);
  EXPECT_GE(reused, freed.size() / 2) << "of the nearly emptied span's freed objects";
  EXPECT_EQ(lm_check_invariants(), nullptr);
  for (void* p : w) lm_free(p);
  for (void* p : w2) lm_free(p);
  phases.set(2);
  worker.join();
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// This thread allocates, frees every other object itself (so each span is
// in its queue, none parked full: the frees revived them) and returns its
// cache; a worker frees the rest.  The run that returns a span's last
// outstanding object notifies this thread (remote_push), whose next refill
// gives those spans back to the backend (release_if_emptied), while its
// queue still offers free objects in other spans: without the notice they
// waited, full of remote frees, until a refill walked that far or the
// collector came.  The current span keeps its phantom object and stays.
TEST_P(SmallRelease, SpansEmptiedByRemoteFreesGoBackAtTheOwnersNextRefill) {
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  std::vector<void*> v(count());
  ASSERT_NO_FATAL_FAILURE(fill(v, 0x6e));
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  for (size_t i = 1; i < v.size(); i += 2) lm_free(v[i]);
  lm_thread_collect();  // the cache back to the spans: each one half full
  ASSERT_EQ(stat("small_spans"), spans0 + grown) << "no span is empty yet";
  const uint64_t released0 = stat("spans_released");
  std::thread worker([&] {
    for (size_t i = 0; i < v.size(); i += 2) lm_free(v[i]);
    lm_thread_collect();  // its cache back to this thread's spans
  });
  worker.join();
  // Nothing has run on this thread: the spans are all still its own.
  EXPECT_EQ(stat("small_spans"), spans0 + grown);
  void* p = lm_malloc(GetParam());  // a refill: the cache is empty
  ASSERT_NE(p, nullptr);
  EXPECT_GE(stat("spans_released") - released0, grown - 1);
  EXPECT_LE(stat("small_spans"), spans0 + 1);
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_free(p);
  lm_thread_collect();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// This thread frees a quarter of its objects itself and returns its cache
// (so each span is in its queue, none parked full: the frees revived
// them), a worker frees half of them (remote frees: every span keeps live
// objects, so no run empties one and none is notified), then this thread
// frees the rest itself, with no refill and no collection meanwhile.  The
// local return that leaves a span with nothing outstanding but the remote
// frees waiting on its `xfree` list gives it back (return_run,
// release_if_emptied): before, such spans stayed in their queue, empty,
// until a refill walked that far or the collector came (issue #16,
// rptest: 12-23 of them, 0.75-1.4 MiB, at its peak).
TEST_P(SmallRelease, SpansEmptiedByALocalFreeAfterRemoteOnesGoBackAtOnce) {
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  std::vector<void*> v(count());
  ASSERT_NO_FATAL_FAILURE(fill(v, 0x71));
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  for (size_t i = 1; i < v.size(); i += 4) lm_free(v[i]);
  lm_thread_collect();  // the cache back to the spans: each one 3/4 full
  std::thread worker([&] {
    for (size_t i = 0; i < v.size(); i += 2) lm_free(v[i]);
    lm_thread_collect();  // its cache back to this thread's spans, as remote frees
  });
  worker.join();
  ASSERT_EQ(stat("small_spans"), spans0 + grown) << "no span is empty yet";
  const uint64_t released0 = stat("spans_released");
  for (size_t i = 3; i < v.size(); i += 4) lm_free(v[i]);
  // The class's current span and those this thread's cache pins stay (its
  // two stacks hold at most 2 x 64 KiB if earlier tests grew them).
  EXPECT_LE(stat("small_spans"), spans0 + 5) << "of " << grown << " spans";
  EXPECT_GE(stat("spans_released") - released0, grown - 5);
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_thread_collect();
  EXPECT_EQ(stat("small_spans"), spans0);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A worker allocates, frees all but its last object itself and then
// blocks: the objects it freed last stay in its cache's free stack, and
// pin their span.  Freed in reverse order, those are the first objects, in
// a span that is not the class's current one (which the last object keeps).
// Once the heap has been quiet for the idle time, the collector takes the
// free stack back to the spans (the worker never runs meanwhile) and the
// first span goes.
TEST_P(SmallRelease, AQuietThreadsCachedFreesGoBackWithoutIt) {
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  const uint64_t bytes0 = stat("idle_cache_bytes");
  std::vector<void*> v(count());
  lmt::Phases phases;  // 1: freed all but the last; 2: worker may go on
  std::set<Span*> pinned;  // the last object's span, the class's current one, those of cached objects
  std::thread worker([&] {
    ASSERT_NO_FATAL_FAILURE(fill(v, 0x6b));
    for (size_t i = v.size() - 1; i-- > 0;) lm_free(v[i]);
    const unsigned c = detail::cached_class(GetParam());
    const detail::Bin& bin = detail::tl_bins[c];
    pinned.insert(detail::g.backend.span_of(v.back()));
    if (Span* cur = detail::tl_heap->head_ref[c]) pinned.insert(cur);
    for (Block** b = bin.base; b < bin.top; ++b) pinned.insert(detail::g.backend.span_of(*b));
    for (Block** b = detail::tl_bin_fbase[c]; b < bin.ftop; ++b) pinned.insert(detail::g.backend.span_of(*b));
    phases.set(1);
    phases.wait(2);
    lm_free(v.back());
  });
  phases.wait(1);
  // The first objects freed went back as the cache overflowed, and their
  // spans with them; those the cache still holds pin theirs (the first
  // objects' span among them: freed last).
  ASSERT_GE(pinned.size(), 2u);
  EXPECT_EQ(stat("small_spans"), spans0 + pinned.size());

  const uint64_t t0 = 3000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  lm_collect_idle_heaps(t0 + idle / 2, idle);  // quiet, not yet for long enough
  EXPECT_EQ(stat("idle_cache_bytes"), bytes0);
  EXPECT_EQ(stat("small_spans"), spans0 + pinned.size());
  lm_collect_idle_heaps(t0 + idle, idle);
  EXPECT_GE(stat("idle_cache_bytes") - bytes0, GetParam());
  EXPECT_EQ(stat("small_spans"), spans0 + 1);
  phases.set(2);
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A worker whose cache of one size class holds objects in its allocation
// stack, and none in its free stack, and that then blocks: it allocates
// about 4 MiB of objects, frees them all (the free stack fills, and its
// overflows flush the rest), and allocates one more, for which the stacks
// trade places.  It records how many objects its allocation stack holds
// and the bottom one.  Woken (finish), it reads its allocation stack
// again, allocates as many objects as before, each of which must be
// distinct and keep the bytes written into it, and frees everything.
class QuietAllocator {
 public:
  explicit QuietAllocator(size_t size) : size_(size), cls_(detail::cached_class(size)) {
    thread_ = std::thread([this] { run(); });
    phases_.wait(1);
  }
  ~QuietAllocator() { finish(); }
  // Wakes the worker and waits for it.
  void finish() {
    if (!thread_.joinable()) return;
    phases_.set(2);
    thread_.join();
  }
  // Wakes the worker and checks what it found and did: `want_after`
  // objects in its allocation stack when it woke, none handed out twice,
  // none overwritten, and the allocator's invariants.
  void finish_and_expect(size_t want_after) {
    finish();
    EXPECT_EQ(in_alloc_after, want_after);
    EXPECT_EQ(handed_out_twice, 0u);
    EXPECT_EQ(overwritten, 0u);
    EXPECT_EQ(lm_check_invariants(), nullptr);
  }
  size_t object_bytes() const { return class_size(cls_); }
  size_t in_alloc = 0;        // objects in the allocation stack when it blocked
  bool free_empty = false;    // its free stack was empty then
  void* bottom = nullptr;     // the allocation stack's bottom object (if 2 or more)
  size_t in_alloc_after = 0;  // objects in the allocation stack when it woke
  // Its bin's capacity (how far above its start the free stack's limit
  // lies) when it blocked, and after its first two mallocs when it woke.
  size_t cap_quiet = 0, cap_woke = 0;
  size_t handed_out_twice = 0, overwritten = 0;

 private:
  static unsigned char fill(size_t i) { return static_cast<unsigned char>(0x21 + i * 11); }
  size_t capacity() const {
    const detail::Bin& bin = detail::tl_bins[cls_];
    return size_t(bin.flimit - detail::tl_bin_fbase[cls_]);  // (no take in progress)
  }
  size_t in_alloc_now() const {
    const detail::Bin& bin = detail::tl_bins[cls_];
    return bin.top > bin.base ? size_t(bin.top - bin.base) : 0;
  }
  void run() {
    const size_t n = (size_t(4) << 20) / size_;
    std::vector<void*> v(n);
    for (auto& p : v) {
      p = lm_malloc(size_);
      if (p) memset(p, 0x6b, size_);
    }
    for (void* p : v) lm_free(p);
    auto* first = static_cast<unsigned char*>(lm_malloc(size_));
    memset(first, 0x5e, size_);
    in_alloc = in_alloc_now();
    free_empty = detail::tl_bins[cls_].ftop == detail::tl_bin_fbase[cls_];
    if (in_alloc >= 2) bottom = *detail::tl_bins[cls_].base;
    cap_quiet = capacity();
    phases_.set(1);
    phases_.wait(2);
    in_alloc_after = in_alloc_now();
    std::set<void*> seen{first};
    std::vector<unsigned char*> again(n);
    for (size_t i = 0; i < n; ++i) {
      again[i] = static_cast<unsigned char*>(lm_malloc(size_));
      if (!seen.insert(again[i]).second) ++handed_out_twice;
      memset(again[i], fill(i), size_);
      if (i == 1) cap_woke = capacity();
    }
    for (size_t i = 0; i < n; ++i) {
      if (again[i][0] != fill(i) || again[i][size_ / 2] != fill(i) || again[i][size_ - 1] != fill(i)) ++overwritten;
    }
    if (first[0] != 0x5e || first[size_ - 1] != 0x5e) ++overwritten;
    for (unsigned char* p : again) lm_free(p);
    lm_free(first);
  }

  const size_t size_;
  const unsigned cls_;
  lmt::Phases phases_;  // 1: the worker is quiet; 2: it may go on
  std::thread thread_;
};

// Once a worker's heap has been quiet for the idle time, the collector
// takes its allocation stack back to the spans too, all but the top object
// (which the thread may be popping: bins.cc); a class whose stack holds one
// object (30000 B: bin_cap 1) keeps it.  The worker then allocates again
// and gets every object once.  A taken object is free: freeing it is a
// double free (or, where the take emptied its span, which went back, a
// free of memory not allocated: the worker's bins grew while it churned,
// and its allocation stack spans several spans).
TEST_P(SmallRelease, AQuietThreadsAllocationStackGoesBackWithoutIt) {
  lm_thread_collect();
  const uint64_t bytes0 = stat("idle_cache_bytes");
  QuietAllocator worker(GetParam());
  EXPECT_TRUE(worker.free_empty);
  if (GetParam() <= 4000) ASSERT_GE(worker.in_alloc, 2u) << "the test needs a stack to take";
  const uint64_t want = worker.in_alloc > 1 ? (worker.in_alloc - 1) * worker.object_bytes() : 0;

  const uint64_t t0 = 4000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  lm_collect_idle_heaps(t0 + idle / 2, idle);  // quiet, not yet for long enough
  EXPECT_EQ(stat("idle_cache_bytes"), bytes0);
  lm_collect_idle_heaps(t0 + idle, idle);
  EXPECT_EQ(stat("idle_cache_bytes") - bytes0, want);
#if LAZYMALLOC_CHECKS
  if (worker.bottom) {
    EXPECT_DEATH(lm_free(worker.bottom),
                 "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: (double free|not allocated)");
  }
#endif
  worker.finish_and_expect(worker.in_alloc > 1 ? 1u : worker.in_alloc);
  // Its churn grew the worker's bin (1000 B: 16 objects to 64; 4000 B: 4
  // to 16); the take puts it back at its starting size.
  const unsigned c = detail::cached_class(GetParam());
  if (GetParam() == 1000 || GetParam() == 4000) EXPECT_GT(worker.cap_quiet, bin_cap(c));
  if (GetParam() <= 4000) EXPECT_EQ(worker.cap_woke, bin_cap(c));
}

// Without the process barrier (membarrier refused), a collector cannot
// tell that a quiet thread is outside its slow path: it claims nothing and
// changes nothing; once the barrier works again it collects.
TEST(SmallReleaseFaults, NoProcessBarrierNoCollection) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  test::FakePlatform fake;
  lm_thread_collect();
  const uint64_t spans0 = stat("small_spans");
  const uint64_t collections0 = stat("idle_heap_collections");
  std::vector<void*> v(1000);
  lmt::Phases phases;  // 1: allocated; 2: worker may exit
  std::thread worker([&] {
    for (auto& p : v) p = lm_malloc(4000);
    phases.set(1);
    phases.wait(2);
  });
  phases.wait(1);
  for (void* p : v) lm_free(p);
  lm_thread_collect();
  const uint64_t grown = stat("small_spans") - spans0;
  ASSERT_GE(grown, 4u);
  lm_set_platform(fake.get());
  fake.barrier_fault.fail_every();
  const uint64_t t0 = 1000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  EXPECT_EQ(lm_collect_idle_heaps(t0 + idle, idle), 0u);
  EXPECT_GE(fake.barrier_fault.failures, 1u);
  EXPECT_EQ(stat("small_spans") - spans0, grown);
  EXPECT_EQ(stat("idle_heap_collections"), collections0);
  fake.barrier_fault.heal();
  EXPECT_GE(lm_collect_idle_heaps(t0 + idle, idle), grown - 3);
  EXPECT_LE(stat("small_spans"), spans0 + 1);
  phases.set(2);
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
  lm_set_platform(&pal::linux_platform());
}

// Nothing was taken from the quiet worker's allocation stack: it finds its
// stack as it left it, every object once and intact.
void expect_nothing_taken(QuietAllocator& worker, uint64_t bytes0) {
  EXPECT_EQ(stat("idle_cache_bytes"), bytes0);
  worker.finish_and_expect(worker.in_alloc);
}

// Where threads fence themselves (no process barrier at start-up:
// g_heap_fence), their fast paths do not: the collector takes free stacks
// only, and the allocation stack stays whole.
TEST(SmallReleaseFaults, WithoutTheProcessBarrierAllocationStacksStay) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  lm_thread_collect();
  const uint64_t bytes0 = stat("idle_cache_bytes");
  QuietAllocator worker(64);
  ASSERT_GE(worker.in_alloc, 2u);
  const bool fence = detail::g_heap_fence;
  detail::g_heap_fence = true;  // (every thread but this one is blocked or fences)
  const uint64_t t0 = 5000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  lm_collect_idle_heaps(t0 + idle, idle);
  detail::g_heap_fence = fence;
  expect_nothing_taken(worker, bytes0);
}

// The barrier that claims the heaps works and the one of the take fails:
// the allocation stacks' bases go back, nothing is taken from them, and the
// worker goes on with its stack whole.
TEST(SmallReleaseFaults, ATakesFailedBarrierPutsTheBasesBack) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  test::FakePlatform fake;
  lm_thread_collect();
  const uint64_t bytes0 = stat("idle_cache_bytes");
  QuietAllocator worker(64);
  ASSERT_GE(worker.in_alloc, 2u);
  const uint64_t t0 = 6000 * kSecond, idle = kSecond;
  lm_collect_idle_heaps(t0, idle);
  lm_set_platform(fake.get());
  fake.barrier_fault.fail_nth(2);
  lm_collect_idle_heaps(t0 + idle, idle);
  lm_set_platform(&pal::linux_platform());
  EXPECT_EQ(fake.barrier_fault.failures, 1u);
  EXPECT_GE(stat("idle_heap_collections"), 1u);
  expect_nothing_taken(worker, bytes0);
}

// Threads that allocate, hand objects to each other, check their contents
// and go quiet, while another thread collects every heap it finds quiet
// between two of its passes (idle time 0): a collection never takes a span
// from under a thread that uses it, and never loses or duplicates an object.
TEST(SmallReleaseStress, CollectionRacesWithThreadsThatSleepAndWake) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  constexpr int kThreads = 3;
  constexpr int kRounds = 300;
  const uint64_t purges0 = stat("span_page_purges"), revivals0 = stat("span_page_revivals");
  std::atomic<bool> done{false};
  std::atomic<uint64_t> clock{1};
  std::thread collector([&] {
    while (!done.load(std::memory_order_relaxed)) {
      // In-span purging too, with and without hysteresis (delay 0: a
      // span purges as soon as its heap is seen quiet twice).
      uint64_t now = clock.fetch_add(1);
      collect(now * kSecond, 0, 0, now % 2 == 0);
      std::this_thread::yield();
    }
  });
  // Each thread passes its objects to the next one, which checks and frees
  // them (remote frees into a heap whose thread may be quiet).
  std::mutex m[kThreads];
  std::vector<std::pair<unsigned char*, size_t>> inbox[kThreads];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint32_t x = 12345u + unsigned(t);
      // Long-lived objects among the short-lived ones: their neighbours'
      // pages are purged and revived while they stay, and they must not
      // change.
      std::vector<std::pair<unsigned char*, size_t>> kept;
      auto fill = [t](unsigned char* p, size_t n) {
        for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i * 7 + size_t(t));
      };
      auto intact = [t](const unsigned char* p, size_t n) {
        for (size_t i = 0; i < n; ++i) {
          if (p[i] != static_cast<unsigned char>(i * 7 + size_t(t))) return false;
        }
        return true;
      };
      for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < 4; ++i) {
          x = x * 1664525u + 1013904223u;
          size_t n = 16 + (x >> 8) % 2000;
          auto* p = static_cast<unsigned char*>(lm_calloc(1, n));
          ASSERT_NE(p, nullptr);
          for (size_t k = 0; k < n; ++k) ASSERT_EQ(p[k], 0) << "calloc of " << n << " byte " << k;
          fill(p, n);
          kept.emplace_back(p, n);
        }
        if (kept.size() > 64) {
          for (size_t i = 0; i < kept.size(); i += 3) {
            ASSERT_TRUE(intact(kept[i].first, kept[i].second));
            lm_free(kept[i].first);
            kept[i].first = nullptr;
          }
          kept.erase(std::remove_if(kept.begin(), kept.end(), [](auto& e) { return !e.first; }), kept.end());
        }
        std::vector<std::pair<unsigned char*, size_t>> mine, got;
        for (int i = 0; i < 200; ++i) {
          x = x * 1664525u + 1013904223u;
          size_t n = 16 + (x >> 8) % 6000;
          auto* p = static_cast<unsigned char*>(lm_malloc(n));
          ASSERT_NE(p, nullptr);
          memset(p, int((n + size_t(t)) & 0xff), n);
          mine.emplace_back(p, n);
        }
        // Half stays here and is freed here; half goes to the next thread.
        {
          std::lock_guard<std::mutex> lock(m[(t + 1) % kThreads]);
          for (size_t i = 0; i < mine.size(); i += 2) inbox[(t + 1) % kThreads].push_back(mine[i]);
        }
        {
          std::lock_guard<std::mutex> lock(m[t]);
          got.swap(inbox[t]);
        }
        for (auto [p, n] : got) {
          size_t from = (size_t(t) + kThreads - 1) % kThreads;
          ASSERT_EQ(p[0], static_cast<unsigned char>((n + from) & 0xff));
          ASSERT_EQ(p[n - 1], static_cast<unsigned char>((n + from) & 0xff));
          lm_free(p);
        }
        for (size_t i = 1; i < mine.size(); i += 2) {
          auto [p, n] = mine[i];
          ASSERT_EQ(p[n / 2], static_cast<unsigned char>((n + size_t(t)) & 0xff));
          lm_free(p);
        }
        // Go quiet now and then, so that the collector finds the heap idle.
        if (round % 16 == 0) {
          uint64_t seen = clock.load();
          while (clock.load() < seen + 3) std::this_thread::yield();
        }
      }
      for (auto [p, n] : kept) {
        ASSERT_TRUE(intact(p, n));
        lm_free(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  done.store(true);
  collector.join();
  for (int t = 0; t < kThreads; ++t) {
    for (auto [p, n] : inbox[t]) lm_free(p);
  }
  lm_thread_collect();
  EXPECT_GE(stat("idle_heap_collections"), 1u);
  // Pages inside spans were purged under the threads, and revived by them.
  EXPECT_GE(stat("span_page_purges") - purges0, 1u);
  EXPECT_GE(stat("span_page_revivals") - revivals0, 1u);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// A thread that pops and pushes one size class as fast as it can, all on
// its fast paths and the stacks' trades (no slow-path event, so its heap
// reads as quiet), while a collector takes its cache again and again
// (idle time 0: every other pass, once the thread has refilled): each
// batch of objects it holds at once must be distinct (each keeps the index
// written into it) and no check may fail.  A pop that races with a take
// is what bins_take_idle leaves the top entry for.
TEST(SmallReleaseStress, AllocationStacksTakenUnderAThreadThatPops) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  constexpr size_t kSize = 64;
  constexpr size_t kBatch = 100;  // under the class's bin_cap (128)
#if defined(__SANITIZE_THREAD__)
  constexpr int kRounds = 20000;
#else
  constexpr int kRounds = 200000;
#endif
  const uint64_t bytes0 = stat("idle_cache_bytes"), takes0 = stat("cache_idle_takes");
  std::atomic<bool> done{false};
  std::atomic<uint64_t> passes{0};
  std::thread collector([&] {
    for (uint64_t now = 1; !done.load(std::memory_order_relaxed); ++now) {
      lm_collect_idle_heaps(now * kSecond, 0);
      passes.fetch_add(1, std::memory_order_relaxed);
    }
  });
  size_t duplicates = 0, failures = 0;
  std::thread popper([&] {
    void* batch[kBatch];
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < kBatch; ++i) batch[i] = lm_malloc(kSize);
      for (size_t i = 0; i < kBatch; ++i) {
        if (!batch[i]) {
          ++failures;
          continue;
        }
        static_cast<uint64_t*>(batch[i])[0] = i;
        static_cast<uint64_t*>(batch[i])[7] = ~uint64_t(i);
      }
      for (size_t i = 0; i < kBatch; ++i) {
        if (!batch[i]) continue;
        const uint64_t* w = static_cast<const uint64_t*>(batch[i]);
        if (w[0] != i || w[7] != ~uint64_t(i)) ++duplicates;
      }
      for (size_t i = 0; i < kBatch; ++i) lm_free(batch[i]);
      // Now and then waits for three of its passes, which take the cache
      // once at least (the first may see the refill that followed the last
      // take), however rarely the two threads run at the same time.
      if (round % (kRounds / 8) == 0) {
        const uint64_t seen = passes.load(std::memory_order_relaxed);
        while (passes.load(std::memory_order_relaxed) < seen + 3) std::this_thread::yield();
      }
    }
    lm_thread_collect();
  });
  popper.join();
  done.store(true);
  collector.join();
  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(duplicates, 0u);
  EXPECT_GT(stat("cache_idle_takes"), takes0);
  EXPECT_GT(stat("idle_cache_bytes"), bytes0);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// One object in flight per class (p = malloc(n); free(q); q = p: issue
// #16's pattern), on three classes at once, all on the fast paths, the
// stacks' trades and refills (alloc_class), while a collector takes the
// thread's cache again and again: the take races with the trade (which
// holds the heap for a moment, heap_try_hold) and with the pops after it.
// Stacks of 128, 2 and 1 objects (the last two trade on nearly every
// malloc).  No object may be handed out while it is live (each keeps the
// round written into it until it is freed), and no check may fail.
TEST(SmallReleaseStress, OneObjectInFlightUnderTheCollector) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  constexpr size_t kSizes[] = {64, 6000, 20000};
  constexpr size_t kClassesUsed = sizeof kSizes / sizeof kSizes[0];
#if defined(__SANITIZE_THREAD__)
  constexpr uint64_t kRounds = 20000;
#else
  constexpr uint64_t kRounds = 300000;
#endif
  const uint64_t takes0 = stat("cache_idle_takes");
  std::atomic<bool> done{false};
  std::atomic<uint64_t> passes{0};
  std::thread collector([&] {
    for (uint64_t now = 1; !done.load(std::memory_order_relaxed); ++now) {
      lm_collect_idle_heaps(now * kSecond, 0);
      passes.fetch_add(1, std::memory_order_relaxed);
    }
  });
  size_t live_handed_out = 0, overwritten = 0, failures = 0;
  std::thread worker([&] {
    uint64_t* q[kClassesUsed];
    for (size_t k = 0; k < kClassesUsed; ++k) {
      q[k] = static_cast<uint64_t*>(lm_malloc(kSizes[k]));
      q[k][0] = 0;
      q[k][1] = ~uint64_t(0);
    }
    for (uint64_t round = 1; round <= kRounds; ++round) {
      for (size_t k = 0; k < kClassesUsed; ++k) {
        auto* p = static_cast<uint64_t*>(lm_malloc(kSizes[k]));
        if (!p) {
          ++failures;
          continue;
        }
        for (uint64_t* live : q) live_handed_out += p == live;
        p[0] = round;
        p[1] = ~round;
        if (q[k][0] != round - 1 || q[k][1] != ~(round - 1)) ++overwritten;
        lm_free(q[k]);
        q[k] = p;
      }
      // Now and then waits for three of the collector's passes (at least
      // one takes the cache), however rarely the two threads run at once.
      if (round % (kRounds / 8) == 0) {
        const uint64_t seen = passes.load(std::memory_order_relaxed);
        while (passes.load(std::memory_order_relaxed) < seen + 3) std::this_thread::yield();
      }
    }
    for (uint64_t* p : q) lm_free(p);
    lm_thread_collect();
  });
  worker.join();
  done.store(true);
  collector.join();
  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(live_handed_out, 0u);
  EXPECT_EQ(overwritten, 0u);
  EXPECT_GT(stat("cache_idle_takes"), takes0);
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// ---- free pages inside spans

// A span's pages purged and revived: through the lm_* entry points over
// the real kernel, with MADV_FREE (the pages may keep their bytes) or
// MADV_DONTNEED (they read as zero).
class SpanPurge : public ::testing::TestWithParam<std::tuple<size_t, bool>> {
 protected:
  void SetUp() override {
    option_set(unsigned(Opt::background), 0);
    lm_init();
    advice_ = option(Opt::purge_advice);
    option_set(unsigned(Opt::purge_advice), dontneed() ? kAdviceDontneed : kAdviceFree);
    lm_set_platform(&platform_);
  }
  void TearDown() override {
    lm_set_platform(&pal::linux_platform());
    option_set(unsigned(Opt::purge_advice), advice_);
  }
  size_t size() const { return std::get<0>(GetParam()); }
  bool dontneed() const { return std::get<1>(GetParam()); }

  static size_t page(const void* p) { return reinterpret_cast<uintptr_t>(p) / kOsPageSize; }

  // Allocates about 4 MiB of objects, each filled with its own byte, and
  // frees those that touch no page numbered 0 mod 10: the rest (about 10%
  // for small sizes) stay live.  Returns into `freed` the objects freed
  // whose first byte lies in a page that only freed objects of this test
  // touch: those the purge must make dormant.
  void allocate_and_free_most() {
    all_.resize((size_t(4) << 20) / size());
    for (size_t i = 0; i < all_.size(); ++i) {
      all_[i] = static_cast<unsigned char*>(lm_malloc(size()));
      ASSERT_NE(all_[i], nullptr);
      memset(all_[i], fill(i), size());
    }
    std::set<size_t> live_pages, freed_pages, touched;
    live_.clear();
    freed_.clear();
    for (size_t i = 0; i < all_.size(); ++i) {
      // The last one too: its span, the class's current one, may hold
      // nothing else, and an empty span goes back whole.
      bool keep = i + 1 == all_.size();
      for (size_t pg = page(all_[i]); pg <= page(all_[i] + size() - 1); ++pg) keep |= pg % 10 == 0;
      (keep ? live_ : freed_).push_back(i);
    }
    // Pages covered only by freed objects, all of which are this test's.
    std::set<uintptr_t> freed_set;
    for (size_t i : freed_) freed_set.insert(reinterpret_cast<uintptr_t>(all_[i]));
    std::vector<uintptr_t> sorted(freed_set.begin(), freed_set.end());
    const size_t stride = lm_usable_size(all_[0]);  // the class's size
    for (size_t k = 0; k < sorted.size(); ++k) {
      // Objects k..j are consecutive in memory: whole pages strictly inside
      // the run (and not overlapping anything else) are free.
      size_t j = k;
      while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + stride) ++j;
      uintptr_t lo = (sorted[k] + kOsPageSize - 1) / kOsPageSize, hi = (sorted[j] + stride) / kOsPageSize;
      for (uintptr_t pg = lo; pg < hi; ++pg) free_pages_.insert(pg);
      k = j;
    }
    for (size_t i : freed_) {
      if (free_pages_.count(page(all_[i]))) dormant_.push_back(i);
      lm_free(all_[i]);
    }
    // The thread's cache goes back to the spans; the heap is quiet from now.
    lm_thread_collect();
  }
  // Runs the collector until the heap's span pages are purged: it sees the
  // heap at `t`, and purges them span_idle later.
  void collect_and_purge(uint64_t t, bool hysteresis) {
    collect(t, kSecond, kSpanIdle, hysteresis);
    collect(t + kSpanIdle, kSecond, kSpanIdle, hysteresis);
  }
  static unsigned char fill(size_t i) { return static_cast<unsigned char>(0x11 + i * 13); }
  void expect_live_intact() {
    for (size_t i : live_) {
      for (size_t k = 0; k < size(); k += 8) {
        ASSERT_EQ(all_[i][k], fill(i)) << "live object " << i << " byte " << k;
      }
      ASSERT_EQ(all_[i][size() - 1], fill(i));
    }
  }
  void free_live() {
    for (size_t i : live_) lm_free(all_[i]);
    live_.clear();
    lm_thread_collect();
  }
  // The freed objects come back, each once, zeroed by calloc; none is a
  // live one.  Then they are freed again.
  void expect_freed_come_back_once() {
    std::set<unsigned char*> live_set;
    for (size_t i : live_) live_set.insert(all_[i]);
    std::set<unsigned char*> got;
    std::vector<unsigned char*> again;
    for (size_t n = 0; n < freed_.size(); ++n) {
      auto* p = static_cast<unsigned char*>(lm_calloc(1, size()));
      ASSERT_NE(p, nullptr);
      for (size_t k = 0; k < size(); ++k) ASSERT_EQ(p[k], 0) << "calloc byte " << k;
      ASSERT_TRUE(got.insert(p).second) << "handed out twice: " << static_cast<void*>(p);
      ASSERT_EQ(live_set.count(p), 0u) << "a live object handed out";
      memset(p, 0xee, size());
      again.push_back(p);
    }
    for (unsigned char* p : again) lm_free(p);
  }
  // How many of the pages of the dormant objects' first bytes (purged by
  // the first stage) are resident (mincore).
  size_t dormant_pages_resident() const {
    std::set<size_t> pages;
    for (size_t i : dormant_) pages.insert(page(all_[i]));
    size_t n = 0;
    for (size_t pg : pages) {
      unsigned char in = 0;
      EXPECT_EQ(mincore(reinterpret_cast<void*>(pg * kOsPageSize), kOsPageSize, &in), 0);
      n += in & 1;
    }
    return n;
  }

  static constexpr uint64_t kSpanIdle = 4 * kSecond;
  const Platform platform_ = manual_clock_platform();
  int64_t advice_ = 0;
  std::vector<unsigned char*> all_;
  std::vector<size_t> live_, freed_, dormant_;
  std::set<size_t> free_pages_;
};

INSTANTIATE_TEST_SUITE_P(SizesAndAdvice, SpanPurge,
                         ::testing::Combine(::testing::Values(64, 1000, 4000, 30000), ::testing::Bool()));

// Whole free pages go back; live neighbours keep their bytes; every object
// freed is handed out again exactly once (dormant ones after their page is
// revived), calloc zeroes them; then everything goes back.
TEST_P(SpanPurge, FreePagesGoBackAndTheirObjectsComeBackOnce) {
  allocate_and_free_most();
  ASSERT_FALSE(free_pages_.empty());
  const uint64_t purges0 = stat("span_page_purges"), revivals0 = stat("span_page_revivals");
  const uint64_t advised0 = stat(dontneed() ? "purge_dontneed_bytes" : "purge_lazy_bytes");
  // Not before the heap has been quiet for span_idle.
  collect(2000 * kSecond, kSecond, kSpanIdle, false);
  collect(2000 * kSecond + kSpanIdle - 1, kSecond, kSpanIdle, false);
  EXPECT_EQ(stat("span_page_purges"), purges0);
  collect(2000 * kSecond + kSpanIdle, kSecond, kSpanIdle, false);
  const uint64_t purged = stat("span_page_purges") - purges0;
  EXPECT_GE(purged, free_pages_.size()) << "of " << all_.size() << " objects, " << freed_.size() << " freed";
  EXPECT_GE(stat("span_purged_bytes"), free_pages_.size() * kOsPageSize);
  EXPECT_GE(stat(dontneed() ? "purge_dontneed_bytes" : "purge_lazy_bytes") - advised0, purged * kOsPageSize);
  for (size_t i : live_) ASSERT_EQ(lm_usable_size(all_[i]), lm_usable_size(all_[live_[0]])) << "the spans stay";
  expect_live_intact();

  expect_freed_come_back_once();
  EXPECT_GE(stat("span_page_revivals") - revivals0, 1u);
  expect_live_intact();
  free_live();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The collector's deadline (what the background thread sleeps to): a heap
// collected is due for its pass span_idle after it went quiet; once the pass
// found nothing more to do, nothing is due.
TEST_P(SpanPurge, TheCollectorAsksToRunWhenThePassIsDue) {
  allocate_and_free_most();
  const uint64_t t = 6000 * kSecond;
  uint64_t due = 0;
  g_clock.store(t);
  lm_collect_idle_heaps(t, kSecond, &due, kSpanIdle, 0);  // every heap seen
  EXPECT_EQ(due, t + kSecond);
  const uint64_t purges0 = stat("span_page_purges");
  g_clock.store(t + kSecond);
  lm_collect_idle_heaps(t + kSecond, kSecond, &due, kSpanIdle, 0);  // collected
  EXPECT_EQ(due, t + kSpanIdle);
  EXPECT_EQ(stat("span_page_purges"), purges0);
  g_clock.store(t + kSpanIdle);
  lm_collect_idle_heaps(t + kSpanIdle, kSecond, &due, kSpanIdle, 0);  // the pass
  EXPECT_GE(stat("span_page_purges") - purges0, free_pages_.size());
  EXPECT_EQ(due, kNoDeadline);
  expect_live_intact();
  free_live();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The second stage inside spans: pages given MADV_FREE stay resident (Rss
// counts them) until they have been LAZY for span_lazy; then they get
// MADV_DONTNEED and leave Rss, and the collector asks for nothing more.
// Pages purged with MADV_DONTNEED in the first place have no second stage.
// Their objects still come back once, zeroed by calloc.
TEST_P(SpanPurge, LazyPagesInsideSpansTurnCleanAfterTheLazyDecay) {
  allocate_and_free_most();
  ASSERT_FALSE(dormant_.empty());
  constexpr uint64_t kSpanLazy = 10 * kSecond;
  const uint64_t t = 8000 * kSecond, purged_at = t + kSpanIdle;
  uint64_t due = 0;
  collect(t, kSecond, kSpanIdle, false, kSpanLazy, &due);               // every heap seen
  collect(t + kSecond, kSecond, kSpanIdle, false, kSpanLazy, &due);     // collected
  const uint64_t purge_bytes0 = stat("span_page_purge_bytes"), clean0 = stat("span_lazy_decay_bytes");
  const uint64_t dontneed0 = stat("purge_dontneed_bytes");
  collect(purged_at, kSecond, kSpanIdle, false, kSpanLazy, &due);       // the first stage
  const uint64_t purged = stat("span_page_purge_bytes") - purge_bytes0;
  ASSERT_GE(purged, free_pages_.size() * kOsPageSize);
  if (dontneed()) {
    EXPECT_EQ(due, kNoDeadline);
    EXPECT_EQ(dormant_pages_resident(), 0u);
  } else {
    EXPECT_EQ(due, purged_at + kSpanLazy);
    // Not before the pages have been LAZY for span_lazy.
    collect(purged_at + kSpanLazy - 1, kSecond, kSpanIdle, false, kSpanLazy, &due);
    EXPECT_EQ(stat("span_lazy_decay_bytes"), clean0);
    EXPECT_EQ(due, purged_at + kSpanLazy);
    collect(purged_at + kSpanLazy, kSecond, kSpanIdle, false, kSpanLazy, &due);
    EXPECT_GE(stat("span_lazy_decay_bytes") - clean0, purged);
    EXPECT_GE(stat("purge_dontneed_bytes") - dontneed0, purged);
    EXPECT_EQ(dormant_pages_resident(), 0u) << "of " << dormant_.size() << " dormant objects' pages";
    EXPECT_EQ(due, kNoDeadline);
  }
  // Nothing more to do for either stage.
  const uint64_t clean1 = stat("span_lazy_decay_bytes");
  collect(purged_at + 3 * kSpanLazy, kSecond, kSpanIdle, false, kSpanLazy, &due);
  EXPECT_EQ(stat("span_lazy_decay_bytes"), clean1);
  EXPECT_EQ(due, kNoDeadline);
  EXPECT_GE(stat("span_purged_bytes"), free_pages_.size() * kOsPageSize) << "the pages stay purged";
  expect_live_intact();
  expect_freed_come_back_once();
  expect_live_intact();
  free_live();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

#if LAZYMALLOC_CHECKS
// A dormant object's tag may be gone with its page: freeing it again is
// still a double free, for free and realloc.  A live object past the
// span's check limit is freed as usual.
TEST_P(SpanPurge, ADoubleFreeOfADormantObjectAborts) {
  allocate_and_free_most();
  ASSERT_FALSE(dormant_.empty());
  collect_and_purge(3000 * kSecond, false);
  unsigned char* d = all_[dormant_[dormant_.size() / 2]];
  if (dontneed()) EXPECT_EQ(reinterpret_cast<uintptr_t*>(d)[1], 0u) << "the tag went with its page";
  EXPECT_DEATH(lm_free(d), "lazymalloc: free\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  EXPECT_DEATH(lm_realloc(d, size() + 1), "lazymalloc: realloc\\(\\): invalid pointer 0x[0-9a-f]+: double free");
  // A live object past a dormant one of its span (the same 64 KiB unit):
  // its free takes the failure path, which completes it (the cache hands
  // it out next).
  size_t pick = live_.size();
  for (size_t k = 0; k < live_.size() && pick == live_.size(); ++k) {
    uintptr_t a = reinterpret_cast<uintptr_t>(all_[live_[k]]);
    for (size_t i : dormant_) {
      uintptr_t b = reinterpret_cast<uintptr_t>(all_[i]);
      if (b < a && b >> 16 == a >> 16) pick = k;
    }
  }
  ASSERT_LT(pick, live_.size());
  unsigned char* last = all_[live_[pick]];
  live_.erase(live_.begin() + long(pick));
  lm_free(last);
  void* q = lm_malloc(size());
  EXPECT_EQ(q, last);
  lm_free(q);
  free_live();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}
#endif

// A span revived at once after its purge is not purged again after the
// same delay (its delay doubled), but after twice that.
TEST_P(SpanPurge, ASpanThatRefillsAtOnceWaitsLongerForItsNextPurge) {
  allocate_and_free_most();
  const uint64_t t0 = 4000 * kSecond;
  collect_and_purge(t0, true);
  const uint64_t refaults0 = stat("span_refaults");
  // Everything freed comes back at once: the spans revive their pages.
  std::vector<void*> again;
  for (size_t n = 0; n < freed_.size(); ++n) again.push_back(lm_malloc(size()));
  EXPECT_GE(stat("span_refaults") - refaults0, 1u);
  for (void* p : again) lm_free(p);
  lm_thread_collect();
  const uint64_t suppressed0 = stat("span_purges_suppressed");
  const uint64_t purges0 = stat("span_page_purges");
  const uint64_t t1 = t0 + 100 * kSecond;
  collect_and_purge(t1, true);
  EXPECT_GE(stat("span_purges_suppressed") - suppressed0, 1u);
  const uint64_t purged_early = stat("span_page_purges") - purges0;
  EXPECT_LT(purged_early, free_pages_.size());
  collect(t1 + 2 * kSpanIdle, kSecond, kSpanIdle, true);
  EXPECT_GT(stat("span_page_purges") - purges0, purged_early);
  // Every free page is purged again now (or was never revived).
  EXPECT_GE(stat("span_purged_bytes"), free_pages_.size() * kOsPageSize);
  expect_live_intact();
  free_live();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}


// ---- statistics: thread caches and where the held bytes are

// The "held" rows of the JSON statistics, with the gauges they come from.
nlohmann::json held_now() {
  std::vector<char> buf(1 << 16);
  size_t n = lm_stats_write(buf.data(), buf.size(), true);
  EXPECT_LT(n, buf.size());
  lmt::ParsedJson j = lmt::ParseJson(std::string_view(buf.data(), n));
  EXPECT_TRUE(j.ok()) << j.error;
  return j.value;
}

// A thread's cache is counted at its refill (what the refill took from the
// span less the object handed out) and at its flush (nothing left), per heap
// and in the sum; the held rows place every byte of the small spans and of
// active_bytes, with the cache where it is.
TEST(CacheStats, ThreadCachesAreCountedAtSlowPathsAndEveryHeldByteIsPlaced) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  lm_thread_collect();
  lmt::Phases phases;  // 1: allocated; 2: collect; 3: collected; 4: exit
  void* p = nullptr;
  const uint64_t cache0 = stat("cache_bytes"), taken0 = stat("span_taken_bytes");
  const uint64_t returned0 = stat("span_returned_bytes");
  std::thread worker([&] {
    p = lm_malloc(64);
    phases.set(1);
    phases.wait(2);
    lm_free(p);  // onto the cache, by the fast path: not counted yet
    lm_thread_collect();
    phases.set(3);
    phases.wait(4);
  });
  phases.wait(1);
  const uint64_t taken = stat("span_taken_bytes") - taken0;
  EXPECT_GE(taken, 2u * 64) << "a refill fills the cache";
  EXPECT_EQ(stat("cache_bytes") - cache0, taken - 64);
  nlohmann::json j = held_now();
  const auto& st = j["stats"];
  const auto& held = j["held"];
  EXPECT_GE(held["thread_caches"].get<uint64_t>(), taken - 64);
  EXPECT_GE(held["small_in_use"].get<uint64_t>(), 64u);
  EXPECT_EQ(held["small_in_use"].get<uint64_t>() + held["thread_caches"].get<uint64_t>() +
                held["small_span_free"].get<uint64_t>(),
            st["small_span_bytes"].get<uint64_t>());
  EXPECT_EQ(st["small_span_bytes"].get<uint64_t>() + held["large_blocks"].get<uint64_t>(),
            st["active_bytes"].get<uint64_t>());
  EXPECT_EQ(held["small_span_purged"].get<uint64_t>(), st["span_purged_bytes"].get<uint64_t>());
  EXPECT_EQ(held["lazy"].get<uint64_t>(), st["lazy_bytes"].get<uint64_t>());
  ASSERT_TRUE(j["heap_cache_bytes"].is_array());
  const uint64_t heaps = st["heaps"].get<uint64_t>();
  EXPECT_EQ(j["heap_cache_bytes"].size(), heaps < 64 ? heaps : 64u);
  uint64_t per_heap = 0, largest = 0;
  for (const auto& v : j["heap_cache_bytes"]) {
    per_heap += v.get<uint64_t>();
    largest = std::max<uint64_t>(largest, v.get<uint64_t>());
  }
  EXPECT_LE(per_heap, st["cache_bytes"].get<uint64_t>());
  EXPECT_GE(largest, taken - 64) << "the worker's heap";
  phases.set(2);
  phases.wait(3);
  // Everything the worker took is back, and its cache is empty.
  EXPECT_EQ(stat("cache_bytes"), cache0);
  EXPECT_EQ(stat("span_returned_bytes") - returned0, taken);
  phases.set(4);
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

// The per-class statistics (docs/stats.md, "Size classes"): a thread's
// objects of one class show in that class's row as spans, carved and
// outstanding bytes, and leave it as they are freed and collected; the rows
// summed give the global statistics they break down.
nlohmann::json class_row(const nlohmann::json& report, uint64_t size) {
  for (const auto& r : report["classes"]) {
    if (r["size"].get<uint64_t>() == size) return r;
  }
  nlohmann::json none = nlohmann::json::object();
  for (unsigned k = 0; k < kClassStatCount; ++k) none[kClassStatInfo[k].name] = 0;
  none["outstanding_bytes"] = 0;
  return none;
}

void expect_rows_sum_to_totals(const nlohmann::json& report) {
  const auto& st = report["stats"];
  uint64_t sum[kClassStatCount] = {};
  for (const auto& r : report["classes"]) {
    for (unsigned k = 0; k < kClassStatCount; ++k) sum[k] += r[kClassStatInfo[k].name].get<uint64_t>();
    EXPECT_LE(r["carved_bytes"].get<uint64_t>(), r["span_bytes"].get<uint64_t>()) << r.dump();
    EXPECT_EQ(r["outstanding_bytes"].get<uint64_t>(),
              r["taken_bytes"].get<uint64_t>() - r["returned_bytes"].get<uint64_t>());
  }
  EXPECT_EQ(sum[unsigned(ClassStat::spans)], st["small_spans"].get<uint64_t>());
  EXPECT_EQ(sum[unsigned(ClassStat::span_bytes)], st["small_span_bytes"].get<uint64_t>());
  EXPECT_EQ(sum[unsigned(ClassStat::taken_bytes)], st["span_taken_bytes"].get<uint64_t>());
  EXPECT_EQ(sum[unsigned(ClassStat::returned_bytes)],
            st["span_returned_bytes"].get<uint64_t>() + st["orphan_return_bytes"].get<uint64_t>());
  EXPECT_EQ(sum[unsigned(ClassStat::refills)], st["span_refills"].get<uint64_t>());
  EXPECT_EQ(sum[unsigned(ClassStat::flushes)], st["cache_flushes"].get<uint64_t>());
}

TEST(ClassStats, AClassRowFollowsItsObjectsAndTheRowsSumToTheTotals) {
  option_set(unsigned(Opt::background), 0);
  lm_init();
  lm_thread_collect();
  constexpr unsigned kObjects = 300;
  const size_t size = lm_usable_size(lm_malloc(1000));  // (kept by this thread's cache)
  ASSERT_EQ(size, 1024u);
  lmt::Phases phases;  // 1: allocated; 2: free; 3: freed and collected; 4: exit
  const nlohmann::json before = held_now();
  expect_rows_sum_to_totals(before);
  const nlohmann::json row0 = class_row(before, size);
  auto delta = [&](const nlohmann::json& row, const char* name) {
    return row[name].get<uint64_t>() - row0[name].get<uint64_t>();
  };
  std::thread worker([&] {
    std::vector<void*> v;
    for (unsigned i = 0; i < kObjects; ++i) v.push_back(lm_malloc(1000));
    phases.set(1);
    phases.wait(2);
    for (void* p : v) lm_free(p);
    lm_thread_collect();
    phases.set(3);
    phases.wait(4);
  });
  phases.wait(1);
  const nlohmann::json held = held_now();
  expect_rows_sum_to_totals(held);
  const nlohmann::json row = class_row(held, size);
  // 300 objects of 1 KiB take five spans of 64 units' worth at least.
  EXPECT_GE(delta(row, "spans"), 5u) << row.dump();
  EXPECT_EQ(delta(row, "span_bytes") % 65536, 0u) << row.dump();
  EXPECT_GE(delta(row, "outstanding_bytes"), kObjects * size) << row.dump();
  EXPECT_LE(delta(row, "outstanding_bytes"), (kObjects + 128) * size) << "at most a cache more";
  EXPECT_GE(delta(row, "carved_bytes"), delta(row, "outstanding_bytes"));
  EXPECT_GE(delta(row, "refills"), 1u);
  // One value by name, as lazymalloc_stat_get reads it (the worker waits).
  uint64_t v = 0;
  const std::string name = "classes." + std::to_string(size) + ".";
  ASSERT_EQ(lm_stat_get((name + "span_bytes").c_str(), &v), 0);
  EXPECT_EQ(v, row["span_bytes"].get<uint64_t>());
  ASSERT_EQ(lm_stat_get((name + "outstanding_bytes").c_str(), &v), 0);
  EXPECT_EQ(v, row["outstanding_bytes"].get<uint64_t>());
  for (const char* bad : {"classes.1000.spans", "classes.1024.nope", "classes.1024", "classes..spans",
                          "classes.99999999999999999999999.spans"}) {
    errno = 0;
    EXPECT_EQ(lm_stat_get(bad, &v), -1) << bad;
    EXPECT_EQ(errno, ENOENT) << bad;
  }
  phases.set(2);
  phases.wait(3);
  const nlohmann::json after = held_now();
  expect_rows_sum_to_totals(after);
  const nlohmann::json back = class_row(after, size);
  // Every object back in its span, and the emptied spans (the worker's
  // current one too, collected) back to the backend.
  EXPECT_EQ(delta(back, "outstanding_bytes"), 0u) << back.dump();
  EXPECT_EQ(delta(back, "spans"), 0u) << back.dump();
  EXPECT_EQ(delta(back, "span_bytes"), 0u);
  EXPECT_EQ(delta(back, "carved_bytes"), 0u);
  EXPECT_GE(delta(back, "flushes"), 1u);
  phases.set(4);
  worker.join();
  EXPECT_EQ(lm_check_invariants(), nullptr);
}

}  // namespace
}  // namespace lazymalloc
