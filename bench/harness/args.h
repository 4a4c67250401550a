// Argument parsing helpers shared by lazybench's subcommands.  CLI11 does the
// command-line grammar; these functions give meaning to the values (sizes
// with suffixes, comma lists, allocator specs), and are unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lazybench {

// "4096", "16K", "16KiB", "2M", "1.5G", "512m" -> bytes (binary units).
// nullopt for negative, malformed or overflowing input.
std::optional<std::uint64_t> parse_size(std::string_view text);

// 16384 -> "16 KiB", 3 << 20 -> "3 MiB", 1536 -> "1.5 KiB".
std::string format_size(std::uint64_t bytes);

// "1.5" -> 1.5, "250ms" -> 0.25, "2s" -> 2, "1min" -> 60.  Seconds.
std::optional<double> parse_seconds(std::string_view text);

// Splits "a,b,,c" on commas (and whitespace), dropping empty items.
std::vector<std::string> split_list(std::string_view text);

// A CPU list as in /proc/PID/status's Cpus_allowed_list and taskset -c:
// "1", "0,2", "0-3,6" -> the CPU numbers, ascending, each once.  nullopt when
// empty or malformed (a range whose end is below its start, a number above 4095).
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

// "VAR=value" -> {"VAR","value"}; nullopt if there is no '=' or VAR is empty
// or VAR has characters other than [A-Za-z0-9_].
std::optional<std::pair<std::string, std::string>> parse_assignment(std::string_view text);

// An allocator to compare: a label, what to preload (empty = none, glibc;
// a bare file name is searched for with resolve_preload), and extra
// environment for its runs.
struct AllocatorSpec {
  std::string name;
  std::string preload;
  std::vector<std::pair<std::string, std::string>> env;
  bool builtin = false;  // one of the known names
};

// One item of `--allocators`: a known name ("jemalloc") or "label=/path/lib.so"
// for any other preloadable library.  nullopt for an unknown bare name.
// `lazymalloc_lib` is what "lazymalloc" resolves to.
std::optional<AllocatorSpec> parse_allocator(std::string_view item, const std::string& lazymalloc_lib);

// Where peer allocators are looked for when a spec names a bare file
// ("libjemalloc.so.2"): the compiler's multiarch directory first.
std::vector<std::string> peer_library_dirs();

// The readable path of `preload`: itself if it contains '/', else the first
// dirs[i]/preload that exists.  Empty when not found (or preload is empty).
std::string resolve_preload(const std::string& preload, const std::vector<std::string>& dirs);

// The allocators lazybench knows by name, in the default comparison order.
// (jemalloc-bg is known but not in the default list.)
const std::vector<std::string>& default_allocator_names();
const std::vector<std::string>& known_allocator_names();

// Splits a shell-like argument string ("-S 2 --size '16 K'") into words:
// whitespace separates, single and double quotes group, backslash escapes.
// nullopt on an unterminated quote.
std::optional<std::vector<std::string>> split_words(std::string_view text);

}  // namespace lazybench
