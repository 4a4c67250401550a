// Parses JSON text (the allocator's JSON statistics) with nlohmann-json:
// exactly one RFC 8259 value, optionally surrounded by whitespace.  Test code
// only: the allocator itself writes its JSON without the standard library.
#ifndef LAZYMALLOC_TESTS_COMMON_JSON_PARSE_H
#define LAZYMALLOC_TESTS_COMMON_JSON_PARSE_H

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace lmt {

struct ParsedJson {
  nlohmann::json value;  // null unless ok()
  std::string error;     // the parser's message, with the byte offset
  bool ok() const { return error.empty(); }
};

inline ParsedJson ParseJson(std::string_view text) {
  ParsedJson r;
  try {
    r.value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace lmt

#endif  // LAZYMALLOC_TESTS_COMMON_JSON_PARSE_H
