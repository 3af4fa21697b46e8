// cluster-sim: runs a cluster's tasks on an emulated network (one network
// namespace per task, links shaped to a NIC's rate; perf/cluster_sim.hpp).
//
//   cluster-sim --tasks ps:2,worker:3 --link 1gbit [--ps-link 10gbit]
//       [--mtu 9000] [--port 7000] [--out DIR] [--timeout 600]
//       -- build/actorflow-train --job {job} --task {index} --bind {ip}
//          --ps-hosts {ps_hosts} --worker-hosts {worker_hosts} --out {out}/{job}{index}
//   cluster-sim --calibrate --link 1gbit     raw TCP between two namespaces
//
// In the command, {job} {index} {ip} {port} {ps_hosts} {worker_hosts} and
// {out} are filled in per task. The ps tasks start first, then the
// workers; the run ends when every worker has exited (the ps tasks are then
// stopped), when a task fails (a worker's nonzero exit, a ps task's exit:
// its log's tail is printed), at the timeout, or at SIGINT/SIGTERM. Each
// task's output goes to <out>/<task>.log; a summary line per task gives its
// exit status and CPU seconds. Every namespace, link and process is removed
// on every way out. Exit status: 0 when every worker exited 0; 1 when a
// task failed; 2 for bad flags; 3 where namespaces cannot be made (the
// message says why); 124 at the timeout; 130 when interrupted.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "perf/cluster_sim.hpp"

namespace {

using namespace actorflow::bench;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr int exit_failed = 1, exit_usage = 2, exit_no_namespaces = 3, exit_interrupted = 130;

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct flags {
  cluster_sim_options sim;
  int port = 7000;
  std::string out = "cluster-sim-out";
  double timeout_s = 600;
  bool calibrate = false;
  double calibrate_s = 3;
  std::vector<std::string> command;
};

// "ps:2,worker:3"
void parse_tasks(const std::string& text, cluster_sim_options& o) {
  o.ps = 0, o.workers = 0;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    auto colon = item.find(':');
    std::string job = item.substr(0, colon);
    int n = -1;
    try {
      if (colon != std::string::npos) n = std::stoi(item.substr(colon + 1));
    } catch (const std::exception&) {
    }
    if (n < 0 || (job != "ps" && job != "worker"))
      throw usage_error("--tasks '" + text + "': a list of ps:N and worker:N");
    (job == "ps" ? o.ps : o.workers) = n;
  }
}

flags parse(int argc, char** argv) {
  flags f;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw usage_error(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) {
    std::string flag = argv[i], v = value(i);
    try {
      size_t used = 0;
      double d = std::stod(v, &used);
      if (used == v.size() && d > 0) return d;
    } catch (const std::exception&) {
    }
    throw usage_error(flag + " '" + v + "': a positive number");
  };
  auto rate = [&](int& i) {
    std::string v = value(i);
    try {
      return parse_rate(v);
    } catch (const std::exception& e) {
      throw usage_error(e.what());
    }
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      f.command.assign(argv + i + 1, argv + argc);
      break;
    }
    if (a == "--tasks") {
      parse_tasks(value(i), f.sim);
    } else if (a == "--link") {
      f.sim.link_bps = rate(i);
    } else if (a == "--ps-link") {
      f.sim.ps_link_bps = rate(i);
    } else if (a == "--mtu") {
      f.sim.mtu = static_cast<int>(number(i));
    } else if (a == "--port") {
      f.port = static_cast<int>(number(i));
    } else if (a == "--out") {
      f.out = value(i);
    } else if (a == "--timeout") {
      f.timeout_s = number(i);
    } else if (a == "--calibrate") {
      f.calibrate = true;
    } else if (a == "--calibrate-seconds") {
      f.calibrate_s = number(i);
    } else {
      throw usage_error("unknown flag '" + a + "' (see the header of perf/cluster_sim_main.cpp)");
    }
  }
  if (!f.calibrate && f.command.empty()) throw usage_error("no command: give it after --");
  if (f.port < 1 || f.port > 65535) throw usage_error("--port: 1 to 65535");
  return f;
}

