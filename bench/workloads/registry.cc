// The list of workloads, their variants, and how `compare` sizes them.
//
// compare_args are chosen so that the headline set (ebizzy-1t, ebizzy-2t,
// phases, malloc-large; 6 allocators x 3 repetitions) fits in tools/bench.sh's
// 10-minute budget on a 2-core machine: see docs/benchmarks.md for the
// arithmetic.  quick_args keep every run well under 2 s (tests, --quick).
#include "workload.h"

namespace lazybench {

namespace {

// kOnRequest: run only when named (idle-release's variants sleep 8 s each,
// too long for `compare all`).
enum class Set { kHeadline, kAll, kVariantBase, kOnRequest };

WorkloadInfo entry(std::string name, std::string description, std::unique_ptr<Workload> (*make)(),
                   std::vector<std::string> fixed, std::vector<std::string> compare,
                   std::vector<std::string> quick, Set set) {
  WorkloadInfo w;
  w.name = std::move(name);
  w.description = std::move(description);
  w.make = make;
  w.fixed_args = std::move(fixed);
  w.compare_args = std::move(compare);
  w.quick_args = std::move(quick);
  w.headline = set == Set::kHeadline;
  // A base whose variants are listed (ebizzy -> ebizzy-1t, ebizzy-2t) is
  // runnable but not repeated in `compare all`.
  w.in_all = set == Set::kHeadline || set == Set::kAll;
  return w;
}

}  // namespace

const std::vector<WorkloadInfo>& workload_registry() {
  static const std::vector<WorkloadInfo> registry = [] {
    std::vector<WorkloadInfo> list = {
      entry("ebizzy", "threads copy a random 512 KiB chunk into a malloc'ed buffer, search it, free it (records/s)",
            make_ebizzy, {}, {"-S", "3"}, {"-S", "0.3"}, Set::kVariantBase),
      entry("ebizzy-1t", "ebizzy with 1 thread (records/s)", make_ebizzy, {"-t", "1"}, {"-S", "3"},
            {"-S", "0.3"}, Set::kHeadline),
      entry("ebizzy-2t", "ebizzy with 2 threads (records/s)", make_ebizzy, {"-t", "2"}, {"-S", "3"},
            {"-S", "0.3"}, Set::kHeadline),
      entry("phases", "bursts of 16 KiB-2 MiB blocks, touched and freed, then idle (phase ms; held MiB)",
            make_phases, {}, {"--phases", "6", "--total", "256M", "--gap", "200ms", "--idle", "4"},
            {"--phases", "2", "--total", "24M", "--gap", "20ms", "--idle", "0.3", "--sample", "20ms"},
            Set::kHeadline),
      entry("malloc-large", "replace random live blocks of 1-32 MiB, touching a quarter of each (ops/s)",
            make_malloc_large, {}, {"-S", "3"}, {"-S", "0.3"}, Set::kHeadline),
      entry("malloc-huge", "malloc-large with 64-512 MiB blocks, 2 live per thread (ops/s)", make_malloc_large,
            {"--min", "64M", "--max", "512M", "--slots", "2"}, {"-S", "3"}, {"-S", "0.3", "--max", "128M"},
            Set::kAll),
      entry("large-churn-1t", "malloc-large with 256 KiB-1 MiB blocks, every page written, 1 thread (ops/s)",
            make_malloc_large, {"--min", "256K", "--max", "1M", "--touch", "1", "-t", "1"}, {"-S", "2"},
            {"-S", "0.3"}, Set::kAll),
      entry("large-churn-2t", "malloc-large with 256 KiB-1 MiB blocks, every page written, 2 threads (ops/s)",
            make_malloc_large, {"--min", "256K", "--max", "1M", "--touch", "1", "-t", "2"}, {"-S", "2"},
            {"-S", "0.3"}, Set::kAll),
      entry("larson", "server churn: free+malloc random 8-1024 B slots, arrays passed between threads (ops/s)",
            make_larson, {}, {"-S", "3"}, {"-S", "0.3", "--round-ops", "2000"}, Set::kAll),
      entry("xmalloc", "producer threads malloc 8-512 B blocks, consumer threads free them (blocks/s)",
            make_xmalloc, {}, {"-S", "3"}, {"-S", "0.3"}, Set::kAll),
      entry("rptest", "2 threads replace random slots: log-uniform 16 B-4 KiB, mixed lifetimes, 1/4 freed by the other thread (ops/s)",
            make_rptest, {}, {"-S", "3"}, {"-S", "0.3"}, Set::kAll),
      entry("cache-scratch", "main hands 8 B objects to 2 workers, which free them, then malloc, write 10k times, free (objects/s)",
            make_cache_scratch, {}, {"-S", "3"}, {"-S", "0.3"}, Set::kAll),
      entry("huge-free", "free() of a touched 2 GiB block: free latency (ms), time until the memory left",
            make_huge_free, {}, {"--size", "2G", "--timeout", "5"}, {"--size", "64M", "--timeout", "0.5"},
            Set::kAll),
      entry("alloc-pair", "small-object malloc/free pairs, 16-512 B (pairs/s)", make_alloc_pair, {},
            {"-S", "2"}, {"-S", "0.3"}, Set::kVariantBase),
      entry("alloc-pair-1t", "alloc-pair with 1 thread (pairs/s)", make_alloc_pair, {"-t", "1"}, {"-S", "2"},
            {"-S", "0.3"}, Set::kAll),
      entry("alloc-pair-2t", "alloc-pair with 2 threads (pairs/s)", make_alloc_pair, {"-t", "2"}, {"-S", "2"},
            {"-S", "0.3"}, Set::kAll),
      entry("realloc-grow", "grow buffers by realloc from 16 B to 4 MiB, writing the new bytes (reallocs/s)",
            make_realloc_grow, {}, {"-S", "2"}, {"-S", "0.3"}, Set::kAll),
      entry("mixed", "espresso/cfrac-like mixed sizes, live set with random lifetimes (allocs/s)", make_mixed,
            {}, {"-S", "2"}, {"-S", "0.3"}, Set::kAll),
      entry("mleak", "rounds of 10 short-lived threads, each callocs 128 B, leaves it in a shared table, frees another's (threads/s)",
            make_mleak, {}, {"-S", "2"}, {"-S", "0.3"}, Set::kAll),
      entry("random-size", "one thread replaces random slots of 4096 with objects of 16 B-4 KiB, log-uniform (ops/s)",
            make_random_size, {}, {"-S", "2"}, {"-S", "0.3"}, Set::kAll),
      entry("batch", "one thread mallocs batches of 25-1600 objects of one size, 16-512 B, then frees them in order (pairs/s)",
            make_batch, {}, {"-S", "2"}, {"-S", "0.3"}, Set::kAll),
    };
    // idle-release and its 16 variants idle-release-{a,b,c,d}-{64,1000,4000,30000}
    // (issue #13's cases and sizes): `lazybench compare 'idle-release-*'` runs them all.
    const std::vector<std::string> idle_compare = {}, idle_quick = {"--total", "8M", "--idle", "0.2"};
    list.push_back(entry("idle-release",
                         "small objects allocated, freed (case a-d), then idle: held MiB above the start (see --case)",
                         make_idle_release, {}, idle_compare, idle_quick, Set::kOnRequest));
    for (const char* c : {"a", "b", "c", "d"}) {
      for (const char* size : {"64", "1000", "4000", "30000"}) {
        static const char* const kCase[] = {"one thread frees all", "a worker frees all, blocks",
                                            "main frees a worker's objects", "one thread frees a random 90%"};
        list.push_back(entry(std::string("idle-release-") + c + "-" + size,
                             std::string("idle-release ") + c + " (" + kCase[c[0] - 'a'] + "), " + size +
                                 " B objects (held MiB above the start)",
                             make_idle_release, {"--case", c, "--size", size}, idle_compare, idle_quick,
                             Set::kOnRequest));
      }
    }
    for (auto& w : list)
      if (w.name == "phases") w.series_option = "--series";
    return list;
  }();
  return registry;
}

const WorkloadInfo* find_workload(std::string_view name) {
  for (const auto& w : workload_registry())
    if (w.name == name) return &w;
  return nullptr;
}

}  // namespace lazybench
