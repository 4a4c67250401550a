// The interface every lazybench workload implements, and the registry.
//
// A workload is ordinary code that allocates through malloc/free/realloc and
// never calls lazymalloc directly, so any allocator can be preloaded under
// it.  It declares its options (through OptionSink, implemented with CLI11 by
// the `run` subcommand), runs, and returns its metric and extra figures; the
// harness adds CPU time, faults and peak RSS and prints the result line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/result.h"
#include "harness/sysinfo.h"

namespace lazybench {

// Where a workload declares its command-line options.  `flags` uses CLI11
// syntax ("-S,--seconds").  The pointee holds the default and receives the
// parsed value.
class OptionSink {
 public:
  virtual ~OptionSink() = default;
  // Seconds; accepts "2", "0.5", "250ms".
  virtual void seconds(const std::string& flags, double* value, const std::string& help) = 0;
  // A plain non-negative integer.
  virtual void count(const std::string& flags, std::uint64_t* value, const std::string& help) = 0;
  // A byte size; accepts "4096", "16K", "2MiB", "1.5G".
  virtual void size(const std::string& flags, std::uint64_t* value, const std::string& help) = 0;
  // A real number.
  virtual void real(const std::string& flags, double* value, const std::string& help) = 0;
  virtual void text(const std::string& flags, std::string* value, const std::string& help) = 0;
  virtual void flag(const std::string& flags, bool* value, const std::string& help) = 0;
};

// Brackets the part of a run that is measured (wall time, CPU, faults).
// Workloads call begin() after their setup and end() before their teardown;
// if they call neither, the whole run() is measured.
class Measure {
 public:
  void begin() {
    started_ = true;
    usage_begin_ = Usage::self();
    t_begin_ = Clock::now();
  }
  void end() {
    t_end_ = Clock::now();
    usage_end_ = Usage::self();
    ended_ = true;
  }
  bool started() const { return started_; }
  bool ended() const { return ended_; }
  double wall_s() const { return std::chrono::duration<double>(t_end_ - t_begin_).count(); }
  Usage usage() const { return Usage::delta(usage_begin_, usage_end_); }

 private:
  bool started_ = false, ended_ = false;
  Usage usage_begin_, usage_end_;
  Clock::time_point t_begin_{}, t_end_{};
};

struct Outcome {
  Metric metric;
  std::vector<std::pair<std::string, double>> extra;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual void options(OptionSink& sink) = 0;
  // Checks the parsed options; returns an error message or "".
  virtual std::string validate() { return {}; }
  // Runs the workload.  Throws std::runtime_error on failure (e.g. malloc
  // returned NULL or a consistency check failed).
  virtual Outcome run(Measure& measure, std::uint64_t seed) = 0;
};

struct WorkloadInfo {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Workload>()> make;
  // Always applied first (variants: e.g. ebizzy-2t is ebizzy with "-t 2").
  std::vector<std::string> fixed_args;
  // Sizing used by `lazybench compare` (chosen so the headline set fits the
  // 10-minute budget of tools/bench.sh on a 2-core machine), and by
  // `compare --quick` / `run --quick` / the tests (well under 2 s).
  std::vector<std::string> compare_args;
  std::vector<std::string> quick_args;
  // Option taking a file for a memory time series ("--series" for phases);
  // compare passes one per run and plots it.  Empty: none.
  std::string series_option;
  bool headline = false;  // part of the default `compare` set
  bool in_all = true;     // part of `compare all` (variants cover their base)
};

// All workloads, in listing order.
const std::vector<WorkloadInfo>& workload_registry();
const WorkloadInfo* find_workload(std::string_view name);

// Factories, one per workload file.
std::unique_ptr<Workload> make_ebizzy();
std::unique_ptr<Workload> make_phases();
std::unique_ptr<Workload> make_larson();
std::unique_ptr<Workload> make_xmalloc();
std::unique_ptr<Workload> make_malloc_large();
std::unique_ptr<Workload> make_huge_free();
std::unique_ptr<Workload> make_alloc_pair();
std::unique_ptr<Workload> make_realloc_grow();
std::unique_ptr<Workload> make_mixed();
std::unique_ptr<Workload> make_mleak();
std::unique_ptr<Workload> make_random_size();
std::unique_ptr<Workload> make_batch();
std::unique_ptr<Workload> make_idle_release();
std::unique_ptr<Workload> make_cache_scratch();
std::unique_ptr<Workload> make_rptest();

}  // namespace lazybench
