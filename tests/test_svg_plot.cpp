// The benchmarks' SVG figures (perf/svg_plot.hpp): what a figure holds, and
// that it is well-formed XML whatever its text says.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "perf/svg_plot.hpp"

using namespace actorflow::bench;

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a figure: a panel per plot, a line and points per series, the note's lines") {
  plot_series a{"actorflow", "#2471a3", {{1, 4.0}, {2, 6.1}, {4, NAN}, {16, 9.5}}};
  plot_series b{"line rate", "#888", {{1, 16}, {2, 16}}, true};
  std::string svg =
      svg_figure("steps <fast> & slow",
                 {{"scalar", "workers", "ms", true, {a, b}}, {"empty", "workers", "s", true, {}}},
                 "first line\nsecond line");
  CHECK(svg.rfind("<svg xmlns='http://www.w3.org/2000/svg'", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(count(svg, "<polyline") == 2);
  CHECK(count(svg, "<circle") == 5);           // the NaN point is left out
  CHECK(count(svg, "stroke-dasharray") == 2);  // the dashed series' line and legend
  CHECK(svg.find("steps &lt;fast&gt; &amp; slow") != std::string::npos);
  CHECK(svg.find("<fast>") == std::string::npos);
  CHECK(svg.find(">no data<") != std::string::npos);
  CHECK(svg.find(">first line<") != std::string::npos);
  CHECK(svg.find(">second line<") != std::string::npos);
  CHECK(svg.find(">16<") != std::string::npos);  // an x tick per worker count
}
