// The pieces every gnuplot script of the project starts from: quoting and
// the SVG terminal.  Header-only, so that lazymalloc-run's --plot (tools/)
// and lazybench's plots (plot.cc) draw alike without linking the harness.
#pragma once

#include <string>

namespace lazybench {

// Quotes text for a gnuplot single-quoted string.
inline std::string gnuplot_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else out += c;
  }
  return out + "'";
}

// The lines every plot starts with: an SVG terminal, the output and a title
// (gnuplot's enhanced text: the caller escapes what it must).
inline std::string svg_header(const std::string& svg_path, const std::string& title) {
  std::string s;
  s += "set terminal svg size 1100,520 dynamic enhanced font 'sans,11' background rgb 'white'\n";
  s += "set output " + gnuplot_quote(svg_path) + "\n";
  s += "set title " + gnuplot_quote(title) + "\n";
  return s;
}

}  // namespace lazybench
