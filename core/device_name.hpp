// Device names in TensorFlow's form: "/job:ps/task:0/cpu:0",
// "/job:worker/replica:0/task:1/device:CPU:0", "/cpu:0", "/gpu:1". A name may
// leave parts out; nested device scopes merge, the inner name's parts winning.
// Placement partitions a graph by task ("/job:ps/task:0"): each task is one
// process of a cluster.
#pragma once
#include <functional>
#include <string>

#include "core/attr.hpp"
#include "core/export.hpp"

namespace actorflow {

struct ACTORFLOW_API device_name {
  std::string job;   // empty: not given
  int replica = -1;  // -1: not given
  int task = -1;
  std::string type;  // "cpu", "gpu" or "stand_in" (devices/stand_in); empty: not given
  int index = -1;

  /// Parses a device name; throws "[device] '<text>': <what was wrong>".
  static device_name parse(const std::string& text);
  /// The canonical text, e.g. "/job:ps/task:0/cpu:0" (only the parts given).
  std::string to_string() const;
  /// "/job:<job>/task:<task>": the process this device belongs to; a name
  /// without a job belongs to `default_task`, one without a task index to task 0.
  std::string task_name(const std::string& default_task) const;
  /// This name with the parts it leaves out taken from `outer`.
  device_name merged_onto(const device_name& outer) const;
};

/// A device function picks a node's device as it is added to the graph (see
/// graph::device_function_scope): it sees the op, its attributes and the
/// device the enclosing scopes give, and returns the device to use.
using device_function = std::function<std::string(const std::string& op, const attr_map& attrs,
                                                  const std::string& device)>;

enum class ps_strategy { round_robin, by_size };

/// TensorFlow's replica_device_setter: variables go to "/job:ps/task:k", k
/// chosen round-robin, or by size (the task holding the fewest bytes so far);
/// every other node goes to `worker_device` unless a scope names a job already.
ACTORFLOW_API device_function
replica_device_setter(int ps_tasks, const std::string& worker_device = "",
                      ps_strategy strategy = ps_strategy::round_robin);

}  // namespace actorflow
