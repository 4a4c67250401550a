// Runs a program as a child process (posix_spawn) with a chosen
// environment, captures its stdout (and stderr, or sends stderr to a file or
// to ours), and waits for it with a timeout.  The one process spawner of
// lazybench's compare, the bench tests and release-scaling.
// (Named subprocess.h, not spawn.h: bench/ is an include directory, and
// <spawn.h> must still find the C library's header.)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lazybench {

// Environment variables to set (value) or remove (nullopt) on top of ours.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

struct SpawnOptions {
  enum class Stderr { kCapture, kFile, kInherit };

  EnvChanges env;
  // Written to the child's stdin, which is then closed; nullopt: /dev/null.
  // (SIGPIPE is ignored in this process when the text is not empty, so a child that
  // does not read it all cannot kill us.)
  std::optional<std::string> stdin_text;
  Stderr stderr_to = Stderr::kCapture;
  std::string stderr_path;  // for kFile: created or truncated
  // The child is killed (SIGKILL) when it has not finished after this long;
  // 0: no limit.
  double timeout_s = 0;
  // The CPUs the child may run on (its affinity, which its threads and
  // children inherit); empty: ours.  A CPU we may not use fails the start.
  std::vector<int> cpus;
};

struct SpawnResult {
  bool started = false;
  std::string start_error;  // why it did not start
  bool timed_out = false;
  double timeout_s = 0;
  int status = 0;  // as from waitpid
  std::string out, err;
  double elapsed_s = 0;

  bool exited() const;           // exited normally (not killed, not timed out)
  int exit_code() const;         // -1 unless exited()
  int term_signal() const;       // 0 unless killed by a signal (other than our timeout)
  bool ok() const { return exit_code() == 0; }
  // "ok", "exit 3", "killed by SIGSEGV", "timeout after 30 s" or the start error.
  std::string status_text() const;
  // status_text() with the captured output, for assertion messages.
  std::string describe() const;
};

// Runs argv[0] (looked up in PATH when it has no '/') with argv.
SpawnResult spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// Our environment with `changes` applied, as NAME=VALUE entries (for a
// caller that starts children itself, e.g. under ptrace).
std::vector<std::string> child_environment(const EnvChanges& changes);

}  // namespace lazybench
