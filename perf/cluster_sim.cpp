#include "perf/cluster_sim.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace actorflow::bench {

namespace {

using namespace std::chrono_literals;

constexpr const char* name_prefix = "afsim-";

// ------------------------------------------------------------- signals

std::atomic<bool> interrupt_seen{false};
std::atomic<int> live_clusters{0};
struct sigaction saved_actions[3];
constexpr int caught_signals[3] = {SIGINT, SIGTERM, SIGHUP};

void on_signal(int) { interrupt_seen = true; }

// While a cluster exists, the signals that would end the program set a flag
// instead: the waits see it and unwind, and the destructors clean up.
void catch_signals() {
  if (live_clusters++ > 0) return;
  struct sigaction act {};
  act.sa_handler = on_signal;
  sigemptyset(&act.sa_mask);
  for (int i = 0; i < 3; ++i) ::sigaction(caught_signals[i], &act, &saved_actions[i]);
}

void release_signals() {
  if (--live_clusters > 0) return;
  for (int i = 0; i < 3; ++i) ::sigaction(caught_signals[i], &saved_actions[i], nullptr);
}

// --------------------------------------------------------------- helpers

bool pid_alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// The owner's pid in "afsim-<pid>-...", or -1.
pid_t owner_of(const std::string& ns) {
  if (ns.rfind(name_prefix, 0) != 0) return -1;
  size_t start = std::string(name_prefix).size(), end = ns.find('-', start);
  if (end == std::string::npos || end == start) return -1;
  try {
    return static_cast<pid_t>(std::stol(ns.substr(start, end - start)));
  } catch (const std::exception&) {
    return -1;
  }
}

// Kills every process in namespace `ns`, then deletes it; best effort
// (a cleanup reports nothing it cannot do).
void remove_namespace(const std::string& ns) {
  for (int round = 0; round < 3; ++round) {
    std::string pids;
    try {
      pids = run_command({"ip", "netns", "pids", ns}, 5s);
    } catch (const std::exception&) {
      break;
    }
    std::istringstream in(pids);
    bool any = false;
    for (long pid; in >> pid;) any = ::kill(static_cast<pid_t>(pid), SIGKILL) == 0 || any;
    if (!any) break;
    std::this_thread::sleep_for(50ms);
  }
  try {
    run_command({"ip", "netns", "del", ns}, 10s);
  } catch (const std::exception&) {
    // Gone already, or held by a process that just exited: nothing to do.
  }
}

// tbf's bucket: at least what the rate sends in 4 ms (the kernel refills it
// at timer ticks, and a smaller one caps the rate below what was asked) and
// a few jumbo frames.
std::string tbf_burst(double bps) {
  double bytes = std::max(bps / 8 * 0.004, 64.0 * 1024);
  return fmt::format("{}b", static_cast<uint64_t>(bytes));
}

// tbf's queue: what the rate sends in 50 ms, and at least 8 MiB, a
// deep-buffered datacenter switch port's share of its buffer. With 625 KB
// (50 ms at 100 Mbit/s) or 4 MiB, the 16 flows into each of 8 dense workers
// lost so many packets that TCP's timeouts left the links idle: the step
// took 1.4 times the line rate; with 8 MiB, 1.05 times.
std::string tbf_limit(double bps) {
  double bytes = std::max(bps / 8 * 0.050, 8.0 * 1024 * 1024);
  return fmt::format("{}b", static_cast<uint64_t>(bytes));
}

void shape(const std::string& ns, const std::string& dev, double bps) {
  run_command({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate_text(bps),
               "burst", tbf_burst(bps), "limit", tbf_limit(bps)});
}

}  // namespace

std::string tool_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = ::getenv("PATH") ? ::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  throw std::runtime_error("'" + name + "' not found (in $PATH, /usr/sbin, /sbin)");
}

std::string run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  auto resolved = argv;
  resolved[0] = tool_path(argv[0]);
  testing::child_process p(resolved);
  int status = p.wait_exit(timeout);
  std::string text = p.output();
  std::string command;
  for (auto& a : argv) command += (command.empty() ? "" : " ") + a;
  if (status == -1) {
    p.kill_now();
    throw std::runtime_error("'" + command + "' did not finish within " +
                             std::to_string(timeout.count()) + " ms");
  }
  if (status != 0)
    throw std::runtime_error("'" + command + "' failed (status " + std::to_string(status) +
                             "): " + text);
  return text;
}

std::string namespaces_unavailable() {
  if (::geteuid() != 0) return "network namespaces need root (CAP_NET_ADMIN); run as root";
  try {
    run_command({"ip", "-V"}, 5s);
    run_command({"tc", "-V"}, 5s);
  } catch (const std::exception& e) {
    return std::string("iproute2 (ip, tc) is missing: apt-get install iproute2 (") + e.what() + ")";
  }
  // Make one namespace and a shaped veth in it: the kernel may refuse either.
  std::string probe = fmt::format("{}{}-probe", name_prefix, ::getpid());
  try {
    run_command({"ip", "netns", "add", probe});
    run_command({"ip", "-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name",
                 "probe1"});
    shape(probe, "probe0", 1e9);
  } catch (const std::exception& e) {
    remove_namespace(probe);
    return std::string("this machine does not allow network namespaces with shaped links: ") +
           e.what();
  }
  remove_namespace(probe);
  return "";
}

