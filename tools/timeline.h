// lazymalloc-run --timeline: runs the program as a child instead of
// becoming it, and samples it every interval until it exits: Rss, LazyFree
// and AnonHugePages from /proc/PID/smaps_rollup, and the allocator's gauges
// from the timeline page (src/core/timeline.h) that the child's lazymalloc
// publishes on.  Writes a TSV and, with --plot, an SVG drawn by gnuplot.
#pragma once

#include <string>
#include <vector>

namespace lazymalloc_run {

struct TimelineRequest {
  std::string tsv_path;
  std::string svg_path;  // empty: no plot
  unsigned interval_ms = 100;
};

// The TSV's columns, tab-separated, in order.  MiB, 3 decimals; "-" for an
// allocator gauge before the allocator first published (or when the program
// does not run on lazymalloc).
inline constexpr const char* kTimelineColumns =
    "time_s\trss_mib\tlazyfree_mib\theld_mib\tanonhuge_mib\tactive_mib\tretained_mib\tlazy_mib\tcached_mib\tpublishes";

// The gnuplot script that draws `tsv_path` into `svg_path`; `program` names
// the run in the title.  Every line has a legend entry saying what it is.
std::string timeline_script(const std::string& tsv_path, const std::string& svg_path, const std::string& program);

// Runs `program` (the environment already set) under the sampler.  In the
// child, `exec_program` is called after the timeline page is set up; it
// execs or returns the status to exit with.  Returns the program's exit
// status; when a signal killed the program, the wrapper kills itself with
// the same signal once the files are written (so the caller sees what it
// would have seen without --timeline).  Wrapper errors are reported on
// stderr and returned as exit statuses (2: files or page, 126/127: exec).
int run_timeline(const TimelineRequest& request, const std::vector<std::string>& program,
                 int (*exec_program)(const std::vector<std::string>& program));

}  // namespace lazymalloc_run
