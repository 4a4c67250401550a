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
  auto r = run_tool({"-o", "decay_ms=500", "--option", "purge-batch=2M", "-oLAZYMALLOC_X=y", "--stats=json", "--lib",
                     g_dummy, "--", "sh", "-c",
                     "echo \"$LAZYMALLOC_DECAY_MS|$LAZYMALLOC_PURGE_BATCH|$LAZYMALLOC_X|$LAZYMALLOC_STATS|$LD_PRELOAD\""},
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
  r = run_tool({"-o", "a=1", "--print-env"}, o);
  EXPECT_EQ(r.exit_code(), 0) << r.describe();
  EXPECT_EQ(r.out, "LD_PRELOAD=" + real(g_dummy) + "\nLAZYMALLOC_A=1\n");
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
  EXPECT_NE(r.out.find("PROGRAM"), std::string::npos);
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
  nlohmann::json stats;
  try {
    stats = nlohmann::json::parse(std::string_view(r.err).substr(open, close - open + 1));
  } catch (const nlohmann::json::parse_error& e) {
    FAIL() << e.what() << "\n" << r.err;
  }
  EXPECT_TRUE(stats.is_object()) << r.err;
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
