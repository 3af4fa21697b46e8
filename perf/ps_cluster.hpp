// ps tasks for the distributed benchmarks: real actorflow-node processes on
// 127.0.0.1, started and reaped by the benchmark that asks for them; the
// bench process itself is one of the workers (or several, each its own
// runtime).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster/cluster.hpp"
#include "actors/run/runtime.hpp"
#include "tests/support/child_process.hpp"

namespace actorflow::bench {

/// A line of a task's output, shortened for an error message.
std::string tail(const std::string& text, size_t n = 600);

/// "127.0.0.1:p1,127.0.0.1:p2".
std::string hosts(const std::vector<uint16_t>& ports);

/// The ps tasks of a cluster that lists `workers` workers, which need not
/// serve. The destructor stops and reaps the tasks.
struct ps_cluster {
  std::vector<uint16_t> ps_ports, worker_ports;
  cluster_spec spec;
  std::vector<std::unique_ptr<testing::child_process>> tasks;

  ~ps_cluster() {
    for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) (*it)->stop();
  }
};

/// Starts `ps` actorflow-node ps tasks of `threads` threads each; `extra`
/// flags go to every task (TLS files, say). Throws naming a task that did not
/// start.
std::unique_ptr<ps_cluster> start_ps_cluster(int ps, int workers,
                                             const std::vector<std::string>& extra = {},
                                             int threads = 1);

/// The benchmarks' cluster options: 10 s to connect, 20 s per step.
cluster_options bench_options();

/// One client of the cluster: its own runtime (its own CAF node, with its own
/// connections) as /job:worker/task:<index>.
std::shared_ptr<cluster_connection> connect_as_worker(
    const ps_cluster& c, int index, runtime_options options = cluster_runtime_options(),
    dtype transfer = dtype::float32);

}  // namespace actorflow::bench
