// A cluster on an emulated network: one Linux network namespace per task,
// each joined to a bridge (in a namespace of its own) by a veth pair whose
// two ends are shaped by tbf to the task's link rate, so that a task's NIC
// is full duplex at that rate and a ps task's bandwidth is a real limit
// again, as in a datacenter. Addresses come from 10.233.0.0/16, which
// exists only inside these namespaces: no traffic leaves them. Needs root
// (CAP_NET_ADMIN) and iproute2 (ip, tc); where either is missing,
// namespaces_unavailable() says why.
//
// Everything made is removed by the destructor: every process started in
// a namespace (SIGTERM, then SIGKILL), then every namespace (the veth
// pairs and the bridge go with them). Names start afsim-<pid>-, so that a
// run killed before it could clean up is found by the next one, which
// removes the namespaces of owners no longer alive. SIGINT, SIGTERM and
// SIGHUP, while a netns_cluster exists, set a flag its waits check
// (interrupted()), so that the program unwinds and cleans up.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.hpp"

namespace actorflow::bench {

/// Empty when this process can make namespaces and shape links; else why not.
std::string namespaces_unavailable();

/// A rate such as "10gbit", "200mbit", "1.5gbit", "800kbit" in bits per
/// second; throws naming a malformed one.
double parse_rate(const std::string& rate);
/// The rate back in tc's words ("1.5gbit").
std::string rate_text(double bits_per_second);

struct cluster_sim_options {
  int ps = 1, workers = 1;
  double link_bps = 1e9;   ///< every task's link, each way
  double ps_link_bps = 0;  ///< the ps tasks' links; 0: link_bps
  int mtu = 9000;          ///< jumbo frames, as in a datacenter: fewer packets per byte
};

/// One task of the simulated cluster.
struct sim_task {
  std::string job;  ///< "ps" or "worker"
  int index = 0;
  std::string netns, ip;
  double link_bps = 0;
  std::string name() const { return job + std::to_string(index); }  // "ps0"
};

/// Whether SIGINT, SIGTERM or SIGHUP arrived while a netns_cluster existed.
bool interrupted();

class netns_cluster {
 public:
  /// Makes the namespaces, the bridge and the shaped links; throws naming
  /// the command that failed (and removes what it made).
  explicit netns_cluster(const cluster_sim_options& options);
  ~netns_cluster();
  netns_cluster(const netns_cluster&) = delete;
  netns_cluster& operator=(const netns_cluster&) = delete;

  const std::vector<sim_task>& tasks() const { return tasks_; }
  const sim_task& task(const std::string& job, int index) const;
  /// "ip:port,ip:port" of a job's tasks: a cluster's --ps-hosts or --worker-hosts.
  std::string hosts(const std::string& job, int port) const;

  /// Starts `argv` in `t`'s namespace; its output goes to a pipe
  /// (child_process). Stopped by the destructor if still running.
  testing::child_process& start(const sim_task& t, const std::vector<std::string>& argv);

  /// Stops every process and removes every namespace; the destructor calls it.
  void remove();

 private:
  std::string prefix_;
  std::vector<sim_task> tasks_;
  std::vector<std::string> made_;  // namespaces made, in order
  std::vector<std::unique_ptr<testing::child_process>> processes_;
};

/// What each task of a run did.
struct sim_task_result {
  sim_task task;
  int status = -1;  ///< exit status; -1: it ran until stopped (a ps task)
  double cpu_seconds = 0;
  std::string output;
};

struct sim_run_result {
  std::vector<sim_task_result> tasks;
  /// 0 when every worker exited 0; 1 when a task failed (a worker's nonzero
  /// exit, a ps task's exit); 124 at the timeout; 130 when interrupted.
  int status = 0;
  std::string why;  ///< what ended it early, with the failed task's output's tail
  double seconds = 0;
  const sim_task_result& of(const std::string& name) const;
};

/// Runs `command` in every task of `sim` (ps tasks first), each with
/// {job} {index} {ip} {port} {ps_hosts} {worker_hosts} {out} filled in
/// (`out` for {out}), until every worker has exited (the ps tasks are then
/// stopped), a task fails, `timeout_s` passes or a signal arrives.
sim_run_result run_tasks(netns_cluster& sim, const std::vector<std::string>& command, int port,
                         double timeout_s, const std::string& out = "");

/// Seconds of CPU a live process has used (user + system), or -1.
double process_cpu_seconds(int pid);

/// Namespaces named afsim-<pid>-... whose pid is no longer alive (a run
/// that was killed): removed, their processes killed. Returns their names.
std::vector<std::string> remove_stale_namespaces();

/// The namespaces of this machine (ip netns list), names only.
std::vector<std::string> list_namespaces();

/// The full path of a program (child_process runs paths): `name` looked
/// up in $PATH, /usr/sbin and /sbin; throws when it is nowhere.
std::string tool_path(const std::string& name);

/// Runs argv to its end (bounded by `timeout`); throws naming the command
/// and its output when it fails. Returns its output.
std::string run_command(const std::vector<std::string>& argv,
                        std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace actorflow::bench
