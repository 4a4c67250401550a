// lazymalloc-run: run a program on lazymalloc.
//
//   lazymalloc-run [options] [--] PROGRAM [ARGS...]
//   lazymalloc-run --list-options[=markdown]
//
// Sets LD_PRELOAD to liblazymalloc.so (prepended to any LD_PRELOAD already
// set), turns `-o NAME=VALUE` into LAZYMALLOC_NAME=VALUE (after checking it
// against the options table) and `--stats` into LAZYMALLOC_STATS, then execs
// PROGRAM.  Statistics come from PROGRAM alone (LAZYMALLOC_STATS_PID is its
// pid, which exec keeps) unless --follow-children.  Because the wrapper *replaces*
// itself with the program (execvp), the program keeps the wrapper's pid,
// stdin/stdout/stderr and signal disposition, and its exit status -- or the
// signal that killed it -- is exactly what the caller sees.  The wrapper's
// own errors: 2 usage, 126 library missing / program not executable, 127
// program not found.  See docs/benchmarks.md ("lazymalloc-run").
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "lazymalloc-run-args.h"
#include "lazymalloc/version.h"
#include "option-table.h"
#include "timeline.h"

namespace {

constexpr const char* kName = "lazymalloc-run";

// CLI11's help, readable: the usage line names PROGRAM, and an option whose
// value is optional (--stats[=json]) shows its option_text instead of
// CLI11's "--stats{text}".
class HelpFormatter final : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] [--] PROGRAM [ARGS...]\n";
  }
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    std::string out = CLI::Formatter::make_option_name(opt, positional);
    for (size_t open = out.find('{'); open != std::string::npos; open = out.find('{')) {
      const size_t close = out.find('}', open);
      out.erase(open, close == std::string::npos ? std::string::npos : close - open + 1);
    }
    return out;
  }
};

std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string path(buf, static_cast<std::size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// Where to look when neither --lib nor $LAZYMALLOC_LIB names the library:
// next to this executable first (the build tree keeps both at its top; an
// install, wherever its prefix was moved, has it in ../LIBDIR), then the
// build tree and the install prefix compiled in.
std::vector<std::pair<std::string, std::string>> default_libraries() {
  std::vector<std::pair<std::string, std::string>> d;
  if (const std::string dir = exe_dir(); !dir.empty()) {
    d.emplace_back("next to lazymalloc-run", dir + "/liblazymalloc.so");
#ifdef LAZYMALLOC_RELATIVE_LIBDIR
    d.emplace_back("next to lazymalloc-run", dir + "/../" LAZYMALLOC_RELATIVE_LIBDIR "/liblazymalloc.so");
#endif
    d.emplace_back("next to lazymalloc-run", dir + "/../lib/liblazymalloc.so");
  }
#ifdef LAZYMALLOC_DEFAULT_LIB
  d.emplace_back("build tree", LAZYMALLOC_DEFAULT_LIB);
#endif
#ifdef LAZYMALLOC_INSTALLED_LIB
  d.emplace_back("installed", LAZYMALLOC_INSTALLED_LIB);
#endif
  return d;
}

std::string absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  return path;
}

// Replaces this process with the program; returns the wrapper's exit status
// when that fails.
int exec_program(const std::vector<std::string>& program) {
  namespace lr = lazymalloc_run;
  std::vector<char*> cargv;
  for (const auto& a : program) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::cout.flush();
  ::execvp(cargv[0], cargv.data());
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) {
    if (program[0].find('/') == std::string::npos)
      std::cerr << kName << ": " << program[0] << ": command not found\n";
    else
      std::cerr << kName << ": " << program[0] << ": " << std::strerror(err) << '\n';
    return lr::kExitNotFound;
  }
  std::cerr << kName << ": cannot execute " << program[0] << ": " << std::strerror(err) << '\n';
  return lr::kExitCannotExec;
}

}  // namespace

