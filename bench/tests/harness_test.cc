// Unit tests of lazybench's harness library: statistics, ratios, table
// formatting, result lines (JSON), argument parsing, the process spawner, and
// the `run` command's option handling (in-process).
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/args.h"
#include "harness/plot.h"
#include "harness/report.h"
#include "harness/result.h"
#include "harness/rng.h"
#include "harness/stats.h"
#include "harness/sysinfo.h"
#include "run.h"
#include "subprocess.h"
#include "workloads/workload.h"

#ifdef LAZYBENCH_HAVE_RUN_ARGS
#include "lazymalloc-run-args.h"
#endif
#ifdef LAZYBENCH_HAVE_OPTION_TABLE
#include "option-table.h"
#endif

namespace lazybench {
namespace {

TEST(Stats, MedianOddEvenAndUnsorted) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_DOUBLE_EQ(median({5, 5, 1, 9, 9}), 5);
  EXPECT_THROW(median({}), std::invalid_argument);
}

TEST(Stats, SummaryHasMinMaxCount) {
  const auto s = summarize({10, 30, 20, 40});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->count, 4u);
  EXPECT_DOUBLE_EQ(s->median, 25);
  EXPECT_DOUBLE_EQ(s->min, 10);
  EXPECT_DOUBLE_EQ(s->max, 40);
  EXPECT_FALSE(summarize({}));
}

TEST(Stats, SpeedupFollowsMetricDirection) {
  EXPECT_DOUBLE_EQ(*speedup(200, 100, true), 2.0);   // twice the throughput
  EXPECT_DOUBLE_EQ(*speedup(50, 100, false), 2.0);   // half the latency
  EXPECT_DOUBLE_EQ(*speedup(100, 200, true), 0.5);
  EXPECT_FALSE(speedup(0, 100, true));
  EXPECT_FALSE(speedup(100, 0, false));
  EXPECT_FALSE(speedup(NAN, 1, true));
}

// Paired ratios (lazybench server): each repetition's value against the
// reference's of the same repetition.  Here the machine's speed halves and
// doubles between repetitions (the reference's own runs spread 100..400)
// while the allocator is 10% faster in two of three: the ratio of the
// medians (140 / 200 = 0.70x) calls it slower, the median of the paired
// ratios says 1.10x.
TEST(Stats, PairedRatiosCancelDriftBetweenRepetitions) {
  const std::map<int, double> reference = {{1, 100}, {2, 400}, {3, 200}};
  const std::map<int, double> values = {{1, 110}, {2, 440}, {3, 140}};
  const auto ratios = paired_ratios(values, reference, true);
  ASSERT_EQ(ratios.size(), 3u);
  EXPECT_DOUBLE_EQ(ratios[0], 1.1);  // in repetition order
  EXPECT_DOUBLE_EQ(ratios[1], 1.1);
  EXPECT_DOUBLE_EQ(ratios[2], 0.7);
  EXPECT_DOUBLE_EQ(summarize(ratios)->median, 1.1);
  EXPECT_NEAR(*speedup(median({110, 440, 140}), median({100, 400, 200}), true), 0.7, 1e-12);
  // Lower is better (CPU per request): reference / value.
  const auto cpu = paired_ratios({{1, 0.5}, {2, 2.0}}, {{1, 1.0}, {2, 1.0}}, false);
  EXPECT_EQ(cpu, (std::vector<double>{2.0, 0.5}));
  // Only repetitions that both have; a value <= 0 (a failed or unmeasurable
  // run) pairs with nothing.
  EXPECT_EQ(paired_ratios({{1, 10}, {2, 20}, {4, 0}}, {{2, 10}, {3, 10}, {4, 10}}, true), (std::vector<double>{2.0}));
  EXPECT_TRUE(paired_ratios({}, reference, true).empty());
  // Against itself: 1 in every repetition.
  EXPECT_EQ(paired_ratios(reference, reference, true), (std::vector<double>{1.0, 1.0, 1.0}));
}

TEST(Stats, BestIndexSkipsExcludedAndNan) {
  const std::vector<double> v = {5, 9, NAN, 7};
  EXPECT_EQ(*best_index(v, true), 1u);
  EXPECT_EQ(*best_index(v, true, 1), 3u);
  EXPECT_EQ(*best_index(v, false), 0u);
  EXPECT_EQ(*best_index(v, false, 0), 3u);
  EXPECT_FALSE(best_index({NAN}, true));
  EXPECT_FALSE(best_index({1}, true, 0));
}

TEST(Stats, FormatNumbers) {
  EXPECT_EQ(format_si(1234567), "1.23M");
  EXPECT_EQ(format_si(12.5), "12.5");
  EXPECT_EQ(format_si(1234), "1234");
  EXPECT_EQ(format_si(98765), "98.8k");
  EXPECT_EQ(format_si(0.000123), "0.000123");
  EXPECT_EQ(format_si(0), "0");
  EXPECT_EQ(format_si(2.5e9), "2.50G");
  EXPECT_EQ(format_ratio(1.234), "1.23x");
  EXPECT_EQ(format_ratio(std::nullopt), "-");
  EXPECT_EQ(format_fixed(3.14159, 2), "3.14");
  EXPECT_EQ(format_count(4), "4");
  EXPECT_EQ(format_count(9999), "9999");
  EXPECT_EQ(format_count(12345), "12.3k");
}

