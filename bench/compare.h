// `lazybench compare`: every workload as a child process under every
// allocator (LD_PRELOAD), repetitions interleaved, then the report.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/args.h"
#include "subprocess.h"

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

// The allocators `names` stands for, with their libraries found (`lib`:
// the liblazymalloc.so to use, as for find_lazymalloc_library).  One not
// installed is left out, with a line on stderr and in *skipped; an unknown
// name is reported on stderr as `who`'s error: nullopt.
std::optional<std::vector<AllocatorSpec>> resolve_allocators(const std::vector<std::string>& names,
                                                             const std::string& lib, const char* who,
                                                             std::vector<std::string>* skipped);

// The allocators a command runs: `list` (comma list; empty: the default
// list) resolved as by resolve_allocators, with `alloc_env` applied (as by
// apply_alloc_env).  nullopt, with the error on stderr as `who`'s, for an
// unknown name, a bad environment item, or nothing left to run.
std::optional<std::vector<AllocatorSpec>> allocators_to_run(const std::string& list, const std::string& lib,
                                                            const std::vector<std::string>& alloc_env,
                                                            const char* who, std::vector<std::string>* skipped);

// "NAME (PRELOAD, VAR=VALUE...), ...": the allocators of a report's header.
std::string describe_allocators(const std::vector<AllocatorSpec>& allocators);

// The environment changes for a child: no LD_PRELOAD of ours, the
// allocator's library (`preload`, none if empty) and variables instead.
EnvChanges child_env(const std::string& preload, const std::vector<std::pair<std::string, std::string>>& vars);

// Adds each "ALLOCATOR:VAR=VALUE" of `items` to that allocator's variables.
// An item naming an allocator outside `names` (the ones asked for), or not of
// that form, is reported on stderr as `who`'s error: false.  (An allocator
// asked for but skipped as not installed takes its items silently.)
bool apply_alloc_env(std::vector<AllocatorSpec>& allocators, const std::vector<std::string>& names,
                     const std::vector<std::string>& items, const char* who);

// The executable `program` found in $PATH; empty if none.
std::string find_in_path(const std::string& program);

}  // namespace lazybench
