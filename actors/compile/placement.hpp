// Placement inside a process: which of the runtime's devices runs each node
// of a compiled signature. (Which process runs it is partitioning's business,
// actors/compile/partition.hpp, which uses the same colocation rules.)
//
// The rules, after the paper and TensorFlow's placer, first match wins:
//  1. An op on a resource (a read or update of a variable, a queue op) runs
//     where its resource is; a node made under graph::colocate_with(op) runs
//     where op runs. Its own device hint is then ignored, as TensorFlow's
//     colocate_with ignores the device scope.
//  2. Its device hint ("/cpu:1", "/job:worker/task:0/cpu:1"; "/cpu:*" is the
//     first CPU device): that device, or an error naming the node and the
//     device when the process has none such.
//  3. Soft placement: a hinted device without a kernel for the op falls back
//     to the first device that has one, and the log says so.
//  4. No hint: "/cpu:0"; or, with runtime_options::cost_model_placement, the
//     device the cost model picks (actors/compile/cost_model.hpp).
// A CPU-to-CPU edge inside a process needs nothing at the cut: a tensor
// travels between actors by reference, whichever arenas run them.
#pragma once
#include <string>
#include <vector>

#include "actors/compile/cost_model.hpp"
#include "actors/compile/placement_entry.hpp"
#include "core/graph.hpp"
#include "devices/local_device.hpp"

namespace actorflow {

/// The node's device hint, parsed; throws naming the node for a malformed name.
device_name checked_device(const node& n);

/// Control flow, a loop gradient's history and feeds: the runtime routes
/// their values on the host, in device memory where they stay on an
/// accelerator (actors/run/device_edges.hpp), so they go on any device.
bool routes_values(op_role role);

/// A kernel of integers and bools only (a loop's counter and predicate, an
/// index, sampled ids), or an op whose kernel is the host's
/// (op_def::host_kernel): on an accelerator it runs on the host, its values
/// in host memory, as TensorFlow keeps a GPU's int32 tensors there. A loop's
/// predicate is then known without waiting for the device's stream.
bool runs_in_host_memory(const graph& g, const node& n);

/// The attribute graph::colocate_with sets: the name of the op to run with.
inline constexpr const char* colocate_attr = "_colocate_with";

/// The node whose placement `n` follows (its resource, or the op it is
/// colocated with), or -1 when it follows none. Throws naming `n` for a
/// colocation with a node the graph lacks.
int colocation_target(const graph& g, const node& n);

/// The node at the end of n's chain of colocation targets (n itself when it
/// follows none). Throws naming the nodes of a cycle.
int colocation_root(const graph& g, int id);

class device_placer {
 public:
  device_placer(const graph& g, const std::vector<local_device>& devices);
  /// The index into `devices` of the device node `id` runs on. Throws
  /// naming the node and the device for a hint this process cannot run.
  int device_of(int id);
  /// The log entry of a node placed already.
  placement_entry entry(int id) const;
  /// Places the `needed` nodes without a hint or colocation, in topological
  /// order, each on the device where the simulated step finishes it soonest
  /// (`rates` in the order of the devices); the others as device_of does.
  void place_by_cost(const std::vector<bool>& needed, const std::vector<device_rate>& rates);

 private:
  int place_by_hint(const node& n, std::string& why) const;
  // The accelerator every reader of variable `var` (the nodes that take its
  // value, not those acting on it) is placed on, if it can hold `var`; else -1.
  int readers_device(const node& var);

  const graph& g_;
  const std::vector<local_device>& devices_;
  std::vector<int> device_;  // -1: not placed yet
  std::vector<std::string> why_;
  bool has_accelerator_ = false;  // else no variable looks for its readers
};

}  // namespace actorflow
