// The options table: every tunable of lazymalloc, declared once.
//
// Each option is read at start-up from the environment variable
// LAZYMALLOC_<NAME> (NAME upper-cased), e.g. LAZYMALLOC_DECAY_MS=500.
// Sizes accept K/M/G/T suffixes (powers of 1024), times ms or s; booleans accept
// 1/0/true/false/yes/no/on/off; enumerations accept a name or its index.
// An unknown LAZYMALLOC_* variable or a malformed value is reported on stderr
// (one line: the variable, its value, what is used instead and, for an
// unknown name, the closest known names); with abort_on_bad_option the
// allocator then aborts at start-up.  Variables that are not tunables but are
// read by lazymalloc or its tools (LAZYMALLOC_VARIABLES) are known names too.
// docs/options.md and the README's options table are generated from this
// table (build/lazymalloc-gen-docs --update; ctest's docs.generated fails
// when they differ), and `lazymalloc-run --list-options` prints it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lazymalloc {

class Writer;

enum class OptKind : uint8_t { kBool, kInt, kSize, kMillis, kEnum };

// X(name, kind, default, min, max, enum choices ("a|b|c") or nullptr, doc)
//
// The doc strings are the reference: docs/options.md, the README's options
// table and `lazymalloc-run --list-options` print them (tools/option-table.cc),
// so they may use `code` spans and end without a full stop.
#define LAZYMALLOC_OPTIONS(X)                                                              \
  X(stats, kEnum, 0, 0, 2, "off|text|json",                                                \
    "print statistics to stderr (or `LAZYMALLOC_STATS_FILE`) when the process exits: "     \
    "`text` (or `1`) or `json`; "                                                          \
    "docs/stats.md names every counter")                                                    \
  X(stats_pid, kInt, 0, 0, 2147483647, nullptr,                                            \
    "print the statistics of `stats` only in the process with this pid (0: in every "      \
    "process that has `stats` set); `lazymalloc-run --stats` sets it to the pid of the "   \
    "program it starts, so the program's children stay silent unless "                    \
    "`--follow-children`")                                                                  \
  X(abort_on_bad_option, kBool, 0, 0, 1, nullptr,                                          \
    "abort at start-up, after reporting them, when a `LAZYMALLOC_*` variable is unknown "  \
    "or has a bad value (without it they are reported on stderr and ignored)")             \
  X(verbose, kBool, 0, 0, 1, nullptr,                                                      \
    "report unusual events (failed `madvise`, fallbacks) on stderr")                       \
  X(purge, kEnum, 0, 0, 3, "adaptive|decay|eager|never",                                   \
    "release policy: `adaptive` gives back memory idle for `decay_ms`, with hysteresis "   \
    "(a slot reused soon after a purge waits twice as long next time, up to 32x, then is " \
    "pinned while the process is busy); `decay` is the same without hysteresis; `eager` "  \
    "purges at every free, like glibc's arenas; `never` keeps everything until "           \
    "`malloc_trim` or `lazymalloc_purge`.  Pressure and limits act under every policy "    \
    "but `never`")                                                                          \
  X(purge_advice, kEnum, 0, 0, 2, "auto|free|dontneed",                                     \
    "how idle memory is given back: `free` (`MADV_FREE`: lazy, the pages stay until the "  \
    "kernel needs them), `dontneed` (`MADV_DONTNEED`: Rss drops at once), or `auto` "      \
    "(`MADV_FREE`; `MADV_DONTNEED` inside a memory-limited cgroup, where lazily freed "    \
    "pages still count against the limit, and wherever the kernel refuses `MADV_FREE`).  " \
    "Pressure and limits always use `MADV_DONTNEED`")                                      \
  X(decay_ms, kMillis, 1000, 0, 3600000, nullptr,                                          \
    "free 2 MiB slots idle this long are given back (by the background thread)")           \
  X(partial_decay_ms, kMillis, 4000, 0, 3600000, nullptr,                                  \
    "free 64 KiB units inside slots that still hold live data wait this long: purging "    \
    "them splits a transparent hugepage; so do the free 4 KiB pages inside the "           \
    "small-object spans of a thread quiet for that long")                                  \
  X(lazy_decay_ms, kMillis, 10000, 0, 3600000, nullptr,                                    \
    "second decay stage: free memory that has stayed LAZY (MADV_FREE, still counted in "    \
    "Rss until the kernel needs it) this long is given MADV_DONTNEED by the background "     \
    "thread, so plain Rss drops too; lengthened by hysteresis like decay_ms")              \
  X(memory_limit, kSize, 0, 0, int64_t(1) << 50, nullptr,                                   \
    "soft limit (0 = none): when active + retained + lazy bytes exceed it, free memory is " \
    "purged with `MADV_DONTNEED`, oldest first, until they do not")                         \
  X(memory_limit_hard, kSize, 0, 0, int64_t(1) << 50, nullptr,                              \
    "hard limit on bytes in use (0 = none): allocations beyond it fail with `ENOMEM`")      \
  X(pressure, kBool, 1, 0, 1, nullptr,                                                     \
    "watch memory pressure (PSI stall time, cgroup limits, MemAvailable) from the background " \
    "thread and purge free memory when the machine needs it")                              \
  X(pressure_interval_ms, kMillis, 250, 10, 3600000, nullptr,                               \
    "pressure sources (and the soft and discardable limits) are checked every "             \
    "pressure_interval_ms while pressure_bytes or more of free memory are held (RETAINED, " \
    "LAZY, discardable); with less, proportionally less often (half the bytes, twice the "  \
    "interval); not at all when none is held")                                              \
  X(pressure_bytes, kSize, 64 << 20, 64 << 10, int64_t(1) << 50, nullptr,                  \
    "held free memory at which pressure is checked at the full rate (pressure_interval_ms)") \
  X(purge_batch, kSize, 32 << 20, 64 << 10, int64_t(1) << 40, nullptr,                      \
    "largest range given to one `madvise` call, and most bytes taken per allocator-lock "  \
    "hold by the purger, so concurrent page faults and allocations are not starved; each " \
    "batch of ranges goes to the kernel in one `process_madvise` call where it accepts it") \
  X(background, kBool, 1, 0, 1, nullptr,                                                   \
    "run decay purges on a background thread (started on first need); without it, "        \
    "purges run inline from `free()` at most once per `background_interval_ms`")            \
  X(background_interval_ms, kMillis, 100, 1, 60000, nullptr,                               \
    "shortest sleep of the background thread (work due sooner waits for the next wakeup), " \
    "and without it the pace of inline decay from free().  The thread sleeps until the "    \
    "next decay or pressure deadline and exits when no free memory is held")               \
  X(large_cache, kSize, 4 << 20, 0, int64_t(1) << 40, nullptr,                              \
    "bytes of freed large blocks (256 KiB-1 MiB) each thread keeps, at most 8 of them, "    \
    "at most the large bytes the thread holds live (at least 1 MiB) and at most "            \
    "its peak of live large bytes less those, for its next large mallocs (the smallest "   \
    "block within 2x of the request) without the backend's lock; a miss gives back those " \
    "smaller than its request; a quiet thread's go back after `decay_ms`, an exiting "     \
    "thread's at once; 0 turns it off")                                                     \
  X(arena_reserve, kSize, int64_t(1) << 30, 4 << 20, int64_t(1) << 40, nullptr,            \
    "address space reserved at a time (reserving commits no memory); halved on failure, "  \
    "e.g. under `RLIMIT_AS`")                                                               \
  X(hugepages, kEnum, 3, 0, 3, "off|on|reused|auto",                                        \
    "transparent hugepages for the heap (where the system allows them: THP `madvise` or "   \
    "`always`).  `on`: arenas are advised `MADV_HUGEPAGE` once the heap is big enough "     \
    "(hugepage_threshold) and dense, withdrawn (`MADV_NOHUGEPAGE`) when purges leave its "   \
    "slots less than a quarter full (khugepaged would fill the purged holes back in); a "   \
    "huge block's slots are advised at once.  `reused`: the same, but a slot gets the "     \
    "advice only once its memory has been given back whole: fresh address space faults in "  \
    "4 KiB pages, and memory purged and used again faults in 2 MiB pages (memory freed and " \
    "reused while still resident keeps its 4 KiB pages).  `auto` (the default): `on`, but "  \
    "on a guest that reports its free memory to the host (virtio-balloon free page "        \
    "reporting: there a hugepage fault on fresh memory also faults 2 MiB in on the host, "   \
    "2-6 ms against under 1 ms for 4 KiB pages) the slots opened for small-object spans "    \
    "are treated as under `reused` (a heap of small objects grows a span at a time; gawk "  \
    "takes 0.58x the time of `on` there), while large and huge blocks, touched whole, get "  \
    "the advice as under `on`.  `off`: no advice")                                           \
  X(hugepage_threshold, kSize, 16 << 20, 0, int64_t(1) << 50, nullptr,                     \
    "active bytes from which arenas are advised MADV_HUGEPAGE (with their unit slots at "  \
    "least half full): below it a program keeps 4 KiB pages (a hugepage faults in 2 MiB "  \
    "at the first touch of a slot, resident even where the slot is touched sparsely); "    \
    "from it on, untouched slots fault in hugepages (about 50x fewer faults, fewer TLB "   \
    "misses)")                                                                              \
  X(huge_retain, kSize, 64 << 20, 0, int64_t(1) << 50, nullptr,                            \
    "a freed huge block (over 1 MiB) stays resident for reuse while the allocator's "      \
    "retained bytes stay within this budget (doubled for each hysteresis step of its "     \
    "range: big buffers that keep coming back stay); otherwise release workers give it "   \
    "back at once.  0 under memory pressure, an exceeded soft limit or `purge=eager`")     \
  X(release_workers, kInt, 4, 0, 64, nullptr,                                              \
    "threads that give freed huge blocks back to the kernel in parallel, `purge_batch` "   \
    "bytes at a time (at most the number of CPUs; started on first need, exit when "       \
    "idle); 0 releases inside `free()`")                                                    \
  X(release_backlog, kSize, int64_t(4) << 30, 0, int64_t(1) << 50, nullptr,                \
    "bytes of freed huge blocks waiting for release beyond which `free()` helps the "      \
    "workers instead of letting the backlog grow")                                         \
  X(secure, kBool, 0, 0, 1, nullptr,                                                       \
    "secure mode (read at start-up only): a `PROT_NONE` guard page right after every "     \
    "large and huge block, random allocation order in new spans, encoded free-list "       \
    "links, freed small objects filled with `0xdf` and held in a per-thread FIFO "         \
    "quarantine (128 objects, 1 MiB) before reuse; costs in docs/reliability.md")          \
  X(discardable_limit, kSize, 0, 0, int64_t(1) << 50, nullptr,                              \
    "most bytes of unlocked discardable blocks kept (0 = no limit): the background thread " \
    "discards the least recently unlocked beyond it")                                      \
  X(timeline_fd, kInt, 0, 0, 1 << 20, nullptr,                                             \
    "set by `lazymalloc-run --timeline`: a descriptor of the shared page on which the "     \
    "allocator publishes its gauges (active, retained, lazy bytes) whenever its slow paths " \
    "or purges change them, for that one process (its pid is on the page); 0 = none, and "  \
    "then nothing is mapped or written")

