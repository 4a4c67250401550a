// `lazybench run WORKLOAD [options]` and `lazybench --list`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace lazybench {

// Runs one workload in this process and prints its result line to `out`.
// `args` are the workload's options (after the name).  Returns the exit
// status: 0 ok, 1 the workload failed, 2 bad arguments.
int run_workload_command(const std::string& name, std::vector<std::string> args, std::ostream& out);

// One line per workload: name, '*' for the headline set, description.
void list_workloads(std::ostream& out);

}  // namespace lazybench
