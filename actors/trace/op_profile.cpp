#include "actors/trace/op_profile.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorflow {

namespace {

// The length of the union of the intervals, in ms.
double union_ms(std::vector<std::pair<int64_t, int64_t>> spans) {
  std::sort(spans.begin(), spans.end());
  int64_t covered = 0, open_from = 0, open_to = -1;
  for (auto [from, to] : spans) {
    if (from > open_to) {
      if (open_to > open_from) covered += open_to - open_from;
      open_from = from;
      open_to = to;
    } else {
      open_to = std::max(open_to, to);
    }
  }
  if (open_to > open_from) covered += open_to - open_from;
  return static_cast<double>(covered) / 1e6;
}

}  // namespace

void op_profile::add(const run_metadata& step) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (auto& t : step.nodes) {
    if (t.kind == trace_kind::send || t.kind == trace_kind::recv) continue;  // instants
    auto& o = ops_[t.op];
    o.calls += 1;
    o.ms += static_cast<double>(t.end_ns - t.start_ns) / 1e6;
    spans.emplace_back(std::max(t.start_ns, step.start_ns), std::min(t.end_ns, step.end_ns));
  }
  steps_ += 1;
  wall_ms_ += static_cast<double>(step.end_ns - step.start_ns) / 1e6;
  busy_ms_ += union_ms(std::move(spans));
}

double op_profile::runtime_share() const {
  return wall_ms_ > 0 ? std::max(0.0, 1.0 - busy_ms_ / wall_ms_) : 0.0;
}

std::vector<op_profile::op_row> op_profile::top(size_t n) const {
  std::vector<op_row> rows;
  for (auto& [op, t] : ops_)
    rows.push_back({op, t.calls, t.ms, t.calls ? 1000.0 * t.ms / double(t.calls) : 0.0,
                    wall_ms_ > 0 ? t.ms / wall_ms_ : 0.0});
  std::sort(rows.begin(), rows.end(),
            [](const op_row& a, const op_row& b) { return a.total_ms > b.total_ms; });
  if (rows.size() > n) rows.resize(n);
  return rows;
}

std::string op_profile::table(size_t n) const {
  size_t width = 24;
  auto rows = top(n);
  for (auto& r : rows) width = std::max(width, r.op.size());
  std::string out = fmt::format("{:<{}} {:>8} {:>11} {:>10} {:>8}\n", "op", width, "calls",
                                "total ms", "mean us", "of step");
  for (auto& r : rows)
    out += fmt::format("{:<{}} {:>8} {:>11.3f} {:>10.1f} {:>7.1f}%\n", r.op, width, r.calls,
                       r.total_ms, r.mean_us, 100.0 * r.share);
  out += fmt::format(
      "{} steps, {:.3f} ms each; the runtime's own share (no kernel running anywhere: messages, "
      "scheduling, waiting): {:.1f}%\n",
      steps_, steps_ ? wall_ms_ / double(steps_) : 0.0, 100.0 * runtime_share());
  out +=
      "(an op's time sums its nodes' kernels over all threads, so shares can pass 100% when "
      "kernels run in parallel)\n";
  return out;
}

}  // namespace actorflow
