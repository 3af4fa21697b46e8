// A client's side of a cluster checkpoint (schema/checkpoint_manifest.hpp):
// the tasks holding variables save one consistent cut of them, each into its
// own shard file, and restore from any checkpoint, each reading only what it
// needs. Only requests and acknowledgements cross the network; the files are
// read and written by the tasks (a directory every task reaches, as a shared
// file system gives).
//
// A save is two phases across the tasks. prepare: every task freezes every
// variable it holds (updates are held, reads go on) and says so. commit: each
// takes references to its variables' buffers (no copy: an update copies a
// buffer still shared before writing it), lets the held updates go, and writes
// its shard in the background. So no update lands on any shard between the
// first and the last task's cut, and training pauses for two round trips.
// A freeze ends by itself after `hold`, so a client that dies between the
// phases stops nothing; a commit that comes too late is refused.
#pragma once
#include <chrono>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "actors/cluster/cluster.hpp"
#include "schema/checkpoint_manifest.hpp"

namespace actorflow {

struct cluster_snapshot_options {
  /// The longest a freeze may hold updates before it ends by itself.
  std::chrono::milliseconds hold = std::chrono::seconds(10);
  /// The longest a task may take to freeze its variables.
  std::chrono::milliseconds prepare_timeout = std::chrono::seconds(20);
  /// The longest a task may take to write its shard.
  std::chrono::milliseconds write_timeout = std::chrono::minutes(10);
  /// The most bytes per second each task writes its shard at (0: as fast as
  /// its disk takes them): a save beside training paces itself.
  double write_bytes_per_second = 0;
};

/// Takes a consistent cut of the variables of `tasks` into `step_dir`
/// (which must exist): returns once every task took its cut (training goes
/// on), with a future of the manifest the shards make (no partition info,
/// not yet on disk: the caller completes and commits it). Throws naming the
/// task that did not freeze (the others are thawed); the future throws
/// naming a task whose write failed.
std::future<checkpoint_manifest> start_cluster_snapshot(
    cluster_connection& cluster, const std::vector<std::string>& tasks, const std::string& step_dir,
    int64_t step, const cluster_snapshot_options& options = {});

/// Restores the checkpoint in `step_dir` (its MANIFEST) into the tasks:
/// `targets` names, per task, the variables it holds now (restore_targets of
/// the graph, grouped by placement). All or nothing: every task first reads
/// and checks what it needs; only when all succeeded does any variable
/// change. Throws naming the task and what was wrong.
void restore_cluster(cluster_connection& cluster,
                     const std::map<std::string, std::vector<manifest_variable>>& targets,
                     const std::string& step_dir,
                     std::chrono::milliseconds timeout = std::chrono::minutes(10));

}  // namespace actorflow
