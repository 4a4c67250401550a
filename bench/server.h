// `lazybench server`: a real server under every allocator side by side.
// Debian's redis-server is started under each allocator's preload (unix
// socket in a temporary directory, no persistence), driven by its own client
// redis-benchmark for throughput per command (servers and clients pinned to
// different CPUs; in each repetition every command runs against every
// allocator's server in turn, and each allocator's requests/s is divided by
// glibc's of the same repetition: the median of these paired ratios ranks
// them), then, in a second server lifetime, loaded with K keys of V bytes,
// flushed and left idle while its memory (Rss and Rss - LazyFree from
// /proc/PID/smaps_rollup) is sampled every second.
#pragma once

#include <string>
#include <vector>

namespace lazybench {

struct ServerOptions {
  std::string allocators;  // comma list; empty: the default list
  std::string lib;         // liblazymalloc.so to use
  std::vector<std::string> alloc_env;  // "ALLOCATOR:VAR=VALUE"
  std::string out_dir = "results/server";
  int reps = 5;
  int memory_reps = 3;  // the memory phase runs in the first min(memory_reps, reps) repetitions
  bool quick = false;  // small sizes: a few seconds per allocator
  std::string server = "redis-server";
  std::string benchmark = "redis-benchmark";
  std::string cli = "redis-cli";
  // CPU lists (as taskset -c) for the servers and for the clients; "auto":
  // the first and the second CPU we may use (none pinned with one CPU);
  // "none": not pinned.
  std::string server_cpus = "auto";
  std::string client_cpus = "auto";
  std::string server_args;  // extra redis-server arguments (shell-like words)
  // Throughput phase: redis-benchmark -P pipeline -c clients -d data_size -n requests -t tests.
  std::string tests = "set,get,lpush,lpop";
  long requests = 0;  // 0: 200,000 (--quick: 20,000)
  int clients = 50;
  int pipeline = 16;
  int data_size = 256;
  // Memory phase: DEBUG POPULATE keys key value_size, FLUSHALL, idle.
  long keys = 0;          // 0: 1,500,000 (--quick: 20,000)
  int value_size = 300;
  double idle_s = -1;     // held reported this long after FLUSHALL; < 0: 10 s (--quick: 1 s)
  double rss_wait_s = -1; // plain Rss reported this long after FLUSHALL; < 0: 12 s (--quick: 2 s)
  double settle_mib = 30; // "settled": held within this of the server's start
  double timeout_s = 600; // per client call, and for a server to start or stop
  std::string command_line;  // for the report
};

// Prints the markdown report on stdout and writes DIR/results.{md,csv,json};
// 0 when every run succeeded, 1 when some failed, 2 on bad arguments or a
// missing server or client.
int server_command(const ServerOptions& options);

}  // namespace lazybench
