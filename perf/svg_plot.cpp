#include "perf/svg_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace actorflow::bench {

namespace {

constexpr double panel_w = 300, panel_h = 220, margin_left = 70, gap = 80, top = 70;

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

struct bounds {
  double x_lo = INFINITY, x_hi = -INFINITY, y_hi = 0;
  bool empty() const { return !(x_lo <= x_hi); }
};

bounds bounds_of(const plot_panel& p) {
  bounds b;
  for (auto& s : p.series)
    for (auto [x, y] : s.points) {
      if (std::isnan(y)) continue;
      double xv = p.log2_x ? std::log2(x) : x;
      b.x_lo = std::min(b.x_lo, xv), b.x_hi = std::max(b.x_hi, xv), b.y_hi = std::max(b.y_hi, y);
    }
  if (b.x_hi - b.x_lo < 1e-9) b.x_lo -= 0.5, b.x_hi += 0.5;
  b.y_hi = b.y_hi > 0 ? b.y_hi * 1.1 : 1;
  return b;
}

void draw_panel(std::ostringstream& out, const plot_panel& p, double x0) {
  out << fmt::format(
      "<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>\n"
      "<text x='{}' y='{}' font-size='14' text-anchor='middle'>{}</text>\n"
      "<text x='{}' y='{}' font-size='11' text-anchor='middle'>{}</text>\n"
      "<text x='{}' y='{}' font-size='11' text-anchor='middle' transform='rotate(-90 {} {})'>{}"
      "</text>\n",
      x0, top, panel_w, panel_h, x0 + panel_w / 2, top - 8, escaped(p.title), x0 + panel_w / 2,
      top + panel_h + 32, escaped(p.x_label), x0 - 48, top + panel_h / 2, x0 - 48,
      top + panel_h / 2, escaped(p.y_label));
  bounds b = bounds_of(p);
  if (b.empty()) {
    out << fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>no data</text>\n",
                       x0 + panel_w / 2, top + panel_h / 2);
    return;
  }
  auto px = [&](double x) {
    double xv = p.log2_x ? std::log2(x) : x;
    return x0 + 15 + (xv - b.x_lo) / (b.x_hi - b.x_lo) * (panel_w - 30);
  };
  auto py = [&](double y) { return top + panel_h - y / b.y_hi * panel_h; };
  for (int i = 0; i <= 4; ++i) {  // y ticks
    double y = b.y_hi * i / 4;
    out << fmt::format("<text x='{}' y='{:.1f}' font-size='10' text-anchor='end'>{:.3g}</text>\n",
                       x0 - 4, py(y) + 3, y);
  }
  std::vector<double> xs;
  for (auto& s : p.series)
    for (auto [x, y] : s.points) xs.push_back(x);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  for (double x : xs)
    out << fmt::format("<text x='{:.1f}' y='{}' font-size='10' text-anchor='middle'>{:g}</text>\n",
                       px(x), top + panel_h + 14, x);
  double legend_y = top + 14;
  for (auto& s : p.series) {
    std::string dash = s.dashed ? " stroke-dasharray='5,4'" : "";
    out << "<polyline fill='none' stroke='" << s.color << "' stroke-width='2'" << dash
        << " points='";
    for (auto [x, y] : s.points)
      if (!std::isnan(y)) out << fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    out << "'/>\n";
    for (auto [x, y] : s.points)
      if (!std::isnan(y))
        out << fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'/>\n", px(x), py(y),
                           s.color);
    out << fmt::format(
        "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='2'{}/>"
        "<text x='{}' y='{}' font-size='10'>{}</text>\n",
        x0 + 8, legend_y - 3, x0 + 28, legend_y - 3, s.color, dash, x0 + 32, legend_y,
        escaped(s.name));
    legend_y += 14;
  }
}

}  // namespace

std::string svg_figure(const std::string& title, const std::vector<plot_panel>& panels,
                       const std::string& note) {
  std::vector<std::string> lines;
  std::istringstream in(note);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  double width = margin_left + double(panels.size()) * (panel_w + gap);
  double height = top + panel_h + 50 + 16 * double(lines.size()) + 10;
  std::ostringstream out;
  out << fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='24' font-size='16' text-anchor='middle'>{}</text>\n",
      width, height, width / 2, escaped(title));
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(out, panels[i], margin_left + double(i) * (panel_w + gap));
  double y = top + panel_h + 62;
  for (auto& line : lines) {
    out << fmt::format("<text x='{}' y='{}' font-size='11'>{}</text>\n", margin_left - 50, y,
                       escaped(line));
    y += 16;
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace actorflow::bench
