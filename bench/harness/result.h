// The result of one `lazybench run`: one JSON object on one line of stdout,
// which `lazybench compare` (and the tests) read back.
//
//   {"lazybench":1,"workload":"ebizzy-2t","allocator":"glibc","seed":"5f3a...",
//    "metric":{"name":"throughput","value":1.2e6,"unit":"records/s","higher_is_better":true},
//    "wall_s":2.0,"user_s":3.9,"sys_s":0.05,"minflt":120,"majflt":0,"nvcsw":3,"nivcsw":40,
//    "maxrss_mib":12.5,"extra":{"held_mib":3.2,...}}
//
// wall/user/sys/faults/context switches cover the workload's measured region
// (setup such as ebizzy's chunk initialisation is excluded); maxrss_mib is the
// process's peak resident set (ru_maxrss).  "extra" holds workload-specific
// figures, e.g. the held-memory figures of `phases` and `huge-free`.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sysinfo.h"

namespace lazybench {

struct Metric {
  std::string name;
  double value = 0;
  std::string unit;
  bool higher_is_better = true;
};

struct RunResult {
  std::string workload;
  std::string allocator;  // as detected in the running process
  std::string seed;       // hex, reproduces the run with --seed
  Metric metric;
  double wall_s = 0;
  Usage usage;
  std::vector<std::pair<std::string, double>> extra;

  std::optional<double> extra_value(std::string_view key) const;
};

// The single result line (no trailing newline), written with nlohmann-json.
std::string to_json_line(const RunResult& result);

// The "extra" member alone, as one line of JSON (results.csv's last column).
std::string extra_json(const RunResult& result);

// Parses a result line.  nullopt (with a message) if it is not one.
std::optional<RunResult> parse_result_line(std::string_view line, std::string* error = nullptr);

// Finds and parses the last result line in a child's whole stdout.
std::optional<RunResult> find_result(std::string_view output, std::string* error = nullptr);

}  // namespace lazybench
