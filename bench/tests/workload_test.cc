// Runs lazybench as a child process, the way `compare` does:
//
//   bench_workload_test --lazybench PATH --workload NAME [--preload LIB]
//       one workload with --quick under glibc or under LIB (LD_PRELOAD);
//       checks the exit status, the result line and the metric.
//   bench_workload_test --lazybench PATH --expect-workloads a,b,c
//       `lazybench --list` lists exactly these (so none goes untested).
//   bench_workload_test --lazybench PATH --compare-out DIR [--lib LIB]
//       a small `lazybench compare` end to end: report, CSV, plots, skips.
//   bench_workload_test --lazybench PATH --server-out DIR [--lib LIB]
//       `lazybench server --quick` end to end (Debian's redis-server and
//       redis-benchmark, which tools/deps.sh installs).
//
// Each ctest entry selects with --gtest_filter the tests its arguments are
// for; a test run without its argument fails (it is never skipped).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/args.h"
#include "harness/result.h"
#include "test_util.h"

namespace lazybench {
namespace {

std::string g_lazybench, g_workload, g_preload, g_expect, g_compare_out, g_server_out, g_lib;

bool is_idle_release() { return g_workload.rfind("idle-release", 0) == 0; }

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// test::options() with LD_PRELOAD set to the library under test (--preload),
// or unset in the child (glibc).
auto preload_options() {
  auto opts = test::options();
  opts.env["LD_PRELOAD"] = g_preload.empty() ? std::nullopt : std::optional<std::string>(g_preload);
  return opts;
}

// The allocators the harness tests run: lazymalloc when built, and glibc.
std::vector<std::string> tool_allocators() {
  return g_lib.empty() ? std::vector<std::string>{"glibc"} : std::vector<std::string>{"lazymalloc", "glibc"};
}

// argv with --allocators (tool_allocators) and --lib when built.
std::vector<std::string> tool_argv(std::vector<std::string> argv) {
  const auto a = tool_allocators();
  argv.push_back("--allocators");
  argv.push_back(a.size() == 1 ? a[0] : a[0] + "," + a[1]);
  if (!g_lib.empty()) {
    argv.push_back("--lib");
    argv.push_back(g_lib);
  }
  return argv;
}

TEST(Workload, RunsQuicklyAndReportsItsMetric) {
  ASSERT_FALSE(g_workload.empty()) << "no --workload given";
  const auto opts = preload_options();  // a hang fails (killed), not a slow machine
  const auto r = spawn({g_lazybench, "run", g_workload, "--quick"}, opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::string error;
  const auto result = find_result(r.out, &error);
  ASSERT_TRUE(result) << error << "\n" << r.describe();
  EXPECT_EQ(result->workload, g_workload);
  EXPECT_FALSE(result->metric.name.empty());
  EXPECT_FALSE(result->metric.unit.empty());
  EXPECT_TRUE(std::isfinite(result->metric.value));
  // idle-release's metric (held after the idle minus held before) can be
  // zero or below when an allocator returns more than the run added.
  if (!is_idle_release()) {
    EXPECT_GT(result->metric.value, 0) << r.out;
  }
  EXPECT_GT(result->wall_s, 0);
  EXPECT_GT(result->usage.user_s + result->usage.sys_s, 0);
  EXPECT_GT(result->usage.maxrss_kib, 0);
  // The child really ran on the allocator we meant.
  if (g_preload.empty()) {
    EXPECT_EQ(result->allocator, "glibc");
  } else if (g_preload.find("liblazymalloc") != std::string::npos) {
    EXPECT_EQ(result->allocator, "lazymalloc");
  }
  // Memory workloads report what the process held.
  if (g_workload == "phases" || g_workload == "huge-free" || is_idle_release()) {
    const auto held = result->extra_value("held_mib");
    const auto rss = result->extra_value("rss_mib");
    const auto lazy = result->extra_value("lazyfree_mib");
    ASSERT_TRUE(held && rss && lazy) << r.out;
    EXPECT_GT(*rss, 0);
    EXPECT_GE(*lazy, 0);
    EXPECT_NEAR(*held, *rss - *lazy, 0.01);
  }
  if (g_workload == "huge-free") {
    ASSERT_TRUE(result->extra_value("release_ms"));
    EXPECT_NEAR(*result->extra_value("size_mib"), 64, 0.001);
  }
}

// idle-release with a small total and a short idle: the figures it reports
// hang together (the allocator's own behaviour is not judged here).
TEST(Workload, IdleReleaseReportsConsistentFigures) {
  ASSERT_TRUE(is_idle_release()) << "run with an idle-release --workload";
  const auto opts = preload_options();
  const auto r = spawn({g_lazybench, "run", g_workload, "--total", "6M", "--idle", "0.05", "--lazy-wait",
                              "0.05", "--seed", "7"},
                             opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::string error;
  const auto result = find_result(r.out, &error);
  ASSERT_TRUE(result) << error << "\n" << r.describe();
  EXPECT_EQ(result->metric.name, "held_after_idle");
  EXPECT_EQ(result->metric.unit, "MiB");
  EXPECT_FALSE(result->metric.higher_is_better);
  auto value = [&](const char* key) {
    const auto v = result->extra_value(key);
    EXPECT_TRUE(v) << key << " missing: " << r.out;
    return v.value_or(std::nan(""));
  };
  const double size = value("object_size"), objects = value("objects"), total = value("total_mib");
  EXPECT_GT(size, 0);
  EXPECT_EQ(objects, std::floor(6.0 * 1024 * 1024 / size));
  EXPECT_NEAR(total, objects * size / (1024.0 * 1024.0), 1e-9);
  // Every byte was written, so the peak holds at least the objects' bytes.
  EXPECT_GE(value("peak_rss_mib") - value("baseline_rss_mib"), 0.95 * total) << r.out;
  EXPECT_NEAR(value("held_above_baseline_mib"), result->metric.value, 1e-9);
  EXPECT_NEAR(result->metric.value, value("held_mib") - value("baseline_held_mib"), 0.01);
  EXPECT_NEAR(value("held_mib"), value("rss_mib") - value("lazyfree_mib"), 0.01);
  EXPECT_NEAR(value("rss_above_baseline_mib"), value("rss_mib") - value("baseline_rss_mib"), 0.01);
  EXPECT_GE(value("held_after_free_mib"), 0);
  EXPECT_NEAR(value("lazy_wait_s"), 0.05, 1e-9);
  EXPECT_GT(value("rss_after_lazy_wait_mib"), 0);
  EXPECT_LE(value("held_after_lazy_wait_mib"), value("rss_after_lazy_wait_mib"));
  const bool case_d = g_workload.rfind("idle-release-d-", 0) == 0;
  EXPECT_EQ(result->extra_value("live_pages").has_value(), case_d) << r.out;
  if (case_d) {
    // 10% of the objects stay live; their bytes cover at least
    // live * size / 4 KiB pages and at most ceil(size / 4 KiB) + 1 each.
    const double live = value("live_objects"), pages = value("live_pages");
    EXPECT_EQ(live, std::floor(objects / 10));
    EXPECT_GE(pages, std::ceil(live * size / 4096));
    EXPECT_LE(pages, live * (std::ceil(size / 4096) + 1));
    EXPECT_NEAR(value("live_pages_mib"), pages * 4096 / (1024.0 * 1024.0), 1e-9);
    EXPECT_NEAR(value("bound_mib"), 1.25 * value("live_pages_mib") + 8, 1e-9);
  }
}

TEST(Workload, IdleReleaseRejectsBadOptions) {
  ASSERT_EQ(g_workload, "idle-release") << "run with --workload idle-release";
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--case", "e"},
                                              std::vector<std::string>{"--size", "0"},
                                              std::vector<std::string>{"--size", "8K", "--total", "4K"}}) {
    std::vector<std::string> argv = {g_lazybench, "run", "idle-release", "--quick"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    const auto r = spawn(argv, test::options());
    EXPECT_EQ(r.exit_code(), 2) << r.describe();
  }
}

// rptest's inboxes hold at most --inbox-max objects (issue #16: unbounded,
// the backlog a descheduled thread found made peak RSS follow the
// scheduler), and a bound below one batch is refused.
TEST(Workload, RptestBoundsItsInboxes) {
  ASSERT_EQ(g_workload, "rptest") << "run with --workload rptest";
  const auto opts = preload_options();
  for (const char* threads : {"1", "2", "3"}) {
    const auto r = spawn({g_lazybench, "run", "rptest", "--quick", "-t", threads, "--inbox-max", "128"}, opts);
    ASSERT_EQ(r.exit_code(), 0) << r.describe();
    std::string error;
    const auto result = find_result(r.out, &error);
    ASSERT_TRUE(result) << error << "\n" << r.describe();
    const auto peak = result->extra_value("inbox_peak");
    ASSERT_TRUE(peak) << r.out;
    EXPECT_GT(*peak, 0) << r.out;  // 1/4 of the frees go through the inboxes
    EXPECT_LE(*peak, 128) << r.out;
  }
  const auto bad = spawn({g_lazybench, "run", "rptest", "--quick", "--inbox-max", "10"}, opts);
  EXPECT_EQ(bad.exit_code(), 2) << bad.describe();
}

// --rounds fixes mleak's work (for callgrind, fault and syscall counts per
// thread): exactly rounds x threads threads, however long they take.
TEST(Workload, MleakRunsExactlyItsRounds) {
  ASSERT_EQ(g_workload, "mleak") << "run with --workload mleak";
  const auto opts = preload_options();
  const auto r = spawn({g_lazybench, "run", "mleak", "-S", "30", "--rounds", "7", "-t", "3"}, opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::string error;
  const auto result = find_result(r.out, &error);
  ASSERT_TRUE(result) << error << "\n" << r.describe();
  const auto threads = result->extra_value("threads");
  ASSERT_TRUE(threads) << r.out;
  EXPECT_EQ(*threads, 21) << r.out;
  EXPECT_LT(r.elapsed_s, 20) << "the rounds end the run, not -S";
}

TEST(Workload, PhasesWritesTimeSeries) {
  ASSERT_EQ(g_workload, "phases") << "run with --workload phases";
  const auto file = std::filesystem::temp_directory_path() /
                    ("lazybench-series-" + std::to_string(::getpid()) + ".tsv");
  const auto opts = preload_options();
  const auto r = spawn({g_lazybench, "run", "phases", "--quick", "--series", file.string()}, opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::istringstream in(slurp(file));
  std::filesystem::remove(file);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line.rfind("# t_s\tphase\trss_mib\tlazyfree_mib\theld_mib", 0), 0u);
  int samples = 0;
  double last_t = -1;
  int last_phase = 0;
  while (std::getline(in, line)) {
    double t, rss, lazy, held, huge;
    int phase;
    ASSERT_EQ(std::sscanf(line.c_str(), "%lf %d %lf %lf %lf %lf", &t, &phase, &rss, &lazy, &held, &huge), 6) << line;
    EXPECT_GE(t, last_t);
    EXPECT_GT(rss, 0);
    last_t = t;
    last_phase = phase;
    ++samples;
  }
  // The sampler samples when it starts and when it stops, after the idle
  // time (phase -1); how many it takes in between depends on timing.
  EXPECT_GE(samples, 2);
  EXPECT_EQ(last_phase, -1) << "the last sample is taken after the last phase";
}

TEST(Workload, ListMatchesTheTestedSet) {
  ASSERT_FALSE(g_expect.empty()) << "no --expect-workloads given";
  const auto r = spawn({g_lazybench, "--list"}, test::options());
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::vector<std::string> listed, headline;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, marker;
    words >> name >> marker;
    if (!name.empty()) listed.push_back(name);
    if (marker == "*") headline.push_back(name);
  }
  std::vector<std::string> expected;
  std::istringstream e(g_expect);
  while (std::getline(e, line, ','))
    if (!line.empty()) expected.push_back(line);
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(headline, (std::vector<std::string>{"ebizzy-1t", "ebizzy-2t", "phases", "malloc-large"})) << r.out;
}

TEST(Workload, AllocatorsListIsAligned) {
  // `lazybench allocators`: one line per known allocator, the second column
  // starting in the same place for every name, the longest included.
  const auto r = spawn({g_lazybench, "allocators"}, test::options());
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::istringstream in(r.out);
  std::string line;
  std::vector<std::string> names;
  std::size_t column = 0;
  while (std::getline(in, line)) {
    const std::size_t name_end = line.find(' ');
    ASSERT_NE(name_end, std::string::npos) << line;
    names.push_back(line.substr(0, name_end));
    const std::size_t second = line.find_first_not_of(' ', name_end);
    ASSERT_NE(second, std::string::npos) << line;
    if (!column) column = second;
    EXPECT_EQ(second, column) << r.out;
    EXPECT_GE(second, name_end + 2) << r.out;
  }
  EXPECT_EQ(names, known_allocator_names()) << r.out;
}

TEST(Workload, RunRejectsUnknownWorkloadAndShowsHelp) {
  ASSERT_FALSE(g_expect.empty()) << "run with the --expect-workloads entry";
  auto r = spawn({g_lazybench, "run", "no-such-workload"}, test::options());
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
  EXPECT_NE(r.err.find("unknown workload"), std::string::npos);
  r = spawn({g_lazybench, "run", "ebizzy", "--help"}, test::options());
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_NE(r.out.find("--chunk-size"), std::string::npos) << r.out;
  r = spawn({g_lazybench, "compare", "no-such-workload"}, test::options());
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
}

TEST(Compare, SmallComparisonWritesReport) {
  ASSERT_FALSE(g_compare_out.empty()) << "no --compare-out given";
  namespace fs = std::filesystem;
  fs::remove_all(g_compare_out);
  // glibc always exists; "ghost" points at a missing library and must be
  // skipped without failing the comparison.
  std::string allocators = "glibc,ghost=/nonexistent/libghost.so";
  if (!g_lib.empty()) allocators = "lazymalloc," + allocators;
  std::vector<std::string> argv = {g_lazybench, "compare", "alloc-pair-1t", "phases", "--quick", "--reps", "2",
                                   "--allocators", allocators, "--out", g_compare_out,
                                   "--args", "alloc-pair-1t=-S 0.1"};
  if (!g_lib.empty()) {
    argv.push_back("--lib");
    argv.push_back(g_lib);
  }
  auto opts = test::options();
  opts.timeout_s = 60;
  const auto r = spawn(argv, opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  const std::size_t n_alloc = g_lib.empty() ? 1 : 2;
  // Progress lines on stderr, one per run.
  std::string first_progress = "[1/";
  first_progress += std::to_string(2 * 2 * n_alloc);
  first_progress += "] alloc-pair-1t under ";
  EXPECT_NE(r.err.find(first_progress), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ghost: not installed, skipped"), std::string::npos) << r.err;
  // results.md, also printed on stdout.
  const std::string md = slurp(fs::path(g_compare_out) / "results.md");
  EXPECT_EQ(md, r.out);
  EXPECT_NE(md.find("## Overview"), std::string::npos);
  EXPECT_NE(md.find("### alloc-pair-1t"), std::string::npos);
  EXPECT_NE(md.find("### phases"), std::string::npos);
  EXPECT_NE(md.find("Skipped: ghost"), std::string::npos);
  EXPECT_NE(md.find("-S 0.1"), std::string::npos);  // --args recorded
  EXPECT_NE(md.find("2/2"), std::string::npos);
  EXPECT_NE(md.find("Rss - LazyFree"), std::string::npos);
  // results.csv: header + one line per run, all ok.
  std::istringstream csv(slurp(fs::path(g_compare_out) / "results.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("workload,allocator,rep,ok,", 0), 0u);
  std::size_t rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    EXPECT_NE(line.find(",1,ok,"), std::string::npos) << line;
  }
  EXPECT_EQ(rows, 2 * 2 * n_alloc);
  // Series files for phases, one per run; the plots when gnuplot exists,
  // else a note that says why there are none (tools/deps.sh installs
  // gnuplot only with --with-peers).
  EXPECT_TRUE(fs::exists(fs::path(g_compare_out) / "series" / "phases.glibc.rep1.tsv"));
  EXPECT_TRUE(fs::exists(fs::path(g_compare_out) / "logs" / "phases.glibc.rep2.log"));
  if (!resolve_preload("gnuplot", {"/usr/bin", "/usr/local/bin", "/bin"}).empty()) {
    EXPECT_GT(fs::file_size(fs::path(g_compare_out) / "throughput.svg"), 500u);
    EXPECT_GT(fs::file_size(fs::path(g_compare_out) / "phases-memory.svg"), 500u);
    EXPECT_NE(md.find("![throughput.svg](throughput.svg)"), std::string::npos);
  } else {
    EXPECT_FALSE(fs::exists(fs::path(g_compare_out) / "throughput.svg"));
    EXPECT_NE(md.find("gnuplot not found: no plots"), std::string::npos) << md;
  }
}

// A pattern names every workload it matches, including those outside `all`.
TEST(Compare, PatternSelectsMatchingWorkloads) {
  ASSERT_FALSE(g_compare_out.empty()) << "no --compare-out given";
  namespace fs = std::filesystem;
  const std::string out = g_compare_out + "-pattern";
  fs::remove_all(out);
  auto opts = test::options();
  opts.timeout_s = 60;
  auto r = spawn({g_lazybench, "compare", "idle-release-d-*", "--quick", "--reps", "1", "--allocators", "glibc",
                        "--no-plots", "--out", out},
                       opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  for (const char* size : {"64", "1000", "4000", "30000"})
    EXPECT_NE(r.err.find(std::string("] idle-release-d-") + size + " under glibc"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[4/4]"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[5/"), std::string::npos) << r.err;
  const std::string md = slurp(fs::path(out) / "results.md");
  EXPECT_NE(md.find("### idle-release-d-30000"), std::string::npos);
  EXPECT_NE(md.find("MiB (lower better)"), std::string::npos) << md;
  fs::remove_all(out);
  r = spawn({g_lazybench, "compare", "no-such-*", "--quick", "--out", out}, test::options());
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
  EXPECT_NE(r.err.find("no workload matches 'no-such-*'"), std::string::npos) << r.err;
}

// redis-server under lazymalloc (when built) and glibc: a throughput figure
// per allocator and command, the memory columns, in all three outputs.
TEST(Server, QuickRunReportsEveryAllocatorAndCommand) {
  ASSERT_FALSE(g_server_out.empty()) << "no --server-out given";
  namespace fs = std::filesystem;
  fs::remove_all(g_server_out);
  const std::vector<std::string> allocators = tool_allocators();
  auto opts = test::options();
  opts.timeout_s = 120;
  const auto r = spawn(tool_argv({g_lazybench, "server", "--quick", "--reps", "2", "--out", g_server_out}), opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  const std::vector<std::string> commands = {"SET", "GET", "LPUSH", "LPOP"};
  const std::vector<std::string> memory = {"start_rss_mib", "start_held_mib", "loaded_rss_mib", "peak_rss_mib",
                                           "idle_held_mib", "wait_rss_mib",   "wait_held_mib",  "bench_peak_rss_mib"};
  // Progress: per repetition, each command under every allocator, then the
  // memory phase of every allocator (both repetitions: --memory-reps 3).
  const std::string runs = std::to_string((4 * 2 + 2) * allocators.size());
  std::string last = "[";
  last += runs;
  last += "/";
  last += runs;
  last += "] memory under ";
  EXPECT_NE(r.err.find(last), std::string::npos) << r.err;
  for (const auto& a : allocators) EXPECT_NE(r.err.find("] rep 2 lpop under " + a + " ... LPOP "), std::string::npos) << r.err;

  // results.json: medians over both repetitions.
  const auto json = nlohmann::json::parse(slurp(fs::path(g_server_out) / "results.json"));
  EXPECT_EQ(json.at("failures"), 0);
  EXPECT_EQ(json.at("keys"), 20000);
  ASSERT_EQ(json.at("allocators").size(), allocators.size()) << json.dump(2);
  for (std::size_t k = 0; k < allocators.size(); ++k) {
    const auto& a = json.at("allocators")[k];
    EXPECT_EQ(a.at("name"), allocators[k]);
    for (const auto& cmd : commands) {
      const auto& t = a.at("throughput").at(cmd);
      EXPECT_EQ(t.at("runs"), 2) << allocators[k] << " " << cmd;
      EXPECT_GT(t.at("median").get<double>(), 0) << allocators[k] << " " << cmd;
      EXPECT_GT(t.at("vs_glibc").get<double>(), 0) << allocators[k] << " " << cmd;
      // The paired ratios: one per repetition; glibc's against itself 1.
      const auto& p = t.at("paired_vs_glibc");
      EXPECT_EQ(p.at("runs"), 2) << allocators[k] << " " << cmd;
      EXPECT_GT(p.at("min").get<double>(), 0) << allocators[k] << " " << cmd;
      EXPECT_LE(p.at("min").get<double>(), p.at("median").get<double>()) << allocators[k] << " " << cmd;
      EXPECT_GE(p.at("max").get<double>(), p.at("median").get<double>()) << allocators[k] << " " << cmd;
      if (allocators[k] == "glibc") {
        EXPECT_EQ(p.at("median").get<double>(), 1.0) << cmd;
      }
      // Server CPU per request: clock ticks, so a command of 20,000
      // requests may round to 0 (the sum over a run's commands is checked
      // in results.csv below).
      const auto& c = a.at("cpu_us_per_request").at(cmd);
      EXPECT_EQ(c.at("runs"), 2) << allocators[k] << " " << cmd;
      EXPECT_GE(c.at("median").get<double>(), 0) << allocators[k] << " " << cmd;
      EXPECT_TRUE(c.contains("paired_vs_glibc")) << allocators[k] << " " << cmd;
    }
    const auto& m = a.at("memory");
    for (const auto& key : memory) {
      EXPECT_EQ(m.at(key).at("runs"), 2) << allocators[k] << " " << key;
      EXPECT_GT(m.at(key).at("median").get<double>(), 0) << allocators[k] << " " << key;
    }
    // 20,000 values of 300 bytes are about 6 MiB more than the empty server.
    EXPECT_GT(m.at("loaded_rss_mib").at("median").get<double>(), m.at("start_rss_mib").at("median").get<double>() + 5)
        << allocators[k];
    EXPECT_GE(m.at("peak_rss_mib").at("median").get<double>(), m.at("loaded_rss_mib").at("median").get<double>())
        << allocators[k];
    EXPECT_EQ(m.at("runs"), 2);
  }
  if (!g_lib.empty()) {
    // The preloads really differ: lazymalloc's library, and libc for glibc
    // (Debian's redis-server links libjemalloc).
    EXPECT_NE(json.at("allocators")[0].at("preload").get<std::string>().find("liblazymalloc"), std::string::npos);
  }
  EXPECT_NE(json.at("allocators").back().at("preload").get<std::string>().find("libc.so.6"), std::string::npos);

  // results.md (also on stdout): a row per command in the overview, a row
  // per command and allocator in the detail, a row per allocator in the
  // memory table.
  const std::string md = slurp(fs::path(g_server_out) / "results.md");
  EXPECT_EQ(md, r.out);
  for (const auto& cmd : commands) {
    EXPECT_NE(md.find("| " + cmd + " "), std::string::npos) << md;
    for (const auto& a : allocators) EXPECT_NE(md.find("| " + cmd + std::string(8 - cmd.size(), ' ') + "| " + a), std::string::npos) << cmd << " " << a << "\n" << md;
  }
  for (const auto& a : allocators) EXPECT_NE(md.find("\n| " + a + " "), std::string::npos) << md;
  EXPECT_NE(md.find("### Server CPU per request"), std::string::npos) << md;
  EXPECT_NE(md.find("### Requests/s against glibc, paired"), std::string::npos) << md;
  EXPECT_NE(md.find("- CPUs: servers "), std::string::npos) << md;
  for (const char* column : {"start Rss", "start held", "loaded Rss", "peak (VmHWM)", "held after idle", "Rss after wait",
                             "settled", "bench peak"})
    EXPECT_NE(md.find(column), std::string::npos) << column;

  // results.csv: per run, a positive rate for each command.
  std::istringstream csv(slurp(fs::path(g_server_out) / "results.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "rep,allocator,phase,metric,t_s,value,unit,status");
  std::map<std::string, int> rates, cpus;
  std::map<std::string, double> cpu_sum;  // us per request, summed over the commands of a run
  while (std::getline(csv, line)) {
    EXPECT_NE(line.find(",ok"), std::string::npos) << line;
    for (const auto& cmd : commands) {
      if (line.find(",throughput," + cmd + ",,") != std::string::npos) {
        const auto v = line.substr(line.find(",,") + 2);
        EXPECT_GT(std::stod(v), 0) << line;
        ++rates[line.substr(0, line.find(",throughput"))];
      }
      if (line.find(",cpu," + cmd + ",,") != std::string::npos) {
        EXPECT_NE(line.find(",us/req,ok"), std::string::npos) << line;
        const double v = std::stod(line.substr(line.find(",,") + 2));
        EXPECT_GE(v, 0) << line;
        const auto who = line.substr(0, line.find(",cpu"));
        ++cpus[who];
        cpu_sum[who] += v;
      }
    }
  }
  EXPECT_EQ(rates.size(), 2 * allocators.size());  // (rep, allocator) pairs
  for (const auto& [who, count] : rates) EXPECT_EQ(count, 4) << who;
  EXPECT_EQ(cpus.size(), 2 * allocators.size());
  for (const auto& [who, count] : cpus) EXPECT_EQ(count, 4) << who;
  // 4 x 20,000 requests take the server well over one 10 ms clock tick.
  for (const auto& [who, sum] : cpu_sum) EXPECT_GT(sum, 0) << who;
}

// The rows of a markdown table on stdout, by their first cell.
std::map<std::string, std::vector<std::string>> table_rows(const std::string& md) {
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() < 2 || line[0] != '|' || line.find("---") != std::string::npos) continue;
    std::vector<std::string> cells;
    std::istringstream fields(line.substr(1));
    std::string c;
    while (std::getline(fields, c, '|')) {
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
    }
    if (!cells.empty()) rows[cells[0]] = cells;
  }
  return rows;
}

// `lazybench startup`: a row per allocator with its peak RSS (a process
// holds at least its own stack and code), glibc's row the reference.
TEST(Tools, StartupReportsEveryAllocator) {
  auto opts = test::options();
  opts.timeout_s = 120;
  const auto r = spawn(tool_argv({g_lazybench, "startup", "--spawns", "3", "--rounds", "2", "--rss-runs", "1"}), opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  const auto rows = table_rows(r.out);
  for (const auto& a : tool_allocators()) {
    ASSERT_TRUE(rows.count(a)) << r.out;
    ASSERT_EQ(rows.at(a).size(), 6u) << r.out;
    EXPECT_GT(std::stod(rows.at(a)[1]), 0.1) << r.out;  // peak RSS, MiB
    EXPECT_GT(std::stod(rows.at(a)[4]), 0) << r.out;    // ms per process
  }
  EXPECT_EQ(rows.at("glibc")[5], "1.00x") << r.out;
}

// `lazybench idle`: a row per allocator from idle-probe's line; 16 MiB
// churned with every 32nd 64 KiB block kept is 0.5 MiB live, and no
// allocator holds less than the live data, which the probe wrote.
TEST(Tools, IdleReportsEveryAllocator) {
  auto opts = test::options();
  opts.timeout_s = 120;
  const auto r = spawn(tool_argv({g_lazybench, "idle", "--churn-mib", "16", "--settle", "0.2", "--window", "0.3"}), opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_NE(r.out.find("Idle cost after a churn of 16 MiB"), std::string::npos) << r.out;
  const auto rows = table_rows(r.out);
  for (const auto& a : tool_allocators()) {
    ASSERT_TRUE(rows.count(a)) << r.out;
    const auto& row = rows.at(a);
    ASSERT_EQ(row.size(), 8u) << r.out;
    EXPECT_EQ(row[1], "0.5") << r.out;
    EXPECT_GE(std::stod(row[2]), 0) << r.out;        // wakeups/s
    EXPECT_GE(std::stod(row[5]), 0.5) << r.out;      // held at end
    EXPECT_GE(std::stod(row[6]), -0.05) << r.out;    // held - live
  }
  const auto bad = spawn({g_lazybench, "idle", "--probe", "/nonexistent/idle-probe"}, test::options());
  EXPECT_EQ(bad.exit_code(), 2) << bad.describe();
  EXPECT_NE(bad.err.find("cannot run /nonexistent/idle-probe"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace lazybench

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  using lazybench::test::arg_value;
  lazybench::g_lazybench = arg_value(argc, argv, "lazybench");
  lazybench::g_workload = arg_value(argc, argv, "workload");
  lazybench::g_preload = arg_value(argc, argv, "preload");
  lazybench::g_expect = arg_value(argc, argv, "expect-workloads");
  lazybench::g_compare_out = arg_value(argc, argv, "compare-out");
  lazybench::g_server_out = arg_value(argc, argv, "server-out");
  lazybench::g_lib = arg_value(argc, argv, "lib");
  if (lazybench::g_lazybench.empty()) {
    std::fprintf(stderr, "usage: %s --lazybench PATH [--workload NAME [--preload LIB]] ...\n", argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
