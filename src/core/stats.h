// The statistics table: every counter lazymalloc keeps, declared once.
//
// Two families, printed together (text and JSON, see docs/stats.md):
//  - global statistics, kept by the backend and the purge engine under their
//    own locks or with relaxed atomics (LAZYMALLOC_GLOBAL_STATS);
//  - per-heap statistics, kept by each thread heap without atomics on the
//    owning thread and summed over all heaps when printed
//    (LAZYMALLOC_HEAP_STATS).
// A "gauge" goes up and down (bytes in a state now); a "counter" only grows.
// Statistics are for reporting: no decision reads them.  The few quantities
// decisions need are kept apart, by the component that decides, in the
// accounting (core/accounting.h), next to the statistic reporting them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lazymalloc {

class Writer;

// X(name, kind, description)
#define LAZYMALLOC_GLOBAL_STATS(X)                                                                \
  X(reserved_bytes, gauge, "address space reserved from the kernel (arenas); costs no memory")   \
  X(arenas, gauge, "arenas (contiguous reservations) registered in the page map")                \
  X(active_bytes, gauge, "bytes in spans that hold live data: small-object spans, large and "    \
                         "huge blocks")                                                          \
  X(retained_bytes, gauge, "free bytes still resident: nothing told to the kernel, reuse is free") \
  X(lazy_bytes, gauge, "free bytes given to the kernel with MADV_FREE: resident until the kernel " \
                       "needs memory (shown as LazyFree in smaps), reuse costs no fault")        \
  X(clean_bytes, gauge, "free bytes that read as zero: never touched, or MADV_DONTNEED")         \
  X(metadata_mapped_bytes, gauge, "address space mapped for allocator metadata (page-map "        \
    "leaves, slot records, chunks of span and heap records): costs no memory until written")     \
  X(metadata_bytes, gauge, "bytes of allocator metadata written: the pages of the mapped "      \
    "metadata that hold records carved or page-map entries in use (resident unless purged)")     \
  X(metadata_purged_bytes, gauge, "of metadata_bytes, pages of free span records given back "   \
    "(MADV_DONTNEED by the decay passes, above a reserve of free records) and not reused since") \
  X(metadata_page_purges, counter, "pages of free span records given back (each reuse and "     \
    "purge again counts anew)")                                                                  \
  X(small_spans, gauge, "live small-object spans")                                               \
  X(small_span_bytes, gauge, "bytes of live small-object spans (part of active_bytes): objects in " \
    "use, objects in thread caches, and free objects (listed, dormant or never carved)")            \
  X(orphan_return_bytes, counter, "bytes of small objects returned to their spans by threads "     \
    "without a heap (exiting or exited threads; a heap counts its own in span_returned_bytes)")   \
  X(large_blocks, gauge, "live large blocks (unit runs)")                                        \
  X(huge_blocks, gauge, "live huge blocks (slot runs)")                                          \
  X(huge_bytes, gauge, "bytes in live huge blocks")                                              \
  X(large_allocs, counter, "large blocks allocated")                                             \
  X(large_cache_hits, counter, "large mallocs served from the thread's cache of freed large blocks " \
    "(no backend lock)")                                                                          \
  X(large_cache_splits, counter, "of large_cache_hits, those served by cutting a cached block more " \
    "than twice the request: the request's units go, the rest stays cached (no backend lock)")   \
  X(large_cache_joins, counter, "freed large blocks joined in the thread's cache with a cached "   \
    "block they adjoin in the same slot, so that a larger request can be served (no backend lock)") \
  X(large_cache_bytes, gauge, "bytes of freed large blocks in threads' caches (in use to the "      \
    "backend; back after decay_ms of quiet, or when the thread exits)")                             \
  X(large_cold_dontneed_bytes, counter, "bytes of large blocks freed by the thread that allocated " \
    "them while its large cache was cold (no large malloc since its first large free) and its "  \
    "heap the only one owned, given MADV_DONTNEED at the free as glibc unmaps them: their units " \
    "go back CLEAN")                                                                              \
  X(huge_allocs, counter, "huge blocks allocated")                                               \
  X(inplace_resizes, counter, "realloc of large and huge blocks done in place")                   \
  X(promotions, counter, "large blocks grown by realloc into huge blocks in place")              \
  X(foreign_slot_runs, counter, "large blocks and small spans placed in the slots of another "    \
    "owner (heap shard) because their own, the shared ones and the free slots had no room: the "   \
    "last resort before a new arena")                                                             \
  X(reuse_retained_bytes, counter, "bytes handed out from RETAINED free memory (no kernel work)") \
  X(reuse_lazy_bytes, counter, "bytes handed out from LAZY memory (no fault unless the kernel "  \
                               "took the page)")                                                 \
  X(reuse_clean_bytes, counter, "bytes handed out from CLEAN memory (each touched page faults)") \
  X(mmap_calls, counter, "mmap calls (arena and metadata reservations)")                         \
  X(mmap_failures, counter, "mmap calls that failed (the allocator then reports ENOMEM)")        \
  X(purge_lazy_calls, counter, "madvise(MADV_FREE) calls")                                       \
  X(purge_lazy_bytes, counter, "bytes given back with MADV_FREE")                                \
  X(purge_dontneed_calls, counter, "madvise(MADV_DONTNEED) calls")                               \
  X(purge_dontneed_bytes, counter, "bytes given back with MADV_DONTNEED")                        \
  X(purge_failures, counter, "madvise calls the kernel refused")                                 \
  X(purge_free_unsupported, counter, "1 once the kernel refused MADV_FREE (then MADV_DONTNEED is used)") \
  X(purge_vector_unsupported, counter, "1 once the kernel refused process_madvise (then one madvise per range)") \
  X(purge_ns, counter, "nanoseconds spent inside madvise for purging")                           \
  X(refaults, counter, "reuses of purged memory sooner than its slot's decay time (each doubles "  \
                       "that slot's decay: hysteresis)")                                          \
  X(refault_bytes, counter, "bytes of purged memory reused by those refaults")                    \
  X(purges_suppressed, counter, "idle episodes in which hysteresis kept a slot from being purged") \
  X(limit_failures, counter, "allocations refused by the hard memory limit (ENOMEM)")             \
  X(pressure_psi_active, gauge, "1 if PSI (the cgroup's memory.pressure or "                      \
                                "/proc/pressure/memory) is being watched")                        \
  X(pressure_meminfo_active, gauge, "1 if /proc/meminfo MemAvailable is being watched")            \
  X(cgroup_limit_bytes, gauge, "memory limit of the process's cgroup (0: none found)")             \
  X(pressure_events_psi, counter, "PSI checks that found tasks stalled on memory 7.5% of the time") \
  X(pressure_events_cgroup, counter, "times cgroup usage came within 10% of its limit")            \
  X(pressure_events_meminfo, counter, "times MemAvailable fell below 1/32 of MemTotal")            \
  X(pressure_events_limit, counter, "times the soft limit (LAZYMALLOC_MEMORY_LIMIT) was exceeded")  \
  X(pressure_events_api, counter, "pressure reported through lazymalloc_pressure_notify()")        \
  X(pressure_purged_bytes, counter, "bytes purged (MADV_DONTNEED) to relieve pressure or limits")  \
  X(purge_passes, counter, "purge passes run (background, inline, trim, explicit)")              \
  X(background_wakeups, counter, "times the background thread woke up (deadline, or work created " \
                                 "for it)")                                                      \
  X(background_threads, gauge, "background purge threads running")                               \
  X(background_starts, counter, "background threads started (the thread exits when no free "     \
                                "memory is held and starts again on the next release)")          \
  X(background_cpu_ns, counter, "CPU time used by background threads, nanoseconds "               \
                                "(CLOCK_THREAD_CPUTIME_ID)")                                     \
  X(pressure_checks, counter, "times the pressure sources were read (rate: pressure_interval_ms " \
                              "scaled by held free memory)")                                     \
  X(lazy_decay_bytes, counter, "LAZY bytes moved to CLEAN (MADV_DONTNEED) after lazy_decay_ms: "  \
                               "the second decay stage")                                         \
  X(background_start_failures, counter, "background threads that could not be created (decay then runs inline)") \
  X(inline_purges, counter, "decay purges run inline from free() (no background thread)")        \
  X(hugepage_advice, gauge, "1 while the arenas are advised MADV_HUGEPAGE (the heap reached "      \
    "hugepage_threshold and fills its slots densely enough for hugepages to pay)")                 \
  X(hugepage_reuse_only, gauge, "which fresh slots keep 4 KiB pages until their memory has been given "  \
    "back whole, once hugepage advice is decided: 0 none (`hugepages=on`), 1 those opened for "      \
    "small-object spans (`auto` on a guest that reports its free memory to the host), 2 every one "  \
    "(`reused`)")                                                                                    \
  X(hugepage_own_advice, counter, "MADV_HUGEPAGE calls for slots of their own where fresh slots keep 4 KiB "  \
    "pages (hugepage_reuse_only not 0); each may split an arena's mapping, so they stop at 16384 "    \
    "(slots then keep the advice they have)")                                                        \
  X(hugepage_withdrawals, counter, "times the arenas' hugepage advice was withdrawn because the heap "  \
    "had become sparse after purges (khugepaged would fill the purged holes back in)")             \
  X(hugepage_thin_slots, counter, "slots already touched on 4 KiB pages and too sparse for a "     \
    "collapse into a hugepage to pay, advised MADV_NOHUGEPAGE when the arenas were advised")        \
  X(huge_kept, counter, "huge blocks freed and kept RETAINED for reuse (within huge_retain)")    \
  X(huge_released, counter, "huge blocks freed and handed to the release workers at once")       \
  X(release_inflight_bytes, gauge, "bytes of freed huge blocks queued or being released (their "  \
                                   "address range is reused only once released)")               \
  X(release_chunks, counter, "chunks of huge blocks released (purge_batch bytes each)")          \
  X(release_helped_chunks, counter, "of those, chunks released by an allocating or freeing "     \
                                    "thread (no workers, backlog over release_backlog, or "      \
                                    "address space needed now)")                                 \
  X(release_bytes, counter, "bytes of huge blocks released")                                     \
  X(release_ns, counter, "nanoseconds from free() to the end of the release, summed over huge " \
                         "blocks (latency)")                                                     \
  X(release_busy_ns, counter, "nanoseconds spent advising release chunks, summed over threads "  \
                              "(release_bytes / release_busy_ns is the throughput per thread)")  \
  X(release_threads, gauge, "release worker threads running")                                    \
  X(release_thread_failures, counter, "release workers that could not be started (free() then " \
                                      "releases inline)")                                        \
  X(mremap_moves, counter, "realloc of huge blocks that moved the pages with mremap instead of "  \
                           "copying them")                                                       \
  X(mremap_bytes, counter, "bytes moved by those")                                               \
  X(heaps, gauge, "thread heaps in existence (owned or pooled)")                                 \
  X(heaps_pooled, gauge, "heaps of exited threads waiting to be adopted")                        \
  X(heap_adoptions, counter, "new threads that adopted a pooled heap")                           \
  X(thread_exits, counter, "threads whose heap went back to the pool")                           \
  X(idle_heap_collections, counter, "heaps collected by the background thread after their thread " \
    "made no refill or flush for decay_ms (or exited): remote frees and empty spans returned")    \
  X(idle_spans_released, counter, "empty small spans those collections gave back to the backend") \
  X(idle_cache_bytes, counter, "bytes of cached objects those collections took from the quiet " \
    "threads' caches back to their spans: the free stacks, and all but the top object of each "  \
    "allocation stack (bins_take_idle)")                                                         \
  X(span_page_purges, counter, "4 KiB pages inside small spans purged because they held only free " \
    "objects and their heap's thread had been quiet for partial_decay_ms (the spans stay active)") \
  X(span_page_purge_bytes, counter, "bytes of those pages")                                       \
  X(span_purged_bytes, gauge, "bytes of pages inside live small spans purged and not revived since " \
    "(part of active_bytes; their free objects are dormant)")                                       \
  X(span_page_revivals, counter, "purged pages inside small spans revived: their dormant objects " \
    "listed again (the page's refault)")                                                            \
  X(span_refaults, counter, "spans revived sooner than their delay after their purge (each doubles " \
    "that span's delay: hysteresis)")                                                               \
  X(span_purges_suppressed, counter, "spans a pass over a quiet heap did not purge (or, in the "   \
    "second stage, give MADV_DONTNEED) because hysteresis had lengthened their delay")              \
  X(span_lazy_decay_bytes, counter, "bytes of pages inside small spans purged with MADV_FREE and "  \
    "given MADV_DONTNEED after lazy_decay_ms: the second decay stage inside spans")                 \
  X(sparse_span_dontneed_bytes, counter, "bytes of empty sparse spans (classes above 8 KiB) "     \
    "given MADV_DONTNEED as they went back to the backend, at most half of their pages being "   \
    "resident or their class judged dense since: their units go back CLEAN")                    \
  X(discardable_blocks, gauge, "live discardable blocks (lazymalloc_discardable_alloc)")          \
  X(discardable_bytes, gauge, "bytes of live discardable blocks (page-rounded), in any state")    \
  X(discardable_locked_bytes, gauge, "bytes of locked discardable blocks (computed when the "     \
                                     "statistics are read)")                                      \
  X(discardable_unlocked_bytes, gauge, "bytes of unlocked discardable blocks the engine may "     \
                                       "discard (computed when the statistics are read)")         \
  X(discardable_discarded_bytes, gauge, "bytes of discardable blocks discarded and not locked "   \
                                        "since (not resident)")                                   \
  X(discards, counter, "discardable blocks discarded (MADV_DONTNEED)")                            \
  X(discarded_bytes, counter, "bytes of discardable blocks discarded")

