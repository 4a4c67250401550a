#include "result.h"

#include "json.h"

namespace lazybench {

std::optional<double> RunResult::extra_value(std::string_view key) const {
  for (const auto& [k, v] : extra)
    if (k == key) return v;
  return std::nullopt;
}

std::string to_json_line(const RunResult& r) {
  JsonWriter metric;
  metric.field("name", r.metric.name)
      .field("value", r.metric.value)
      .field("unit", r.metric.unit)
      .field("higher_is_better", r.metric.higher_is_better);
  JsonWriter extra;
  for (const auto& [k, v] : r.extra) extra.field(k, v);
  JsonWriter w;
  w.field("lazybench", 1)
      .field("workload", r.workload)
      .field("allocator", r.allocator)
      .field("seed", r.seed)
      .object("metric", metric)
      .field("wall_s", r.wall_s)
      .field("user_s", r.usage.user_s)
      .field("sys_s", r.usage.sys_s)
      .field("minflt", static_cast<std::int64_t>(r.usage.minflt))
      .field("majflt", static_cast<std::int64_t>(r.usage.majflt))
      .field("nvcsw", static_cast<std::int64_t>(r.usage.nvcsw))
      .field("nivcsw", static_cast<std::int64_t>(r.usage.nivcsw))
      .field("maxrss_mib", static_cast<double>(r.usage.maxrss_kib) / 1024.0)
      .object("extra", extra);
  return w.str();
}

std::optional<RunResult> parse_result_line(std::string_view line, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<RunResult> {
    if (error) *error = why;
    return std::nullopt;
  };
  std::string json_error;
  const auto doc = parse_json(line, &json_error);
  if (!doc) return fail("not JSON: " + json_error);
  if (!doc->is_object() || !doc->number("lazybench")) return fail("not a lazybench result");
  RunResult r;
  r.workload = doc->string("workload").value_or("");
  r.allocator = doc->string("allocator").value_or("");
  r.seed = doc->string("seed").value_or("");
  const JsonValue* metric = doc->find("metric");
  if (!metric || !metric->is_object()) return fail("result has no metric object");
  const auto value = metric->number("value");
  if (!value) return fail("metric has no numeric value");
  r.metric.name = metric->string("name").value_or("");
  r.metric.value = *value;
  r.metric.unit = metric->string("unit").value_or("");
  r.metric.higher_is_better = metric->boolean("higher_is_better").value_or(true);
  r.wall_s = doc->number("wall_s").value_or(0);
  r.usage.user_s = doc->number("user_s").value_or(0);
  r.usage.sys_s = doc->number("sys_s").value_or(0);
  r.usage.minflt = static_cast<std::int64_t>(doc->number("minflt").value_or(0));
  r.usage.majflt = static_cast<std::int64_t>(doc->number("majflt").value_or(0));
  r.usage.nvcsw = static_cast<std::int64_t>(doc->number("nvcsw").value_or(0));
  r.usage.nivcsw = static_cast<std::int64_t>(doc->number("nivcsw").value_or(0));
  r.usage.maxrss_kib = static_cast<std::int64_t>(doc->number("maxrss_mib").value_or(0) * 1024.0 + 0.5);
  if (const JsonValue* extra = doc->find("extra"); extra && extra->is_object()) {
    for (const auto& [k, v] : extra->as_object())
      if (v.is_number()) r.extra.emplace_back(k, v.as_number());
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