int main(int argc, char** argv) {
  namespace lr = lazymalloc_run;
  CLI::App app{"Run PROGRAM with lazymalloc preloaded (LD_PRELOAD), passing lazymalloc options as LAZYMALLOC_* "
               "environment variables.",
               kName};
  app.prefix_command();  // the first non-option word is PROGRAM; everything after it is left alone
  app.formatter(std::make_shared<HelpFormatter>());
  std::string lib;
  std::vector<std::string> options;
  std::string stats, list_options;
  bool verbose = false, print_env = false, version = false, follow_children = false;
  app.add_option("--lib", lib,
                 "liblazymalloc.so to preload (default: $LAZYMALLOC_LIB, else the one next to lazymalloc-run or in "
                 "its ../lib, else the build tree's, else the installed one)")
      ->type_name("PATH");
  app.add_option("-o,--option", options,
                 "Set lazymalloc option NAME (LAZYMALLOC_NAME=VALUE), checked against --list-options; repeatable")
      ->allow_extra_args(false)
      ->type_name("NAME=VALUE");
  app.add_flag("--stats{text}", stats,
               "Print PROGRAM's lazymalloc statistics to stderr at exit, as text (--stats) or JSON (--stats=json); "
               "-o stats_file=PATH writes them to a file instead (%p: pid, %e: program name)")
      ->option_text("[=text|json]");
  app.add_flag("--follow-children", follow_children,
               "With --stats: PROGRAM's child processes (and theirs) that inherit lazymalloc print their statistics "
               "too, each report starting with its pid and program name");
  app.add_flag("-v,--verbose", verbose, "Print the environment being set to stderr before running PROGRAM");
  app.add_flag("--print-env", print_env, "Print the variables that would be set, one per line, and exit");
  app.add_flag("--list-options{text}", list_options,
               "Print every lazymalloc option (name, default, description, values) and exit; "
               "--list-options=markdown prints the table of docs/options.md")
      ->option_text("[=text|markdown]");
  app.add_flag("--version", version, "Print the version and exit");
  lr::TimelineRequest timeline;
  app.add_option("--timeline", timeline.tsv_path,
                 "Run PROGRAM as a child and sample its memory into FILE (TSV) every --interval: Rss, LazyFree, "
                 "AnonHugePages and lazymalloc's gauges (active, retained, lazy)")
      ->type_name("FILE");
  auto* plot = app.add_option("--plot", timeline.svg_path, "With --timeline: draw the samples into FILE (SVG, gnuplot)")
                   ->type_name("FILE");
  app.add_option("--interval", timeline.interval_ms,
                 "With --timeline: milliseconds between samples, 1 to 60000 (default 100)")
      ->check(CLI::Range(1u, 60000u).description(""))
      ->type_name("MS");
  app.footer(
      "Exit status: PROGRAM's own (the wrapper execs it, so a signal that kills PROGRAM kills it as seen by the\n"
      "caller; a shell reports 128+N). Wrapper errors: 2 usage, 126 library missing or PROGRAM not executable,\n"
      "127 PROGRAM not found. With --timeline the wrapper stays PROGRAM's parent and exits the same way.\n"
      "Examples: lazymalloc-run -o decay_ms=500 --stats=json -- ./server --port 8080\n"
      "          lazymalloc-run --stats --follow-children -o stats_file=/tmp/lm.%e.%p.txt -- make -j8\n"
      "          lazymalloc-run --timeline mem.tsv --plot mem.svg -- ./batch-job");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : lr::kExitUsage;
  }
  if (*plot && timeline.tsv_path.empty()) {
    std::cerr << kName << ": --plot needs --timeline FILE\n";
    return lr::kExitUsage;
  }
  if (version) {
    std::cout << kName << " " << LAZYMALLOC_VERSION << '\n';
    return 0;
  }
  if (!list_options.empty()) {
    using lazymalloc_docs::OptionTable;
    if (list_options != "text" && list_options != "markdown") {
      std::cerr << kName << ": bad --list-options value '" << list_options << "': use text or markdown\n";
      return lr::kExitUsage;
    }
    if (list_options == "text") {
      std::cout << "Set an option with -o NAME=VALUE, or as LAZYMALLOC_NAME=VALUE in the environment.\n\n";
    }
    std::cout << lazymalloc_docs::option_table(list_options == "text" ? OptionTable::kText
                                                                        : OptionTable::kMarkdownFull);
    return 0;
  }

  std::vector<std::string> program = app.remaining();
  if (!program.empty() && program.front() == "--") program.erase(program.begin());
  else if (!program.empty() && program.front().size() > 1 && program.front()[0] == '-') {
    std::cerr << kName << ": unknown option '" << program.front() << "' (put the program after --)\n";
    return lr::kExitUsage;
  }
  if (program.empty() && !print_env) {
    std::cerr << kName << ": no program given\n" << "Usage: " << kName << " [OPTIONS] [--] PROGRAM [ARGS...] (see --help)\n";
    return lr::kExitUsage;
  }

  // The variables to set, in order.
  std::vector<std::pair<std::string, std::string>> vars;
  for (const auto& o : options) {
    const auto parsed = lr::parse_option(o);
    if (!parsed) {
      std::cerr << kName << ": bad option '" << o << "': expected NAME=VALUE with NAME made of letters, digits, _ or -\n";
      return lr::kExitUsage;
    }
    const auto eq = o.find('=');
    if (const std::string problem = lr::option_problem(o.substr(0, eq), o.substr(eq + 1)); !problem.empty()) {
      std::cerr << kName << ": -o " << o << ": " << problem << "\n(" << kName
                << " --list-options lists the options and their values)\n";
      return lr::kExitUsage;
    }
    vars.push_back(*parsed);
  }
  if (!stats.empty()) {
    const auto value = lr::stats_env_value(stats);
    if (!value) {
      std::cerr << kName << ": bad --stats value '" << stats << "': use --stats, --stats=text or --stats=json\n";
      return lr::kExitUsage;
    }
    vars.emplace_back("LAZYMALLOC_STATS", *value);
  }
  // Whose statistics: PROGRAM will have this process's pid (exec keeps it),
  // its children other pids.  Only when statistics are asked for (here or
  // in the environment), and not for --print-env, whose variables serve
  // another process; an explicit -o stats_pid=N is left alone.
  bool stats_asked = std::getenv("LAZYMALLOC_STATS") != nullptr, pid_given = false;
  for (const auto& [k, v] : vars) {
    stats_asked = stats_asked || k == "LAZYMALLOC_STATS";
    pid_given = pid_given || k == "LAZYMALLOC_STATS_PID";
  }
  if (follow_children && stats.empty() && !stats_asked) {
    std::cerr << kName << ": --follow-children without --stats (or -o stats=...) prints nothing\n";
    return lr::kExitUsage;
  }
  if (!pid_given && !print_env) {
    if (follow_children) ::unsetenv("LAZYMALLOC_STATS_PID");  // every descendant, even under an outer wrapper
    else if (stats_asked) vars.emplace_back("LAZYMALLOC_STATS_PID", std::to_string(::getpid()));
  }

  const auto choice = lr::choose_library(lib, std::getenv("LAZYMALLOC_LIB"), default_libraries(),
                                         [](const std::string& p) { return ::access(p.c_str(), R_OK) == 0; });
  if (choice.path.empty()) {
    std::cerr << kName << ": cannot find liblazymalloc.so (tried:";
    for (const auto& t : choice.tried) std::cerr << ' ' << t;
    std::cerr << "); build it, or pass --lib PATH or set LAZYMALLOC_LIB\n";
    return lr::kExitNoLibrary;
  }
  if (!lr::looks_like_elf(choice.path)) {
    std::cerr << kName << ": " << choice.path << " (from " << choice.source << ") is not a shared library\n";
    return lr::kExitNoLibrary;
  }
  const char* existing = std::getenv("LD_PRELOAD");
  vars.insert(vars.begin(), {"LD_PRELOAD", lr::compose_preload(absolute(choice.path), existing ? existing : "")});

  if (print_env || verbose) {
    std::ostream& out = print_env ? std::cout : std::cerr;
    for (const auto& [k, v] : vars) out << (print_env ? "" : "lazymalloc-run: ") << k << '=' << v << '\n';
    out.flush();
    if (print_env) return 0;
  }
  for (const auto& [k, v] : vars) {
    if (::setenv(k.c_str(), v.c_str(), 1) != 0) {
      std::cerr << kName << ": setenv " << k << ": " << std::strerror(errno) << '\n';
      return lr::kExitUsage;
    }
  }
  if (!timeline.tsv_path.empty()) return lr::run_timeline(timeline, program, exec_program);
  return exec_program(program);
}
