#include "option-table.h"

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/format.h"

namespace lazymalloc_docs {

namespace {

using lazymalloc::OptionInfo;

// What a core writer (heap-free, in src/core/options.cc) writes, as a string.
template <class Write>
std::string written(Write write) {
  char buf[512];
  lazymalloc::Writer w(buf, sizeof buf);
  write(w);
  const size_t n = w.finish();
  return std::string(buf, n < sizeof buf ? n : sizeof buf - 1);
}

// `code` spans are Markdown; a terminal shows the words without the marks.
std::string plain(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '`') out += c;
  return out;
}

// A `code` span.  (Built by appending: "`" + std::string trips GCC 12's
// -Wrestrict false positive.)
std::string code(std::string_view s) {
  std::string out = "`";
  return out.append(s).append("`");
}

// A Markdown table cell: '|' would end it.
std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// `text` wrapped at `width` columns, every line after the first indented to `indent`.
std::string wrap(std::string_view text, size_t indent, size_t width) {
  std::string out, line;
  auto flush = [&] {
    if (!out.empty()) out += '\n' + std::string(indent, ' ');
    out += line;
    line.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;  // the double space after a full stop
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) flush();
    if (!line.empty()) line += ' ';
    line += word;
  }
  flush();
  return out;
}

}  // namespace

std::string option_env_var(const OptionInfo& info) { return option_env_var(info.name); }

std::string option_env_var(const char* name) {
  std::string out = "LAZYMALLOC_";
  for (const char* p = name; *p; ++p) out += (*p >= 'a' && *p <= 'z') ? char(*p - 'a' + 'A') : *p;
  return out;
}

std::string option_default(const OptionInfo& info) {
  return written([&](lazymalloc::Writer& w) { lazymalloc::option_write_value(w, info, info.def); });
}

std::string option_values(const OptionInfo& info) {
  return written([&](lazymalloc::Writer& w) { lazymalloc::option_write_values(w, info, true); });
}

std::string option_table(OptionTable form) {
  using lazymalloc::kOptionCount;
  using lazymalloc::kOptionInfo;
  std::string out;
  if (form == OptionTable::kText) {
    constexpr size_t kName = 24, kDefault = 10, kWidth = 100;
    auto pad = [](std::string s, size_t n) { return s.size() < n ? s + std::string(n - s.size(), ' ') : s + ' '; };
    out += pad("NAME", kName) + pad("DEFAULT", kDefault) + "DESCRIPTION\n";
    for (unsigned o = 0; o < kOptionCount; ++o) {
      const OptionInfo& info = kOptionInfo[o];
      std::string head = pad(info.name, kName) + pad(option_default(info), kDefault);
      out += head + wrap(plain(info.doc), head.size(), kWidth) + '\n';
      out += std::string(head.size(), ' ') + wrap("values: " + plain(option_values(info)), head.size(), kWidth) + '\n';
    }
    out += "\nOther variables lazymalloc reads (never reported as unknown):\n";
    for (unsigned i = 0; i < lazymalloc::kVariableCount; ++i) {
      const auto& v = lazymalloc::kVariableInfo[i];
      std::string head = pad(option_env_var(v.name), kName + kDefault);
      out += head + wrap(plain(v.doc), head.size(), kWidth) + '\n';
    }
    return out;
  }
  const bool full = form == OptionTable::kMarkdownFull;
  out += full ? "| name | environment variable | default | values | description |\n|---|---|---|---|---|\n"
              : "| variable | default | meaning |\n|---|---|---|\n";
  for (unsigned o = 0; o < kOptionCount; ++o) {
    const OptionInfo& info = kOptionInfo[o];
    std::vector<std::string> row;
    if (full) row.push_back(code(info.name));
    row.push_back(code(option_env_var(info)));
    row.push_back(cell(option_default(info)));
    if (full) row.push_back(cell(option_values(info)));
    row.push_back(cell(info.doc));
    for (const auto& c : row) out.append("| ").append(c).append(" ");
    out += "|\n";
  }
  return out;
}

std::string variable_table() {
  std::string out = "| environment variable | meaning |\n|---|---|\n";
  for (unsigned i = 0; i < lazymalloc::kVariableCount; ++i) {
    const auto& v = lazymalloc::kVariableInfo[i];
    out += "| " + code(option_env_var(v.name)) + " | " +
           cell(v.doc) + " |\n";
  }
  return out;
}

}  // namespace lazymalloc_docs