TEST(Stats, MarkdownTableAlignsAndEscapes) {
  MarkdownTable t({{"name", false}, {"value", true}});
  t.add_row({"a|b", "1"});
  t.add_row({"longer", "12345"});
  const std::string expected =
      "| name   | value |\n"
      "| ------ | ----: |\n"
      "| a\\|b   |     1 |\n"
      "| longer | 12345 |\n";
  EXPECT_EQ(t.render(), expected);
  EXPECT_THROW(t.add_row({"only one"}), std::invalid_argument);
}

TEST(Stats, CsvQuotesOnlyWhenNeeded) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_line({"a", "b c", "d,e"}), "a,b c,\"d,e\"\n");
}

TEST(Stats, CsvNumberIsShortestRoundTrip) {
  EXPECT_EQ(csv_number(5), "5");
  EXPECT_EQ(csv_number(3.25), "3.25");
  EXPECT_EQ(csv_number(-0.1), "-0.1");
  EXPECT_EQ(csv_number(1e20), "1e+20");
  EXPECT_EQ(std::stod(csv_number(1.0 / 3)), 1.0 / 3);
  EXPECT_EQ(csv_number(NAN), "");
  EXPECT_EQ(csv_number(INFINITY), "");
}

RunResult sample_result() {
  RunResult r;
  r.workload = "phases";
  r.allocator = "glibc";
  r.seed = "0x00000000000000ff";
  r.metric = {"phase_time", 12.5, "ms", false};
  r.wall_s = 3.25;
  r.usage.user_s = 1.5;
  r.usage.sys_s = 0.25;
  r.usage.minflt = 1234;
  r.usage.maxrss_kib = 2048;
  r.extra = {{"held_mib", 3.5}, {"rss_mib", 10}};
  return r;
}

TEST(Result, LineRoundTrips) {
  const std::string line = to_json_line(sample_result());
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto r = parse_result_line(line);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->workload, "phases");
  EXPECT_EQ(r->metric.name, "phase_time");
  EXPECT_DOUBLE_EQ(r->metric.value, 12.5);
  EXPECT_EQ(r->metric.unit, "ms");
  EXPECT_FALSE(r->metric.higher_is_better);
  EXPECT_DOUBLE_EQ(r->wall_s, 3.25);
  EXPECT_DOUBLE_EQ(r->usage.user_s, 1.5);
  EXPECT_EQ(r->usage.minflt, 1234);
  EXPECT_EQ(r->usage.maxrss_kib, 2048);
  EXPECT_DOUBLE_EQ(*r->extra_value("held_mib"), 3.5);
  EXPECT_EQ(r->seed, "0x00000000000000ff");
}

TEST(Result, LineKeepsKeyOrderEscapesAndNonFiniteNumbers) {
  RunResult r = sample_result();
  r.workload = "we\"ird\nname\\";
  r.metric.value = NAN;
  const std::string line = to_json_line(r);
  // find_result() looks for lines that start so.
  EXPECT_EQ(line.rfind("{\"lazybench\":1,\"workload\":", 0), 0u) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_NE(line.find("\"value\":null"), std::string::npos) << line;
  // A metric that is not a number is no result.
  std::string error;
  EXPECT_FALSE(parse_result_line(line, &error));
  EXPECT_EQ(error, "metric has no numeric value");
  r.metric.value = 1;
  const auto back = parse_result_line(to_json_line(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->workload, r.workload);
  EXPECT_EQ(extra_json(r), "{\"held_mib\":3.5,\"rss_mib\":10.0}");
}

TEST(Result, RejectsWhatIsNotAResultLine) {
  std::string error;
  EXPECT_FALSE(parse_result_line("{\"lazybench\":1,\"metric\":{\"value\":1},}", &error));
  EXPECT_EQ(error.rfind("not JSON: ", 0), 0u) << error;
  EXPECT_FALSE(parse_result_line("{\"lazybench\":1,\"metric\":{\"value\":1}} x", &error));
  EXPECT_EQ(error.rfind("not JSON: ", 0), 0u) << error;
  EXPECT_FALSE(parse_result_line("", &error));
  EXPECT_EQ(error.rfind("not JSON: ", 0), 0u) << error;
  EXPECT_FALSE(parse_result_line("[1,2]", &error));
  EXPECT_EQ(error, "not a lazybench result");
  EXPECT_FALSE(parse_result_line("{\"lazybench\":\"1\",\"metric\":{\"value\":1}}", &error));
  EXPECT_EQ(error, "not a lazybench result");
  EXPECT_FALSE(parse_result_line("{\"lazybench\":1,\"metric\":3}", &error));
  EXPECT_EQ(error, "result has no metric object");
  // Only the members that are numbers count as extras; higher_is_better
  // defaults to true.
  const auto r = parse_result_line(
      R"({"lazybench":1,"metric":{"value":2,"higher_is_better":"no"},"extra":{"a":1,"b":"x","c":[1]}})");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->metric.higher_is_better);
  ASSERT_EQ(r->extra.size(), 1u);
  EXPECT_EQ(r->extra[0].first, "a");
}

