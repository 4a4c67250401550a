// Helpers of the bench tests that run children (bench_workload_test,
// bench_run_tool_test): spawn options with the tests' time limit, and the
// test binaries' own arguments.
#pragma once

#include <string>

#include "subprocess.h"

namespace lazybench::test {

// Options for a child of a test: killed after timeout_s.
inline SpawnOptions options(double timeout_s = 30) {
  SpawnOptions o;
  o.timeout_s = timeout_s;
  return o;
}

// Reads "--name=value" or "--name value" from a test binary's own arguments
// (after InitGoogleTest has removed its flags).
inline std::string arg_value(int argc, char** argv, const std::string& name) {
  const std::string flag = "--" + name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == flag && i + 1 < argc) return argv[i + 1];
    if (a.rfind(flag + "=", 0) == 0) return a.substr(flag.size() + 1);
  }
  return {};
}

}  // namespace lazybench::test
