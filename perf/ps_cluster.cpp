#include "perf/ps_cluster.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace actorflow::bench {

using testing::child_process;
using testing::free_port;
using namespace std::chrono_literals;

std::string tail(const std::string& text, size_t n) {
  std::string t = text.size() > n ? "..." + text.substr(text.size() - n) : text;
  std::replace(t.begin(), t.end(), '\n', ' ');
  return t;
}

std::string hosts(const std::vector<uint16_t>& ports) {
  std::string out;
  for (auto p : ports) {
    if (!out.empty()) out += ',';
    out += fmt::format("127.0.0.1:{}", p);
  }
  return out;
}

std::unique_ptr<ps_cluster> start_ps_cluster(int ps, int workers,
                                             const std::vector<std::string>& extra, int threads) {
  const std::string binary = ACTORFLOW_NODE_BINARY;
  if (access(binary.c_str(), X_OK) != 0)
    throw std::runtime_error("actorflow-node not found at " + binary + " (build it)");
  std::string failure;
  // A free port can be taken between free_port() and the node's bind: then
  // the whole cluster starts again on fresh ports.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto c = std::make_unique<ps_cluster>();
    for (int i = 0; i < ps; ++i) c->ps_ports.push_back(free_port());
    for (int i = 0; i < workers; ++i) c->worker_ports.push_back(free_port());
    c->spec = cluster_spec::from_hosts(hosts(c->ps_ports), hosts(c->worker_ports));
    bool up = true, port_taken = false;
    for (int t = 0; t < ps && up; ++t) {
      std::vector<std::string> argv{binary,
                                    "--job",
                                    "ps",
                                    "--task",
                                    std::to_string(t),
                                    "--ps-hosts",
                                    hosts(c->ps_ports),
                                    "--worker-hosts",
                                    hosts(c->worker_ports),
                                    "--threads",
                                    std::to_string(threads)};
      argv.insert(argv.end(), extra.begin(), extra.end());
      c->tasks.push_back(std::make_unique<child_process>(argv));
      auto& p = *c->tasks.back();
      if (!p.wait_for("serving on", 20s)) {
        up = false;
        port_taken = p.output().find("cannot listen") != std::string::npos;
        failure = fmt::format("actorflow-node /job:ps/task:{} did not start within 20 s: {}", t,
                              tail(p.output()));
      }
    }
    if (up) return c;
    if (!port_taken) break;
  }
  throw std::runtime_error(failure);
}

cluster_options bench_options() {
  cluster_options o;
  o.connect_timeout = 10s;
  o.step_timeout = 20s;
  return o;
}

std::shared_ptr<cluster_connection> connect_as_worker(const ps_cluster& c, int index,
                                                      runtime_options options, dtype transfer) {
  auto cluster = bench_options();
  cluster.transfer_precision = transfer;
  return std::make_shared<cluster_connection>(std::make_shared<runtime>(options), c.spec,
                                              task_name("worker", index), cluster);
}

}  // namespace actorflow::bench
