// `lazybench startup`: what being loaded costs a process that does (almost)
// nothing, under every allocator side by side: the peak RSS of a short
// program (/bin/true) and the time to spawn it and wait for it.
#pragma once

#include <string>

namespace lazybench {

struct StartupOptions {
  std::string allocators;              // comma list; empty: the default list
  std::string lib;                     // liblazymalloc.so to use
  std::string program = "/bin/true";   // run with no arguments
  int spawns = 50;                     // processes per timed batch
  int rounds = 10;                     // batches per allocator, interleaved
  int rss_runs = 5;                    // traced runs per allocator for the memory figures
};

// Prints a markdown table on stdout; 0 when every run succeeded, 1 when some
// failed, 2 on bad arguments.
int startup_command(const StartupOptions& options);

}  // namespace lazybench
