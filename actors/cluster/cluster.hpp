// A cluster: named jobs of tasks, each task one process listening on a
// host:port (TensorFlow's ClusterSpec), and a client's connections to them.
//
// The description comes from flags (--ps-hosts H:P,H:P --worker-hosts ...) or
// from a JSON text in the style of TF_CONFIG:
//   {"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]},
//    "task": {"type": "worker", "index": 0}}
#pragma once
#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/run/runtime.hpp"
#include "core/dtype.hpp"
#include "core/export.hpp"

namespace actorflow {

struct ACTORFLOW_API host_port {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
  /// Parses "host:port"; throws "[cluster] ..." naming the text.
  static host_port parse(const std::string& text);
};

class ACTORFLOW_API cluster_spec {
 public:
  cluster_spec() = default;
  /// Adds a job with one address per task, task 0 first.
  void add_job(const std::string& job, std::vector<host_port> tasks);
  /// From comma-separated "host:port" lists (either may be empty).
  static cluster_spec from_hosts(const std::string& ps_hosts, const std::string& worker_hosts);
  /// From TF_CONFIG-style JSON; fills `job`/`index` from its "task" when given.
  static cluster_spec from_json(const std::string& json, std::string* job = nullptr,
                                int* index = nullptr);

  /// The address of task "/job:<job>/task:<i>"; throws naming the task and
  /// the jobs the cluster has.
  host_port address(const std::string& task_name) const;
  int num_tasks(const std::string& job) const;
  const std::map<std::string, std::vector<host_port>>& jobs() const { return jobs_; }

 private:
  std::map<std::string, std::vector<host_port>> jobs_;
};

/// "/job:<job>/task:<index>".
ACTORFLOW_API std::string task_name(const std::string& job, int index);

/// How long the idle threads of a cluster process poll before they sleep
/// (runtime_options::idle_spin_us). A step's hops come closer together than
/// this, so none of them waits for a thread to wake (a null step on
/// loopback: about 0.45 -> 0.2 ms).
constexpr int default_cluster_idle_spin_us = 300;

/// Runtime options for a process of a cluster. Its messages arrive from the
/// network multiplexer thread; a scheduler worker napping when one comes in
/// would make it wait out the nap, so idle threads poll (yielding their
/// core) for default_cluster_idle_spin_us, then sleep without a nap.
ACTORFLOW_API runtime_options cluster_runtime_options(int threads = 0);

/// Publishes a task's server on `port` at address `bind` (SO_REUSEADDR):
/// through TLS when the runtime has TLS files, else plain TCP. Clients
/// connect the same way (cluster_connection). The port bound, or CAF's error.
ACTORFLOW_API caf::expected<uint16_t> publish_task_server(runtime& rt, const caf::actor& server,
                                                          uint16_t port, const std::string& bind);

struct ACTORFLOW_API cluster_options {
  /// How long to keep trying to reach a task that is not up yet (tasks of a
  /// cluster start in any order).
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(30);
  /// How long one step may take on a remote task before it fails, naming it.
  std::chrono::milliseconds step_timeout = std::chrono::seconds(60);
  /// Where the connection says what it waits for (a task not up yet);
  /// empty: standard error. (The cluster secret is the runtime's:
  /// runtime_options::secret.)
  std::function<void(const std::string&)> log;
  /// The dtype float32 tensors cross between tasks as: float32 (exact), or
  /// bfloat16 (half the bytes; each value rounded to bfloat16's 8 significant
  /// bits on the sending task and widened back on the receiving one, like
  /// TensorFlow's bfloat16 gradient compression). Values sent inside a while
  /// loop cross as float32.
  dtype transfer_precision = dtype::float32;
};

/// A client's view of a cluster: who it is, and its connections to the other
/// tasks' servers (actors/cluster/task_server.hpp), made on first use.
class ACTORFLOW_API cluster_connection {
 public:
  /// `local_task` is this process's task ("/job:worker/task:0"): nodes
  /// without a job run here.
  cluster_connection(std::shared_ptr<runtime> rt, cluster_spec spec, std::string local_task,
                     cluster_options options = {});

  const std::string& local_task() const { return local_task_; }
  const cluster_spec& spec() const { return spec_; }
  const cluster_options& options() const { return options_; }
  const std::shared_ptr<runtime>& rt() const { return runtime_; }

  /// The server actor of `task`, connecting on first use; retries until
  /// connect_timeout, saying once what it waits for, then throws naming the
  /// task, its address and why (a refused connection, a handshake that failed
  /// and how: wrong secret, certificate, a peer of another kind).
  caf::actor server(const std::string& task);
  /// Drops the connection to `task` (it died); the next server() reconnects.
  void forget(const std::string& task);

 private:
  caf::actor connect(const std::string& task);
  caf::expected<caf::actor> reach(const host_port& address);
  void say(const std::string& line) const;

  std::shared_ptr<runtime> runtime_;
  cluster_spec spec_;
  std::string local_task_;
  cluster_options options_;
  std::mutex mutex_;
  std::map<std::string, caf::actor> servers_;
};

}  // namespace actorflow
