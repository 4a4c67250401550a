#include "report.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "result.h"

namespace lazybench {

namespace {

std::optional<double> median_of(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  return median(v);
}

std::string opt_fixed(const std::optional<double>& v, int decimals) {
  return v ? format_fixed(*v, decimals) : std::string("-");
}

// "peak / held / LazyFree" of a row's medians (MiB), "-" for what is missing.
std::string memory_cell(const AllocatorRow& row) {
  return opt_fixed(row.maxrss_mib, 1) + " / " + opt_fixed(row.held_mib, 1) + " / " + opt_fixed(row.lazyfree_mib, 1);
}

std::string opt_count(const std::optional<double>& v) { return v ? format_count(*v) : std::string("-"); }

}  // namespace

const AllocatorRow* WorkloadSummary::row(const std::string& allocator) const {
  for (const auto& r : rows)
    if (r.allocator == allocator) return &r;
  return nullptr;
}

WorkloadSummary summarize_workload(const std::string& workload, const std::vector<std::string>& allocators,
                                   const std::vector<RunRecord>& records) {
  WorkloadSummary s;
  s.workload = workload;
  for (const auto& rec : records) {
    if (rec.workload != workload || !rec.ok || !rec.result) continue;
    s.metric_name = rec.result->metric.name;
    s.unit = rec.result->metric.unit;
    s.higher_is_better = rec.result->metric.higher_is_better;
    if (rec.result->extra_value("held_mib")) s.has_held = true;
    if (rec.result->extra_value("release_ms")) s.has_release = true;
    break;
  }
  for (const auto& alloc : allocators) {
    AllocatorRow row;
    row.allocator = alloc;
    std::vector<double> values, user, sys, minflt, maxrss, held, lazyfree, release;
    for (const auto& rec : records) {
      if (rec.workload != workload || rec.allocator != alloc) continue;
      ++row.runs;
      if (rec.allocator_mismatch) row.mismatch = true;
      if (!rec.ok || !rec.result) {
        ++row.failures;
        continue;
      }
      const auto& r = *rec.result;
      values.push_back(r.metric.value);
      user.push_back(r.usage.user_s);
      sys.push_back(r.usage.sys_s);
      minflt.push_back(static_cast<double>(r.usage.minflt));
      maxrss.push_back(static_cast<double>(r.usage.maxrss_kib) / 1024.0);
      if (auto h = r.extra_value("held_mib")) held.push_back(*h);
      if (auto l = r.extra_value("lazyfree_mib")) lazyfree.push_back(*l);
      if (auto t = r.extra_value("release_ms"); t && *t >= 0) release.push_back(*t);
    }
    row.metric = summarize(values);
    row.user_s = median_of(user);
    row.sys_s = median_of(sys);
    row.minflt = median_of(minflt);
    row.maxrss_mib = median_of(maxrss);
    row.held_mib = median_of(held);
    row.lazyfree_mib = median_of(lazyfree);
    row.release_ms = median_of(release);
    s.rows.push_back(std::move(row));
  }
  // Ratios need every row's median.
  std::vector<double> medians;
  for (const auto& row : s.rows)
    medians.push_back(row.metric ? row.metric->median : std::numeric_limits<double>::quiet_NaN());
  const AllocatorRow* glibc = s.row("glibc");
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    auto& row = s.rows[i];
    if (!row.metric) continue;
    if (glibc && glibc->metric) row.vs_glibc = speedup(row.metric->median, glibc->metric->median, s.higher_is_better);
    if (const auto best = best_index(medians, s.higher_is_better, i)) {
      row.vs_best = speedup(row.metric->median, medians[*best], s.higher_is_better);
      row.best_other = s.rows[*best].allocator;
    }
  }
  return s;
}

std::string render_overview(const std::vector<WorkloadSummary>& summaries, const std::vector<std::string>& allocators) {
  std::vector<MarkdownTable::Column> cols = {{"workload", false}, {"metric", false}, {"glibc median", true}};
  for (const auto& a : allocators) cols.push_back({a, true});
  MarkdownTable table(cols);
  for (const auto& s : summaries) {
    const AllocatorRow* glibc = s.row("glibc");
    std::vector<std::string> cells = {
        s.workload, s.unit.empty() ? "-" : s.unit + (s.higher_is_better ? " (higher better)" : " (lower better)"),
        glibc && glibc->metric ? format_si(glibc->metric->median) : "-"};
    for (const auto& a : allocators) {
      const AllocatorRow* row = s.row(a);
      if (!row || !row->metric) cells.push_back(row && row->failures ? "failed" : "-");
      else cells.push_back(format_ratio(row->vs_glibc) + (row->mismatch ? " (!)" : ""));
    }
    table.add_row(cells);
  }
  std::string out = "Speed relative to glibc (median of the runs; > 1.00x = better than glibc, "
                    "whichever direction the metric goes):\n\n" +
                    table.render();
  // Memory: peak RSS beside what is held at the end, so that a low "held"
  // figure cannot hide a high peak.
  std::vector<MarkdownTable::Column> mcols = {{"workload", false}};
  for (const auto& a : allocators) mcols.push_back({a, true});
  MarkdownTable memory(mcols);
  bool any_memory = false;
  for (const auto& s : summaries) {
    std::vector<std::string> cells = {s.workload};
    bool reported = false;
    for (const auto& a : allocators) {
      const AllocatorRow* row = s.row(a);
      reported = reported || (row && (row->maxrss_mib || row->held_mib));
      cells.push_back(row ? memory_cell(*row) : "-");
    }
    if (!reported) continue;
    any_memory = true;
    memory.add_row(cells);
  }
  if (any_memory) {
    out += "\nMemory in MiB, median, lower is better: peak RSS / held at the end (Rss - LazyFree) / LazyFree "
           "at the end (\"-\": the workload does not measure it):\n\n" +
           memory.render();
  }
  return out;
}

