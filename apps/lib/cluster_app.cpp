#include "apps/lib/cluster_app.hpp"

#include <atomic>
#include <caf/io/all.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <thread>
#include <vector>

#include "actors/caf_ext/auth.hpp"
#include "actors/cluster/task_server.hpp"
#include "apps/lib/stop_signals.hpp"
#include "core/error.hpp"

namespace actorflow::apps {

void add_cluster_flags(CLI::App& app, cluster_flags& flags) {
  const std::string group = "Cluster";
  app.add_option("--job", flags.job, "this task's job: ps or worker")->group(group);
  app.add_option("--task", flags.task, "this task's index in its job")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->group(group);
  app.add_option("--ps-hosts", flags.ps_hosts, "parameter servers, host:port,host:port")
      ->group(group);
  app.add_option("--worker-hosts", flags.worker_hosts, "workers, host:port,host:port")
      ->group(group);
  app.add_option("--bind", flags.bind, "address to listen on (default 127.0.0.1)")->group(group);
  app.add_option("--secret", flags.secret,
                 "shared secret every connection must prove before anything else")
      ->group(group);
  app.add_option("--secret-file", flags.secret_file, "file holding the shared secret")
      ->group(group);
  app.add_option("--handshake-timeout-ms", flags.handshake_timeout_ms,
                 "a connection that has not completed its handshakes by then is closed")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str()
      ->group(group);
  app.add_option("--max-message-bytes", flags.max_message_bytes,
                 "largest message a peer may send; a larger one closes its connection")
      ->check(CLI::Range(uint64_t{1} << 20, uint64_t{0xffffffff}))
      ->capture_default_str()
      ->group(group);
  app.add_option("--tls-cert", flags.tls.certificate, "TLS: this task's certificate (PEM)")
      ->group(group);
  app.add_option("--tls-key", flags.tls.key, "TLS: this task's private key (PEM)")->group(group);
  app.add_option("--tls-ca", flags.tls.ca_file, "TLS: the CA peers' certificates must chain to")
      ->group(group);
  app.add_option("--cpu-devices", flags.cpu_devices,
                 "CPU devices of this task (/cpu:0 ...), each with --threads threads; nodes are "
                 "placed on them by their device hints")
      ->check(CLI::Range(1, 64))
      ->capture_default_str()
      ->group(group);
  app.add_option("--stand-in-devices", flags.stand_in_devices,
                 "accelerator stand-ins of this task (/stand_in:0 ...): the GPU's protocol on the "
                 "CPU, for testing")
      ->check(CLI::Range(0, 8))
      ->capture_default_str()
      ->group(group);
  app.add_option("--idle-spin-us", flags.idle_spin_us,
                 "microseconds idle threads poll before they sleep; 0 on a shared machine")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str()
      ->group(group);
}

cluster_setup resolve_cluster(const cluster_flags& flags) {
  cluster_setup setup;
  setup.job = flags.job;
  setup.task = flags.task;
  if (!flags.ps_hosts.empty() || !flags.worker_hosts.empty()) {
    setup.spec = cluster_spec::from_hosts(flags.ps_hosts, flags.worker_hosts);
  } else if (const char* json = std::getenv("ACTORFLOW_CONFIG"); json && *json) {
    std::string job;
    int task = -1;  // none given; from_json refuses a negative one
    setup.spec = cluster_spec::from_json(json, &job, &task);
    if (setup.job.empty()) setup.job = job;
    if (task >= 0 && flags.job.empty()) setup.task = task;
  }
  setup.tls = flags.tls;
  setup.idle_spin_us = flags.idle_spin_us;
  setup.cpu_devices = flags.cpu_devices;
  setup.stand_in_devices = flags.stand_in_devices;
  setup.handshake_timeout_ms = flags.handshake_timeout_ms;
  setup.max_message_bytes = flags.max_message_bytes;
  if (!flags.secret_file.empty())
    setup.secret = read_secret_file(flags.secret_file);
  else
    setup.secret = flags.secret;
  if (!setup.enabled()) return setup;
  if (setup.job.empty()) fail("cluster", "--job is needed with a cluster (ps or worker)");
  setup.spec.address(setup.task_name());  // throws for an unknown job or task
  return setup;
}

runtime_options task_runtime_options(const cluster_setup& setup, int threads) {
  auto options = cluster_runtime_options(threads);
  options.tls = setup.tls;
  options.idle_spin_us = setup.idle_spin_us;
  options.cpu_devices = setup.cpu_devices;
  options.stand_in_devices = setup.stand_in_devices;
  options.secret = setup.secret;
  options.handshake_timeout_ms = setup.handshake_timeout_ms;
  options.max_message_bytes = setup.max_message_bytes;
  return options;
}

runtime_options worker_runtime_options(const cluster_setup& setup, int threads,
                                       const std::string& device) {
  auto options = task_runtime_options(setup, threads);
  if (device == "gpu") options.gpus = -1;
  if (device == "stand_in") options.stand_in_devices = std::max(options.stand_in_devices, 1);
  return options;
}

std::string worker_device(const cluster_setup& setup, const std::string& device) {
  return setup.task_name() + (device == "cpu" ? "" : "/" + device + ":0");
}

namespace {

// Connects a ps task to every other ps task, before any step runs. CAF routes
// a message for a node it learned of through another node through that
// node: a ps task that learned of another from a worker wiring its
// partitions would send to it through the worker, and when the worker dies
// every step with an edge between the two stalls until its timeout. With a
// direct connection made first, no route between ps tasks runs through a
// worker. The tasks up within the connect timeout are reached; one started
// later reaches this one itself.
class ps_mesh {
 public:
  ps_mesh(std::shared_ptr<runtime> rt, const cluster_setup& setup) {
    if (setup.job != "ps") return;
    cluster_options options;
    // Short tries, so that a stop never waits for one.
    options.connect_timeout = std::chrono::milliseconds(300);
    options.log = [](const std::string&) {};  // a task not up yet connects to this one
    peers_ = std::make_shared<cluster_connection>(rt, setup.spec, setup.task_name(), options);
    std::vector<std::string> others;
    for (int i = 0; i < setup.spec.num_tasks("ps"); ++i)
      if (i != setup.task) others.push_back(task_name("ps", i));
    thread_ = std::thread([this, others] { connect(others); });
  }
  ~ps_mesh() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  // Tries each other ps task for a while; one not up by then connects to
  // this one when it starts.
  void connect(std::vector<std::string> pending) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!stop_ && !pending.empty() && std::chrono::steady_clock::now() < deadline) {
      for (auto it = pending.begin(); it != pending.end() && !stop_;) {
        try {
          peers_->server(*it);
          it = pending.erase(it);
        } catch (const std::exception&) {
          ++it;
        }
      }
    }
  }