TEST(Result, FindsLastResultAmongOtherOutput) {
  RunResult a = sample_result(), b = sample_result();
  b.metric.value = 99;
  const std::string out = "noise\n" + to_json_line(a) + "\nmore noise {\n" + to_json_line(b) + "\n\n";
  const auto r = find_result(out);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->metric.value, 99);
  std::string error;
  EXPECT_FALSE(find_result("nothing here\n", &error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(parse_result_line("{\"lazybench\":1}"));  // no metric
}

TEST(Args, ParseSizes) {
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("16K"), 16384u);
  EXPECT_EQ(*parse_size("16KiB"), 16384u);
  EXPECT_EQ(*parse_size("2m"), 2u << 20);
  EXPECT_EQ(*parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(*parse_size(" 512 MB "), 512ull << 20);
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_FALSE(parse_size("12Q"));
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("K"));
  EXPECT_FALSE(parse_size("99999999999T"));
  EXPECT_EQ(format_size(16384), "16 KiB");
  EXPECT_EQ(format_size(3u << 20), "3 MiB");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
  EXPECT_EQ(format_size(100), "100 B");
}

TEST(Args, ParseSeconds) {
  EXPECT_DOUBLE_EQ(*parse_seconds("2"), 2);
  EXPECT_DOUBLE_EQ(*parse_seconds("0.5"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_seconds("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*parse_seconds("3s"), 3);
  EXPECT_DOUBLE_EQ(*parse_seconds("1min"), 60);
  EXPECT_FALSE(parse_seconds("fast"));
  EXPECT_FALSE(parse_seconds("3h"));
}

TEST(Args, ListsAssignmentsAndWords) {
  EXPECT_EQ(split_list("a,b,,c d"), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(split_list("").empty());
  EXPECT_EQ(*parse_assignment("MALLOC_CONF=a:1,b:2"), std::make_pair(std::string("MALLOC_CONF"), std::string("a:1,b:2")));
  EXPECT_FALSE(parse_assignment("=x"));
  EXPECT_FALSE(parse_assignment("NOEQUALS"));
  EXPECT_FALSE(parse_assignment("BAD-NAME=1"));
  EXPECT_EQ(*split_words("-S 2 --size '16 K' \"a b\" c\\ d"),
            (std::vector<std::string>{"-S", "2", "--size", "16 K", "a b", "c d"}));
  EXPECT_FALSE(split_words("'open"));
}

TEST(Args, CpuLists) {
  EXPECT_EQ(*parse_cpu_list("1"), (std::vector<int>{1}));
  EXPECT_EQ(*parse_cpu_list("0-3,6"), (std::vector<int>{0, 1, 2, 3, 6}));
  EXPECT_EQ(*parse_cpu_list("5,2,2-3"), (std::vector<int>{2, 3, 5}));  // sorted, each once
  for (const char* bad : {"", ",", "a", "1-", "-1", "3-1", "1-2x", "4096", "0-5000"})
    EXPECT_FALSE(parse_cpu_list(bad)) << bad;
}

TEST(Args, AllocatorSpecs) {
  const auto lazy = parse_allocator("lazymalloc", "/b/liblazymalloc.so");
  ASSERT_TRUE(lazy);
  EXPECT_EQ(lazy->preload, "/b/liblazymalloc.so");
  EXPECT_TRUE(lazy->builtin);
  const auto glibc = parse_allocator("glibc", "");
  ASSERT_TRUE(glibc);
  EXPECT_TRUE(glibc->preload.empty());
  const auto tbb = parse_allocator("tbbmalloc", "");
  ASSERT_TRUE(tbb);
  EXPECT_EQ(tbb->preload, "libtbbmalloc_proxy.so.2");
  const auto bg = parse_allocator("jemalloc-bg", "");
  ASSERT_TRUE(bg);
  ASSERT_EQ(bg->env.size(), 1u);
  EXPECT_EQ(bg->env[0].first, "MALLOC_CONF");
  EXPECT_EQ(bg->env[0].second, "background_thread:true");
  const auto custom = parse_allocator("mine=/opt/libmine.so", "");
  ASSERT_TRUE(custom);
  EXPECT_EQ(custom->name, "mine");
  EXPECT_EQ(custom->preload, "/opt/libmine.so");
  EXPECT_FALSE(custom->builtin);
  EXPECT_FALSE(parse_allocator("nosuchmalloc", ""));
  EXPECT_FALSE(parse_allocator("x=", ""));
  EXPECT_EQ(default_allocator_names().front(), "lazymalloc");
}

TEST(Args, ResolvePreloadSearchesDirectories) {
  EXPECT_EQ(resolve_preload("", {"/"}), "");
  EXPECT_EQ(resolve_preload("/nonexistent/lib.so", {}), "");
  EXPECT_EQ(resolve_preload("/bin/sh", {}), "/bin/sh");
  EXPECT_EQ(resolve_preload("sh", {"/nonexistent", "/bin"}), "/bin/sh");
  EXPECT_EQ(resolve_preload("no-such-file-here", {"/bin"}), "");
}

TEST(Smaps, ParsesRollup) {
  const std::string text =
      "55d0c0000000-7ffc00000000 ---p 00000000 00:00 0                          [rollup]\n"
      "Rss:              204800 kB\n"
      "Pss:              200000 kB\n"
      "LazyFree:          51200 kB\n"
      "AnonHugePages:     4096 kB\n";
  const auto s = parse_smaps_rollup(text);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rss_kib, 204800);
  EXPECT_EQ(s->lazyfree_kib, 51200);
  EXPECT_EQ(s->anonhuge_kib, 4096);
  EXPECT_EQ(s->held_kib(), 153600);
  EXPECT_FALSE(parse_smaps_rollup("Pss: 1 kB\n"));
  EXPECT_EQ(*proc_field_kib("VmRSS:\t  1234 kB\n", "VmRSS"), 1234);
  // The live reader works on this kernel.
  const auto live = read_mem_sample();
  ASSERT_TRUE(live);
  EXPECT_GT(live->rss_kib, 0);
}

// The machine line names free page reporting (bit 5 of a virtio-balloon's
// features) with its block size; other features, or none, say nothing.
TEST(Machine, FreePageReportingFromTheBalloonsFeatures) {
  const std::string reporting = "0110010100000000000000000000000010000000";  // a Firecracker guest's
  EXPECT_EQ(page_reporting_kib(reporting, "11\n"), 8192u);
  EXPECT_EQ(page_reporting_kib(reporting, ""), 2048u) << "order 9 when the order is unknown";
  EXPECT_EQ(page_reporting_kib("0110000100000000", "11\n"), 0u) << "stats and deflate-on-OOM only";
  EXPECT_EQ(page_reporting_kib("01100", "11"), 0u) << "too short for bit 5";
  EXPECT_EQ(page_reporting_kib("", ""), 0u);
  EXPECT_EQ(page_reporting_kib("0000010", "x"), 2048u);
}

TEST(Smaps, UsageDeltaAndDetection) {
  Usage a, b;
  a.user_s = 1;
  b.user_s = 3.5;
  a.minflt = 10;
  b.minflt = 25;
  b.maxrss_kib = 77;
  const auto d = Usage::delta(a, b);
  EXPECT_DOUBLE_EQ(d.user_s, 2.5);
  EXPECT_EQ(d.minflt, 15);
  EXPECT_EQ(d.maxrss_kib, 77);
  EXPECT_EQ(detect_allocator(), "glibc");  // the test binary preloads nothing
  const std::string load = load_average();
  EXPECT_EQ(std::count(load.begin(), load.end(), ' '), 2) << load;
}

TEST(Rng, StreamsDifferAndStayInRange) {
  Rng a(Rng::derive(42, 0)), b(Rng::derive(42, 1)), c(Rng::derive(43, 0)), a2(Rng::derive(42, 0));
  const auto x = a.next();
  EXPECT_NE(x, b.next());
  EXPECT_NE(x, c.next());
  EXPECT_EQ(x, a2.next());
  Rng r(7);
  std::vector<int> hist(10, 0);
  for (int i = 0; i < 100000; ++i) {
    const auto v = r.below(10);
    ASSERT_LT(v, 10u);
    ++hist[v];
  }
  for (int h : hist) EXPECT_GT(h, 9000);  // roughly uniform: every value is picked
  for (int i = 0; i < 1000; ++i) {
    const auto v = r.between(16, 512);
    ASSERT_GE(v, 16u);
    ASSERT_LE(v, 512u);
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

RunRecord record(const std::string& w, const std::string& a, int rep, double value, bool hib = true,
                 double held = -1) {
  RunRecord rec;
  rec.workload = w;
  rec.allocator = a;
  rec.rep = rep;
  rec.ok = true;
  rec.status = "ok";
  RunResult r;
  r.workload = w;
  r.allocator = a;
  r.metric = {"throughput", value, hib ? "ops/s" : "ms", hib};
  r.usage.user_s = value / 100;
  r.usage.maxrss_kib = 1024;
  if (held >= 0) r.extra = {{"held_mib", held}};
  rec.result = r;
  return rec;
}

TEST(Report, MediansAndRatios) {
  std::vector<RunRecord> recs = {
      record("w", "glibc", 1, 100), record("w", "glibc", 2, 120), record("w", "glibc", 3, 110),
      record("w", "lazymalloc", 1, 300), record("w", "lazymalloc", 2, 200), record("w", "lazymalloc", 3, 220),
      record("w", "jemalloc", 1, 440), record("w", "jemalloc", 2, 400), record("w", "jemalloc", 3, 420),
      record("other", "glibc", 1, 1)};
  RunRecord failed;
  failed.workload = "w";
  failed.allocator = "mimalloc";
  failed.rep = 1;
  failed.status = "killed by SIGSEGV";
  recs.push_back(failed);
  const auto s = summarize_workload("w", {"lazymalloc", "glibc", "jemalloc", "mimalloc"}, recs);
  ASSERT_EQ(s.rows.size(), 4u);
  EXPECT_EQ(s.unit, "ops/s");
  const auto* lazy = s.row("lazymalloc");
  ASSERT_TRUE(lazy && lazy->metric);
  EXPECT_DOUBLE_EQ(lazy->metric->median, 220);
  EXPECT_DOUBLE_EQ(lazy->metric->min, 200);
  EXPECT_DOUBLE_EQ(lazy->metric->max, 300);
  EXPECT_DOUBLE_EQ(*lazy->vs_glibc, 2.0);      // 220 / 110
  EXPECT_DOUBLE_EQ(*lazy->vs_best, 220.0 / 420.0);
  EXPECT_EQ(lazy->best_other, "jemalloc");
  const auto* je = s.row("jemalloc");
  EXPECT_EQ(je->best_other, "lazymalloc");
  EXPECT_DOUBLE_EQ(*je->vs_best, 420.0 / 220.0);
  const auto* mi = s.row("mimalloc");
  EXPECT_FALSE(mi->metric);
  EXPECT_EQ(mi->failures, 1u);
  EXPECT_EQ(mi->runs, 1u);

  const std::string detail = render_detail(s);
  EXPECT_NE(detail.find("### w"), std::string::npos);
  EXPECT_NE(detail.find("| lazymalloc"), std::string::npos);
  EXPECT_NE(detail.find("2.00x"), std::string::npos);
  EXPECT_NE(detail.find("200..300"), std::string::npos);
  EXPECT_NE(detail.find("0.52x (jemalloc)"), std::string::npos);
  EXPECT_NE(detail.find("failed"), std::string::npos);
  EXPECT_NE(detail.find("0/1"), std::string::npos);
  EXPECT_NE(detail.find("3/3"), std::string::npos);
}

TEST(Report, LowerIsBetterAndHeldMemory) {
  std::vector<RunRecord> recs = {record("phases", "glibc", 1, 40, false, 100),
                                 record("phases", "lazymalloc", 1, 10, false, 5)};
  const auto s = summarize_workload("phases", {"glibc", "lazymalloc"}, recs);
  EXPECT_TRUE(s.has_held);
  EXPECT_FALSE(s.higher_is_better);
  EXPECT_DOUBLE_EQ(*s.row("lazymalloc")->vs_glibc, 4.0);  // 40 ms / 10 ms
  EXPECT_DOUBLE_EQ(*s.row("lazymalloc")->held_mib, 5);
  const std::string overview = render_overview({s}, {"glibc", "lazymalloc"});
  EXPECT_NE(overview.find("4.00x"), std::string::npos);
  EXPECT_NE(overview.find("lower better"), std::string::npos);
  EXPECT_NE(overview.find("Rss - LazyFree"), std::string::npos);
  EXPECT_NE(overview.find("1.0 / 100.0 / -"), std::string::npos) << overview;
  const std::string data = throughput_data({s}, {"glibc", "lazymalloc"});
  EXPECT_EQ(data, "workload\tglibc\tlazymalloc\nphases\t1.0000\t4.0000\n");
  EXPECT_DOUBLE_EQ(throughput_floor({s}), 0.5);  // lowest ratio 1.0 -> one power of two below
}

// The memory table puts each allocator's peak RSS, held memory and LazyFree
// in one cell, for every workload that measured memory; a workload without
// held figures shows its peak and "-" for the rest.
TEST(Report, MemoryTableShowsPeakHeldAndLazyFreeSideBySide) {
  std::vector<RunRecord> recs = {record("phases", "glibc", 1, 40, false, 100),
                                 record("phases", "lazymalloc", 1, 10, false, 5),
                                 record("ebizzy", "glibc", 1, 7), record("ebizzy", "lazymalloc", 1, 8)};
  recs[0].result->usage.maxrss_kib = 261 * 1024;
  recs[0].result->extra.emplace_back("lazyfree_mib", 0);
  recs[1].result->usage.maxrss_kib = 340 * 1024;
  recs[1].result->extra.emplace_back("lazyfree_mib", 30.5);
  recs[3].result->usage.maxrss_kib = 3 * 1024;
  const std::vector<std::string> allocators = {"glibc", "lazymalloc"};
  const auto phases = summarize_workload("phases", allocators, recs);
  const auto ebizzy = summarize_workload("ebizzy", allocators, recs);
  const std::string overview = render_overview({phases, ebizzy}, allocators);
  const auto table = overview.find("peak RSS / held at the end (Rss - LazyFree) / LazyFree");
  ASSERT_NE(table, std::string::npos) << overview;
  const std::string memory = overview.substr(table);
  auto line_of = [&](const std::string& workload) {
    const auto at = memory.find("| " + workload + " ");
    return at == std::string::npos ? std::string() : memory.substr(at, memory.find('\n', at) - at);
  };
  const std::string phases_line = line_of("phases");
  EXPECT_NE(phases_line.find("261.0 / 100.0 / 0.0"), std::string::npos) << memory;
  EXPECT_NE(phases_line.find("340.0 / 5.0 / 30.5"), std::string::npos) << memory;
  EXPECT_LT(phases_line.find("261.0"), phases_line.find("340.0"));  // allocator order
  const std::string ebizzy_line = line_of("ebizzy");
  EXPECT_NE(ebizzy_line.find("1.0 / - / -"), std::string::npos) << memory;
  EXPECT_NE(ebizzy_line.find("3.0 / - / -"), std::string::npos) << memory;
}

TEST(Report, ReleaseTimeIgnoresRunsThatNeverReleased) {
  std::vector<RunRecord> recs = {record("huge-free", "a", 1, 0.1, false, 5), record("huge-free", "a", 2, 0.1, false, 5),
                                 record("huge-free", "b", 1, 50, false, 5)};
  recs[0].result->extra.emplace_back("release_ms", 1000);
  recs[1].result->extra.emplace_back("release_ms", -1);  // did not release within the timeout
  recs[2].result->extra.emplace_back("release_ms", -1);
  const auto s = summarize_workload("huge-free", {"a", "b"}, recs);
  EXPECT_TRUE(s.has_release);
  EXPECT_DOUBLE_EQ(*s.row("a")->release_ms, 1000);
  EXPECT_FALSE(s.row("b")->release_ms);
  const std::string detail = render_detail(s);
  EXPECT_NE(detail.find("released after ms"), std::string::npos);
  EXPECT_NE(detail.find("never"), std::string::npos);
}

TEST(Report, CsvHasOneLinePerRunAndFixedWidth) {
  std::vector<RunRecord> recs = {record("w", "glibc", 1, 5), record("w", "glibc", 2, 6)};
  RunRecord failed;
  failed.workload = "w";
  failed.allocator = "x";
  failed.status = "exit 1, with comma";
  recs.push_back(failed);
  const std::string csv = render_csv(recs);
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind("workload,allocator,rep,ok,status,metric,value", 0), 0u);
  EXPECT_NE(lines[3].find("\"exit 1, with comma\""), std::string::npos);
  EXPECT_EQ(lines[1].rfind("w,glibc,1,1,ok,throughput,5,ops/s,1", 0), 0u);
}

TEST(Report, GnuplotQuoting) {
  EXPECT_EQ(gnuplot_quote("it's"), "'it''s'");
  const std::string script = phases_memory_script({{"glibc", "/r/a.tsv"}, {"lazy", "/r/b.tsv"}}, "/r/o.svg");
  EXPECT_NE(script.find("'/r/a.tsv' using 1:5"), std::string::npos);
  EXPECT_NE(script.find("title 'lazy'"), std::string::npos);
  EXPECT_NE(script.find("set output '/r/o.svg'"), std::string::npos);
}

TEST(Registry, HeadlineSetAndVariants) {
  std::vector<std::string> headline;
  for (const auto& w : workload_registry()) {
    EXPECT_TRUE(w.make) << w.name;
    EXPECT_FALSE(w.description.empty()) << w.name;
    EXPECT_FALSE(w.quick_args.empty()) << w.name;
    if (w.headline) headline.push_back(w.name);
  }
  EXPECT_EQ(headline, (std::vector<std::string>{"ebizzy-1t", "ebizzy-2t", "phases", "malloc-large"}));
  ASSERT_TRUE(find_workload("ebizzy-2t"));
  EXPECT_EQ(find_workload("ebizzy-2t")->fixed_args, (std::vector<std::string>{"-t", "2"}));
  EXPECT_EQ(find_workload("phases")->series_option, "--series");
  EXPECT_FALSE(find_workload("nope"));
  std::ostringstream list;
  list_workloads(list);
  EXPECT_NE(list.str().find("ebizzy-2t"), std::string::npos);
  EXPECT_NE(list.str().find("huge-free"), std::string::npos);
}

TEST(Spawn, EnvironmentStdinStderrAndStatus) {
  ::setenv("LAZYBENCH_SPAWN_KEEP", "kept", 1);
  ::setenv("LAZYBENCH_SPAWN_DROP", "dropped", 1);
  SpawnOptions o;
  o.env["LAZYBENCH_SPAWN_DROP"] = std::nullopt;
  o.env["LAZYBENCH_SPAWN_SET"] = "set";
  o.stdin_text = std::string(1 << 20, 'x');  // more than a pipe holds
  o.timeout_s = 30;
  auto r = spawn({"sh", "-c",
                  "echo \"$LAZYBENCH_SPAWN_KEEP,${LAZYBENCH_SPAWN_DROP-unset},$LAZYBENCH_SPAWN_SET\"; "
                  "wc -c; echo oops >&2; exit 3"},
                 o);
  EXPECT_EQ(r.exit_code(), 3) << r.describe();
  EXPECT_EQ(r.status_text(), "exit 3");
  EXPECT_EQ(r.out, "kept,unset,set\n1048576\n");
  EXPECT_EQ(r.err, "oops\n");
  // stderr into a file; stdin /dev/null; death by a signal.
  const auto log = std::filesystem::temp_directory_path() / ("lazybench-spawn-" + std::to_string(::getpid()));
  SpawnOptions f;
  f.stderr_to = SpawnOptions::Stderr::kFile;
  f.stderr_path = log.string();
  r = spawn({"sh", "-c", "wc -c; echo to-file >&2; kill -SEGV $$"}, f);
  EXPECT_EQ(r.term_signal(), SIGSEGV) << r.describe();
  EXPECT_EQ(r.status_text(), "killed by SIGSEGV");
  EXPECT_EQ(r.out, "0\n");
  std::ifstream in(log);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "to-file");
  std::filesystem::remove(log);
  r = spawn({"/nonexistent/lazybench-no-such-program"});
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.status_text().rfind("spawn /nonexistent/lazybench-no-such-program: ", 0), 0u) << r.status_text();
  EXPECT_FALSE(r.ok());
}

// The child runs on the CPUs asked for (and its children too); the spawning
// thread keeps its own.
TEST(Spawn, PinsTheChildToItsCpus) {
  const std::vector<int> ours = usable_cpus();
  ASSERT_FALSE(ours.empty());
  SpawnOptions o;
  o.cpus = {ours.back()};
  auto r = spawn({"sh", "-c", "grep Cpus_allowed_list /proc/self/status"}, o);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.out, "Cpus_allowed_list:\t" + std::to_string(ours.back()) + "\n");
  EXPECT_EQ(usable_cpus(), ours);
  // A CPU we may not use: no start, and the reason.
  ASSERT_EQ(std::find(ours.begin(), ours.end(), CPU_SETSIZE - 1), ours.end());
  o.cpus = {CPU_SETSIZE - 1};
  r = spawn({"true"}, o);
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.status_text().rfind("sched_setaffinity for true: ", 0), 0u) << r.status_text();
  EXPECT_EQ(usable_cpus(), ours);
}

