// actorflow-node: one task of a cluster. It publishes its task server on the
// task's port, so that clients can register graph partitions with it, and
// serves until SIGINT or SIGTERM.
//
//   actorflow-node --job ps --task 0 --ps-hosts 127.0.0.1:2222
//                  --worker-hosts 127.0.0.1:2223,127.0.0.1:2224   (one command line)
#include <iostream>

#include "apps/lib/cluster_app.hpp"

int main(int argc, char** argv) {
  using namespace actorflow;
  CLI::App app{"actorflow-node: serves one task of an actorflow cluster"};
  apps::cluster_flags flags;
  apps::add_cluster_flags(app, flags);
  std::string checkpoint_dir;
  int threads = 0;
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "not for a task: the chief's --checkpoint-dir holds the cluster's checkpoints");
  app.add_option("--threads", threads, "CAF and kernel threads (0: one per core)")
      ->check(CLI::Range(0, 1024));
  CLI11_PARSE(app, argc, argv);
  try {
    auto setup = apps::resolve_cluster(flags);
    if (!setup.enabled()) {
      std::cerr << "error: no cluster: give --ps-hosts/--worker-hosts or $ACTORFLOW_CONFIG\n";
      return 2;
    }
    return apps::serve_task(setup, flags.bind, checkpoint_dir, threads);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
