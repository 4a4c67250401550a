// Turning the runs of `lazybench compare` into tables: per-allocator medians
// with min..max, ratios against glibc and against the best other allocator,
// the markdown report and the raw CSV.  Pure functions, unit-tested.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "result.h"
#include "stats.h"

namespace lazybench {

// One child run of one workload under one allocator.
struct RunRecord {
  std::string workload;
  std::string allocator;
  int rep = 0;
  bool ok = false;
  std::string status;  // "ok", "exit 1", "killed by SIGSEGV", "timeout", "no result: ..."
  std::optional<RunResult> result;
  double elapsed_s = 0;           // child's wall time as seen by the parent
  std::string args;               // the child's workload arguments, space-separated
  bool allocator_mismatch = false;  // preloaded allocator not detected in the child
};

struct AllocatorRow {
  std::string allocator;
  std::optional<Summary> metric;
  std::size_t runs = 0;
  std::size_t failures = 0;
  bool mismatch = false;
  // Medians over the successful runs.
  std::optional<double> user_s, sys_s, minflt, maxrss_mib, held_mib, lazyfree_mib;
  // huge-free: when the memory had left the process (runs where it did not
  // within the timeout report -1 and are left out of the median).
  std::optional<double> release_ms;
  // speedup() of this row's median against glibc's and the best other row's.
  std::optional<double> vs_glibc, vs_best;
  std::string best_other;
};

struct WorkloadSummary {
  std::string workload;
  std::string metric_name;
  std::string unit;
  bool higher_is_better = true;
  bool has_held = false;     // the workload reports held memory (phases, huge-free)
  bool has_release = false;  // the workload reports release_ms (huge-free)
  std::vector<AllocatorRow> rows;  // in `allocators` order
  const AllocatorRow* row(const std::string& allocator) const;
};

// Aggregates the records of `workload`, one row per entry of `allocators`.
WorkloadSummary summarize_workload(const std::string& workload, const std::vector<std::string>& allocators,
                                   const std::vector<RunRecord>& records);

// One row per workload, one column per allocator: each cell is the median
// relative to glibc (speedup, > 1 = better than glibc), plus glibc's absolute
// median.  Held memory of the workloads that report it follows in a second
// table (MiB at the end of the run, lower is better).
std::string render_overview(const std::vector<WorkloadSummary>& summaries, const std::vector<std::string>& allocators);

// The detailed table of one workload.
std::string render_detail(const WorkloadSummary& summary);

// Raw runs as CSV (header line first).
std::string render_csv(const std::vector<RunRecord>& records);

}  // namespace lazybench
