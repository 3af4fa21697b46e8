// Line plots as SVG, for the benchmarks' figures (the scaling group's,
// laid out like the paper's): panels side by side, each with its series,
// axes with their ticks, a legend, and a note under the figure that says
// what it shows and simulates. No library: the text is written directly.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace actorflow::bench {

struct plot_series {
  std::string name;
  std::string color = "#2471a3";
  std::vector<std::pair<double, double>> points;  ///< (x, y); NaN ys are left out
  bool dashed = false;
};

struct plot_panel {
  std::string title, x_label, y_label;
  bool log2_x = true;  ///< x ticks at powers of two (workers, ps tasks)
  std::vector<plot_series> series;
};

/// An SVG document: `title` above, the panels side by side, `note` below
/// (lines split at '\n'). Panels without a point are drawn empty, saying so.
std::string svg_figure(const std::string& title, const std::vector<plot_panel>& panels,
                       const std::string& note);

}  // namespace actorflow::bench