#define LAZYMALLOC_HEAP_STATS(X)                                                                 \
  X(span_refills, counter, "refills of a thread's cache of a size class from its spans (new or reused span)") \
  X(cache_bytes, gauge, "bytes of free objects in the heap's thread's caches (bins), as each class's " \
    "cache stood at its last refill or flush (the fast paths do not update it)")                  \
  X(span_taken_bytes, counter, "bytes of small objects taken from the heap's spans (to a cache or a caller)") \
  X(span_returned_bytes, counter, "bytes of small objects the heap's thread returned to spans "  \
    "(its own or other heaps')")                                                                 \
  X(cache_flushes, counter, "times a thread's cache of a size class overflowed and returned objects to their spans") \
  X(cache_idle_takes, counter, "times the background thread took this quiet heap's thread's cached objects of a size class back to their spans") \
  X(cache_idle_flushes, counter, "times a thread's cache of a size class, unchanged (the same stack tops and objects on them) and without a refill or overflow for 16 of the thread's refills and overflows, went back to its spans") \
  X(spans_acquired, counter, "small spans taken from the backend")                               \
  X(spans_released, counter, "empty small spans given back to the backend")                      \
  X(span_restarts, counter, "spans whose every object had come back, started over from their first " \
    "object (refills take never-used objects by address, not from a list)")                    \
  X(idle_class_spans_released, counter, "empty current spans of size classes whose cache went " \
    "back idle, given back to the backend with it")                                              \
  X(sparse_span_reuses, counter, "empty sparse spans kept with their class and taken again "     \
    "(instead of a new span from the backend)")                                                 \
  X(remote_frees, counter, "freed objects returned to a span of another thread's heap (from a cache flush)") \
  X(delayed_spans, counter, "full spans revived by another thread's free")                       \
  X(spans_adopted, counter, "parked spans other threads had freed into taken over from a quiet heap (instead of a new span)") \
  X(spans_not_adopted, counter, "parked spans of a quiet heap left to it by an adopter: more than a quarter of their objects still live") \
  X(large_frees, counter, "large and huge blocks freed")                                         \
  X(discardable_lock_hits, counter, "discardable locks that found the contents intact")          \
  X(discardable_lock_misses, counter, "discardable locks that found the block discarded")

