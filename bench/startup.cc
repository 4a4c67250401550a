#include "startup.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "compare.h"
#include "harness/stats.h"
#include "harness/sysinfo.h"

namespace lazybench {

namespace {

// A program's argv and envp as C arrays (built before any fork).
struct ChildArgs {
  ChildArgs(const ChildArgs&) = delete;
  ChildArgs& operator=(const ChildArgs&) = delete;
  std::vector<std::string> env;
  std::vector<char*> argv;
  std::vector<char*> envp;
  ChildArgs(const std::string& program, std::vector<std::string> environment) : env(std::move(environment)) {
    // (Pointers into `env`: never copied or moved.)
    argv = {const_cast<char*>(program.c_str()), nullptr};
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

// The "Name:   123 kB" field of a /proc file, in KiB.
std::optional<double> proc_kib(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size() + 1, name + ":") != 0) continue;
    std::istringstream fields(line.substr(name.size() + 1));
    double v = 0;
    if (fields >> v) return v;
  }
  return std::nullopt;
}

struct Footprint {
  double peak_rss_kib = 0;       // VmHWM: the peak of the program's own address space
  double private_dirty_kib = 0;  // pages it wrote (anonymous and data), at exit
};

// Runs the program traced, stopped at its exit (PTRACE_O_TRACEEXIT) while
// its address space still exists, and reads its memory figures there.  A
// child's rusage would not do: its ru_maxrss includes the parent's resident
// set at the fork (the kernel counts the replaced address space at exec).
std::optional<Footprint> traced_run(const std::string& program, ChildArgs& args, std::string* error) {
  const pid_t pid = ::fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) ::_exit(126);
    ::execve(program.c_str(), args.argv.data(), args.envp.data());
    ::_exit(127);
  }
  std::optional<Footprint> out;
  int status = 0;
  bool options_set = false;
  for (;;) {
    if (::waitpid(pid, &status, 0) < 0) {
      if (errno == EINTR) continue;
      *error = std::string("waitpid: ") + std::strerror(errno);
      return std::nullopt;
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) break;
    if (!WIFSTOPPED(status)) continue;
    int deliver = 0;
    if (!options_set && WSTOPSIG(status) == SIGTRAP) {
      // The stop after execve: from here on, stop again at exit.
      ::ptrace(PTRACE_SETOPTIONS, pid, nullptr, reinterpret_cast<void*>(PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL));
      options_set = true;
    } else if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
      const std::string proc = "/proc/" + std::to_string(pid);
      const auto hwm = proc_kib(proc + "/status", "VmHWM");
      const auto dirty = proc_kib(proc + "/smaps_rollup", "Private_Dirty");
      if (hwm && dirty) out = Footprint{*hwm, *dirty};
    } else {
      deliver = WSTOPSIG(status);
    }
    ::ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(static_cast<long>(deliver)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126) {
    *error = "ptrace(PTRACE_TRACEME) refused";
    return std::nullopt;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = program + " failed (status " + std::to_string(status) + ")";
    return std::nullopt;
  }
  if (!out) *error = "no exit stop seen, or /proc unreadable";
  return out;
}

// Spawns the program `n` times, one after the other, waiting for each:
// seconds per process, or nullopt if one failed.
std::optional<double> spawn_batch(const std::string& program, ChildArgs& args, int n, std::string* error) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::optional<double> out;
  const auto start = Clock::now();
  int i = 0;
  for (; i < n; ++i) {
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, program.c_str(), &fa, nullptr, args.argv.data(), args.envp.data());
    if (rc != 0) {
      *error = "spawn " + program + ": " + std::strerror(rc);
      break;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      *error = program + " failed (status " + std::to_string(status) + ")";
      break;
    }
  }
  if (i == n) out = seconds_since(start) / n;
  posix_spawn_file_actions_destroy(&fa);
  return out;
}

std::string mib(double kib) { return format_fixed(kib / 1024.0, 2); }

