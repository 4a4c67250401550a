#include "option-table.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace lazymalloc_docs {

namespace {

using lazymalloc::OptionInfo;
using lazymalloc::OptKind;

// "0", "64K", "32M", "1G": the largest power-of-1024 suffix that divides `v`
// (the suffixes option_parse accepts).
std::string size_text(int64_t v) {
  static constexpr char kSuffix[] = {'T', 'G', 'M', 'K'};
  for (int i = 0; i < 4; ++i) {
    const int64_t unit = int64_t(1) << (10 * (4 - i));
    if (v != 0 && v % unit == 0) return std::to_string(v / unit) + kSuffix[i];
  }
  return std::to_string(v);
}

std::vector<std::string_view> choices(const OptionInfo& info) {
  std::vector<std::string_view> out;
  std::string_view all = info.choices ? info.choices : "";
  for (size_t start = 0;;) {
    const size_t bar = all.find('|', start);
    out.push_back(all.substr(start, bar - start));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return out;
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

std::string option_env_var(const OptionInfo& info) {
  std::string out = "LAZYMALLOC_";
  for (const char* p = info.name; *p; ++p) out += (*p >= 'a' && *p <= 'z') ? char(*p - 'a' + 'A') : *p;
  return out;
}

std::string option_default(const OptionInfo& info) {
  switch (info.kind) {
    case OptKind::kEnum: return std::string(choices(info).at(size_t(info.def)));
    case OptKind::kSize: return size_text(info.def);
    case OptKind::kMillis: return std::to_string(info.def) + " ms";
    case OptKind::kBool:
    case OptKind::kInt: break;
  }
  return std::to_string(info.def);
}

std::string option_values(const OptionInfo& info) {
  switch (info.kind) {
    case OptKind::kBool: return "`1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`";
    case OptKind::kEnum: {
      std::string out;
      for (auto c : choices(info)) out.append(out.empty() ? "" : ", ").append(code(c));
      return out + " (or the index, " + std::to_string(info.min) + " to " + std::to_string(info.max) + ")";
    }
    case OptKind::kSize:
      return "bytes, " + size_text(info.min) + " to " + size_text(info.max) + " (suffix K, M, G or T: powers of 1024)";
    case OptKind::kMillis:
      return std::to_string(info.min) + " to " + std::to_string(info.max) + " ms (suffix `ms`, or `s` for seconds)";
    case OptKind::kInt: break;
  }
  return std::to_string(info.min) + " to " + std::to_string(info.max);
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

}  // namespace lazymalloc_docs