TEST(Spawn, TimeoutKillsTheChild) {
  SpawnOptions o;
  o.timeout_s = 0.5;
  // The child would run for a minute; `exec` so that the shell is the sleeper.
  const auto r = spawn({"sh", "-c", "echo started; exec sleep 60"}, o);
  EXPECT_TRUE(r.started);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.term_signal(), 0);
  EXPECT_EQ(r.status_text(), "timeout after 0 s");
  EXPECT_EQ(r.out, "started\n");
  EXPECT_GE(r.elapsed_s, 0.5);
  EXPECT_LT(r.elapsed_s, 30.0);
}

TEST(RunCommand, ParsesOptionsAndPrintsOneResultLine) {
  std::ostringstream out;
  // Explicit options after --quick win: -S 50ms overrides the quick 0.3 s.
  const int rc = run_workload_command("alloc-pair-2t", {"--quick", "-S", "50ms", "--max", "1K", "--seed", "0x2a"}, out);
  ASSERT_EQ(rc, 0);
  const auto r = find_result(out.str());
  ASSERT_TRUE(r) << out.str();
  EXPECT_EQ(r->workload, "alloc-pair-2t");
  EXPECT_EQ(r->seed, "0x000000000000002a");
  EXPECT_GT(r->metric.value, 0);
  EXPECT_EQ(*r->extra_value("threads"), 2);  // the variant's fixed -t 2
  EXPECT_LT(r->wall_s, 1.0);
  EXPECT_GE(r->wall_s, 0.04);
}