// Variables that are not tunables but that lazymalloc, its tools or its tests
// read, so that an unknown-variable report never names them.
// X(name, doc)
#define LAZYMALLOC_VARIABLES(X)                                                            \
  X(stats_file, "write the statistics of `LAZYMALLOC_STATS` to this file (appended; "     \
    "created with mode 0644) instead of stderr; `%p` in it stands for the process id, "   \
    "`%e` for the program name, `%%` for `%`, e.g. `/tmp/lm.%e.%p.json`")                  \
  X(lib, "the `liblazymalloc.so` that `lazymalloc-run` and `lazybench` preload, unless "   \
    "`--lib` is given")                                                                    \
  X(test_scale, "test suites only: scales the sizes and iteration counts of the stress "   \
    "tests (1 = full size)")

enum class Opt : unsigned {
#define LM_OPT_ENUM(name, kind, def, mn, mx, choices, doc) name,
  LAZYMALLOC_OPTIONS(LM_OPT_ENUM)
#undef LM_OPT_ENUM
  kCount
};

inline constexpr unsigned kOptionCount = unsigned(Opt::kCount);

struct VariableInfo {
  const char* name;
  const char* doc;
};
inline constexpr unsigned kVariableCount = 0
#define LM_VAR_COUNT(name, doc) +1
    LAZYMALLOC_VARIABLES(LM_VAR_COUNT)
