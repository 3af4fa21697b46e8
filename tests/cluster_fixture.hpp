// What the cluster suites share: a cluster of real actorflow-node processes
// on 127.0.0.1 (each started and stopped by the test that starts it), a
// fresh temporary directory, and a peer that sends junk.
#pragma once
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster/cluster.hpp"
#include "tests/support/child_process.hpp"

namespace actorflow::testing {

using namespace std::chrono_literals;

// ---- a cluster of actorflow-node processes ------------------------------------

struct test_cluster {
  uint16_t client_port = free_port(), worker1_port = free_port(), ps_port = free_port(),
           ps1_port = free_port();
  // Ps tasks beyond the first two (with_ps_tasks).
  std::vector<uint16_t> more_ps_ports;
  // Tests that use one ps task start only the first.
  std::string ps_hosts() const {
    std::string hosts =
        "127.0.0.1:" + std::to_string(ps_port) + ",127.0.0.1:" + std::to_string(ps1_port);
    for (auto port : more_ps_ports) hosts += ",127.0.0.1:" + std::to_string(port);
    return hosts;
  }
  // A cluster of `n` ps tasks (n >= 2).
  test_cluster& with_ps_tasks(int n) {
    while (int(more_ps_ports.size()) + 2 < n) more_ps_ports.push_back(free_port());
    return *this;
  }
  std::string worker_hosts() const {
    return "127.0.0.1:" + std::to_string(client_port) +
           ",127.0.0.1:" + std::to_string(worker1_port);
  }
  uint16_t& port_of(const std::string& job, int task) {
    if (job == "ps") return task == 0 ? ps_port : task == 1 ? ps1_port : more_ps_ports.at(task - 2);
    return task == 0 ? client_port : worker1_port;
  }
  // Starts a task; if another process took its port meanwhile, the task gets
  // a fresh one (the client reads the ports when it connects).
  std::unique_ptr<child_process> start(const std::string& job, int task,
                                       std::vector<std::string> extra = {}) {
    for (int attempt = 0;; ++attempt) {
      std::vector<std::string> argv{
          ACTORFLOW_NODE_BINARY, "--job",      job,        "--task",
          std::to_string(task),  "--ps-hosts", ps_hosts(), "--worker-hosts",
          worker_hosts(),        "--threads",  "2"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto p = std::make_unique<child_process>(argv);
      bool up = p->wait_for("serving on", 20s);
      if (!up && attempt < 3 && p->output().find("cannot listen") != std::string::npos) {
        p->stop();
        port_of(job, task) = free_port();
        continue;
      }
      INFO("output of " << job << "/" << task << ":\n" << p->output());
      REQUIRE(up);
      return p;
    }
  }
  std::shared_ptr<cluster_connection> connect(cluster_options options = {},
                                              runtime_options rt = {}) const {
    if (options.connect_timeout > 10s) options.connect_timeout = 10s;
    return std::make_shared<cluster_connection>(
        std::make_shared<runtime>(rt), cluster_spec::from_hosts(ps_hosts(), worker_hosts()),
        "/job:worker/task:0", options);
  }
};

// A fresh (empty) directory under the system's temporary one.
inline std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("actorflow-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Writes `rounds` runs of junk to 127.0.0.1:port, each closed mid-stream.
inline void send_garbage(uint16_t port, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    std::string junk;
    for (int i = 0; i < 64 * (round + 1); ++i)
      junk.push_back(static_cast<char>((i * 7919 + round * 31) & 0xff));
    (void)!write(fd, junk.data(), junk.size());
    close(fd);
  }
}

}  // namespace actorflow::testing
