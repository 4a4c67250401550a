// lazymalloc-gen-docs: writes the generated tables of the documentation from
// the tables in the code, or checks that they are up to date.
//
//   lazymalloc-gen-docs --update SOURCE_DIR   rewrite the generated blocks
//   lazymalloc-gen-docs --check SOURCE_DIR    exit 1 if any block differs
//
// A generated block sits between `<!-- NAME:begin -->` and `<!-- NAME:end -->`
// lines; the text around it is kept.  The blocks: the options table in
// docs/options.md (full) and README.md (short), and the table of the other
// LAZYMALLOC_* variables in docs/options.md, from src/core/options.h; the
// statistics tables in docs/stats.md, from src/core/stats.h.  ctest's
// docs.generated runs --check; `cmake --build BUILD --target update-docs`
// runs --update.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/stats.h"
#include "option-table.h"

namespace {

std::string stats_table(const lazymalloc::StatInfo* info, unsigned count) {
  std::string out = "| name | kind | meaning |\n|---|---|---|\n";
  for (unsigned i = 0; i < count; ++i) {
    out += "| `" + std::string(info[i].name) + "` | " + (info[i].gauge ? "gauge" : "counter") + " | " + info[i].doc +
           " |\n";
  }
  return out;
}

std::string held_table() {
  std::string out = "| row | meaning |\n|---|---|\n";
  for (unsigned i = 0; i < lazymalloc::kHeldCount; ++i) {
    out += "| `" + std::string(lazymalloc::kHeldInfo[i].name) + "` | " + lazymalloc::kHeldInfo[i].doc + " |\n";
  }
  return out;
}

// The per-class statistics and the column derived from them.
std::string class_table() {
  std::string out = stats_table(lazymalloc::kClassStatInfo, lazymalloc::kClassStatCount);
  const lazymalloc::StatInfo& o = lazymalloc::kClassOutstandingInfo;
  out += "| `" + std::string(o.name) + "` | gauge | " + o.doc + " |\n";
  return out;
}

struct Block {
  const char* file;  // relative to the source directory
  const char* name;  // marker name
  std::string text;  // the generated content
};

std::vector<Block> blocks() {
  using lazymalloc_docs::OptionTable;
  return {
      {"docs/options.md", "options", lazymalloc_docs::option_table(OptionTable::kMarkdownFull)},
      {"docs/options.md", "variables", lazymalloc_docs::variable_table()},
      {"README.md", "options", lazymalloc_docs::option_table(OptionTable::kMarkdownShort)},
      {"docs/stats.md", "stats-global", stats_table(lazymalloc::kStatInfo, lazymalloc::kStatCount)},
      {"docs/stats.md", "stats-heap", stats_table(lazymalloc::kHeapStatInfo, lazymalloc::kHeapStatCount)},
      {"docs/stats.md", "stats-held", held_table()},
      {"docs/stats.md", "stats-class", class_table()},
  };
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Replaces the lines between the markers of `name` in `doc` by `text`.
// False when the markers are missing or out of order.
bool splice(std::string* doc, const std::string& name, const std::string& text) {
  const std::string begin = "<!-- " + name + ":begin -->\n", end = "<!-- " + name + ":end -->";
  const size_t b = doc->find(begin);
  if (b == std::string::npos) return false;
  const size_t from = b + begin.size();
  const size_t e = doc->find(end, from);
  if (e == std::string::npos) return false;
  doc->replace(from, e - from, text);
  return true;
}

// The first line where `a` and `b` differ, as "line N".
std::string first_difference(const std::string& a, const std::string& b) {
  size_t line = 1, i = 0;
  for (; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
    if (a[i] == '\n') ++line;
  return "line " + std::to_string(line);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc == 3 ? argv[1] : "";
  if (mode != "--check" && mode != "--update") {
    std::fprintf(stderr, "usage: %s --check|--update SOURCE_DIR\n", argv[0]);
    return 2;
  }
  const std::string root = argv[2];
  bool stale = false, failed = false;
  std::vector<std::pair<std::string, std::string>> files;  // path, new content (in order)
  for (const Block& block : blocks()) {
    const std::string path = root + "/" + block.file;
    auto it = files.begin();
    while (it != files.end() && it->first != path) ++it;
    if (it == files.end()) {
      std::string doc;
      if (!read_file(path, &doc)) {
        std::fprintf(stderr, "lazymalloc-gen-docs: cannot read %s\n", path.c_str());
        return 1;
      }
      files.emplace_back(path, doc);
      it = files.end() - 1;
    }
    if (!splice(&it->second, block.name, block.text)) {
      std::fprintf(stderr, "lazymalloc-gen-docs: %s has no <!-- %s:begin --> ... <!-- %s:end --> block\n",
                   path.c_str(), block.name, block.name);
      failed = true;
    }
  }
  if (failed) return 1;
  for (const auto& [path, doc] : files) {
    std::string old;
    read_file(path, &old);
    if (old == doc) continue;
    if (mode == "--check") {
      std::fprintf(stderr, "lazymalloc-gen-docs: %s is out of date (from %s)\n", path.c_str(),
                   first_difference(old, doc).c_str());
      stale = true;
      continue;
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << doc;
    if (!out.flush()) {
      std::fprintf(stderr, "lazymalloc-gen-docs: cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("updated %s\n", path.c_str());
  }
  if (stale) {
    std::fprintf(stderr,
                 "The tables are generated from src/core/options.h and src/core/stats.h; regenerate them with\n"
                 "  cmake --build BUILD --target update-docs\n"
                 "(or BUILD/lazymalloc-gen-docs --update %s) and commit the result.\n",
                 root.c_str());
    return 1;
  }
  return 0;
}