enum class Stat : unsigned {
#define LM_STAT_ENUM(name, kind, doc) name,
  LAZYMALLOC_GLOBAL_STATS(LM_STAT_ENUM)
#undef LM_STAT_ENUM
  kCount
};

enum class HeapStat : unsigned {
#define LM_STAT_ENUM(name, kind, doc) name,
  LAZYMALLOC_HEAP_STATS(LM_STAT_ENUM)
#undef LM_STAT_ENUM
  kCount
};

// Per size class: kept by each heap like its statistics (in the heap's
// record, frontend/internal.h), summed over heaps when printed, one row per
// class that has any (text: a table after the held bytes; JSON: "classes",
// an array of objects with the class's "size").  They say where a class's
// memory is: its spans, the part of them its objects have touched, and how
// much of that its objects hold (taken_bytes less returned_bytes, printed as
// outstanding_bytes); the rest of carved_bytes is free objects in the spans.
// X(name, kind, description)
#define LAZYMALLOC_CLASS_STATS(X)                                                                  \
  X(spans, gauge, "live small spans of the class")                                                \
  X(span_bytes, gauge, "bytes of those spans")                                                    \
  X(carved_bytes, gauge, "bytes of their objects carved since each span was made: what use has "  \
    "touched of span_bytes (pages purged inside the spans since included)")                        \
  X(taken_bytes, counter, "bytes of the class's objects taken from its spans to a thread's cache " \
    "or a caller (span_taken_bytes)")                                                              \
  X(returned_bytes, counter, "bytes of them returned to the spans, by any thread "                 \
    "(span_returned_bytes and orphan_return_bytes)")                                               \
  X(refills, counter, "refills of a thread's cache of the class from its spans (span_refills)")   \
  X(flushes, counter, "times a thread's cache of the class overflowed and returned objects to "    \
    "their spans (cache_flushes)")

