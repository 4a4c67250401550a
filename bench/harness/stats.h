// Statistics over repeated runs, ratios between allocators, and the text
// formatting used by the reports (markdown tables, CSV fields, numbers).
//
// Everything here is pure and deterministic so it can be unit-tested.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lazybench {

// Median of the values (mean of the two middle ones for an even count).
// Precondition: !values.empty().
double median(std::vector<double> values);

struct Summary {
  std::size_t count = 0;
  double median = 0;
  double min = 0;
  double max = 0;
};

// Summary of the values; nullopt when there are none.
std::optional<Summary> summarize(const std::vector<double>& values);

// How many times better `value` is than `reference`: value/reference when a
// higher metric is better, reference/value when lower is better.  So > 1
// always means "better than the reference".  nullopt when either is <= 0.
std::optional<double> speedup(double value, double reference, bool higher_is_better);

// Paired ratios: for every key (a repetition) that both `values` and
// `reference` have, speedup(value, reference, higher_is_better), in key
// order; pairs where speedup is nullopt (a value <= 0) are left out.  The two
// runs of one repetition ran close together, so what drifts between
// repetitions (other work on the machine, the clock) moves both alike and
// the ratio cancels it; the median of these ratios ranks two allocators
// where the ratio of their medians, taken from different moments, cannot.
std::vector<double> paired_ratios(const std::map<int, double>& values, const std::map<int, double>& reference,
                                  bool higher_is_better);

// Index of the best value (largest when higher is better, smallest
// otherwise), skipping index `exclude` (pass npos to skip nothing).
// nullopt when nothing is left.
std::optional<std::size_t> best_index(const std::vector<double>& values, bool higher_is_better,
                                      std::size_t exclude = static_cast<std::size_t>(-1));

// A number with about `sig` significant digits and thousands kept readable:
// 1234567 -> "1.23M", 0.000123 -> "0.000123", 12.5 -> "12.5".
std::string format_si(double value, int sig = 3);

// A count: "1234" below 10000, format_si above ("12.3k").
std::string format_count(double value);

// Fixed-point with `decimals` decimals.
std::string format_fixed(double value, int decimals);

// "1.23x".
std::string format_ratio(std::optional<double> ratio);

// A markdown table.  Columns whose `right_align` flag is set are numeric and
// right-aligned.  Cells are padded so the raw text lines up as well.
class MarkdownTable {
 public:
  struct Column {
    std::string title;
    bool right_align = false;
  };
  explicit MarkdownTable(std::vector<Column> columns);
  // Precondition: cells.size() == number of columns.  '|' in cells is escaped.
  void add_row(std::vector<std::string> cells);
  std::size_t rows() const { return rows_.size(); }
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// One CSV field, quoted when it needs to be (RFC 4180).
std::string csv_field(const std::string& text);

// A number as a CSV field: the shortest text that reads back to the same
// double ("5", "3.25", "1e+20"); empty for NaN and infinities.
std::string csv_number(double value);

// A CSV line (terminated by '\n') from fields.
std::string csv_line(const std::vector<std::string>& fields);

}  // namespace lazybench
