// lazybench: allocator workloads and the harness that compares allocators.
//
//   lazybench --list                       the workloads (* = headline set)
//   lazybench run WORKLOAD [options]       one workload, in this process; one JSON line
//   lazybench compare [WORKLOADS|all] ...  every workload under every allocator
//   lazybench startup [options]            start-up cost (peak RSS, spawn time) per allocator
//   lazybench idle [options]               idle cost (wakeups, CPU, held memory) per allocator
//   lazybench server [options]             redis-server under every allocator: throughput, memory
//   lazybench allocators                   which allocators compare would use
//
// See docs/benchmarks.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>

#include "compare.h"
#include "harness/args.h"
#include "run.h"
#include "server.h"
#include "idle.h"
#include "startup.h"

namespace {

int allocators_command(const std::string& lib) {
  std::string tried;
  const std::string lazymalloc = lazybench::find_lazymalloc_library(lib, &tried);
  const auto dirs = lazybench::peer_library_dirs();
  const auto names = lazybench::known_allocator_names();
  std::size_t width = 0;
  for (const auto& name : names) width = std::max(width, name.size());
  for (const auto& name : names) {
    const auto spec = lazybench::parse_allocator(name, lazymalloc);
    std::string where;
    if (name == "glibc") where = "(no preload)";
    else if (const std::string path = lazybench::resolve_preload(spec->preload, dirs); !path.empty()) where = path;
    else where = name == "lazymalloc" ? "not found (tried: " + tried + ")" : "not installed (" + spec->preload + ")";
    for (const auto& [k, v] : spec->env) where += " " + k + "=" + v;
    std::cout << name << std::string(width + 2 - name.size(), ' ') << where << '\n';
  }
  return 0;
}

std::string command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i == 0) a = "lazybench";
    if (a.find_first_of(" '\"*$") != std::string::npos) a = "'" + a + "'";
    out += (i ? " " : "") + a;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lazybench: malloc workloads, and a harness that runs them under several allocators (LD_PRELOAD)",
               "lazybench"};
  app.footer("Examples:\n  lazybench run ebizzy-2t -S 2\n  lazybench compare --quick\n"
             "  lazybench compare all --reps 5 --allocators lazymalloc,glibc,jemalloc-bg --out results/all");
  bool list = false;
  app.add_flag("--list", list, "List the workloads (* = run by a plain `compare`)");

  auto* run = app.add_subcommand("run", "Run one workload in this process and print one JSON result line");
  run->prefix_command();   // everything after the workload name belongs to the workload
  run->set_help_flag();    // so that `run WORKLOAD --help` shows the workload's options
  std::string workload;
  run->add_option("workload", workload, "Workload name (see --list)");

  lazybench::CompareOptions copt;
  std::string timeout_text = "600";
  auto* compare = app.add_subcommand(
      "compare", "Run workloads under several allocators, report medians and ratios, write DIR/results.{md,csv} and plots");
  compare->add_option("workloads", copt.workloads,
                      "Workloads to run (default: the headline set ebizzy-1t ebizzy-2t phases malloc-large; "
                      "'all': every workload; a pattern such as 'idle-release-*': those it matches)");
  compare->add_option("--reps", copt.reps, "Repetitions per workload and allocator")->capture_default_str();
  compare->add_option("--allocators", copt.allocators,
                      "Comma list of allocators: lazymalloc, glibc, jemalloc, jemalloc-bg, jemalloc-free, tcmalloc, mimalloc, "
                      "tbbmalloc, lazymalloc-decay, lazymalloc-eager, lazymalloc-never (other release policies), lazymalloc-secure, "
                      "or NAME=/path/lib.so (default: lazymalloc,glibc,jemalloc,tcmalloc,mimalloc,tbbmalloc)");
  compare->add_option("--out", copt.out_dir, "Output directory")->capture_default_str();
  compare->add_flag("--quick", copt.quick, "Small sizes: every run well under 2 s");
  compare->add_option("--lib", copt.lib, "liblazymalloc.so to use for 'lazymalloc' (default: $LAZYMALLOC_LIB, the build tree's)");
  compare
      ->add_option("--alloc-env", copt.alloc_env,
                   "ALLOCATOR:VAR=VALUE, extra environment for one allocator's runs (repeatable)")
      ->allow_extra_args(false);
  compare->add_option("--args", copt.extra_args, "WORKLOAD=ARGS or all=ARGS, extra workload options (repeatable)")
      ->allow_extra_args(false);
  compare->add_option("--timeout", timeout_text, "Kill a run after this long (seconds)")->capture_default_str();
  bool no_plots = false;
  compare->add_flag("--no-plots", no_plots, "Do not run gnuplot");

  lazybench::StartupOptions sopt;
  auto* startup = app.add_subcommand(
      "startup", "Start-up cost under every allocator: peak RSS of a short program and the time to spawn it");
  startup->add_option("--allocators", sopt.allocators, "Comma list of allocators, as for compare");
  startup->add_option("--lib", sopt.lib, "liblazymalloc.so to use for 'lazymalloc'");
  startup->add_option("--program", sopt.program, "Program to run, without arguments")->capture_default_str();
  startup->add_option("--spawns", sopt.spawns, "Processes per timed batch")->capture_default_str();
  startup->add_option("--rounds", sopt.rounds, "Timed batches per allocator, interleaved")->capture_default_str();
  startup->add_option("--rss-runs", sopt.rss_runs, "Traced runs per allocator for the memory figures")
      ->capture_default_str();

  lazybench::IdleOptions iopt;
  auto* idle = app.add_subcommand(
      "idle", "Idle cost under every allocator: wakeups, CPU and held memory of a process idle after a churn "
              "(bench/idle_probe.c)");
  idle->add_option("--allocators", iopt.allocators, "Comma list of allocators, as for compare");
  idle->add_option("--lib", iopt.lib, "liblazymalloc.so to use for 'lazymalloc'");
  idle->add_option("--probe", iopt.probe, "The idle-probe program (default: next to lazybench)");
  idle->add_option("--reps", iopt.reps, "Runs per allocator, interleaved")->capture_default_str();
  idle->add_option("--churn-mib", iopt.churn_mib, "MiB allocated, written and freed")->capture_default_str();
  idle->add_option("--size", iopt.size, "Bytes per block")->capture_default_str();
  idle->add_option("--stride", iopt.stride, "Every stride-th block stays live")->capture_default_str();
  idle->add_option("--settle", iopt.settle_s, "Seconds of sleep after the frees, before the window")
      ->capture_default_str();
  idle->add_option("--window", iopt.window_s, "Seconds of idle sleep measured")->capture_default_str();

  lazybench::ServerOptions vopt;
  std::string server_timeout = "600";
  auto* server = app.add_subcommand(
      "server", "redis-server under every allocator: throughput per command (redis-benchmark) and memory "
                "when loaded, flushed and idle; writes DIR/results.{md,csv,json}");
  server->add_option("--allocators", vopt.allocators, "Comma list of allocators, as for compare");
  server->add_option("--lib", vopt.lib, "liblazymalloc.so to use for 'lazymalloc'");
  server->add_option("--alloc-env", vopt.alloc_env, "ALLOCATOR:VAR=VALUE, extra environment for one allocator's servers")
      ->allow_extra_args(false);
  server->add_option("--reps", vopt.reps, "Repetitions of the throughput phase (each runs every allocator)")
      ->capture_default_str();
  server->add_option("--memory-reps", vopt.memory_reps, "The memory phase runs in the first N repetitions (0: none)")
      ->capture_default_str();
  server->add_option("--server-cpus", vopt.server_cpus,
                     "CPUs of the servers (a list as for taskset -c; auto: the first we may use, none: not pinned)")
      ->capture_default_str();
  server->add_option("--client-cpus", vopt.client_cpus,
                     "CPUs of the clients (auto: the second we may use; none: not pinned)")
      ->capture_default_str();
  server->add_option("--out", vopt.out_dir, "Output directory")->capture_default_str();
  server->add_flag("--quick", vopt.quick, "Small sizes (20,000 requests and keys, 1 s idle, 2 s wait): a few seconds per allocator");
  server->add_option("--requests", vopt.requests, "redis-benchmark -n per command and repetition (default 200,000)");
  server->add_option("--tests", vopt.tests, "redis-benchmark -t")->capture_default_str();
  server->add_option("--clients", vopt.clients, "redis-benchmark -c")->capture_default_str();
  server->add_option("--pipeline", vopt.pipeline, "redis-benchmark -P")->capture_default_str();
  server->add_option("--data-size", vopt.data_size, "redis-benchmark -d (bytes)")->capture_default_str();
  server->add_option("--keys", vopt.keys, "Keys loaded for the memory phase (default 1,500,000)");
  server->add_option("--value-size", vopt.value_size, "Bytes per loaded value")->capture_default_str();
  server->add_option("--idle", vopt.idle_s, "Held memory reported this long after FLUSHALL, seconds (default 10)");
  server->add_option("--rss-wait", vopt.rss_wait_s, "Plain Rss reported this long after FLUSHALL, seconds (default 12)");
  server->add_option("--settle-mib", vopt.settle_mib, "Settled: held within this many MiB of the start")
      ->capture_default_str();
  server->add_option("--server-args", vopt.server_args, "Extra redis-server arguments, e.g. '--io-threads 2'");
  server->add_option("--server", vopt.server, "redis-server to run")->capture_default_str();
  server->add_option("--benchmark", vopt.benchmark, "redis-benchmark to run")->capture_default_str();
  server->add_option("--cli", vopt.cli, "redis-cli to run")->capture_default_str();
  server->add_option("--timeout", server_timeout, "Limit for each client call and server start (seconds)")
      ->capture_default_str();

  std::string lib;
  auto* allocs = app.add_subcommand("allocators", "Show the allocators compare knows and where their libraries are");
  allocs->add_option("--lib", lib, "liblazymalloc.so to use");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (list) {
    lazybench::list_workloads(std::cout);
    return 0;
  }
  if (*run) {
    std::vector<std::string> rest = run->remaining();
    const bool help = std::find(rest.begin(), rest.end(), "--help") != rest.end() ||
                      std::find(rest.begin(), rest.end(), "-h") != rest.end();
    if (workload.empty() || workload == "--help" || workload == "-h") {
      std::cout << "Usage: lazybench run WORKLOAD [--quick] [--seed N] [workload options]\n"
                   "       lazybench run WORKLOAD --help   (the workload's options)\n\nWorkloads:\n";
      lazybench::list_workloads(std::cout);
      return workload.empty() && !help ? 2 : 0;
    }
    return lazybench::run_workload_command(workload, rest, std::cout);
  }
  if (*compare) {
    const auto t = lazybench::parse_seconds(timeout_text);
    if (!t || *t <= 0) {
      std::cerr << "lazybench compare: bad --timeout '" << timeout_text << "'\n";
      return 2;
    }
    copt.timeout_s = *t;
    copt.plots = !no_plots;
    copt.command_line = command_line(argc, argv);
    return lazybench::compare_command(copt);
  }
  if (*startup) return lazybench::startup_command(sopt);
  if (*idle) return lazybench::idle_command(iopt);
  if (*server) {
    const auto t = lazybench::parse_seconds(server_timeout);
    if (!t || *t <= 0) {
      std::cerr << "lazybench server: bad --timeout '" << server_timeout << "'\n";
      return 2;
    }
    vopt.timeout_s = *t;
    vopt.command_line = command_line(argc, argv);
    return lazybench::server_command(vopt);
  }
  if (*allocs) return allocators_command(lib);
  std::cout << app.help();
  return 2;
}