int run(const flags& f) {
  netns_cluster sim(f.sim);
  fs::create_directories(f.out);
  std::cerr << fmt::format("cluster-sim: {} ps tasks, {} workers, links {} (ps {}), MTU {}\n",
                           f.sim.ps, f.sim.workers, rate_text(f.sim.link_bps),
                           rate_text(f.sim.ps_link_bps > 0 ? f.sim.ps_link_bps : f.sim.link_bps),
                           f.sim.mtu);
  auto r = run_tasks(sim, f.command, f.port, f.timeout_s, fs::absolute(f.out).string());
  for (auto& t : r.tasks) {
    std::ofstream(f.out + "/" + t.task.name() + ".log") << t.output;
    std::cout << fmt::format("{} ip={} status={} cpu_s={:.2f}\n", t.task.name(), t.task.ip,
                             t.status < 0 ? std::string("stopped") : std::to_string(t.status),
                             t.cpu_seconds);
  }
  if (!r.why.empty()) std::cerr << "cluster-sim: " << r.why << "\n";
  return r.status;
}

// ---------------------------------------------------------- calibration

// The hidden modes the calibration runs in the namespaces: a TCP sink that
// counts what it receives, and a source that sends for `seconds`.
int tcp_sink(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s, 1) != 0) {
    std::perror("tcp sink");
    return 1;
  }
  std::cout << "listening" << std::endl;
  int c = ::accept(s, nullptr, nullptr);
  std::vector<char> buf(1 << 20);
  while (::read(c, buf.data(), buf.size()) > 0) {
  }
  return 0;
}

int tcp_source(const std::string& ip, int port, double seconds) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  for (int attempt = 0; ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0;
       ++attempt) {
    if (attempt == 100) {
      std::perror("tcp source");
      return 1;
    }
    ::close(s);
    s = ::socket(AF_INET, SOCK_STREAM, 0);
    std::this_thread::sleep_for(20ms);
  }
  std::vector<char> buf(1 << 20, 'x');
  uint64_t sent = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (
      (elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) <
      seconds) {
    ssize_t n = ::write(s, buf.data(), buf.size());
    if (n <= 0) return 1;
    sent += static_cast<uint64_t>(n);
  }
  ::shutdown(s, SHUT_WR);
  std::cout << fmt::format("tcp_bps={:.0f}\n", double(sent) * 8 / elapsed);
  return 0;
}

int calibrate(const flags& f, const char* self) {
  cluster_sim_options o = f.sim;
  o.ps = 1, o.workers = 1;
  netns_cluster sim(o);
  auto& sink = sim.start(sim.task("ps", 0), {self, "--tcp-sink", std::to_string(f.port)});
  if (!sink.wait_for("listening", 10s)) throw std::runtime_error("the TCP sink did not start");
  auto& source =
      sim.start(sim.task("worker", 0), {self, "--tcp-source", sim.task("ps", 0).ip,
                                        std::to_string(f.port), std::to_string(f.calibrate_s)});
  int status = source.wait_exit(std::chrono::seconds(static_cast<int>(f.calibrate_s) + 30));
  auto out = source.output();
  auto at = out.find("tcp_bps=");
  if (status != 0 || at == std::string::npos)
    throw std::runtime_error("the TCP source failed: " + out);
  double bps = std::stod(out.substr(at + 8));
  std::cout << fmt::format(
      "calibration: raw TCP between two namespaces {:.3f} Gbit/s at {} "
      "configured: {:.3f} of it\n",
      bps / 1e9, rate_text(o.link_bps), bps / o.link_bps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 3 && std::string(argv[1]) == "--tcp-sink") return tcp_sink(std::stoi(argv[2]));
    if (argc >= 5 && std::string(argv[1]) == "--tcp-source")
      return tcp_source(argv[2], std::stoi(argv[3]), std::stod(argv[4]));
    flags f = parse(argc, argv);
    if (auto why = namespaces_unavailable(); !why.empty()) {
      std::cerr << "cluster-sim: cannot make the simulated network: " << why << "\n";
      return exit_no_namespaces;
    }
    std::string self = fs::canonical("/proc/self/exe").string();
    return f.calibrate ? calibrate(f, self.c_str()) : run(f);
  } catch (const usage_error& e) {
    std::cerr << "cluster-sim: " << e.what() << "\n";
    return exit_usage;
  } catch (const std::exception& e) {
    std::cerr << "cluster-sim: " << e.what() << "\n";
    return interrupted() ? exit_interrupted : exit_failed;
  }
}
