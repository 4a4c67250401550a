#include "run.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iostream>

#include "harness/args.h"
#include "harness/result.h"
#include "harness/sysinfo.h"
#include "workloads/workload.h"

namespace lazybench {

namespace {

// OptionSink on top of CLI11.  Values are converted by lazybench's own
// parsers, so sizes and durations accept suffixes.
class CliSink final : public OptionSink {
 public:
  explicit CliSink(CLI::App& app) : app_(app) {}

  void seconds(const std::string& flags, double* value, const std::string& help) override {
    add(flags, help, "SECONDS", format_number(*value), [value](const std::string& s) {
      const auto v = parse_seconds(s);
      if (v) *value = *v;
      return v.has_value();
    });
  }
  void count(const std::string& flags, std::uint64_t* value, const std::string& help) override {
    add(flags, help, "N", std::to_string(*value), [value](const std::string& s) {
      if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return false;
      *value = std::strtoull(s.c_str(), nullptr, 10);
      return true;
    });
  }
  void size(const std::string& flags, std::uint64_t* value, const std::string& help) override {
    add(flags, help, "SIZE", format_size(*value), [value](const std::string& s) {
      const auto v = parse_size(s);
      if (v) *value = *v;
      return v.has_value();
    });
  }
  void real(const std::string& flags, double* value, const std::string& help) override {
    add(flags, help, "X", format_number(*value), [value](const std::string& s) {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) return false;
      *value = v;
      return true;
    });
  }
  void text(const std::string& flags, std::string* value, const std::string& help) override {
    add(flags, help, "TEXT", *value, [value](const std::string& s) {
      *value = s;
      return true;
    });
  }
  void flag(const std::string& flags, bool* value, const std::string& help) override {
    app_.add_flag(flags, *value, help);
  }

 private:
  static std::string format_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  template <class Convert>
  void add(const std::string& flags, const std::string& help, const char* type, const std::string& def,
           Convert convert) {
    auto* opt = app_.add_option(
        flags, [convert](const CLI::results_t& res) { return !res.empty() && convert(res.back()); }, help);
    opt->type_name(type)->type_size(1)->expected(1)->default_str(def);
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }

  CLI::App& app_;
};

std::optional<std::uint64_t> parse_seed(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const std::uint64_t v = std::strtoull(s.c_str(), &end, hex ? 16 : 10);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

void list_workloads(std::ostream& out) {
  std::size_t width = 0;
  for (const auto& w : workload_registry()) width = std::max(width, w.name.size());
  for (const auto& w : workload_registry()) {
    out << w.name << std::string(width - w.name.size() + 2, ' ') << (w.headline ? "* " : "  ") << w.description
        << '\n';
  }
}

int run_workload_command(const std::string& name, std::vector<std::string> args, std::ostream& out) {
  const WorkloadInfo* info = find_workload(name);
  if (!info) {
    std::cerr << "lazybench run: unknown workload '" << name << "' (see lazybench --list)\n";
    return 2;
  }
  // --quick selects the small sizing; it goes first so explicit options win.
  std::vector<std::string> full = info->fixed_args;
  if (const auto it = std::find(args.begin(), args.end(), "--quick"); it != args.end()) {
    args.erase(it);
    full.insert(full.end(), info->quick_args.begin(), info->quick_args.end());
  }
  full.insert(full.end(), args.begin(), args.end());

  auto workload = info->make();
  CLI::App app{info->description, "lazybench run " + name};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string seed_text;
  bool quick_placeholder = false;
  app.add_option("--seed", seed_text, "Run seed (decimal or 0x hex); default: fresh for every run");
  app.add_flag("--quick", quick_placeholder, "Small sizes for a run well under 2 s (applied before other options)");
  CliSink sink(app);
  workload->options(sink);
  if (!info->fixed_args.empty()) {
    std::string fixed;
    for (const auto& a : info->fixed_args) fixed += (fixed.empty() ? "" : " ") + a;
    app.footer("Variant of its base workload with: " + fixed);
  }
  try {
    std::vector<std::string> reversed(full.rbegin(), full.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every other parse error is a usage error (2).
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (const std::string err = workload->validate(); !err.empty()) {
    std::cerr << "lazybench run " << name << ": " << err << '\n';
    return 2;
  }
  std::uint64_t seed = fresh_seed();
  if (!seed_text.empty()) {
    const auto parsed = parse_seed(seed_text);
    if (!parsed) {
      std::cerr << "lazybench run " << name << ": bad --seed '" << seed_text << "'\n";
      return 2;
    }
    seed = *parsed;
  }

  Measure measure;
  Outcome outcome;
  const auto usage_start = Usage::self();
  const auto t_start = Clock::now();
  try {
    outcome = workload->run(measure, seed);
  } catch (const std::exception& e) {
    std::cerr << "lazybench run " << name << ": FAILED: " << e.what() << '\n';
    return 1;
  }
  RunResult r;
  r.workload = name;
  r.allocator = detect_allocator();
  char seed_buf[32];
  std::snprintf(seed_buf, sizeof seed_buf, "0x%016" PRIx64, seed);
  r.seed = seed_buf;
  r.metric = outcome.metric;
  r.extra = outcome.extra;
  if (measure.started() && measure.ended()) {
    r.wall_s = measure.wall_s();
    r.usage = measure.usage();
  } else {
    r.wall_s = seconds_since(t_start);
    r.usage = Usage::delta(usage_start, Usage::self());
  }
  r.usage.maxrss_kib = Usage::self().maxrss_kib;
  out << to_json_line(r) << std::endl;
  return 0;
}

}  // namespace lazybench