#undef LM_VAR_COUNT
    ;
extern const VariableInfo kVariableInfo[kVariableCount];

struct OptionInfo {
  const char* name;
  OptKind kind;
  int64_t def;
  int64_t min;
  int64_t max;
  const char* choices;
  const char* doc;
};

extern const OptionInfo kOptionInfo[kOptionCount];
extern std::atomic<int64_t> g_option_values[kOptionCount];

inline int64_t option(Opt o) { return g_option_values[unsigned(o)].load(std::memory_order_relaxed); }

// Purge policies (values of Opt::purge) and advice (Opt::purge_advice).
enum PurgePolicy : int64_t { kPurgeAdaptive = 0, kPurgeDecay = 1, kPurgeEager = 2, kPurgeNever = 3 };
enum PurgeAdviceOpt : int64_t { kAdviceAuto = 0, kAdviceFree = 1, kAdviceDontneed = 2 };
// Values of Opt::hugepages.
enum HugepageMode : int64_t { kHugepagesOff = 0, kHugepagesOn = 1, kHugepagesReused = 2, kHugepagesAuto = 3 };

// Parses `text` for option `o`; returns false (value untouched) if malformed
// or out of range.
bool option_parse(unsigned o, const char* text, int64_t* value);
// Finds an option by name (any case); returns kOptionCount if unknown.
unsigned option_find(const char* name);
unsigned option_find(const char* name, size_t len);
// Finds a variable of LAZYMALLOC_VARIABLES by name (any case); kVariableCount if unknown.
unsigned variable_find(const char* name, size_t len);