double parse_rate(const std::string& rate) {
  static const std::pair<const char*, double> units[] = {
      {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}};
  for (auto [unit, scale] : units) {
    size_t at = rate.size() >= std::strlen(unit) ? rate.size() - std::strlen(unit) : 0;
    if (rate.size() <= std::strlen(unit) || rate.compare(at, std::string::npos, unit) != 0)
      continue;
    try {
      size_t used = 0;
      double v = std::stod(rate.substr(0, at), &used);
      if (used == at && v > 0 && std::isfinite(v)) return v * scale;
    } catch (const std::exception&) {
    }
    break;
  }
  throw std::runtime_error("'" + rate +
                           "' is not a link rate: a positive number and gbit, mbit or kbit "
                           "(10gbit, 200mbit)");
}

std::string rate_text(double bps) {
  if (bps >= 1e9 && std::fmod(bps, 1e7) == 0) return fmt::format("{}gbit", bps / 1e9);
  if (bps >= 1e6 && std::fmod(bps, 1e4) == 0) return fmt::format("{}mbit", bps / 1e6);
  return fmt::format("{}kbit", std::max(1.0, std::round(bps / 1e3)));
}

bool interrupted() { return interrupt_seen.load(); }

std::vector<std::string> list_namespaces() {
  std::vector<std::string> out;
  std::istringstream in(run_command({"ip", "netns", "list"}, 5s));
  for (std::string line; std::getline(in, line);) {
    auto name = line.substr(0, line.find(' '));
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

std::vector<std::string> remove_stale_namespaces() {
  std::vector<std::string> removed;
  for (auto& ns : list_namespaces()) {
    pid_t owner = owner_of(ns);
    if (owner > 0 && !pid_alive(owner)) {
      remove_namespace(ns);
      removed.push_back(ns);
    }
  }
  return removed;
}

netns_cluster::netns_cluster(const cluster_sim_options& o)
    : prefix_(fmt::format("{}{}-{}-", name_prefix, ::getpid(), [] {
        static std::atomic<int> serial{0};
        return serial++;
      }())) {
  if (o.ps < 0 || o.workers < 1 || o.ps + o.workers > 250)
    throw std::runtime_error(fmt::format(
        "a simulated cluster of {} ps tasks and {} workers: 1 to 250 tasks, 1 worker at least",
        o.ps, o.workers));
  if (o.mtu < 1280 || o.mtu > 65000)
    throw std::runtime_error(fmt::format("MTU {}: 1280 to 65000", o.mtu));
  // A pipe per task's output, and the commands that set the network up.
  struct rlimit files {};
  auto needed = static_cast<rlim_t>(64 + 4 * (o.ps + o.workers));
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < needed)
    throw std::runtime_error(
        fmt::format("{} tasks need about {} file descriptors; this process may open {} (ulimit -n)",
                    o.ps + o.workers, needed, files.rlim_cur));
  catch_signals();
  try {
    remove_stale_namespaces();
    std::string bridge = prefix_ + "br";
    run_command({"ip", "netns", "add", bridge});
    made_.push_back(bridge);
    run_command({"ip", "-n", bridge, "link", "set", "lo", "up"});
    run_command({"ip", "-n", bridge, "link", "add", "name", "br0", "type", "bridge"});
    run_command({"ip", "-n", bridge, "link", "set", "br0", "mtu", std::to_string(o.mtu), "up"});
    int n = 0;
    for (auto [job, count] : {std::pair{"ps", o.ps}, std::pair{"worker", o.workers}})
      for (int i = 0; i < count; ++i, ++n) {
        sim_task t;
        t.job = job, t.index = i;
        t.netns = prefix_ + t.name();
        t.ip = fmt::format("10.233.{}.{}", n / 250, n % 250 + 1);
        t.link_bps = (t.job == "ps" && o.ps_link_bps > 0) ? o.ps_link_bps : o.link_bps;
        std::string port = fmt::format("p{}", n), mtu = std::to_string(o.mtu);
        run_command({"ip", "netns", "add", t.netns});
        made_.push_back(t.netns);
        run_command({"ip", "-n", t.netns, "link", "set", "lo", "up"});
        run_command({"ip", "-n", t.netns, "link", "add", "name", "eth0", "type", "veth", "peer",
                     "name", port, "netns", bridge});
        run_command({"ip", "-n", t.netns, "addr", "add", t.ip + "/16", "dev", "eth0"});
        run_command({"ip", "-n", t.netns, "link", "set", "eth0", "mtu", mtu, "up"});
        run_command({"ip", "-n", bridge, "link", "set", port, "master", "br0", "mtu", mtu, "up"});
        shape(t.netns, "eth0", t.link_bps);  // what the task sends
        shape(bridge, port, t.link_bps);     // what it receives
        tasks_.push_back(t);
      }
  } catch (...) {
    remove();
    release_signals();
    throw;
  }
}

netns_cluster::~netns_cluster() {
  remove();
  release_signals();
}

const sim_task& netns_cluster::task(const std::string& job, int index) const {
  for (auto& t : tasks_)
    if (t.job == job && t.index == index) return t;
  throw std::runtime_error(fmt::format("the simulated cluster has no task {}{}", job, index));
}

std::string netns_cluster::hosts(const std::string& job, int port) const {
  std::string out;
  for (auto& t : tasks_)
    if (t.job == job) out += (out.empty() ? "" : ",") + t.ip + ":" + std::to_string(port);
  return out;
}

testing::child_process& netns_cluster::start(const sim_task& t,
                                             const std::vector<std::string>& argv) {
  std::vector<std::string> full{tool_path("ip"), "netns", "exec", t.netns};
  full.insert(full.end(), argv.begin(), argv.end());
  processes_.push_back(std::make_unique<testing::child_process>(full));
  return *processes_.back();
}

double process_cpu_seconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  // After the command's name: state (field 3) ... utime (14), stime (15).
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i)
    if (i >= 14) ticks += std::stod(f);
  return ticks / double(::sysconf(_SC_CLK_TCK));
}