enum class ClassStat : unsigned {
#define LM_STAT_ENUM(name, kind, doc) name,
  LAZYMALLOC_CLASS_STATS(LM_STAT_ENUM)
#undef LM_STAT_ENUM
  kCount
};
inline constexpr unsigned kClassStatCount = unsigned(ClassStat::kCount);

inline constexpr unsigned kStatCount = unsigned(Stat::kCount);
inline constexpr unsigned kHeapStatCount = unsigned(HeapStat::kCount);

// Global statistics that each heap counts in its own HeapStats::folded, by
// the heap's holder with a plain load and store, and that a reader sums
// with the global value (the global value takes what threads without a heap
// count).  They change on every large malloc and free: as process-wide
// atomics, each such call of every thread would write one cache line, which
// moves between the cores (issue #16).  A gauge's parts may be differences
// modulo 2^64 (a block allocated by one heap and freed by another): the sum
// stays exact.
#define LAZYMALLOC_FOLDED_STATS(X)                                                   \
  X(large_blocks) X(large_allocs) X(large_cache_hits) X(large_cache_splits) X(large_cache_joins) \
  X(large_cache_bytes)

enum class Folded : unsigned {
#define LM_FOLDED_ENUM(name) name,
  LAZYMALLOC_FOLDED_STATS(LM_FOLDED_ENUM)
#undef LM_FOLDED_ENUM
  kCount
};
inline constexpr unsigned kFoldedCount = unsigned(Folded::kCount);
// The global statistic each folded one adds to.
inline constexpr Stat kFoldedStat[kFoldedCount] = {
#define LM_FOLDED_STAT(name) Stat::name,
    LAZYMALLOC_FOLDED_STATS(LM_FOLDED_STAT)
#undef LM_FOLDED_STAT
};

