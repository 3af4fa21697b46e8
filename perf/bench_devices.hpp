// Several devices in one process: the MLP split over two CPU devices beside
// the same MLP on one, and the accelerator stand-in's copy path.
#pragma once

namespace actorflow::bench {

struct device_figures {
  double mlp_step_ms = 0;              // one CPU device, one step at a time
  double mlp_step_ms_8_in_flight = 0;  // one CPU device, 8 steps in flight
  double two_device_mlp_step_ms = 0;   // fc1 on /cpu:0, fc2 and fc3 on /cpu:1, 8 in flight
  double device_copy_gbps = 0;         // 64 MiB into the stand-in's memory and back out
  double memcpy_gbps = 0;              // the same bytes with two plain memcpy calls
};

/// Alternating blocks of Adam steps (batch 128) of the three MLP set-ups,
/// each one's median, and the copies' medians.
device_figures device_benchmarks();

}  // namespace actorflow::bench