const sim_task_result& sim_run_result::of(const std::string& name) const {
  for (auto& t : tasks)
    if (t.task.name() == name) return t;
  throw std::runtime_error("the run has no task " + name);
}

namespace {

std::string fill_placeholders(std::string s, const std::map<std::string, std::string>& values) {
  for (auto& [key, v] : values)
    for (size_t at; (at = s.find(key)) != std::string::npos;) s.replace(at, key.size(), v);
  return s;
}

std::string output_tail(const std::string& text, size_t n = 2000) {
  return text.size() > n ? "..." + text.substr(text.size() - n) : text;
}

}  // namespace

sim_run_result run_tasks(netns_cluster& sim, const std::vector<std::string>& command, int port,
                         double timeout_s, const std::string& out) {
  if (command.empty()) throw std::runtime_error("run_tasks: no command");
  auto start = std::chrono::steady_clock::now();
  sim_run_result r;
  std::vector<testing::child_process*> procs;
  for (auto& t : sim.tasks()) {
    std::map<std::string, std::string> values{{"{job}", t.job},
                                              {"{index}", std::to_string(t.index)},
                                              {"{ip}", t.ip},
                                              {"{port}", std::to_string(port)},
                                              {"{ps_hosts}", sim.hosts("ps", port)},
                                              {"{worker_hosts}", sim.hosts("worker", port)},
                                              {"{out}", out}};
    std::vector<std::string> argv;
    for (auto& a : command) argv.push_back(fill_placeholders(a, values));
    argv[0] = tool_path(argv[0]);
    procs.push_back(&sim.start(t, argv));
    r.tasks.push_back({t});
  }
  auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
  for (;;) {
    bool workers_running = false;
    for (size_t i = 0; i < procs.size(); ++i) {
      auto& t = r.tasks[i];
      if (t.status >= 0) continue;
      procs[i]->output();  // keep the pipe drained
      double cpu = process_cpu_seconds(procs[i]->pid());
      if (cpu >= 0) t.cpu_seconds = cpu;
      t.status = procs[i]->wait_exit(0ms);
      if (t.status < 0) {
        workers_running = workers_running || t.task.job == "worker";
        continue;
      }
      if (t.task.job == "ps" || t.status != 0) {
        r.why = fmt::format("{} exited with status {}; the end of its output:\n{}", t.task.name(),
                            t.status, output_tail(procs[i]->output()));
        r.status = 1;
      }
    }
    if (r.status != 0 || !workers_running) break;
    if (interrupted()) {
      r.why = "interrupted", r.status = 130;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      r.why = fmt::format("the timeout ({} s) came first", timeout_s), r.status = 124;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    if (r.tasks[i].status < 0) {
      double cpu = process_cpu_seconds(procs[i]->pid());
      if (cpu >= 0) r.tasks[i].cpu_seconds = cpu;
      procs[i]->stop(1s);
    }
    r.tasks[i].output = procs[i]->output();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void netns_cluster::remove() {
  // The processes first, each with a moment for a clean exit, then anything
  // left in a namespace (a process a task started), then the namespaces.
  for (auto it = processes_.rbegin(); it != processes_.rend(); ++it) (*it)->stop(1s);
  processes_.clear();
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) remove_namespace(*it);
  made_.clear();
  tasks_.clear();
}

}  // namespace actorflow::bench
