// Tests of lazymalloc-run as a black box: exit status, signals, stdin/stdout
// pass through; the environment it sets; its own error codes.
//
//   bench_run_tool_test --tool PATH --dummy-lib PATH [--lazymalloc-lib PATH]
//
// Most tests preload a do-nothing library (--dummy-lib) so they test the
// wrapper alone; the RealLibrary tests use the allocator itself (ctest
// runs them, with --lazymalloc-lib, only where the build has it; run without
// it they fail).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lazymalloc/version.h"
#include "option-table.h"
#include "test_util.h"

namespace lazybench {
namespace {

std::string g_tool, g_dummy, g_lazymalloc;

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

SpawnOptions clean_env() {
  auto o = test::options();
  o.env["LD_PRELOAD"] = std::nullopt;
  o.env["LAZYMALLOC_LIB"] = std::nullopt;
  o.env["LAZYMALLOC_STATS"] = std::nullopt;
  o.env["LAZYMALLOC_STATS_PID"] = std::nullopt;
  o.env["LAZYMALLOC_STATS_FILE"] = std::nullopt;
  return o;
}

SpawnResult run_tool(std::vector<std::string> args, SpawnOptions o = clean_env()) {
  args.insert(args.begin(), g_tool);
  return spawn(args, o);
}

TEST(RunTool, ExitStatusPassesThrough) {
  for (int code : {0, 1, 7, 42, 255}) {
    const auto r = run_tool({"--lib", g_dummy, "--", "sh", "-c", "exit " + std::to_string(code)});
    EXPECT_EQ(r.exit_code(), code) << r.describe();
  }
  // Without "--" too: the first non-option word is the program.
  const auto r = run_tool({"--lib", g_dummy, "sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code(), 7) << r.describe();
}

TEST(RunTool, TerminatingSignalPassesThrough) {
  // The wrapper execs the program, so the process the caller waits for is
  // killed by the very signal: WIFSIGNALED with SIGTERM...
  auto r = run_tool({"--lib", g_dummy, "--", "sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.term_signal(), SIGTERM) << r.describe();
  r = run_tool({"--lib", g_dummy, "--", "sh", "-c", "kill -KILL $$"});
  EXPECT_EQ(r.term_signal(), SIGKILL) << r.describe();
  // ...which a shell reports as 128 + 15.
  r = spawn({"sh", "-c", "\"$0\" --lib \"$1\" -- sh -c 'kill -TERM $$'; echo \"status=$?\"", g_tool, g_dummy},
                  clean_env());
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_NE(r.out.find("status=143"), std::string::npos) << r.describe();
}

TEST(RunTool, ProgramKeepsPidStdinAndStdout) {
  auto o = clean_env();
  o.stdin_text = "hello through the wrapper\n";
  auto r = run_tool({"--lib", g_dummy, "--", "cat"}, o);
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.out, "hello through the wrapper\n");
  // exec, not fork: the program's parent is our test process, not a wrapper.
  r = run_tool({"--lib", g_dummy, "--", "sh", "-c", "echo $PPID"});
  EXPECT_EQ(r.out, std::to_string(::getpid()) + "\n") << r.describe();
}

TEST(RunTool, SetsPreloadAndOptions) {
  auto o = clean_env();
  o.env["LAZYBENCH_DUMMY_ANNOUNCE"] = "1";
  auto r = run_tool({"-o", "decay_ms=500", "--option", "purge-batch=2M", "-oLAZYMALLOC_STATS_FILE=y", "--stats=json",
                     "--lib", g_dummy, "--", "sh", "-c",
                     "echo \"$LAZYMALLOC_DECAY_MS|$LAZYMALLOC_PURGE_BATCH|$LAZYMALLOC_STATS_FILE|$LAZYMALLOC_STATS|"
                     "$LD_PRELOAD\""},
                    o);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.out, "500|2M|y|json|" + real(g_dummy) + "\n");
  // The library really was loaded into the program.
  EXPECT_NE(r.err.find("lazybench-dummy-preload: loaded"), std::string::npos) << r.describe();

  r = run_tool({"--stats", "--lib", g_dummy, "--", "sh", "-c", "echo $LAZYMALLOC_STATS"});
  EXPECT_EQ(r.out, "1\n") << r.describe();

  // An existing LD_PRELOAD is kept, after ours.
  o = clean_env();
  o.env["LD_PRELOAD"] = "/bin/true-not-a-lib.so";
  r = run_tool({"--lib", g_dummy, "--print-env"}, o);
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.out, "LD_PRELOAD=" + real(g_dummy) + ":/bin/true-not-a-lib.so\n");

  // LAZYMALLOC_LIB chooses the library when --lib is absent.
  o = clean_env();
  o.env["LAZYMALLOC_LIB"] = g_dummy;
  r = run_tool({"-o", "verbose=1", "--print-env"}, o);
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.out, "LD_PRELOAD=" + real(g_dummy) + "\nLAZYMALLOC_VERBOSE=1\n");
}

TEST(RunTool, OptionsAreCheckedAgainstTheTable) {
  // Exit 2 before the program starts, naming the option, the value and
  // what was expected or the closest names.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"decay_mss=5", "-o decay_mss=5: unknown option 'decay_mss' (did you mean decay_ms?)\n"},
      {"LAZYMALLOC_MEMROY_LIMIT=1G",
       "-o LAZYMALLOC_MEMROY_LIMIT=1G: unknown option 'LAZYMALLOC_MEMROY_LIMIT' (did you mean memory_limit?)\n"},
      {"memory_limit=-5G",
       "-o memory_limit=-5G: bad value '-5G' for memory_limit: expected bytes, 0 to 1024T (suffix K, M, G or T: "
       "powers of 1024)\n"},
      {"memory-limit=5X", "-o memory-limit=5X: bad value '5X' for memory_limit: expected bytes"},
      {"purge=lazy", "-o purge=lazy: bad value 'lazy' for purge: expected adaptive, decay, eager, never"},
      {"qwertyuiop=1", "-o qwertyuiop=1: unknown option 'qwertyuiop'\n"},
  };
  for (const auto& [option, message] : cases) {
    const auto r = run_tool({"--lib", g_dummy, "-o", option, "--", "sh", "-c", "echo ran"});
    EXPECT_EQ(r.exit_code(), 2) << r.describe();
    EXPECT_EQ(r.out, "") << r.describe();
    EXPECT_NE(r.err.find("lazymalloc-run: " + message), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--list-options lists the options"), std::string::npos) << r.err;
  }
  // Good values in every form the table accepts.
  const auto r = run_tool({"--lib", g_dummy, "-o", "memory_limit=5G", "-o", "purge=NEVER", "-o", "decay_ms=2s", "-o",
                           "background=off", "-o", "stats_file=/tmp/x.%p", "--print-env"});
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
}

TEST(RunTool, StatisticsComeFromTheProgramUnlessFollowChildren) {
  // The program keeps the wrapper's pid, and LAZYMALLOC_STATS_PID names it.
  auto o = clean_env();
  o.env["LAZYMALLOC_STATS_PID"] = "1";  // from an outer wrapper: replaced
  auto r = run_tool({"--stats", "--lib", g_dummy, "--", "sh", "-c", "echo \"$LAZYMALLOC_STATS_PID $$\""}, o);
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  const auto space = r.out.find(' ');
  ASSERT_NE(space, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(0, space) + "\n", r.out.substr(space + 1)) << r.out;
  // Also when the statistics are asked for with -o or in the environment.
  r = run_tool({"-o", "stats=json", "--lib", g_dummy, "--", "sh", "-c", "echo \"$LAZYMALLOC_STATS_PID\" $$"});
  EXPECT_EQ(r.out.substr(0, r.out.find(' ')) + "\n", r.out.substr(r.out.find(' ') + 1)) << r.out;
  // --follow-children: no pid, so every descendant reports.
  r = run_tool({"--stats", "--follow-children", "--lib", g_dummy, "--", "sh", "-c", "echo \"[$LAZYMALLOC_STATS_PID]\""},
               o);
  EXPECT_EQ(r.out, "[]\n") << r.describe();
  // Without statistics nothing is set; --print-env serves another process.
  r = run_tool({"--lib", g_dummy, "--", "sh", "-c", "echo \"[$LAZYMALLOC_STATS_PID]\""});
  EXPECT_EQ(r.out, "[]\n") << r.describe();
  r = run_tool({"--stats", "--lib", g_dummy, "--print-env"});
  EXPECT_EQ(r.out, "LD_PRELOAD=" + real(g_dummy) + "\nLAZYMALLOC_STATS=1\n") << r.describe();
  r = run_tool({"--follow-children", "--lib", g_dummy, "--", "true"});
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
  EXPECT_NE(r.err.find("--follow-children without --stats"), std::string::npos) << r.err;
}

TEST(RunTool, MissingProgramIs127) {
  auto r = run_tool({"--lib", g_dummy, "--", "lazybench-no-such-command-xyz"});
  EXPECT_EQ(r.exit_code(), 127) << r.describe();
  EXPECT_NE(r.err.find("lazybench-no-such-command-xyz: command not found"), std::string::npos) << r.err;
  r = run_tool({"--lib", g_dummy, "--", "/nonexistent/dir/prog"});
  EXPECT_EQ(r.exit_code(), 127) << r.describe();
  EXPECT_NE(r.err.find("/nonexistent/dir/prog"), std::string::npos) << r.err;
}

TEST(RunTool, NotExecutableIs126) {
  const auto file = std::filesystem::temp_directory_path() / ("lazybench-noexec-" + std::to_string(::getpid()));
  std::ofstream(file) << "#!/bin/sh\nexit 0\n";
  ::chmod(file.c_str(), 0644);
  const auto r = run_tool({"--lib", g_dummy, "--", file.string()});
  std::filesystem::remove(file);
  EXPECT_EQ(r.exit_code(), 126) << r.describe();
  EXPECT_NE(r.err.find("cannot execute"), std::string::npos) << r.err;
}

TEST(RunTool, MissingLibraryIs126) {
  auto r = run_tool({"--lib", "/nonexistent/liblazymalloc.so", "--", "true"});
  EXPECT_EQ(r.exit_code(), 126) << r.describe();
  EXPECT_NE(r.err.find("cannot find liblazymalloc.so"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/liblazymalloc.so"), std::string::npos) << r.err;
  auto o = clean_env();
  o.env["LAZYMALLOC_LIB"] = "/nonexistent/env/liblazymalloc.so";
  r = run_tool({"--", "true"}, o);
  EXPECT_EQ(r.exit_code(), 126) << r.describe();
  // A file that is not a shared library.
  const auto file = std::filesystem::temp_directory_path() / ("lazybench-notelf-" + std::to_string(::getpid()) + ".so");
  std::ofstream(file) << "not an ELF file\n";
  r = run_tool({"--lib", file.string(), "--", "true"});
  std::filesystem::remove(file);
  EXPECT_EQ(r.exit_code(), 126) << r.describe();
  EXPECT_NE(r.err.find("is not a shared library"), std::string::npos) << r.err;
}

TEST(RunTool, UsageErrorsAre2) {
  EXPECT_EQ(run_tool({"--lib", g_dummy}).exit_code(), 2);                                   // no program
  EXPECT_EQ(run_tool({"--lib", g_dummy, "-o", "decay_ms", "--", "true"}).exit_code(), 2);   // no '='
  EXPECT_EQ(run_tool({"--lib", g_dummy, "-o", "a b=1", "--", "true"}).exit_code(), 2);      // bad name
  EXPECT_EQ(run_tool({"--lib", g_dummy, "--stats=xml", "--", "true"}).exit_code(), 2);
  const auto r = run_tool({"--lib", g_dummy, "--no-such-option", "true"});
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
  EXPECT_NE(r.err.find("unknown option"), std::string::npos) << r.err;
}

TEST(RunTool, HelpAndVersion) {
  auto r = run_tool({"--help"});
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_NE(r.out.find("\nUsage: lazymalloc-run [OPTIONS] [--] PROGRAM [ARGS...]\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--lib PATH "), std::string::npos) << r.out;
  // Options with an optional value read as such, without CLI11's {default}.
  EXPECT_NE(r.out.find("--stats [=text|json]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--list-options [=text|markdown]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--follow-children"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('{'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--option"), std::string::npos);
  EXPECT_NE(r.out.find("127"), std::string::npos);
  r = run_tool({"--version"});
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.out, "lazymalloc-run " LAZYMALLOC_VERSION "\n");
}

TEST(RunTool, ListOptions) {
  // Needs neither a program nor a library.
  auto r = run_tool({"--lib", "/nonexistent/liblazymalloc.so", "--list-options"});
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.err, "");
  // One entry per option of the table: a line that starts with its name
  // and its default.
  for (unsigned o = 0; o < lazymalloc::kOptionCount; ++o) {
    const auto& info = lazymalloc::kOptionInfo[o];
    const std::string name = info.name;
    const std::string def = lazymalloc_docs::option_default(info);
    bool found = false;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(name + ' ', 0) != 0) continue;
      const auto at = line.find_first_not_of(' ', name.size());
      found = at != std::string::npos && line.compare(at, def.size() + 1, def + ' ') == 0;
      break;
    }
    EXPECT_TRUE(found) << "no line '" << name << "  " << def << " ...' in:\n" << r.out;
  }
  EXPECT_NE(r.out.find("decay_ms                1000 ms   free 2 MiB slots idle this long"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("values: adaptive, decay, eager, never"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nLAZYMALLOC_STATS_FILE             write the statistics"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('`'), std::string::npos) << "Markdown marks in the text form:\n" << r.out;

  // The Markdown form is the table of docs/options.md.
  r = run_tool({"--list-options=markdown"});
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.out, lazymalloc_docs::option_table(lazymalloc_docs::OptionTable::kMarkdownFull));
  EXPECT_NE(r.out.find("| `decay_ms` | `LAZYMALLOC_DECAY_MS` | 1000 ms |"), std::string::npos) << r.out;

  r = run_tool({"--list-options=xml"});
  EXPECT_EQ(r.exit_code(), 2) << r.describe();
  EXPECT_NE(r.err.find("bad --list-options value 'xml'"), std::string::npos) << r.err;
}

TEST(RealLibrary, DefaultLibraryRunsProgramsAndPassesStatus) {
  ASSERT_FALSE(g_lazymalloc.empty()) << "no --lazymalloc-lib given (RealLibrary.* needs liblazymalloc.so)";
  // No --lib: the build tree's library is the compiled-in default.
  auto r = run_tool({"--print-env"});
  EXPECT_EQ(r.out, "LD_PRELOAD=" + real(g_lazymalloc) + "\n") << r.describe();
  r = run_tool({"--", "sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code(), 7) << r.describe();
  r = run_tool({"--", "sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.term_signal(), SIGTERM) << r.describe();
  auto o = clean_env();
  o.stdin_text = "a\nb\nc\n";
  r = run_tool({"--", "sort", "-r"}, o);
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.out, "c\nb\na\n");
}

TEST(RealLibrary, StatsJsonAtExit) {
  ASSERT_FALSE(g_lazymalloc.empty()) << "no --lazymalloc-lib given (RealLibrary.* needs liblazymalloc.so)";
  // `true`: a program that exits through exit() with stderr still open.
  // (dash leaves with _exit(), and coreutils such as ls or cat close stderr
  // in an atexit handler, so neither can show statistics printed at exit.)
  const auto r = run_tool({"--stats=json", "--", "true"});
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  const auto open = r.err.find('{');
  const auto close = r.err.rfind('}');
  ASSERT_TRUE(open != std::string::npos && close != std::string::npos && close > open) << r.err;
  // Nothing else: no warning about the variables the wrapper set.
  EXPECT_EQ(open, 0u) << r.err;
  nlohmann::json stats;
  try {
    stats = nlohmann::json::parse(std::string_view(r.err).substr(open, close - open + 1));
  } catch (const nlohmann::json::parse_error& e) {
    FAIL() << e.what() << "\n" << r.err;
  }
  ASSERT_TRUE(stats.is_object()) << r.err;
  EXPECT_EQ(stats.value("program", ""), "true") << r.err;
  EXPECT_GT(stats.value("pid", 0), 0) << r.err;
  EXPECT_EQ(stats.value("time", "").size(), std::string("2026-11-30T22:36:41.123Z").size()) << r.err;
  EXPECT_EQ(stats["options"].value("purge", ""), "adaptive") << r.err;
}

// The JSON objects in `text`, one per line that starts with '{'.
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return out;
}

TEST(RealLibrary, StatsOfTheProgramOrOfEveryDescendant) {
  ASSERT_FALSE(g_lazymalloc.empty()) << "no --lazymalloc-lib given (RealLibrary.* needs liblazymalloc.so)";
  // A shell script with two children (one in the background), then exec:
  // the last `true` is the program the wrapper started (the shell's pid).
  const auto dir = std::filesystem::temp_directory_path() / ("lazymalloc-run-children-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto script = dir / "spawn.sh";
  std::ofstream(script) << "#!/bin/sh\n/bin/true\n/bin/true &\nwait\necho $$\nexec /bin/true\n";
  ::chmod(script.c_str(), 0755);

  auto r = run_tool({"--stats=json", "--", script.string()});
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  const std::string program_pid = r.out.substr(0, r.out.find('\n'));
  auto reports = json_lines(r.err);
  ASSERT_EQ(reports.size(), 1u) << r.err;
  EXPECT_EQ(std::to_string(reports[0].value("pid", 0)), program_pid) << r.err;
  EXPECT_EQ(reports[0].value("program", ""), "true") << r.err;

  r = run_tool({"--stats=json", "--follow-children", "--", script.string()});
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  reports = json_lines(r.err);
  ASSERT_EQ(reports.size(), 3u) << r.err;
  std::set<int> pids;
  for (const auto& j : reports) {
    EXPECT_EQ(j.value("program", ""), "true") << r.err;
    pids.insert(j.value("pid", 0));
  }
  EXPECT_EQ(pids.size(), 3u) << r.err;
  EXPECT_EQ(pids.count(std::stoi(r.out)), 1u) << r.err;

  // One file per process with LAZYMALLOC_STATS_FILE's %e and %p; text
  // reports start with the pid and the program.
  r = run_tool({"--stats", "--follow-children", "-o", "stats_file=" + (dir / "lm.%e.%p.txt").string(), "--",
                script.string()});
  ASSERT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.err, "");
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "spawn.sh") continue;
    files.insert(name);
    std::ifstream in(entry.path());
    std::string first;
    std::getline(in, first);
    const std::string pid = name.substr(8, name.size() - 8 - 4);  // lm.true.PID.txt
    EXPECT_NE(first.find("statistics: pid " + pid + ", program true, time "), std::string::npos) << name << ": " << first;
  }
  EXPECT_EQ(files.size(), 3u);
  EXPECT_EQ(files.count("lm.true." + r.out.substr(0, r.out.find('\n')) + ".txt"), 1u) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(RealLibrary, BadVariablesAreReportedAndCanAbort) {
  ASSERT_FALSE(g_lazymalloc.empty()) << "no --lazymalloc-lib given (RealLibrary.* needs liblazymalloc.so)";
  auto o = clean_env();
  o.env["LAZYMALLOC_DECAY_MSS"] = "5";
  o.env["LAZYMALLOC_MEMORY_LIMIT"] = "-5G";
  auto r = run_tool({"--", "sh", "-c", "exit 3"}, o);
  EXPECT_EQ(r.exit_code(), 3) << r.describe();
  EXPECT_NE(r.err.find("lazymalloc: LAZYMALLOC_DECAY_MSS=5: unknown variable, ignored (did you mean "
                       "LAZYMALLOC_DECAY_MS?)\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("lazymalloc: LAZYMALLOC_MEMORY_LIMIT=-5G: bad value, expected bytes"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("; using 0 (the default)\n"), std::string::npos) << r.err;
  o.env["LAZYMALLOC_ABORT_ON_BAD_OPTION"] = "1";
  r = run_tool({"--", "sh", "-c", "exit 3"}, o);
  EXPECT_EQ(r.term_signal(), SIGABRT) << r.describe();
  EXPECT_NE(r.err.find("LAZYMALLOC_DECAY_MSS=5: unknown variable"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lazymalloc: aborting: LAZYMALLOC_ABORT_ON_BAD_OPTION is set\n"), std::string::npos) << r.err;
  // Good variables only: silence.
  o = clean_env();
  o.env["LAZYMALLOC_DECAY_MS"] = "5";
  o.env["LAZYMALLOC_ABORT_ON_BAD_OPTION"] = "1";
  o.env["LAZYMALLOC_LIB"] = g_lazymalloc;
  r = run_tool({"--", "sh", "-c", "exit 3"}, o);
  EXPECT_EQ(r.exit_code(), 3) << r.describe();
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace lazybench

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  using lazybench::test::arg_value;
  lazybench::g_tool = arg_value(argc, argv, "tool");
  lazybench::g_dummy = arg_value(argc, argv, "dummy-lib");
  lazybench::g_lazymalloc = arg_value(argc, argv, "lazymalloc-lib");
  if (lazybench::g_tool.empty() || lazybench::g_dummy.empty()) {
    std::fprintf(stderr, "usage: %s --tool PATH --dummy-lib PATH [--lazymalloc-lib PATH]\n", argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
