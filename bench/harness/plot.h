// gnuplot scripts for the compare report: a bar chart of every workload's
// median normalised to glibc, and the held-memory time series of `phases`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gnuplot.h"
#include "report.h"

namespace lazybench {

// Data file for the bar chart: one row per workload, one column per
// allocator, speedup vs glibc ("-" where missing).
std::string throughput_data(const std::vector<WorkloadSummary>& summaries, const std::vector<std::string>& allocators);

// The bottom of the bar chart's log scale: a power of two below every ratio.
double throughput_floor(const std::vector<WorkloadSummary>& summaries);

// Script drawing `data_path` into `svg_path` (log scale from y_floor).
std::string throughput_script(const std::string& data_path, const std::string& svg_path, std::size_t allocators,
                              double y_floor);

// Script drawing held memory (Rss - LazyFree) and Rss over time, one colour
// per allocator; `series` is (allocator, path of a phases --series file).
std::string phases_memory_script(const std::vector<std::pair<std::string, std::string>>& series,
                                 const std::string& svg_path);

}  // namespace lazybench
