#include "apps/lib/cluster_app.hpp"

#include <caf/io/all.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "actors/auth.hpp"
#include "actors/task_server.hpp"
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
  app.add_option("--secret", flags.secret, "shared secret peers must prove")->group(group);
  app.add_option("--secret-file", flags.secret_file, "file holding the shared secret")
      ->group(group);
  app.add_option("--tls-cert", flags.tls.certificate, "TLS: this task's certificate (PEM)")
      ->group(group);
  app.add_option("--tls-key", flags.tls.key, "TLS: this task's private key (PEM)")->group(group);
  app.add_option("--tls-ca", flags.tls.ca_file, "TLS: the CA peers' certificates must chain to")
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
    constexpr int no_index = std::numeric_limits<int>::min();  // no "task" object
    int task = no_index;
    setup.spec = cluster_spec::from_json(json, &job, &task);
    if (task != no_index && task < 0)
      fail("cluster", "$ACTORFLOW_CONFIG: \"task\": {\"index\": " + std::to_string(task) +
                          "} is negative; task indices count from 0");
    if (setup.job.empty()) setup.job = job;
    if (task >= 0 && flags.job.empty()) setup.task = task;
  }
  setup.tls = flags.tls;
  setup.idle_spin_us = flags.idle_spin_us;
  if (!flags.secret_file.empty()) setup.secret = read_secret_file(flags.secret_file);
  else setup.secret = flags.secret;
  if (!setup.enabled()) return setup;
  if (setup.job.empty()) fail("cluster", "--job is needed with a cluster (ps or worker)");
  setup.spec.address(setup.task_name());  // throws for an unknown job or task
  return setup;
}

runtime_options task_runtime_options(const cluster_setup& setup, int threads) {
  auto options = cluster_runtime_options(threads);
  options.tls = setup.tls;
  options.idle_spin_us = setup.idle_spin_us;
  return options;
}

int serve_task(const cluster_setup& setup, const std::string& bind,
               const std::string& checkpoint_dir, int threads) {
  // Block the stop signals before any thread starts, so that sigwait gets them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto rt = std::make_shared<runtime>(task_runtime_options(setup, threads));
  task_server_options options{setup.task_name(), setup.secret, checkpoint_dir};
  auto server = spawn_task_server(*rt, options);
  auto address = setup.spec.address(setup.task_name());
  auto port = publish_task_server(*rt, server, address.port, bind);
  if (!port) {
    caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    std::cerr << "error: " << setup.task_name() << " cannot listen on " << bind << ":"
              << address.port << ": " << error_text(port.error()) << "\n";
    return 1;
  }
  std::cout << setup.task_name() << " serving on " << bind << ":" << *port << std::endl;
  int received = 0;
  sigwait(&stop_signals, &received);
  std::cout << setup.task_name() << " stopping (signal " << received << ")" << std::endl;
  rt->system().middleman().close(*port);
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
  return 0;
}

}  // namespace actorflow::apps
