#include "plot.h"

#include <algorithm>
#include <cmath>

namespace lazybench {

std::string throughput_data(const std::vector<WorkloadSummary>& summaries, const std::vector<std::string>& allocators) {
  std::string out = "workload";
  for (const auto& a : allocators) out += "\t" + a;
  out += "\n";
  for (const auto& s : summaries) {
    out += s.workload;
    for (const auto& a : allocators) {
      const AllocatorRow* row = s.row(a);
      out += "\t";
      out += row && row->vs_glibc ? format_fixed(*row->vs_glibc, 4) : "-";
    }
    out += "\n";
  }
  return out;
}

double throughput_floor(const std::vector<WorkloadSummary>& summaries) {
  double lowest = 1.0;
  for (const auto& s : summaries)
    for (const auto& row : s.rows)
      if (row.vs_glibc && *row.vs_glibc > 0) lowest = std::min(lowest, *row.vs_glibc);
  // A power of two at least one step below the lowest bar (and below 1), so
  // every bar, glibc's included, has a visible height.
  return std::exp2(std::floor(std::log2(lowest)) - 1);
}


std::string throughput_script(const std::string& data_path, const std::string& svg_path, std::size_t allocators,
                              double y_floor) {
  std::string s = svg_header(svg_path, "lazybench: median speed relative to glibc (higher is better)");
  s += "set datafile separator '\\t'\n";
  s += "set datafile missing '-'\n";
  s += "set style data histograms\n";
  s += "set style histogram clustered gap 1\n";
  s += "set style fill solid 0.85 border -1\n";
  s += "set boxwidth 0.9\n";
  // Ratios are multiplicative, and one allocator can be 100x off in a single
  // workload: a log scale keeps the rest readable.
  s += "set ylabel 'x glibc (log scale)'\n";
  s += "set logscale y 2\n";
  s += "set yrange [" + format_fixed(y_floor, 6) + ":*]\n";
  s += "set grid ytics\n";
  s += "set xtics rotate by -25 nomirror\n";
  s += "set key outside right top\n";
  s += "set arrow from graph 0, first 1 to graph 1, first 1 nohead dashtype 2 lc rgb 'black'\n";
  s += "plot for [i=2:" + std::to_string(allocators + 1) + "] " + gnuplot_quote(data_path) +
       " using i:xtic(1) title columnheader(i)\n";
  return s;
}

std::string phases_memory_script(const std::vector<std::pair<std::string, std::string>>& series,
                                 const std::string& svg_path) {
  std::string s = svg_header(svg_path, "phases: memory held over time (solid: Rss - LazyFree; dashed: Rss)");
  s += "set xlabel 'seconds'\n";
  s += "set ylabel 'MiB'\n";
  s += "set yrange [0:*]\n";
  s += "set grid\n";
  s += "set key outside right top\n";
  s += "plot ";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto& [name, path] = series[i];
    const std::string color = std::to_string(i + 1);
    if (i) s += ", \\\n     ";
    s += gnuplot_quote(path) + " using 1:5 with lines lw 2 lc " + color + " title " + gnuplot_quote(name) +
         ", \\\n     " + gnuplot_quote(path) + " using 1:3 with lines lw 1 dt 2 lc " + color + " notitle";
  }
  s += "\n";
  return s;
}

}  // namespace lazybench