TEST(RunCommand, RejectsBadInput) {
  std::ostringstream out;
  EXPECT_EQ(run_workload_command("no-such-workload", {}, out), 2);
  EXPECT_EQ(run_workload_command("alloc-pair", {"--bogus"}, out), 2);
  EXPECT_EQ(run_workload_command("alloc-pair", {"-S", "soon"}, out), 2);
  EXPECT_EQ(run_workload_command("alloc-pair", {"--min", "1K", "--max", "16"}, out), 2);  // validate()
  EXPECT_EQ(run_workload_command("phases", {"--quick", "--total", "12Q"}, out), 2);
  EXPECT_EQ(run_workload_command("ebizzy", {"--quick", "--seed", "xyz"}, out), 2);
  EXPECT_TRUE(out.str().empty());
}

#ifdef LAZYBENCH_HAVE_RUN_ARGS
TEST(RunToolArgs, OptionNames) {
  namespace lr = lazymalloc_run;
  EXPECT_EQ(*lr::option_env_name("decay_ms"), "LAZYMALLOC_DECAY_MS");
  EXPECT_EQ(*lr::option_env_name("decay-ms"), "LAZYMALLOC_DECAY_MS");
  EXPECT_EQ(*lr::option_env_name("LAZYMALLOC_DECAY_MS"), "LAZYMALLOC_DECAY_MS");
  EXPECT_FALSE(lr::option_env_name(""));
  EXPECT_FALSE(lr::option_env_name("LAZYMALLOC_"));
  EXPECT_FALSE(lr::option_env_name("a b"));
  EXPECT_EQ(*lr::parse_option("purge_batch=2M"), std::make_pair(std::string("LAZYMALLOC_PURGE_BATCH"), std::string("2M")));
  EXPECT_EQ(lr::parse_option("x=")->second, "");
  EXPECT_EQ(lr::parse_option("x=a=b")->second, "a=b");
  EXPECT_FALSE(lr::parse_option("decay_ms"));
  EXPECT_FALSE(lr::parse_option("=5"));
}

