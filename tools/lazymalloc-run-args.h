// The decisions lazymalloc-run makes, as pure functions (unit-tested from
// bench/tests): which library to preload, how LD_PRELOAD is composed, how
// `-o name=value` becomes LAZYMALLOC_NAME=value, and the exit codes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lazymalloc_run {

// Exit statuses of lazymalloc-run itself.  When the program runs, its own
// status is the wrapper's status, because the wrapper execs it.
inline constexpr int kExitUsage = 2;         // bad command line
inline constexpr int kExitNoLibrary = 126;   // liblazymalloc.so missing, unreadable or not ELF
inline constexpr int kExitCannotExec = 126;  // program found but cannot be executed
inline constexpr int kExitNotFound = 127;    // program not found (as in the shell)

// "decay_ms" / "decay-ms" / "DECAY_MS" / "LAZYMALLOC_DECAY_MS" -> "LAZYMALLOC_DECAY_MS".
// nullopt when the name is empty or has characters other than [A-Za-z0-9_-].
std::optional<std::string> option_env_name(std::string_view name);

// "decay_ms=500" -> {"LAZYMALLOC_DECAY_MS", "500"}; nullopt without '=' or with a bad name.
std::optional<std::pair<std::string, std::string>> parse_option(std::string_view assignment);

// Checks `-o NAME=VALUE` against the options table (src/core/options.h):
// empty when NAME is an option and VALUE a value it accepts, or NAME a
// variable lazymalloc reads (LAZYMALLOC_STATS_FILE); otherwise one line
// saying what is wrong, e.g. "unknown option 'decay_mss' (did you mean
// decay_ms?)" or "bad value '-5G' for memory_limit: expected bytes, ...".
std::string option_problem(std::string_view name, std::string_view value);

// The value of LAZYMALLOC_STATS for `--stats[=VALUE]`: "text", "1", "yes",
// "true" or "" -> "1" (text at exit); "json" -> "json"; "0", "no", "off",
// "false" -> "0".  nullopt otherwise.
std::optional<std::string> stats_env_value(std::string_view value);

// LD_PRELOAD with `lib` first, followed by the entries of `existing`
// (separated by ':' or spaces), without a second copy of `lib`.
std::string compose_preload(const std::string& lib, std::string_view existing);

struct LibraryChoice {
  std::string path;                // chosen library; empty on failure
  std::string source;              // "--lib", "LAZYMALLOC_LIB", "build tree", "installed", "next to lazymalloc-run"
  std::vector<std::string> tried;  // what was looked at, in order
};

// Picks the library: `cli` (--lib) if given, else `env` ($LAZYMALLOC_LIB) if
// set; an explicit choice that does not exist is an error, not a fallback.
// Otherwise the first of `defaults` (source name, path) that exists.
LibraryChoice choose_library(const std::string& cli, const char* env,
                             const std::vector<std::pair<std::string, std::string>>& defaults,
                             const std::function<bool(const std::string&)>& exists);

// True when the file starts with the ELF magic.
bool looks_like_elf(const std::string& path);

}  // namespace lazymalloc_run