std::string render_detail(const WorkloadSummary& s) {
  std::vector<MarkdownTable::Column> cols = {{"allocator", false},
                                             {"median " + (s.unit.empty() ? std::string("value") : s.unit), true},
                                             {"min..max", true},
                                             {"vs glibc", true},
                                             {"vs best other", true},
                                             {"user s", true},
                                             {"sys s", true},
                                             {"minflt", true},
                                             {"peak RSS MiB", true}};
  if (s.has_held) {
    cols.push_back({"held MiB", true});
    cols.push_back({"LazyFree MiB", true});
  }
  if (s.has_release) cols.push_back({"released after ms", true});
  cols.push_back({"runs ok", true});
  MarkdownTable table(cols);
  for (const auto& row : s.rows) {
    std::vector<std::string> cells;
    cells.push_back(row.allocator + (row.mismatch ? " (!)" : ""));
    if (row.metric) {
      cells.push_back(format_si(row.metric->median));
      cells.push_back(format_si(row.metric->min) + ".." + format_si(row.metric->max));
    } else {
      cells.push_back(row.failures ? "failed" : "-");
      cells.push_back("-");
    }
    cells.push_back(format_ratio(row.vs_glibc));
    cells.push_back(row.vs_best ? format_ratio(row.vs_best) + " (" + row.best_other + ")" : "-");
    cells.push_back(opt_fixed(row.user_s, 2));
    cells.push_back(opt_fixed(row.sys_s, 2));
    cells.push_back(opt_count(row.minflt));
    cells.push_back(opt_fixed(row.maxrss_mib, 1));
    if (s.has_held) {
      cells.push_back(opt_fixed(row.held_mib, 1));
      cells.push_back(opt_fixed(row.lazyfree_mib, 1));
    }
    if (s.has_release) cells.push_back(row.release_ms ? format_si(*row.release_ms) : "never");
    cells.push_back(std::to_string(row.runs - row.failures) + "/" + std::to_string(row.runs));
    table.add_row(cells);
  }
  std::string title = "### " + s.workload;
  if (!s.metric_name.empty())
    title += " — " + s.metric_name + ", " + s.unit + (s.higher_is_better ? ", higher is better" : ", lower is better");
  return title + "\n\n" + table.render();
}

std::string render_csv(const std::vector<RunRecord>& records) {
  std::string out = csv_line({"workload", "allocator", "rep", "ok", "status", "metric", "value", "unit",
                              "higher_is_better", "wall_s", "user_s", "sys_s", "minflt", "majflt", "nvcsw",
                              "nivcsw", "maxrss_mib", "held_mib", "rss_mib", "lazyfree_mib", "detected_allocator",
                              "seed", "elapsed_s", "args", "extra"});
  for (const auto& rec : records) {
    std::vector<std::string> f = {rec.workload, rec.allocator, std::to_string(rec.rep), rec.ok ? "1" : "0",
                                  rec.status};
    if (rec.result) {
      const auto& r = *rec.result;
      auto extra_or_empty = [&](const char* key) {
        const auto v = r.extra_value(key);
        return v ? csv_number(*v) : std::string();
      };
      const std::vector<std::string> more = {
          r.metric.name, csv_number(r.metric.value), r.metric.unit, r.metric.higher_is_better ? "1" : "0",
          csv_number(r.wall_s), csv_number(r.usage.user_s), csv_number(r.usage.sys_s),
          std::to_string(r.usage.minflt), std::to_string(r.usage.majflt), std::to_string(r.usage.nvcsw),
          std::to_string(r.usage.nivcsw), csv_number(static_cast<double>(r.usage.maxrss_kib) / 1024.0),
          extra_or_empty("held_mib"), extra_or_empty("rss_mib"), extra_or_empty("lazyfree_mib"), r.allocator,
          r.seed};
      f.insert(f.end(), more.begin(), more.end());
      f.push_back(csv_number(rec.elapsed_s));
      f.push_back(rec.args);
      f.push_back(extra_json(r));
    } else {
      f.resize(22);
      f.push_back(csv_number(rec.elapsed_s));
      f.push_back(rec.args);
      f.push_back("");
    }
    out += csv_line(f);
  }
  return out;
}

}  // namespace lazybench
