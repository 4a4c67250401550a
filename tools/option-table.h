// The options table (src/core/options.h) as users and the documentation see
// it: `lazymalloc-run --list-options` prints the text form, and
// lazymalloc-gen-docs writes the Markdown forms into docs/options.md and
// README.md.  Every column comes from the table itself.
#pragma once

#include <string>

#include "core/options.h"

namespace lazymalloc_docs {

// "decay_ms" -> "LAZYMALLOC_DECAY_MS".
std::string option_env_var(const lazymalloc::OptionInfo& info);
std::string option_env_var(const char* name);
// The default as a user would write it: "adaptive", "32M", "1000 ms", "1".
std::string option_default(const lazymalloc::OptionInfo& info);
// What the option accepts, with units: "0 to 3600000 ms (suffix `ms` or `s`)".
std::string option_values(const lazymalloc::OptionInfo& info);

enum class OptionTable {
  kText,           // name, default, description and values, wrapped for a terminal; then the other variables
  kMarkdownFull,   // docs/options.md: name, variable, default, values, description
  kMarkdownShort,  // README.md: variable, default, description
};
// The whole table, ending with a newline.
std::string option_table(OptionTable form);
// The other LAZYMALLOC_* variables (LAZYMALLOC_VARIABLES) as a Markdown table.
std::string variable_table();

}  // namespace lazymalloc_docs