// One set of global statistics (the process has one; tests make their own).
struct Stats {
  std::atomic<uint64_t> v[kStatCount] = {};

  void add(Stat s, uint64_t n) { v[unsigned(s)].fetch_add(n, std::memory_order_relaxed); }
  void sub(Stat s, uint64_t n) { v[unsigned(s)].fetch_sub(n, std::memory_order_relaxed); }
  void set(Stat s, uint64_t n) { v[unsigned(s)].store(n, std::memory_order_relaxed); }
  uint64_t get(Stat s) const { return v[unsigned(s)].load(std::memory_order_relaxed); }
};

// Adds n to a statistic that has one writer at a time (a heap's, written
// by whoever holds it): a plain load and store, no read-modify-write, and
// readers see whole values.
inline void add_single_writer(std::atomic<uint64_t>& c, uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// Per-heap statistics: written only by the owning thread (plain load+store,
// no read-modify-write), read by anyone.
struct HeapStats {
  std::atomic<uint64_t> v[kHeapStatCount] = {};

  void inc(HeapStat s, uint64_t n = 1) { add_single_writer(v[unsigned(s)], n); }
  // Gauges: n may be a difference modulo 2^64 (the sum stays exact).
  void add(HeapStat s, uint64_t n) { inc(s, n); }

  // The heap's share of the folded global statistics (Folded).
  std::atomic<uint64_t> folded[kFoldedCount] = {};
  void fold(Folded f, uint64_t n) { add_single_writer(folded[unsigned(f)], n); }
};

// One class's statistics in one heap: written by whoever holds the heap
// (plain load+store), read by anyone.  Gauges may go below zero in one heap
// (a span made by one heap and given back by another that adopted it): n
// is then a difference modulo 2^64, and the sum over heaps stays exact.
struct ClassStats {
  std::atomic<uint64_t> v[kClassStatCount] = {};

  void inc(ClassStat s, uint64_t n = 1) { add_single_writer(v[unsigned(s)], n); }
};

struct StatInfo {
  const char* name;
  bool gauge;
  const char* doc;
};
extern const StatInfo kStatInfo[kStatCount];
extern const StatInfo kHeapStatInfo[kHeapStatCount];
extern const StatInfo kClassStatInfo[kClassStatCount];
// The column printed after them: taken_bytes less returned_bytes.
extern const StatInfo kClassOutstandingInfo;

// The buffer a statistics report is rendered into (lm_stats_print; a
// report with every size class takes about 32 KiB of text).
inline constexpr size_t kStatsReportBytes = 65536;

// The per-class statistics of a report: n classes, size[i] bytes each, and
// their values, kClassStatCount a class (summed over heaps).
struct ClassRows {
  unsigned n;
  const uint32_t* size;
  const uint64_t* v;
};

// Finds a statistic by name: returns true and sets *heap_stat and *index.
bool stat_find(const char* name, bool* heap_stat, unsigned* index);

// Where the bytes the allocator holds are (active + retained + lazy +
// metadata), derived from the statistics; declared once, printed after them
// (text) or as "held" (JSON).  X(name, doc)
#define LAZYMALLOC_HELD_ROWS(X)                                                                   \
  X(small_in_use, "small objects handed out and not freed (small_span_bytes less the two rows "  \
    "below; includes secure mode's quarantine)")                                                 \
  X(thread_caches, "free small objects in threads' caches (cache_bytes summed over heaps)")     \
  X(small_span_free, "free bytes inside small spans: listed, dormant, pending remote frees and " \
    "never carved")                                                                              \
  X(small_span_purged, "of small_span_free, pages purged inside spans (span_purged_bytes)")     \
  X(large_blocks, "large and huge blocks in use, discardable ones included (active_bytes less "  \
    "small_span_bytes and the row below)")                                                       \
  X(large_cached, "freed large blocks in threads' caches (large_cache_bytes)")                  \
  X(retained, "free and resident, in the backend (retained_bytes)")                             \
  X(lazy, "free, given with MADV_FREE, resident until the kernel takes it (lazy_bytes)")        \
  X(metadata, "allocator metadata, resident (metadata_bytes less metadata_purged_bytes)")

enum class Held : unsigned {
#define LM_HELD_ENUM(name, doc) name,
  LAZYMALLOC_HELD_ROWS(LM_HELD_ENUM)
#undef LM_HELD_ENUM
  kCount
};
inline constexpr unsigned kHeldCount = unsigned(Held::kCount);
struct HeldInfo {
  const char* name;
  const char* doc;
};
extern const HeldInfo kHeldInfo[kHeldCount];
// The rows from the statistics (global: kStatCount values, heap: the sums).
void held_rows(const uint64_t* global, const uint64_t* heap, uint64_t* out);
// Reads "classes.SIZE.NAME" (a per-class statistic, as lazymalloc_stat_get
// names it): returns true and sets *size and *index (the ClassStat, or
// kClassStatCount for outstanding_bytes).
bool class_stat_parse(const char* name, uint64_t* size, unsigned* index);
// Finds a held row by name: returns true and sets *index.
bool held_find(const char* name, unsigned* index);

// The process a report describes: printed first in every report, so that
// reports of several processes (a shell script's children) can be told apart.
struct StatsOrigin {
  int64_t pid;
  const char* program;  // e.g. /proc/self/comm without its newline
  uint64_t unix_ms;     // wall-clock time of the report, milliseconds since 1970-01-01 UTC
};

// Writes all statistics: `global` has kStatCount values, `heap` the sums of
// kHeapStatCount per-heap values, then where the held bytes are, then the
// size classes (`classes`, if given: the classes with any value), then the
// bytes in each heap's thread caches (`heap_cache`, `nheaps` of them: at
// most 64 printed).  Text is a table with descriptions after a line naming
// the origin; JSON is one object {"pid":..,"program":..,"time":..,
// "version":..,"stats":{..},"held":{..},"classes":[{"size":..,..},..],
// "heap_cache_bytes":[..],"options":{..}}, the time as ISO 8601 UTC with milliseconds
// ("2026-11-30T22:36:41.123Z").
void stats_write(Writer& w, const StatsOrigin& origin, const uint64_t* global, const uint64_t* heap, bool json,
                 const uint64_t* heap_cache = nullptr, unsigned nheaps = 0, const ClassRows* classes = nullptr);

// The path of LAZYMALLOC_STATS_FILE for `origin`: `%p` becomes the pid, `%e`
// the program name (a '/' in it becomes '_'), `%%` a '%'; any other '%'
// stays as it is.
void stats_path(Writer& w, const char* pattern, const StatsOrigin& origin);

}  // namespace lazymalloc
