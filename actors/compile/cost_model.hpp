// The cost model of placement (runtime_options::cost_model_placement), after
// the paper's placer: a node's compute time is its estimated floating-point
// work over its device's rate, measured once per runtime; an edge between
// devices costs its bytes over the accelerator's copy rate plus a hop; nodes
// without a hint go, in topological order, to the device where the
// simulated step would finish them soonest (greedy earliest finish).
#pragma once
#include <vector>

#include "core/graph.hpp"
#include "devices/local_device.hpp"

namespace actorflow {

struct device_rate {
  double gflops = 1;     // a 256x256x256 float32 product, the best of a few runs
  double copy_gbps = 0;  // accelerators: host to device and back; 0 for CPU devices
};

/// Measures every device of `devices` (a few milliseconds each): CPU devices
/// inside their arena, accelerators through their streams. A device whose
/// probe fails gets a rate so low that the cost model never picks it.
std::vector<device_rate> measure_device_rates(const std::vector<local_device>& devices);

/// Floating-point operations of n's kernel, from its shapes: products and
/// convolutions 2 per multiply-add, other ops one per output element.
/// Unknown dims count as 64.
double estimated_flops(const graph& g, const node& n);

/// Bytes of output `e` (unknown dims count as 64).
double estimated_bytes(const graph& g, endpoint e);

/// Microseconds to move `bytes` from device `from` to device `to`: nothing
/// on one device, a message hop between CPU devices (tensors pass by
/// reference), a hop and the copy at the accelerator's rate otherwise.
double transfer_us(const std::vector<local_device>& devices, const std::vector<device_rate>& rates,
                   int from, int to, double bytes);

}  // namespace actorflow
