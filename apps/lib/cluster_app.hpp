// What actorflow-node and actorflow-train share for clusters: the flags, in
// TensorFlow's conventions, --job ps|worker --task N --ps-hosts H:P,H:P
// --worker-hosts H:P,H:P; or the JSON description in $ACTORFLOW_CONFIG
// (TF_CONFIG's form), which launchers set for each task.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "actors/cluster/cluster.hpp"
#include "actors/run/runtime.hpp"

namespace actorflow::apps {

struct cluster_flags {
  std::string job;
  int task = 0;
  std::string ps_hosts;
  std::string worker_hosts;
  std::string bind = "127.0.0.1";
  std::string secret;
  std::string secret_file;
  tls_files tls;
  int idle_spin_us = default_cluster_idle_spin_us;
  int handshake_timeout_ms = runtime_options{}.handshake_timeout_ms;
  uint64_t max_message_bytes = runtime_options{}.max_message_bytes;
  int cpu_devices = 1;       // this task's CPU devices (/cpu:0 ...)
  int stand_in_devices = 0;  // and accelerator stand-ins (/stand_in:0 ...)
};

/// Adds the flags to `app` (group "Cluster").
void add_cluster_flags(CLI::App& app, cluster_flags& flags);

struct cluster_setup {
  cluster_spec spec;
  std::string job;
  int task = 0;
  std::string secret;
  tls_files tls;
  int idle_spin_us = default_cluster_idle_spin_us;
  int handshake_timeout_ms = runtime_options{}.handshake_timeout_ms;
  uint64_t max_message_bytes = runtime_options{}.max_message_bytes;
  int cpu_devices = 1;
  int stand_in_devices = 0;
  bool enabled() const { return !spec.jobs().empty(); }
  std::string task_name() const { return actorflow::task_name(job, task); }
};

/// The cluster from the flags, or from $ACTORFLOW_CONFIG when no hosts are
/// given; disabled when neither names one. Throws "[cluster] ..." for a
/// malformed description, an unknown job or a task index out of range.
cluster_setup resolve_cluster(const cluster_flags& flags);

/// The runtime options of a cluster task (cluster_runtime_options) with the
/// setup's secret, TLS files and connection limits.
runtime_options task_runtime_options(const cluster_setup& setup, int threads);
/// A worker's runtime with the device --device names (a GPU, or the stand-in).
runtime_options worker_runtime_options(const cluster_setup& setup, int threads,
                                       const std::string& device);
/// Where a worker's nodes go: its task, on the device --device names
/// ("/job:worker/task:1/gpu:0"); its variables go to the ps tasks.
std::string worker_device(const cluster_setup& setup, const std::string& device);

/// Serves this task (actors/cluster/task_server.hpp) on its port, bound to `bind`,
/// until SIGINT or SIGTERM; prints "... serving on HOST:PORT" once it listens.
/// Returns the process's exit status. A `checkpoint_dir` is an error that
/// says where cluster checkpoints are kept (the chief's --checkpoint-dir).
int serve_task(const cluster_setup& setup, const std::string& bind,
               const std::string& checkpoint_dir, int threads);

}  // namespace actorflow::apps