std::string delta_mib(double kib, double ref_kib) {
  const double d = (kib - ref_kib) / 1024.0;
  return (d >= 0 ? "+" : "") + format_fixed(d, 2);
}

}  // namespace

int startup_command(const StartupOptions& opt) {
  if (opt.spawns < 1 || opt.rounds < 1 || opt.rss_runs < 1) {
    std::cerr << "lazybench startup: --spawns, --rounds and --rss-runs must be at least 1\n";
    return 2;
  }
  if (::access(opt.program.c_str(), X_OK) != 0) {
    std::cerr << "lazybench startup: cannot run " << opt.program << '\n';
    return 2;
  }
  std::vector<std::string> skipped;
  auto resolved = allocators_to_run(opt.allocators, opt.lib, {}, "lazybench startup", &skipped);
  if (!resolved) return 2;
  std::vector<AllocatorSpec> allocators = std::move(*resolved);
  std::vector<std::unique_ptr<ChildArgs>> args;
  for (const auto& a : allocators)
    args.push_back(std::make_unique<ChildArgs>(opt.program, child_environment(child_env(a.preload, a.env))));
  const std::size_t n = allocators.size();
  bool failed = false;
  auto fail = [&](const AllocatorSpec& a, const std::string& what) {
    std::cerr << "lazybench startup: " << a.name << ": " << what << '\n';
    failed = true;
  };

  // Memory: a few traced runs each (the figures barely vary).
  std::vector<std::vector<double>> hwm(n), dirty(n);
  for (int r = 0; r < opt.rss_runs; ++r) {
    for (std::size_t k = 0; k < n; ++k) {
      std::string error;
      if (const auto f = traced_run(opt.program, *args[k], &error)) {
        hwm[k].push_back(f->peak_rss_kib);
        dirty[k].push_back(f->private_dirty_kib);
      } else {
        fail(allocators[k], error);
      }
    }
  }
  // Time: batches interleaved round by round, each round starting with the
  // next allocator, so that drifts in machine load spread over all of them.
  std::vector<std::vector<double>> per_process(n);
  for (int r = 0; r < opt.rounds; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t k = (i + static_cast<std::size_t>(r)) % n;
      std::string error;
      if (const auto t = spawn_batch(opt.program, *args[k], opt.spawns, &error)) {
        per_process[k].push_back(*t);
      } else {
        fail(allocators[k], error);
      }
    }
  }

  std::optional<std::size_t> glibc;
  for (std::size_t k = 0; k < n; ++k)
    if (allocators[k].name == "glibc") glibc = k;
  auto med = [](const std::vector<double>& v) { return v.empty() ? 0.0 : median(v); };
  MarkdownTable table({{"allocator"},
                       {"peak RSS (MiB)", true},
                       {"vs glibc (MiB)", true},
                       {"private dirty at exit (MiB)", true},
                       {"spawn + wait (ms/process)", true},
                       {"vs glibc", true}});
  for (std::size_t k = 0; k < n; ++k) {
    const double h = med(hwm[k]), d = med(dirty[k]), t = med(per_process[k]);
    const bool have_ref = glibc && !hwm[*glibc].empty() && !per_process[*glibc].empty();
    table.add_row({allocators[k].name, hwm[k].empty() ? "-" : mib(h),
                   have_ref && !hwm[k].empty() ? delta_mib(h, med(hwm[*glibc])) : "-",
                   dirty[k].empty() ? "-" : mib(d), per_process[k].empty() ? "-" : format_fixed(t * 1e3, 2),
                   have_ref && !per_process[k].empty() ? format_fixed(t / med(per_process[*glibc]), 2) + "x" : "-"});
  }
  std::cout << "Start-up cost of " << opt.program << " (medians: memory of " << opt.rss_runs
            << " traced runs; time of " << opt.rounds << " interleaved batches of " << opt.spawns
            << " processes)\n\n"
            << table.render();
  for (const auto& s : skipped) std::cout << "- Skipped: " << s << '\n';
  return failed ? 1 : 0;
}

}  // namespace lazybench
