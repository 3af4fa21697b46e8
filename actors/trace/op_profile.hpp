// Per-op statistics over traced steps, like TensorFlow's tfprof summary: for
// each op, its calls, total and mean time and share of the steps' wall time,
// and how much of the wall time no kernel ran anywhere (the runtime's own
// share: message passing, scheduling, waiting).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/trace/step_trace.hpp"
#include "core/export.hpp"

namespace actorflow {

class ACTORFLOW_API op_profile {
 public:
  struct op_row {
    std::string op;
    int64_t calls = 0;
    double total_ms = 0;
    double mean_us = 0;
    double share = 0;  // of the steps' wall time
  };

  /// Adds one traced step.
  void add(const run_metadata& step);
  int64_t steps() const { return steps_; }
  double wall_ms() const { return wall_ms_; }
  /// Of the steps' wall time, the part in which no node's work (kernel,
  /// launch, resource request) was running on any thread or device.
  double runtime_share() const;
  /// The ops with the most total time, most first (at most n).
  std::vector<op_row> top(size_t n) const;
  /// A printable table of top(n) with a summary line.
  std::string table(size_t n = 15) const;

 private:
  struct totals {
    int64_t calls = 0;
    double ms = 0;
  };
  std::map<std::string, totals> ops_;
  int64_t steps_ = 0;
  double wall_ms_ = 0;
  double busy_ms_ = 0;  // the union of the work's intervals, per step
};

}  // namespace actorflow
