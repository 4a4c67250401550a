// A very small JSON writer and parser, enough for lazybench's own result
// lines ({"lazybench":1, ...}) and for reading an allocator's JSON stats.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace lazybench {

// Builds one JSON object on a single line, keys in insertion order.
class JsonWriter {
 public:
  JsonWriter& field(std::string_view key, double value);
  JsonWriter& field(std::string_view key, std::int64_t value);
  JsonWriter& field(std::string_view key, std::uint64_t value);
  JsonWriter& field(std::string_view key, int value) { return field(key, static_cast<std::int64_t>(value)); }
  JsonWriter& field(std::string_view key, bool value);
  JsonWriter& field(std::string_view key, std::string_view value);
  JsonWriter& field(std::string_view key, const char* value) { return field(key, std::string_view(value)); }
  // A nested object produced by another writer.
  JsonWriter& object(std::string_view key, const JsonWriter& inner);
  std::string str() const { return "{" + body_ + "}"; }

  static std::string quote(std::string_view text);
  // Shortest text that reads back to the same double; non-finite -> null.
  static std::string number(double value);

 private:
  void key(std::string_view k);
  std::string body_;
};

// A parsed JSON value.
class JsonValue {
 public:
  using Array = std::vector<JsonValue>;
  using Object = std::map<std::string, JsonValue, std::less<>>;

  JsonValue() = default;  // null
  explicit JsonValue(bool b) : v_(b) {}
  explicit JsonValue(double d) : v_(d) {}
  explicit JsonValue(std::string s) : v_(std::move(s)) {}
  explicit JsonValue(Array a) : v_(std::make_shared<Array>(std::move(a))) {}
  explicit JsonValue(Object o) : v_(std::make_shared<Object>(std::move(o))) {}

  bool is_null() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_number() const { return std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(v_); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  double as_number() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Array& as_array() const { return *std::get<std::shared_ptr<Array>>(v_); }
  const Object& as_object() const { return *std::get<std::shared_ptr<Object>>(v_); }

  // Member lookup on an object; nullptr when absent or not an object.
  const JsonValue* find(std::string_view key) const;
  // Convenience: member as number / string / bool, if present with that type.
  std::optional<double> number(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;
  std::optional<bool> boolean(std::string_view key) const;

 private:
  std::variant<std::monostate, bool, double, std::string, std::shared_ptr<Array>,
               std::shared_ptr<Object>>
      v_;
};

// Parses one JSON text (surrounding whitespace allowed).  On error returns
// nullopt and, if `error` is given, a message with the byte offset.
std::optional<JsonValue> parse_json(std::string_view text, std::string* error = nullptr);

}  // namespace lazybench