TEST(RunToolArgs, OptionsCheckedAgainstTheTable) {
  namespace lr = lazymalloc_run;
  EXPECT_EQ(lr::option_problem("decay_ms", "500"), "");
  EXPECT_EQ(lr::option_problem("DECAY-MS", "2s"), "");
  EXPECT_EQ(lr::option_problem("LAZYMALLOC_PURGE", "never"), "");
  EXPECT_EQ(lr::option_problem("stats_file", "/tmp/lm.%p"), "");  // a variable, not an option
  EXPECT_EQ(lr::option_problem("decay_mss", "5"), "unknown option 'decay_mss' (did you mean decay_ms?)");
  EXPECT_EQ(lr::option_problem("zzzzzzzz", "5"), "unknown option 'zzzzzzzz'");
  EXPECT_EQ(lr::option_problem("memory_limit", "-5G"),
            "bad value '-5G' for memory_limit: expected bytes, 0 to 1024T (suffix K, M, G or T: powers of 1024)");
  EXPECT_EQ(lr::option_problem("release_workers", "65"), "bad value '65' for release_workers: expected 0 to 64");
  EXPECT_EQ(lr::option_problem("a b", "1"), "bad option name 'a b': use letters, digits, _ or -");
}

TEST(RunToolArgs, StatsAndPreload) {
  namespace lr = lazymalloc_run;
  EXPECT_EQ(*lr::stats_env_value("text"), "1");
  EXPECT_EQ(*lr::stats_env_value(""), "1");
  EXPECT_EQ(*lr::stats_env_value("JSON"), "json");
  EXPECT_EQ(*lr::stats_env_value("off"), "0");
  EXPECT_FALSE(lr::stats_env_value("xml"));
  EXPECT_EQ(lr::compose_preload("/l/lazy.so", ""), "/l/lazy.so");
  EXPECT_EQ(lr::compose_preload("/l/lazy.so", "/a.so /b.so:/l/lazy.so"), "/l/lazy.so:/a.so:/b.so");
}

