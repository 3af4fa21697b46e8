// A cluster of actorflow-train processes on 127.0.0.1 (ps tasks and
// workers), for the suites that train across real processes: each process
// is started and stopped by the test that starts it, and the output
// directory is removed with the cluster.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.hpp"

namespace actorflow::testing {

using namespace std::chrono_literals;

/// Whether `dir` holds a complete cluster checkpoint (a ckpt-<step>/MANIFEST).
inline bool has_cluster_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::filesystem::exists(it->path() / "MANIFEST")) return true;
  return false;
}

/// Waits up to `timeout` for has_cluster_checkpoint(dir).
inline bool wait_for_cluster_checkpoint(const std::string& dir, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline)
    if (has_cluster_checkpoint(dir))
      return true;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return has_cluster_checkpoint(dir);
}

struct train_cluster {
  std::vector<uint16_t> ps_ports, worker_ports;
  std::string out_dir;

  train_cluster(int ps, int workers) {
    for (int i = 0; i < ps; ++i) ps_ports.push_back(free_port());
    for (int i = 0; i < workers; ++i) worker_ports.push_back(free_port());
    out_dir = (std::filesystem::temp_directory_path() /
               ("actorflow-cluster-train-" + std::to_string(getpid())))
                  .string();
    std::filesystem::remove_all(out_dir);
  }
  ~train_cluster() { std::filesystem::remove_all(out_dir); }

  std::vector<std::string> args(const std::string& job, int task) const {
    return {ACTORFLOW_TRAIN_BINARY,
            "--job",
            job,
            "--task",
            std::to_string(task),
            "--ps-hosts",
            loopback_hosts(ps_ports),
            "--worker-hosts",
            loopback_hosts(worker_ports),
            "--threads",
            "1"};
  }
  // Starts ps task `task`; if another process took its port meanwhile, it
  // gets a fresh one (workers are started after the ps tasks).
  std::unique_ptr<child_process> ps(int task, std::vector<std::string> extra = {}) {
    for (int attempt = 0;; ++attempt) {
      auto argv = args("ps", task);
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto p = std::make_unique<child_process>(argv);
      bool up = p->wait_for("serving on", 20s);
      if (!up && attempt < 3 && p->output().find("cannot listen") != std::string::npos) {
        p->stop();
        ps_ports[static_cast<size_t>(task)] = free_port();
        continue;
      }
      INFO(p->output());
      REQUIRE(up);
      return p;
    }
  }
  std::unique_ptr<child_process> worker(int task, std::vector<std::string> extra) const {
    auto argv = args("worker", task);
    argv.push_back("--out");
    argv.push_back(out_dir + "/w" + std::to_string(task));
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<child_process>(argv);
  }
};

}  // namespace actorflow::testing
