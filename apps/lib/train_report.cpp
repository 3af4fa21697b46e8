#include "apps/lib/train_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "schema/file_io.hpp"

namespace actorflow {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

namespace {

std::string clock_text(double seconds) {
  auto s = int64_t(std::max(0.0, seconds) + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

// One plot panel: a polyline of (epoch, value) in a box with axis labels.
struct panel {
  double x, y, w, h;
  std::string title;
};

void draw_panel(std::ostream& out, const panel& p, const std::vector<epoch_metrics>& rows,
                double (*value)(const epoch_metrics&), const char* color) {
  double lo = value(rows[0]), hi = lo;
  for (auto& r : rows) lo = std::min(lo, value(r)), hi = std::max(hi, value(r));
  if (hi - lo < 1e-9) hi = lo + 1e-3, lo -= 1e-3;
  double first = double(rows.front().epoch), last = double(rows.back().epoch);
  auto px = [&](double e) {
    return p.x + (last > first ? (e - first) / (last - first) : 0.5) * p.w;
  };
  auto py = [&](double v) { return p.y + p.h - (v - lo) / (hi - lo) * p.h; };
  out << fmt::format(
      "<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>\n"
      "<text x='{}' y='{}' font-size='14' text-anchor='middle'>{}</text>\n"
      "<text x='{}' y='{}' font-size='11' text-anchor='end'>{:.4g}</text>\n"
      "<text x='{}' y='{}' font-size='11' text-anchor='end'>{:.4g}</text>\n"
      "<text x='{}' y='{}' font-size='11' text-anchor='middle'>epoch</text>\n",
      p.x, p.y, p.w, p.h, p.x + p.w / 2, p.y - 8, p.title, p.x - 4, p.y + 10, hi, p.x - 4,
      p.y + p.h, lo, p.x + p.w / 2, p.y + p.h + 30);
  out << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
  for (auto& r : rows) out << fmt::format("{:.1f},{:.1f} ", px(double(r.epoch)), py(value(r)));
  out << "'/>\n";
  for (auto& r : rows)
    out << fmt::format(
        "<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'/>"
        "<text x='{:.1f}' y='{}' font-size='10' text-anchor='middle'>{}</text>\n",
        px(double(r.epoch)), py(value(r)), color, px(double(r.epoch)), p.y + p.h + 14, r.epoch);
}

}  // namespace

train_report::train_report(std::string dir, std::string title, bool resumed, report_columns columns)
    : dir_(std::move(dir)), title_(std::move(title)), columns_(std::move(columns)) {
  if (resumed) load_csv();
}

std::string train_report::csv_header() const {
  return fmt::format("epoch,step,train_loss,{},seconds,{}_per_s", columns_.eval, columns_.unit);
}

void train_report::load_csv() {
  std::ifstream in(csv_path());
  std::string line;
  if (!std::getline(in, line) || line != csv_header()) return;  // none, or not ours
  while (std::getline(in, line)) {
    epoch_metrics m;
    char comma;
    std::istringstream row(line);
    if (row >> m.epoch >> comma >> m.step >> comma >> m.train_loss >> comma >> m.test_acc >>
        comma >> m.seconds >> comma >> m.examples_per_s)
      epochs_.push_back(m);
  }
}

void train_report::add_epoch(const epoch_metrics& m) {
  // A resumed run redoes epochs after its checkpoint: the new rows replace them.
  std::erase_if(epochs_, [&](const epoch_metrics& e) { return e.epoch >= m.epoch; });
  epochs_.push_back(m);
  fmt::print("epoch {:>3}  train_loss={:.4f}  {}={:.4f}  time={:.1f}s  ({:.0f} {}/s)\n", m.epoch,
             m.train_loss, columns_.eval, m.test_acc, m.seconds, m.examples_per_s, columns_.unit);
  std::fflush(stdout);
  write_files();
}

void train_report::write_files() {
  try {
    write_csv();
    write_svg();
  } catch (const std::exception& e) {
    // A full disk would say so after every epoch; once is enough.
    if (!write_failed_)
      fmt::print(stderr,
                 "warning: {} (training goes on; the report is tried again after each epoch, "
                 "without a word)\n",
                 e.what());
    std::fflush(stderr);
    write_failed_ = true;
  }
}

void train_report::write_csv() const {
  std::string text = csv_header() + "\n";
  for (auto& m : epochs_)
    text += fmt::format("{},{},{:.6f},{:.6f},{:.3f},{:.1f}\n", m.epoch, m.step, m.train_loss,
                        m.test_acc, m.seconds, m.examples_per_s);
  write_file_atomically(csv_path(), {text}, "[train_report] ");
}

void train_report::write_svg() const {
  std::ostringstream out;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='820' height='340' "
         "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  out << fmt::format("<text x='410' y='22' font-size='16' text-anchor='middle'>{}</text>\n",
                     title_);
  draw_panel(
      out, {60, 60, 320, 220, "train loss"}, epochs_,
      [](const epoch_metrics& m) { return m.train_loss; }, "#c0392b");
  draw_panel(
      out, {470, 60, 320, 220, columns_.eval_title}, epochs_,
      [](const epoch_metrics& m) { return m.test_acc; }, "#2471a3");
  out << "</svg>\n";
  write_file_atomically(svg_path(), {out.str()}, "[train_report] ");
}

progress_bar::progress_bar(bool terminal, int64_t total_examples, std::string unit)
    : terminal_(terminal), total_(total_examples), unit_(std::move(unit)), start_(now_seconds()) {}

void progress_bar::update(int64_t epoch, int64_t epochs, int64_t done) {
  double now = now_seconds();
  if (first_done_ < 0) {
    first_done_ = done, start_ = now, last_draw_ = now;  // no rate to show yet
    return;
  }
  if (now - last_draw_ < (terminal_ ? 0.1 : 10.0)) return;
  last_draw_ = now;
  double rate = now > start_ ? double(done - first_done_) / (now - start_) : 0.0;
  double eta = rate > 0 ? double(total_ - done) / rate : 0.0;
  double frac = total_ > 0 ? double(done) / double(total_) : 1.0;
  if (terminal_) {
    int filled = int(frac * 30);
    std::fputs(fmt::format("\repoch {}/{} [{}{}] {:3.0f}%  {:.0f} {}/s  ETA {} ", epoch, epochs,
                           std::string(size_t(filled), '#'), std::string(size_t(30 - filled), ' '),
                           100 * frac, rate, unit_ == "examples" ? "ex" : unit_, clock_text(eta))
                   .c_str(),
               stdout);
    drawn_ = true;
  } else {
    std::fputs(fmt::format("progress epoch {}/{} {:.0f}%  {:.0f} {}/s  ETA {}\n", epoch, epochs,
                           100 * frac, rate, unit_, clock_text(eta))
                   .c_str(),
               stdout);
  }
  std::fflush(stdout);
}

void progress_bar::clear() {
  if (!drawn_) return;
  std::fputs(("\r" + std::string(80, ' ') + "\r").c_str(), stdout);
  drawn_ = false;
}

}  // namespace actorflow