TEST(RunToolArgs, LibraryChoiceOrder) {
  namespace lr = lazymalloc_run;
  const std::vector<std::pair<std::string, std::string>> defaults = {{"build tree", "/build/liblazymalloc.so"},
                                                                     {"installed", "/usr/lib/liblazymalloc.so"}};
  auto only = [](std::set<std::string> present) {
    return [present](const std::string& p) { return present.count(p) > 0; };
  };
  auto c = lr::choose_library("", nullptr, defaults, only({"/build/liblazymalloc.so", "/usr/lib/liblazymalloc.so"}));
  EXPECT_EQ(c.path, "/build/liblazymalloc.so");
  EXPECT_EQ(c.source, "build tree");
  c = lr::choose_library("", nullptr, defaults, only({"/usr/lib/liblazymalloc.so"}));
  EXPECT_EQ(c.source, "installed");
  EXPECT_EQ(c.tried.size(), 2u);
  c = lr::choose_library("", "/env/lib.so", defaults, only({"/env/lib.so", "/build/liblazymalloc.so"}));
  EXPECT_EQ(c.path, "/env/lib.so");
  // An explicit library that is missing is an error, not a fallback.
  c = lr::choose_library("/cli/missing.so", "/env/lib.so", defaults, only({"/env/lib.so", "/build/liblazymalloc.so"}));
  EXPECT_TRUE(c.path.empty());
  EXPECT_EQ(c.tried, (std::vector<std::string>{"/cli/missing.so"}));
  c = lr::choose_library("", "/env/missing.so", defaults, only({"/build/liblazymalloc.so"}));
  EXPECT_TRUE(c.path.empty());
  c = lr::choose_library("", nullptr, defaults, only({}));
  EXPECT_TRUE(c.path.empty());
  EXPECT_FALSE(lr::looks_like_elf("/nonexistent"));
  EXPECT_TRUE(lr::looks_like_elf("/bin/sh"));
}
#endif