// Names offered for a mistyped one: an index below kOptionCount is an option,
// kOptionCount + i is variable i.  Fills up to `max` indices, closest first
// (edit distance, or a known name that contains the typed one); returns how many.
unsigned option_suggest(const char* name, size_t len, unsigned* out, unsigned max);
// The name of a suggestion index (option or variable), lower case.
const char* option_suggestion_name(unsigned index);

// `v` for people: "adaptive", "32M", "1000 ms", "1".
void option_write_value(Writer& w, const OptionInfo& info, int64_t v);
// What option `info` accepts: "bytes, 0 to 1024T (suffix K, M, G or T: powers
// of 1024)"; with `code`, literal words are marked as Markdown `code`.
void option_write_values(Writer& w, const OptionInfo& info, bool code);

// Reads every LAZYMALLOC_* variable from `envp` (NULL-terminated).  Each
// unknown variable or bad value is reported through `report` (may be null)
// as one line; returns how many there were.
unsigned options_load(char** envp, void (*report)(const char* msg, size_t len));
// The value of environment variable `name` (e.g. "LAZYMALLOC_STATS_FILE") in
// `envp`, or nullptr.
const char* env_find(char** envp, const char* name);
// Sets option `o` if `value` is in range.
bool option_set(unsigned o, int64_t value);
// Text: one "  name  value" line per option, the name padded to
// `name_width` characters and the value right-aligned in 16 more (as the
// statistics' values); JSON: the body of an object.  Enumerations by name in
// both.
void options_write(Writer& w, bool json, unsigned name_width);

}  // namespace lazymalloc