  std::shared_ptr<cluster_connection> peers_;  // the connections live as long as the task
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int serve_task(const cluster_setup& setup, const std::string& bind,
               const std::string& checkpoint_dir, int threads) {
  if (!checkpoint_dir.empty())
    fail("train", setup.task_name() +
                      ": a ps task takes no --checkpoint-dir: the chief (worker 0) keeps the "
                      "cluster's checkpoints in its --checkpoint-dir, where every ps task writes "
                      "its shard of each consistent cut, and restores them into the ps tasks");
  stop_signals signals(setup.task_name());  // before any thread starts
  auto rt = std::make_shared<runtime>(task_runtime_options(setup, threads));
  task_server_options options{setup.task_name()};
  auto server = spawn_task_server(*rt, options);
  auto address = setup.spec.address(setup.task_name());
  auto port = publish_task_server(*rt, server, address.port, bind);
  if (!port) {
    caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    std::cerr << "error: " << setup.task_name() << " cannot listen on " << bind << ":"
              << address.port << ": " << error_text(port.error()) << "\n";
    return 1;
  }
  signals.running();
  std::cout << setup.task_name() << " serving on " << bind << ":" << *port << std::endl;
  ps_mesh mesh(rt, setup);
  int received = signals.wait_for_stop(std::chrono::seconds(10));
  std::cout << setup.task_name() << " stopping (signal " << received << ")" << std::endl;
  rt->system().middleman().close(*port);
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
  return 0;
}

}  // namespace actorflow::apps
