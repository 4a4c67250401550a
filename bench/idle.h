// `lazybench idle`: what an allocator costs a process that has gone idle,
// under every allocator side by side.  Each run is bench/idle_probe.c under
// LD_PRELOAD: it churns 256 MiB (every byte written), keeps every 32nd block
// (8 MiB live, one 64 KiB block in every 2 MiB), sleeps while the
// allocator's decay runs, then measures a window of idle sleep with
// getrusage: wakeups and CPU of every thread but the sleeping main thread,
// and memory held (Rss - LazyFree) at the end.
#pragma once

#include <string>

namespace lazybench {

struct IdleOptions {
  std::string allocators;  // comma list; empty: the default list
  std::string lib;         // liblazymalloc.so to use
  std::string probe;       // the idle-probe program; empty: next to lazybench
  int reps = 1;            // runs per allocator, interleaved
  int churn_mib = 256;
  int size = 65536;        // bytes per block
  int stride = 32;         // every stride-th block stays live
  double settle_s = 20;    // after the frees, before the window
  double window_s = 10;
};

// Prints a markdown table on stdout; 0 when every run succeeded, 1 when some
// failed, 2 on bad arguments.
int idle_command(const IdleOptions& options);

}  // namespace lazybench
