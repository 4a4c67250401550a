#include "json.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace lazybench {

std::string JsonWriter::quote(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string JsonWriter::number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, res.ptr);
}

void JsonWriter::key(std::string_view k) {
  if (!body_.empty()) body_ += ',';
  body_ += quote(k);
  body_ += ':';
}

JsonWriter& JsonWriter::field(std::string_view k, double value) {
  key(k);
  body_ += number(value);
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, std::int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, std::uint64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view k, std::string_view value) {
  key(k);
  body_ += quote(value);
  return *this;
}

JsonWriter& JsonWriter::object(std::string_view k, const JsonWriter& inner) {
  key(k);
  body_ += inner.str();
  return *this;
}

const JsonValue* JsonValue::find(std::string_view k) const {
  if (!is_object()) return nullptr;
  const auto& obj = as_object();
  const auto it = obj.find(k);
  return it == obj.end() ? nullptr : &it->second;
}

std::optional<double> JsonValue::number(std::string_view k) const {
  const JsonValue* v = find(k);
  if (!v || !v->is_number()) return std::nullopt;
  return v->as_number();
}

std::optional<std::string> JsonValue::string(std::string_view k) const {
  const JsonValue* v = find(k);
  if (!v || !v->is_string()) return std::nullopt;
  return v->as_string();
}

std::optional<bool> JsonValue::boolean(std::string_view k) const {
  const JsonValue* v = find(k);
  if (!v || !v->is_bool()) return std::nullopt;
  return v->as_bool();
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  std::optional<JsonValue> parse_document(std::string* error) {
    auto v = value(0);
    if (v) {
      skip_ws();
      if (pos_ != s_.size()) {
        v.reset();
        fail("trailing characters");
      }
    }
    if (!v && error) *error = error_ + " at offset " + std::to_string(pos_);
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void fail(const char* what) {
    if (error_.empty()) error_ = what;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  std::optional<JsonValue> value(int depth) {
    if (depth > kMaxDepth) {
      fail("nesting too deep");
      return std::nullopt;
    }
    skip_ws();
    if (pos_ >= s_.size()) {
      fail("unexpected end");
      return std::nullopt;
    }
    const char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      auto str = string();
      if (!str) return std::nullopt;
      return JsonValue(std::move(*str));
    }
    if (literal("true")) return JsonValue(true);
    if (literal("false")) return JsonValue(false);
    if (literal("null")) return JsonValue();
    return number();
  }

  std::optional<JsonValue> number() {
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size() && std::string_view("0123456789.eE+-").find(s_[pos_]) != std::string_view::npos)
      ++pos_;
    if (pos_ == start) {
      fail("unexpected character");
      return std::nullopt;
    }
    const std::string text(s_.substr(start, pos_ - start));
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || errno == ERANGE) {
      pos_ = start;
      fail("bad number");
      return std::nullopt;
    }
    return JsonValue(d);
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::optional<unsigned> hex4() {
    if (pos_ + 4 > s_.size()) return std::nullopt;
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else return std::nullopt;
    }
    return v;
  }

  std::optional<std::string> string() {
    ++pos_;  // opening quote
    std::string out;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        fail("control character in string");
        return std::nullopt;
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          auto cp = hex4();
          if (!cp) {
            fail("bad \\u escape");
            return std::nullopt;
          }
          if (*cp >= 0xD800 && *cp < 0xDC00 && literal("\\u")) {
            auto lo = hex4();
            if (!lo || *lo < 0xDC00 || *lo > 0xDFFF) {
              fail("bad surrogate pair");
              return std::nullopt;
            }
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (*lo - 0xDC00);
          }
          append_utf8(out, *cp);
          break;
        }
        default:
          fail("bad escape");
          return std::nullopt;
      }
    }
    fail("unterminated string");
    return std::nullopt;
  }

  std::optional<JsonValue> array(int depth) {
    ++pos_;
    JsonValue::Array items;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return JsonValue(std::move(items));
    }
    while (true) {
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      items.push_back(std::move(*v));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return JsonValue(std::move(items));
      }
      fail("expected ',' or ']'");
      return std::nullopt;
    }
  }

  std::optional<JsonValue> object(int depth) {
    ++pos_;
    JsonValue::Object members;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return JsonValue(std::move(members));
    }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') {
        fail("expected a key");
        return std::nullopt;
      }
      auto k = string();
      if (!k) return std::nullopt;
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') {
        fail("expected ':'");
        return std::nullopt;
      }
      ++pos_;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      members.insert_or_assign(std::move(*k), std::move(*v));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return JsonValue(std::move(members));
      }
      fail("expected ',' or '}'");
      return std::nullopt;
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  std::string error_;
};

}  // namespace

std::optional<JsonValue> parse_json(std::string_view text, std::string* error) {
  return Parser(text).parse_document(error);
}

}  // namespace lazybench
