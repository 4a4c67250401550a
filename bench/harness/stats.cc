#include "stats.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace lazybench {

double median(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("median of no values");
  const std::size_t n = values.size();
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(values.begin(), mid, values.end());
  const double upper = *mid;
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), mid);
  return (lower + upper) / 2;
}

std::optional<Summary> summarize(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  Summary s;
  s.count = values.size();
  s.median = median(values);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  s.min = *lo;
  s.max = *hi;
  return s;
}

std::optional<double> speedup(double value, double reference, bool higher_is_better) {
  if (!(value > 0) || !(reference > 0)) return std::nullopt;
  return higher_is_better ? value / reference : reference / value;
}

std::vector<double> paired_ratios(const std::map<int, double>& values, const std::map<int, double>& reference,
                                  bool higher_is_better) {
  std::vector<double> out;
  for (const auto& [key, value] : values) {
    const auto ref = reference.find(key);
    if (ref == reference.end()) continue;
    if (const auto r = speedup(value, ref->second, higher_is_better)) out.push_back(*r);
  }
  return out;
}

std::optional<std::size_t> best_index(const std::vector<double>& values, bool higher_is_better,
                                      std::size_t exclude) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i == exclude || std::isnan(values[i])) continue;
    if (!best) {
      best = i;
      continue;
    }
    const bool better = higher_is_better ? values[i] > values[*best] : values[i] < values[*best];
    if (better) best = i;
  }
  return best;
}

std::string format_si(double value, int sig) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  static constexpr struct {
    double scale;
    const char* suffix;
  } kUnits[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  const double mag = std::fabs(value);
  const char* suffix = "";
  double scaled = value;
  for (const auto& unit : kUnits) {
    // Only switch to a suffix at 10000 and above: "1234" reads better than "1.23k".
    if (mag >= unit.scale && mag >= 1e4) {
      scaled = value / unit.scale;
      suffix = unit.suffix;
      break;
    }
  }
  char buf[64];
  const double smag = std::fabs(scaled);
  if (smag == 0) {
    std::snprintf(buf, sizeof buf, "0%s", suffix);
  } else {
    const int digits_before = smag >= 1 ? static_cast<int>(std::floor(std::log10(smag))) + 1 : 0;
    int decimals = std::max(0, sig - digits_before);
    if (smag < 1) {
      // Keep `sig` significant digits for small values: 0.000123.
      decimals = sig - 1 - static_cast<int>(std::floor(std::log10(smag)));
      decimals = std::min(decimals, 12);
    }
    std::snprintf(buf, sizeof buf, "%.*f%s", decimals, scaled, suffix);
  }
  return buf;
}

std::string format_count(double value) {
  if (std::fabs(value) < 1e4) return format_fixed(value, 0);
  return format_si(value);
}

std::string format_fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string format_ratio(std::optional<double> ratio) {
  if (!ratio) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", *ratio);
  return buf;
}

MarkdownTable::MarkdownTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

void MarkdownTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size()) throw std::invalid_argument("markdown row has wrong width");
  for (auto& cell : cells) {
    std::string escaped;
    for (char c : cell) {
      if (c == '|') escaped += '\\';
      if (c == '\n') c = ' ';
      escaped += c;
    }
    cell = std::move(escaped);
  }
  rows_.push_back(std::move(cells));
}

std::string MarkdownTable::render() const {
  std::vector<std::size_t> width(columns_.size(), 3);
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = std::max(width[c], columns_[c].title.size());
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  // Appends " text |" padded to the column width.  (Built with append rather
  // than operator+ chains, which trip a GCC 12 -Wrestrict false positive.)
  auto cell = [](std::string& out, const std::string& text, std::size_t w, bool right) {
    out += ' ';
    if (right) out.append(w - text.size(), ' ');
    out += text;
    if (!right) out.append(w - text.size(), ' ');
    out += " |";
  };
  std::string out = "|";
  for (std::size_t c = 0; c < columns_.size(); ++c) cell(out, columns_[c].title, width[c], columns_[c].right_align);
  out += "\n|";
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    std::string rule(width[c], '-');
    if (columns_[c].right_align) rule.back() = ':';
    cell(out, rule, width[c], false);
  }
  out += "\n";
  for (const auto& row : rows_) {
    out += "|";
    for (std::size_t c = 0; c < columns_.size(); ++c) cell(out, row[c], width[c], columns_[c].right_align);
    out += "\n";
  }
  return out;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string csv_number(double value) {
  if (!std::isfinite(value)) return {};
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, res.ptr);
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    out += csv_field(fields[i]);
  }
  out += '\n';
  return out;
}

}  // namespace lazybench
