#include "args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <unistd.h>

namespace lazybench {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses a non-negative decimal number prefix; returns the number and the rest.
std::optional<std::pair<double, std::string_view>> leading_number(std::string_view s) {
  s = trim(s);
  std::size_t i = 0;
  bool digits = false, dot = false;
  while (i < s.size()) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
    ++i;
  }
  if (!digits) return std::nullopt;
  const std::string num(s.substr(0, i));
  return std::make_pair(std::strtod(num.c_str(), nullptr), trim(s.substr(i)));
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  const auto parsed = leading_number(text);
  if (!parsed) return std::nullopt;
  const auto [number, rest] = *parsed;
  const std::string unit = lower(rest);
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  const double bytes = std::round(number * scale);
  if (!(bytes < 18446744073709551615.0)) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

std::string format_size(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  else std::snprintf(buf, sizeof buf, "%.3g %s", v, kUnits[u]);
  return buf;
}

std::optional<double> parse_seconds(std::string_view text) {
  const auto parsed = leading_number(text);
  if (!parsed) return std::nullopt;
  const auto [number, rest] = *parsed;
  const std::string unit = lower(rest);
  if (unit.empty() || unit == "s" || unit == "sec") return number;
  if (unit == "ms") return number / 1000;
  if (unit == "us") return number / 1e6;
  if (unit == "min" || unit == "m") return number * 60;
  return std::nullopt;
}

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) flush();
    else cur += c;
  }
  flush();
  return out;
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  constexpr long kMaxCpu = 4095;
  std::vector<int> out;
  for (const auto& item : split_list(text)) {
    long first = -1, last = -1;
    char* end = nullptr;
    first = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || first < 0) return std::nullopt;
    last = first;
    if (*end == '-') {
      const char* start = end + 1;
      last = std::strtol(start, &end, 10);
      if (end == start || last < first) return std::nullopt;
    }
    if (*end != '\0' || last > kMaxCpu) return std::nullopt;
    for (long c = first; c <= last; ++c) out.push_back(static_cast<int>(c));
  }
  if (out.empty()) return std::nullopt;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<std::pair<std::string, std::string>> parse_assignment(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) return std::nullopt;
  const std::string_view name = text.substr(0, eq);
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return std::nullopt;
  return std::make_pair(std::string(name), std::string(text.substr(eq + 1)));
}

const std::vector<std::string>& default_allocator_names() {
  static const std::vector<std::string> names = {"lazymalloc", "glibc",    "jemalloc",
                                                 "tcmalloc",   "mimalloc", "tbbmalloc"};
  return names;
}

const std::vector<std::string>& known_allocator_names() {
  static const std::vector<std::string> names = {
      "lazymalloc", "glibc",    "jemalloc",  "jemalloc-bg",     "jemalloc-free",    "tcmalloc",
      "mimalloc",   "tbbmalloc", "lazymalloc-decay", "lazymalloc-eager", "lazymalloc-never",
      "lazymalloc-secure"};
  return names;
}

std::optional<AllocatorSpec> parse_allocator(std::string_view item, const std::string& lazymalloc_lib) {
  item = trim(item);
  if (item.empty()) return std::nullopt;
  AllocatorSpec spec;
  const auto eq = item.find('=');
  if (eq != std::string_view::npos) {
    if (eq == 0 || eq + 1 == item.size()) return std::nullopt;
    spec.name = std::string(item.substr(0, eq));
    spec.preload = std::string(item.substr(eq + 1));
    return spec;
  }
  spec.name = std::string(item);
  spec.builtin = true;
  if (item == "lazymalloc") {
    spec.preload = lazymalloc_lib;
  } else if (item == "glibc") {
    spec.preload.clear();
  } else if (item == "jemalloc") {
    spec.preload = "libjemalloc.so.2";
  } else if (item == "jemalloc-bg") {
    // jemalloc with its background purging thread: the fair "jemalloc that
    // returns memory while idle" configuration.
    spec.preload = "libjemalloc.so.2";
    spec.env.emplace_back("MALLOC_CONF", "background_thread:true");
  } else if (item == "jemalloc-free") {
    // jemalloc giving idle memory back with MADV_FREE (its muzzy state):
    // without dirty_decay_ms it would only ever use MADV_DONTNEED.
    spec.preload = "libjemalloc.so.2";
    spec.env.emplace_back("MALLOC_CONF", "background_thread:true,dirty_decay_ms:1,muzzy_decay_ms:10000");
  } else if (item == "lazymalloc-decay" || item == "lazymalloc-eager" || item == "lazymalloc-never") {
    // lazymalloc under its other release policies, for side-by-side runs.
    spec.preload = lazymalloc_lib;
    spec.env.emplace_back("LAZYMALLOC_PURGE", std::string(item.substr(11)));
  } else if (item == "lazymalloc-secure") {
    spec.preload = lazymalloc_lib;
    spec.env.emplace_back("LAZYMALLOC_SECURE", "1");
  } else if (item == "tcmalloc") {
    spec.preload = "libtcmalloc_minimal.so.4";
  } else if (item == "mimalloc") {
    spec.preload = "libmimalloc.so.2";
  } else if (item == "tbbmalloc") {
    // The proxy is the library that replaces malloc; libtbbmalloc.so.2 alone
    // only provides scalable_malloc.
    spec.preload = "libtbbmalloc_proxy.so.2";
  } else {
    return std::nullopt;
  }
  return spec;
}

std::optional<std::vector<std::string>> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        cur += text[++i];
      } else {
        cur += c;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote) return std::nullopt;
  if (in_word) words.push_back(cur);
  return words;
}

}  // namespace lazybench

namespace lazybench {

std::vector<std::string> peer_library_dirs() {
  std::vector<std::string> dirs;
#ifdef LAZYBENCH_MULTIARCH_LIBDIR
  dirs.emplace_back(LAZYBENCH_MULTIARCH_LIBDIR);
#endif
  for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                        "/usr/local/lib", "/lib/x86_64-linux-gnu", "/lib64"})
    dirs.emplace_back(d);
  return dirs;
}

std::string resolve_preload(const std::string& preload, const std::vector<std::string>& dirs) {
  if (preload.empty()) return {};
  if (preload.find('/') != std::string::npos) return ::access(preload.c_str(), R_OK) == 0 ? preload : std::string();
  for (const auto& dir : dirs) {
    const std::string path = dir + "/" + preload;
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return {};
}

}  // namespace lazybench