#ifdef LAZYBENCH_HAVE_OPTION_TABLE
const lazymalloc::OptionInfo& option_info(const char* name) {
  const unsigned o = lazymalloc::option_find(name);
  EXPECT_LT(o, lazymalloc::kOptionCount) << name;
  return lazymalloc::kOptionInfo[o < lazymalloc::kOptionCount ? o : 0];
}

TEST(OptionTable, Columns) {
  namespace d = lazymalloc_docs;
  EXPECT_EQ(d::option_env_var(option_info("background_interval_ms")), "LAZYMALLOC_BACKGROUND_INTERVAL_MS");
  EXPECT_EQ(d::option_default(option_info("purge")), "adaptive");
  EXPECT_EQ(d::option_default(option_info("purge_batch")), "32M");
  EXPECT_EQ(d::option_default(option_info("arena_reserve")), "1G");
  EXPECT_EQ(d::option_default(option_info("decay_ms")), "1000 ms");
  EXPECT_EQ(d::option_default(option_info("memory_limit")), "0");
  EXPECT_EQ(d::option_default(option_info("release_workers")), "4");
  EXPECT_EQ(d::option_values(option_info("purge_batch")),
            "bytes, 64K to 1T (suffix K, M, G or T: powers of 1024)");
  EXPECT_EQ(d::option_values(option_info("stats")), "`off`, `text`, `json` (or the index, 0 to 2)");
  EXPECT_EQ(d::option_values(option_info("release_workers")), "0 to 64");
}

// What the table shows as the default is something a user can type: it
// parses back to the default (times written without the space: "1000ms").
TEST(OptionTable, DefaultsParseBack) {
  for (unsigned o = 0; o < lazymalloc::kOptionCount; ++o) {
    std::string shown = lazymalloc_docs::option_default(lazymalloc::kOptionInfo[o]);
    if (shown.ends_with(" ms")) shown.erase(shown.size() - 3, 1);
    int64_t v = -1;
    EXPECT_TRUE(lazymalloc::option_parse(o, shown.c_str(), &v)) << lazymalloc::kOptionInfo[o].name << ": " << shown;
    EXPECT_EQ(v, lazymalloc::kOptionInfo[o].def) << lazymalloc::kOptionInfo[o].name << ": " << shown;
  }
}

// Every Markdown row has its columns (no '|' in a cell ends it early), one
// row per option, in the table's order.
TEST(OptionTable, MarkdownRows) {
  using lazymalloc_docs::OptionTable;
  for (auto [form, columns] : {std::pair{OptionTable::kMarkdownFull, 5}, std::pair{OptionTable::kMarkdownShort, 3}}) {
    std::istringstream in(lazymalloc_docs::option_table(form));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), lazymalloc::kOptionCount + 2u);
    for (size_t i = 0; i < lines.size(); ++i) {
      int bars = 0;
      for (size_t k = 0; k < lines[i].size(); ++k) bars += lines[i][k] == '|' && (k == 0 || lines[i][k - 1] != '\\');
      EXPECT_EQ(bars, columns + 1) << lines[i];
      if (i >= 2) {
        const auto& info = lazymalloc::kOptionInfo[i - 2];
        const std::string var = std::string("`").append(lazymalloc_docs::option_env_var(info)).append("`");
        EXPECT_NE(lines[i].find(var), std::string::npos) << lines[i];
      }
    }
  }
}
#endif


}  // namespace
}  // namespace lazybench
