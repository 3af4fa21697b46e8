// A distributed executable: one run signature split by task (actors/
// partition.hpp). The client's own partition runs here; every other one is
// registered with its task's server and runs there, its actors talking to
// ours directly (send -> recv). A driver actor starts each step on every
// partition with one message each and answers the caller once all report.
//
// Nothing waits forever: a task that goes down fails the steps in flight at
// once (CAF's monitoring), and a step that a task does not finish within the
// cluster's step timeout fails naming the task; either way the other
// partitions drop the step.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster/cluster.hpp"
#include "actors/compile/partition.hpp"
#include "actors/run/executable.hpp"

namespace actorflow {

class distributed_executable : public runnable {
 public:
  /// Partitions, registers the remote partitions and connects every cut
  /// edge; throws naming the task that cannot be reached or refuses.
  /// `tasks`: each node's task, as place() (actors/compile/partition.hpp) gave it.
  distributed_executable(const graph& g, const run_signature& sig, std::vector<std::string> tasks,
                         cluster_connection& cluster, const variable_lookup& local_resources);
  /// Releases the remote partitions.
  ~distributed_executable() override;

  void start(step_request_ptr request) const override;

  bool broken() const override { return health_->broken.load(); }
  std::vector<std::string> dead_tasks() const override;
  const std::vector<placement_entry>& placement_log() const override {
    return local_->placement_log();
  }

  struct health {
    std::atomic<bool> broken{false};
    std::mutex mutex;
    std::vector<std::string> dead;
  };

 private:
  struct remote_partition {
    std::string task;
    caf::actor server;
    uint64_t id = 0;
  };
  void release();

  runtime& runtime_;
  partitioned_graph parts_;
  std::unique_ptr<executable> local_;
  std::vector<remote_partition> remotes_;
  caf::actor driver_;
  std::shared_ptr<health> health_;
};

}  // namespace actorflow
