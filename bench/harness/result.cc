#include "result.h"

#include <nlohmann/json.hpp>

namespace lazybench {

std::optional<double> RunResult::extra_value(std::string_view key) const {
  for (const auto& [k, v] : extra)
    if (k == key) return v;
  return std::nullopt;
}

namespace {

nlohmann::ordered_json extra_object(const RunResult& r) {
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& [k, v] : r.extra) extra[k] = v;
  return extra;
}

// One line (no indent); invalid UTF-8 in a name becomes U+FFFD rather than
// an exception.  Non-finite numbers are written as null.
std::string dump_line(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

std::string extra_json(const RunResult& r) { return dump_line(extra_object(r)); }

std::string to_json_line(const RunResult& r) {
  // ordered_json keeps the keys in this order: find_result() looks for lines
  // that start with {"lazybench".
  nlohmann::ordered_json metric = {{"name", r.metric.name},
                                   {"value", r.metric.value},
                                   {"unit", r.metric.unit},
                                   {"higher_is_better", r.metric.higher_is_better}};
  const nlohmann::ordered_json line = {{"lazybench", 1},
                                       {"workload", r.workload},
                                       {"allocator", r.allocator},
                                       {"seed", r.seed},
                                       {"metric", std::move(metric)},
                                       {"wall_s", r.wall_s},
                                       {"user_s", r.usage.user_s},
                                       {"sys_s", r.usage.sys_s},
                                       {"minflt", static_cast<std::int64_t>(r.usage.minflt)},
                                       {"majflt", static_cast<std::int64_t>(r.usage.majflt)},
                                       {"nvcsw", static_cast<std::int64_t>(r.usage.nvcsw)},
                                       {"nivcsw", static_cast<std::int64_t>(r.usage.nivcsw)},
                                       {"maxrss_mib", static_cast<double>(r.usage.maxrss_kib) / 1024.0},
                                       {"extra", extra_object(r)}};
  return dump_line(line);
}

namespace {

// Member `key` of `obj` if it is present and has the wanted type.
std::optional<double> number_member(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string string_member(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::optional<RunResult> parse_result_line(std::string_view line, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<RunResult> {
    if (error) *error = why;
    return std::nullopt;
  };
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    return fail(std::string("not JSON: ") + e.what());
  }
  if (!doc.is_object() || !number_member(doc, "lazybench")) return fail("not a lazybench result");
  RunResult r;
  r.workload = string_member(doc, "workload");
  r.allocator = string_member(doc, "allocator");
  r.seed = string_member(doc, "seed");
  const auto metric = doc.find("metric");
  if (metric == doc.end() || !metric->is_object()) return fail("result has no metric object");
  const auto value = number_member(*metric, "value");
  if (!value) return fail("metric has no numeric value");
  r.metric.name = string_member(*metric, "name");
  r.metric.value = *value;
  r.metric.unit = string_member(*metric, "unit");
  const auto hib = metric->find("higher_is_better");
  r.metric.higher_is_better = hib == metric->end() || !hib->is_boolean() || hib->get<bool>();
  r.wall_s = number_member(doc, "wall_s").value_or(0);
  r.usage.user_s = number_member(doc, "user_s").value_or(0);
  r.usage.sys_s = number_member(doc, "sys_s").value_or(0);
  r.usage.minflt = static_cast<std::int64_t>(number_member(doc, "minflt").value_or(0));
  r.usage.majflt = static_cast<std::int64_t>(number_member(doc, "majflt").value_or(0));
  r.usage.nvcsw = static_cast<std::int64_t>(number_member(doc, "nvcsw").value_or(0));
  r.usage.nivcsw = static_cast<std::int64_t>(number_member(doc, "nivcsw").value_or(0));
  r.usage.maxrss_kib = static_cast<std::int64_t>(number_member(doc, "maxrss_mib").value_or(0) * 1024.0 + 0.5);
  if (const auto extra = doc.find("extra"); extra != doc.end() && extra->is_object()) {
    for (const auto& [k, v] : extra->items())
      if (v.is_number()) r.extra.emplace_back(k, v.get<double>());
  }
  return r;
}

std::optional<RunResult> find_result(std::string_view output, std::string* error) {
  std::size_t end = output.size();
  std::string last_error = "no result line in the output";
  while (end > 0) {
    std::size_t start = output.rfind('\n', end - 1);
    start = (start == std::string_view::npos) ? 0 : start + 1;
    const std::string_view line = output.substr(start, end - start);
    if (line.starts_with("{\"lazybench\"")) {
      if (auto r = parse_result_line(line, &last_error)) return r;
    }
    if (start == 0) break;
    end = start - 1;
  }
  if (error) *error = last_error;
  return std::nullopt;
}

}  // namespace lazybench
