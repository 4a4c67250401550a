// A strict RFC 8259 JSON validator, enough to check the allocator's JSON
// statistics.  ParseJson() accepts exactly one value surrounded by optional
// whitespace, and collects every numeric leaf as (dotted.path, text).
#ifndef LAZYMALLOC_TESTS_COMMON_JSON_CHECK_H
#define LAZYMALLOC_TESTS_COMMON_JSON_CHECK_H

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lmt {

struct JsonResult {
  bool ok = false;
  bool top_is_object = false;
  std::string error;  // what went wrong, with the offset
  std::vector<std::pair<std::string, std::string>> numbers;  // path -> literal
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  JsonResult Run() {
    JsonResult r;
    Ws();
    if (pos_ < s_.size() && s_[pos_] == '{') r.top_is_object = true;
    if (!Value("", 0)) {
      r.error = err_ + " at offset " + std::to_string(pos_);
      return r;
    }
    Ws();
    if (pos_ != s_.size()) {
      r.error = "trailing characters at offset " + std::to_string(pos_);
      return r;
    }
    r.ok = true;
    r.numbers = std::move(numbers_);
    return r;
  }

 private:
  bool Fail(const char* what) {
    if (err_.empty()) err_ = what;
    return false;
  }
  void Ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Lit(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return Fail("bad literal");
    pos_ += w.size();
    return true;
  }
  static bool IsHex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  bool String(std::string* out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') return Fail("expected string");
    ++pos_;
    while (pos_ < s_.size()) {
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("control character in string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) return Fail("unterminated escape");
        char e = s_[pos_];
        if (e == 'u') {
          for (int i = 1; i <= 4; ++i)
            if (pos_ + i >= s_.size() || !IsHex(s_[pos_ + i])) return Fail("bad \\u escape");
          pos_ += 5;
          if (out) out->push_back('?');
          continue;
        }
        if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos)
          return Fail("bad escape");
        if (out) out->push_back(e);
        ++pos_;
        continue;
      }
      if (out) out->push_back(static_cast<char>(c));
      ++pos_;
    }
    return Fail("unterminated string");
  }
  bool Number(const std::string& path) {
    size_t start = pos_;
    auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (!digit()) return Fail("bad number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digit()) return Fail("bad fraction");
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) return Fail("bad exponent");
      while (digit()) ++pos_;
    }
    numbers_.emplace_back(path, std::string(s_.substr(start, pos_ - start)));
    return true;
  }
  bool Value(const std::string& path, int depth) {
    if (depth > 64) return Fail("nesting too deep");
    Ws();
    if (pos_ >= s_.size()) return Fail("unexpected end");
    char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      Ws();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      for (;;) {
        Ws();
        std::string key;
        if (!String(&key)) return false;
        Ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') return Fail("expected ':'");
        ++pos_;
        if (!Value(path.empty() ? key : path + "." + key, depth + 1)) return false;
        Ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return true;
        }
        return Fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++pos_;
      Ws();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      for (size_t i = 0;; ++i) {
        if (!Value(path + "[" + std::to_string(i) + "]", depth + 1)) return false;
        Ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return true;
        }
        return Fail("expected ',' or ']'");
      }
    }
    if (c == '"') return String(nullptr);
    if (c == 't') return Lit("true");
    if (c == 'f') return Lit("false");
    if (c == 'n') return Lit("null");
    return Number(path);
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string err_;
  std::vector<std::pair<std::string, std::string>> numbers_;
};

inline JsonResult ParseJson(std::string_view s) { return JsonParser(s).Run(); }

}  // namespace lmt

#endif  // LAZYMALLOC_TESTS_COMMON_JSON_CHECK_H
