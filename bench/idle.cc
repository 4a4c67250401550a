#include "idle.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "compare.h"
#include "harness/stats.h"
#include "subprocess.h"

namespace lazybench {

namespace {

// idle-probe's result line, "key=value ..." (numbers), or nullopt.
std::optional<std::map<std::string, double>> parse_probe_line(const std::string& out) {
  std::map<std::string, double> values;
  std::istringstream in(out);
  std::string item;
  while (in >> item) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    try {
      values[item.substr(0, eq)] = std::stod(item.substr(eq + 1));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  for (const char* key : {"live_kb", "settled_held_kb", "end_held_kb", "end_rss_kb", "wakeups_per_s", "cpu_ms_per_s"})
    if (!values.count(key)) return std::nullopt;
  return values;
}

std::string default_probe() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("idle-probe") : (self.parent_path() / "idle-probe").string();
}

}  // namespace

int idle_command(const IdleOptions& opt) {
  if (opt.reps < 1 || opt.churn_mib < 1 || opt.size < 16 || opt.stride < 1 || opt.settle_s < 0 || opt.window_s <= 0) {
    std::cerr << "lazybench idle: --reps, --churn-mib, --stride must be at least 1, --size at least 16, "
                 "--settle at least 0 and --window above 0\n";
    return 2;
  }
  const std::string probe = opt.probe.empty() ? default_probe() : opt.probe;
  if (::access(probe.c_str(), X_OK) != 0) {
    std::cerr << "lazybench idle: cannot run " << probe << " (build the idle-probe target, or give --probe)\n";
    return 2;
  }
  std::vector<std::string> skipped;
  auto resolved = allocators_to_run(opt.allocators, opt.lib, {}, "lazybench idle", &skipped);
  if (!resolved) return 2;
  const std::vector<AllocatorSpec> allocators = std::move(*resolved);
  const std::vector<std::string> argv = {probe,
                                         std::to_string(opt.churn_mib),
                                         std::to_string(opt.size),
                                         std::to_string(opt.stride),
                                         format_fixed(opt.settle_s, 3),
                                         format_fixed(opt.window_s, 3)};
  const std::size_t n = allocators.size();
  bool failed = false;
  // Per allocator, per key: the runs' values.
  std::vector<std::map<std::string, std::vector<double>>> runs(n);
  const std::size_t total = n * static_cast<std::size_t>(opt.reps);
  std::size_t done = 0;
  for (int r = 0; r < opt.reps; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t k = (i + static_cast<std::size_t>(r)) % n;  // each round starts with the next one
      const AllocatorSpec& a = allocators[k];
      std::cerr << "[" << ++done << "/" << total << "] idle under " << a.name << '\n';
      SpawnOptions so;
      so.env = child_env(a.preload, a.env);
      so.stderr_to = SpawnOptions::Stderr::kCapture;
      so.timeout_s = opt.settle_s + opt.window_s + 300;
      const SpawnResult res = spawn(argv, so);
      const auto values = res.ok() ? parse_probe_line(res.out) : std::nullopt;
      if (!values) {
        std::cerr << "lazybench idle: " << a.name << ": " << res.describe() << '\n';
        failed = true;
        continue;
      }
      // (A difference of rusage times can come out as -0.0000 or -0.)
      for (const auto& [key, v] : *values) runs[k][key].push_back(key == "cpu_ms_per_s" ? std::max(0.0, v) : v);
    }
  }

  auto med = [](const std::map<std::string, std::vector<double>>& m, const char* key) -> std::optional<double> {
    const auto it = m.find(key);
    if (it == m.end() || it->second.empty()) return std::nullopt;
    return median(it->second);
  };
  auto cell = [](std::optional<double> v, int decimals) { return v ? format_fixed(*v, decimals) : std::string("-"); };
  auto mib = [](std::optional<double> kib) { return kib ? std::optional<double>(*kib / 1024.0) : std::nullopt; };
  MarkdownTable table({{"allocator"},
                       {"live (MiB)", true},
                       {"wakeups/s", true},
                       {"CPU ms/s", true},
                       {"held after settle (MiB)", true},
                       {"held at end (MiB)", true},
                       {"held - live (MiB)", true},
                       {"Rss at end (MiB)", true}});
  for (std::size_t k = 0; k < n; ++k) {
    const auto live = mib(med(runs[k], "live_kb")), end = mib(med(runs[k], "end_held_kb"));
    table.add_row({allocators[k].name, cell(live, 1), cell(med(runs[k], "wakeups_per_s"), 2),
                   cell(med(runs[k], "cpu_ms_per_s"), 3), cell(mib(med(runs[k], "settled_held_kb")), 1), cell(end, 1),
                   live && end ? format_fixed(*end - *live, 1) : "-", cell(mib(med(runs[k], "end_rss_kb")), 1)});
  }
  std::cout << "Idle cost after a churn of " << opt.churn_mib << " MiB (" << opt.size << "-byte blocks, 1 in "
            << opt.stride << " kept), " << opt.settle_s << " s settle, " << opt.window_s
            << " s window (medians of " << opt.reps << " run" << (opt.reps > 1 ? "s" : "")
            << "; wakeups and CPU of every thread but the sleeping main thread; held = Rss - LazyFree)\n\n"
            << table.render();
  for (const auto& s : skipped) std::cout << "- Skipped: " << s << '\n';
  return failed ? 1 : 0;
}

}  // namespace lazybench
