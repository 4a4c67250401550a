// Test helper: run a command with a chosen environment and capture its
// stdout and stderr, with a timeout.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lazybench::test {

struct Spawned {
  bool started = false;
  bool timed_out = false;
  int status = 0;  // as from waitpid
  std::string out, err;
  double elapsed_s = 0;
  bool exited() const;
  int exit_code() const;   // -1 if it did not exit normally
  int term_signal() const; // 0 if it was not killed by a signal
  std::string describe() const;  // for assertion messages
};

struct SpawnOptions {
  // Variables to set (value) or remove (nullopt) on top of our environment.
  std::map<std::string, std::optional<std::string>> env;
  std::string stdin_text;
  double timeout_s = 30;
};

// Runs argv[0] (searched in PATH) with argv.
Spawned spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// Reads "--name=value" or "--name value" from a test binary's own arguments
// (after InitGoogleTest has removed its flags).
std::string arg_value(int argc, char** argv, const std::string& name);

}  // namespace lazybench::test
