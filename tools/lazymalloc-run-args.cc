#include "lazymalloc-run-args.h"

#include <cctype>
#include <cstdio>

#include "core/format.h"
#include "core/options.h"

namespace lazymalloc_run {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<std::string> option_env_name(std::string_view name) {
  constexpr std::string_view kPrefix = "LAZYMALLOC_";
  std::string upper;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '-') upper += '_';
    else if (std::isalnum(u) || c == '_') upper += static_cast<char>(std::toupper(u));
    else return std::nullopt;
  }
  if (upper.starts_with(kPrefix)) upper.erase(0, kPrefix.size());
  if (upper.empty()) return std::nullopt;
  return std::string(kPrefix) + upper;
}

std::optional<std::pair<std::string, std::string>> parse_option(std::string_view assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos) return std::nullopt;
  auto name = option_env_name(assignment.substr(0, eq));
  if (!name) return std::nullopt;
  return std::make_pair(std::move(*name), std::string(assignment.substr(eq + 1)));
}

std::string option_problem(std::string_view name, std::string_view value) {
  namespace lm = lazymalloc;
  const auto var = option_env_name(name);
  if (!var) return "bad option name '" + std::string(name) + "': use letters, digits, _ or -";
  // The table's name: lower case, after LAZYMALLOC_.
  const std::string key = lower(std::string_view(*var).substr(11));
  const unsigned o = lm::option_find(key.c_str(), key.size());
  if (o < lm::kOptionCount) {
    int64_t parsed;
    if (lm::option_parse(o, std::string(value).c_str(), &parsed)) return {};
    char buf[512];
    lm::Writer w(buf, sizeof buf);
    lm::option_write_values(w, lm::kOptionInfo[o], false);
    const size_t n = w.finish();
    return "bad value '" + std::string(value) + "' for " + key + ": expected " +
           std::string(buf, n < sizeof buf ? n : sizeof buf - 1);
  }
  if (lm::variable_find(key.c_str(), key.size()) < lm::kVariableCount) return {};
  std::string out = "unknown option '" + std::string(name) + "'";
  unsigned near[3];
  const unsigned n = lm::option_suggest(key.c_str(), key.size(), near, 3);
  for (unsigned i = 0; i < n; ++i)
    out.append(i == 0 ? " (did you mean " : i + 1 == n ? " or " : ", ").append(lm::option_suggestion_name(near[i]));
  return out + (n ? "?)" : "");
}

std::optional<std::string> stats_env_value(std::string_view value) {
  const std::string v = lower(value);
  if (v.empty() || v == "text" || v == "1" || v == "yes" || v == "true" || v == "on") return "1";
  if (v == "json") return "json";
  if (v == "0" || v == "no" || v == "false" || v == "off") return "0";
  return std::nullopt;
}

std::string compose_preload(const std::string& lib, std::string_view existing) {
  std::string out = lib;
  std::string item;
  auto flush = [&] {
    if (!item.empty() && item != lib) out += ":" + item;
    item.clear();
  };
  for (char c : existing) {
    if (c == ':' || c == ' ' || c == '\t') flush();
    else item += c;
  }
  flush();
  return out;
}

LibraryChoice choose_library(const std::string& cli, const char* env,
                             const std::vector<std::pair<std::string, std::string>>& defaults,
                             const std::function<bool(const std::string&)>& exists) {
  LibraryChoice choice;
  auto explicit_choice = [&](const std::string& path, const char* source) {
    choice.tried.push_back(path);
    if (exists(path)) {
      choice.path = path;
      choice.source = source;
    }
    return choice;
  };
  if (!cli.empty()) return explicit_choice(cli, "--lib");
  if (env && *env) return explicit_choice(env, "LAZYMALLOC_LIB");
  for (const auto& [source, path] : defaults) {
    if (path.empty()) continue;
    choice.tried.push_back(path);
    if (exists(path)) {
      choice.path = path;
      choice.source = source;
      break;
    }
  }
  return choice;
}

bool looks_like_elf(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  unsigned char magic[4] = {};
  const bool ok = std::fread(magic, 1, 4, f) == 4 && magic[0] == 0x7F && magic[1] == 'E' && magic[2] == 'L' &&
                  magic[3] == 'F';
  std::fclose(f);
  return ok;
}

}  // namespace lazymalloc_run
