// Placement and partitioning: which task (process) runs each node of a run
// signature, and the per-task graphs with a send/recv pair on every cut edge.
//
// Placement follows the paper: a node's device hint names its task ("/job:ps
// /task:0"); an op that acts on a resource (an update, a queue op) sits with
// its resource whatever its hint says, and a node made under
// graph::colocate_with(op) with op; a node without a job runs on the client's
// task. Constants are copied to the tasks that use them rather than sent.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "actors/compile/signature.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// One task's share of a run signature: a self-contained graph and what the
/// task's executable feeds, fetches and runs. Names refer to nodes of `g`.
struct partition {
  std::string task;  // "/job:ps/task:0"
  std::unique_ptr<graph> g;
  std::vector<std::string> feeds;    // placeholder names
  std::vector<size_t> feed_index;    // where each feed sits in the signature's feed list
  std::vector<std::string> fetches;  // "name" or "name:i"; only the client's partition fetches
  std::vector<std::string> targets;  // the signature's targets on this task, and every send

  /// The partition's run signature in its own graph.
  run_signature signature() const;
};

/// A cut edge: the send in one partition and the recv it delivers to.
struct cut_edge {
  std::string send_task, send_name;
  std::string recv_task, recv_name;
};

struct partitioned_graph {
  /// parts[0] is the client's task (it holds the fetches), even when it has
  /// nothing else to do; the others in task-name order.
  std::vector<partition> parts;
  std::vector<cut_edge> cuts;
};

/// The task each node of `g` runs on ("" for nodes the signature does not
/// need). Throws naming the node for a malformed device name or a non-CPU
/// device this build cannot run.
std::vector<std::string> place(const graph& g, const run_signature& sig,
                               const std::string& client_task);

/// Splits the signature's nodes by task. Throws for malformed device names.
/// With `transfer` bfloat16, float32 values cross between tasks as bfloat16
/// (cluster_options::transfer_precision): a cast before each such send and
/// one back to float32 after its recv; values sent inside a loop stay float32.
partitioned_graph partition_graph(const graph& g, const run_signature& sig,
                                  const std::string& client_task, dtype transfer = dtype::float32);
/// The same with the tasks place() gave (a session has them already).
partitioned_graph partition_graph(const graph& g, const run_signature& sig,
                                  const std::string& client_task, std::vector<std::string> tasks,
                                  dtype transfer = dtype::float32);

}  // namespace actorflow
