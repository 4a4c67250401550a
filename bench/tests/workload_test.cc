// Runs lazybench as a child process, the way `compare` does:
//
//   bench_workload_test --lazybench PATH --workload NAME [--preload LIB]
//       one workload with --quick under glibc or under LIB (LD_PRELOAD);
//       checks the exit status, the result line and the metric.
//   bench_workload_test --lazybench PATH --expect-workloads a,b,c
//       `lazybench --list` lists exactly these (so none goes untested).
//   bench_workload_test --lazybench PATH --compare-out DIR [--lib LIB]
//       a small `lazybench compare` end to end: report, CSV, plots, skips.
//
// Each ctest entry selects with --gtest_filter the tests its arguments are
// for; a test run without its argument fails (it is never skipped).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/args.h"
#include "harness/result.h"
#include "spawn.h"

namespace lazybench {
namespace {

std::string g_lazybench, g_workload, g_preload, g_expect, g_compare_out, g_lib;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Workload, RunsQuicklyAndReportsItsMetric) {
  ASSERT_FALSE(g_workload.empty()) << "no --workload given";
  test::SpawnOptions opts;
  opts.timeout_s = 30;  // a hang fails (killed), not a slow machine
  if (g_preload.empty()) opts.env["LD_PRELOAD"] = std::nullopt;
  else opts.env["LD_PRELOAD"] = g_preload;
  const auto r = test::spawn({g_lazybench, "run", g_workload, "--quick"}, opts);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::string error;
  const auto result = find_result(r.out, &error);
  ASSERT_TRUE(result) << error << "\n" << r.describe();
  EXPECT_EQ(result->workload, g_workload);
  EXPECT_FALSE(result->metric.name.empty());
  EXPECT_FALSE(result->metric.unit.empty());
  EXPECT_TRUE(std::isfinite(result->metric.value));
  EXPECT_GT(result->metric.value, 0) << r.out;
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
  if (g_workload == "phases" || g_workload == "huge-free") {
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

TEST(Workload, PhasesWritesTimeSeries) {
  ASSERT_EQ(g_workload, "phases") << "run with --workload phases";
  const auto file = std::filesystem::temp_directory_path() /
                    ("lazybench-series-" + std::to_string(::getpid()) + ".tsv");
  test::SpawnOptions opts;
  opts.env["LD_PRELOAD"] = g_preload.empty() ? std::nullopt : std::optional<std::string>(g_preload);
  const auto r = test::spawn({g_lazybench, "run", "phases", "--quick", "--series", file.string()}, opts);
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
  const auto r = test::spawn({g_lazybench, "--list"});
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

TEST(Workload, RunRejectsUnknownWorkloadAndShowsHelp) {
  ASSERT_FALSE(g_expect.empty()) << "run with the --expect-workloads entry";
  auto r = test::spawn({g_lazybench, "run", "no-such-workload"});
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
  EXPECT_NE(r.err.find("unknown workload"), std::string::npos);
  r = test::spawn({g_lazybench, "run", "ebizzy", "--help"});
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_NE(r.out.find("--chunk-size"), std::string::npos) << r.out;
  r = test::spawn({g_lazybench, "compare", "no-such-workload"});
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
  test::SpawnOptions opts;
  opts.timeout_s = 60;
  const auto r = test::spawn(argv, opts);
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
  lazybench::g_lib = arg_value(argc, argv, "lib");
  if (lazybench::g_lazybench.empty()) {
    std::fprintf(stderr, "usage: %s --lazybench PATH [--workload NAME [--preload LIB]] ...\n", argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
