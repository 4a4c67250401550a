// ns per lock/unlock pair of a discardable block (docs/discardable.md):
//   build/discard_bench --benchmark_repetitions=9 --benchmark_report_aggregates_only=true
// Own: each thread its own block (the common case: no syscall, one CAS each).
// Shared: every thread the same block (nested locks, the state word's cache
// line bounces).  Discarded: the miss path, lock after a discard.
#include <benchmark/benchmark.h>

#include "lazymalloc/lazymalloc.h"

namespace {

void BM_LockUnlockOwn(benchmark::State& state) {
  void* p = lazymalloc_discardable_alloc(4096);
  lazymalloc_discardable_unlock(p);
  for (auto _ : state) {
    benchmark::DoNotOptimize(lazymalloc_discardable_lock(p));
    benchmark::DoNotOptimize(lazymalloc_discardable_unlock(p));
  }
  lazymalloc_discardable_free(p);
}
BENCHMARK(BM_LockUnlockOwn)->Threads(1)->Threads(2)->UseRealTime();

void* g_shared;
void BM_LockUnlockShared(benchmark::State& state) {
  if (state.thread_index() == 0) {
    g_shared = lazymalloc_discardable_alloc(4096);
    lazymalloc_discardable_lock(g_shared);  // stays locked: unlocks only nest
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(lazymalloc_discardable_lock(g_shared));
    benchmark::DoNotOptimize(lazymalloc_discardable_unlock(g_shared));
  }
  if (state.thread_index() == 0) {
    lazymalloc_discardable_unlock(g_shared);
    lazymalloc_discardable_unlock(g_shared);
    lazymalloc_discardable_free(g_shared);
  }
}
BENCHMARK(BM_LockUnlockShared)->Threads(2)->UseRealTime();

void BM_LockAfterDiscard(benchmark::State& state) {
  void* p = lazymalloc_discardable_alloc(4096);
  for (auto _ : state) {
    lazymalloc_discardable_unlock(p);
    state.PauseTiming();
    lazymalloc_discardable_purge();
    state.ResumeTiming();
    benchmark::DoNotOptimize(lazymalloc_discardable_lock(p));
  }
  lazymalloc_discardable_free(p);
}
BENCHMARK(BM_LockAfterDiscard);

}  // namespace
