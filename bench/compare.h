// `lazybench compare`: every workload as a child process under every
// allocator (LD_PRELOAD), repetitions interleaved, then the report.
#pragma once

#include <string>
#include <vector>

namespace lazybench {

struct CompareOptions {
  std::vector<std::string> workloads;   // empty: the headline set; "all": everything
  int reps = 3;
  std::string allocators;               // comma list; empty: the default list
  std::string out_dir = "results";
  bool quick = false;
  std::string lib;                      // liblazymalloc.so to use (else env / built-in default)
  std::vector<std::string> alloc_env;   // "ALLOCATOR:VAR=VALUE"
  std::vector<std::string> extra_args;  // "WORKLOAD=ARGS" or "all=ARGS"
  double timeout_s = 600;
  bool plots = true;
  std::string command_line;             // for the report
};

// Returns 0 when every run succeeded, 1 when some failed (the report is
// still written), 2 on bad arguments.
int compare_command(const CompareOptions& options);

// The liblazymalloc.so lazybench uses: `cli` if given, else $LAZYMALLOC_LIB,
// else the build tree's library (compiled in), else the installed one, else
// liblazymalloc.so next to the lazybench executable.  Empty if none exists;
// `tried` lists what was looked at.
std::string find_lazymalloc_library(const std::string& cli, std::string* tried = nullptr);

}  // namespace lazybench
