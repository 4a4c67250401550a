// lazymalloc-run --timeline with the real allocator:
//
//   bench_timeline_test --tool PATH --lazymalloc-lib PATH --phases PATH
//
// --phases is timeline_phases.cc: idle, 64 MiB allocated, freed, trimmed,
// each phase held until two more rows were written.  The TSV must show Rss
// and the allocator's gauges rise and fall in that order; --plot must draw
// an SVG with every line in its legend; the exit status passes through.
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "timeline.h"

namespace lazybench {
namespace {

std::string g_tool, g_lazymalloc, g_phases;

struct Row {
  double t, rss, lazyfree, held, anonhuge, active, retained, lazy, cached;
  bool gauges;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Row> parse(const std::string& text, std::string* header) {
  std::vector<Row> rows;
  std::istringstream in(text);
  std::string line;
  std::getline(in, *header);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> cells;
    std::string c;
    while (std::getline(f, c, '\t')) cells.push_back(c);
    if (cells.size() != 10) {
      ADD_FAILURE() << "row with " << cells.size() << " cells: " << line;
      continue;
    }
    Row r{};
    r.t = std::stod(cells[0]);
    r.rss = std::stod(cells[1]);
    r.lazyfree = std::stod(cells[2]);
    r.held = std::stod(cells[3]);
    r.anonhuge = std::stod(cells[4]);
    r.gauges = cells[5] != "-";
    if (r.gauges) {
      r.active = std::stod(cells[5]);
      r.retained = std::stod(cells[6]);
      r.lazy = std::stod(cells[7]);
      r.cached = std::stod(cells[8]);
    }
    rows.push_back(r);
  }
  return rows;
}

SpawnResult run_timeline(const std::filesystem::path& dir, bool plot) {
  SpawnOptions o = test::options(120);
  o.env["LD_PRELOAD"] = std::nullopt;
  o.env["LAZYMALLOC_LIB"] = std::nullopt;
  std::vector<std::string> args = {g_tool, "--lib", g_lazymalloc, "-o", "decay_ms=3600000", "-o",
                                    "partial_decay_ms=3600000", "--timeline", (dir / "t.tsv").string(),
                                    "--interval", "20"};
  if (plot) {
    args.push_back("--plot");
    args.push_back((dir / "t.svg").string());
  }
  args.push_back("--");
  args.push_back(g_phases);
  return spawn(args, o);
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("lazymalloc-timeline-" + std::to_string(::getpid()) + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(Timeline, RssAndGaugesRiseAndFallWithThePhases) {
  ASSERT_FALSE(g_lazymalloc.empty() || g_phases.empty()) << "needs --lazymalloc-lib and --phases";
  const auto dir = fresh_dir("rows");
  const auto r = run_timeline(dir, false);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  std::string header;
  auto rows = parse(slurp(dir / "t.tsv"), &header);
  EXPECT_EQ(header, lazymalloc_run::kTimelineColumns);
  for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_GT(rows[i].t, rows[i - 1].t);
  for (const auto& row : rows) EXPECT_NEAR(row.held, row.rss - row.lazyfree, 0.01);
  // The sampling starts with the program, so its first rows may come before
  // the allocator has started and published ("-"); from its first
  // publication on, every row has the gauges.
  std::size_t first = 0;
  while (first < rows.size() && !rows[first].gauges) ++first;
  for (std::size_t i = first; i < rows.size(); ++i) EXPECT_TRUE(rows[i].gauges) << "row " << i;
  rows.erase(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(first));
  ASSERT_GE(rows.size(), 8u) << "four phases of two samples each";
  // 64 MiB live: active and Rss at least that; then freed: active falls,
  // retained takes it, Rss stays; then trimmed: retained and Rss fall.
  std::size_t live = rows.size(), freed = rows.size(), trimmed = rows.size();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    if (live == rows.size() && row.active >= 64 && row.rss >= 64) live = i;
    else if (live < i && freed == rows.size() && row.active < 16 && row.retained >= 60 && row.rss >= 60) freed = i;
    else if (freed < i && trimmed == rows.size() && row.retained < 4 && row.rss < rows[freed].rss - 50) trimmed = i;
  }
  std::string dump = header + "\n";
  for (const auto& row : rows)
    dump += std::to_string(row.t) + " rss " + std::to_string(row.rss) + " active " + std::to_string(row.active) +
            " retained " + std::to_string(row.retained) + " lazy " + std::to_string(row.lazy) + " cached " +
            std::to_string(row.cached) + "\n";
  EXPECT_LT(live, rows.size()) << "no row with 64 MiB active and resident\n" << dump;
  EXPECT_LT(freed, rows.size()) << "no later row with the 64 MiB freed, retained and still resident\n" << dump;
  EXPECT_LT(trimmed, rows.size()) << "no later row with the memory trimmed (retained and Rss down)\n" << dump;
  EXPECT_LT(rows.front().active, 16) << dump;  // before the allocation phase
  // The freed phase leaves one 768 KiB block in the thread's large cache:
  // the page counts it as cached; the trim empties the cache.
  if (freed < rows.size() && trimmed < rows.size()) {
    EXPECT_GE(rows[freed].cached, 0.7) << dump;
    EXPECT_LT(rows[trimmed].cached, 0.1) << dump;
    EXPECT_LE(rows[freed].cached, rows[freed].active) << dump;
  }
  std::filesystem::remove_all(dir);
}

TEST(Timeline, PlotIsAnSvgWithALegendForEveryLine) {
  ASSERT_FALSE(g_lazymalloc.empty() || g_phases.empty()) << "needs --lazymalloc-lib and --phases";
  const auto dir = fresh_dir("plot");
  const auto r = run_timeline(dir, true);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.err.find("no plot"), std::string::npos) << r.err;  // gnuplot (gnuplot-nox) is required
  const std::string svg = slurp(dir / "t.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos) << "not an SVG: " << svg.substr(0, 200);
  for (const char* legend : {"Rss: resident", "held = Rss - LazyFree", "LazyFree: MADV", "AnonHugePages",
                             "active: live blocks", "retained: free, resident", "lazy: given back",
                             "cached: free objects in threads",
                             "solid: the kernel", "dashed: the allocator"}) {
    EXPECT_NE(svg.find(legend), std::string::npos) << "legend entry missing: " << legend;
  }
  std::filesystem::remove_all(dir);
}

TEST(Timeline, ExitStatusAndSignalPassThrough) {
  ASSERT_FALSE(g_lazymalloc.empty()) << "needs --lazymalloc-lib";
  const auto dir = fresh_dir("status");
  SpawnOptions o = test::options(60);
  o.env["LD_PRELOAD"] = std::nullopt;
  const std::string tsv = (dir / "s.tsv").string();
  auto r = spawn({g_tool, "--lib", g_lazymalloc, "--timeline", tsv, "--", "sh", "-c", "exit 7"}, o);
  EXPECT_EQ(r.exit_code(), 7) << r.describe();
  r = spawn({g_tool, "--lib", g_lazymalloc, "--timeline", tsv, "--", "sh", "-c", "kill -TERM $$"}, o);
  EXPECT_EQ(r.term_signal(), SIGTERM) << r.describe();
  r = spawn({g_tool, "--lib", g_lazymalloc, "--timeline", tsv, "--", "no-such-program-xyz"}, o);
  EXPECT_EQ(r.exit_code(), 127) << r.describe();
  EXPECT_EQ(slurp(tsv).substr(0, 7), "time_s\t");
  r = spawn({g_tool, "--lib", g_lazymalloc, "--plot", tsv + ".svg", "--", "true"}, o);
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
  EXPECT_NE(r.err.find("--plot needs --timeline"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lazybench

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  using lazybench::test::arg_value;
  lazybench::g_tool = arg_value(argc, argv, "tool");
  lazybench::g_lazymalloc = arg_value(argc, argv, "lazymalloc-lib");
  lazybench::g_phases = arg_value(argc, argv, "phases");
  if (lazybench::g_tool.empty()) {
    std::fprintf(stderr, "usage: %s --tool PATH --lazymalloc-lib PATH --phases PATH\n", argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
