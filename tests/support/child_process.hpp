// Child processes and free ports, for the cluster tests and benchmarks, which
// start actorflow-node and actorflow-train tasks on 127.0.0.1.
// A child's output goes to a pipe; every wait is bounded; the destructor
// stops the child's process group (SIGTERM, then SIGKILL) and reaps the
// child. The child also gets SIGKILL if the bench process dies first
// (PR_SET_PDEATHSIG), so an interrupted run leaves no task behind.
#pragma once
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorflow::testing {

class child_process {
 public:
  explicit child_process(const std::vector<std::string>& argv) {
    // Everything the child needs is made before fork: after it, in a
    // process with threads, only async-signal-safe calls are allowed.
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t parent = getpid();
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) {
      close(fds[0]);
      close(fds[1]);
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
      setpgid(0, 0);  // its own process group: stop() reaches what it starts
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      execv(args[0], args.data());
      _exit(127);
    }
    setpgid(pid_, pid_);  // as the child does: whichever runs first
    close(fds[1]);
    out_ = fds[0];
    fcntl(out_, F_SETFL, O_NONBLOCK);
    fcntl(out_, F_SETFD, FD_CLOEXEC);
  }
  ~child_process() {
    stop();
    if (out_ >= 0) close(out_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// Reads output until it contains `text`; false on timeout or exit.
  bool wait_for(const std::string& text, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(text) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(static_cast<int>(left.count()))) return false;
    }
    return true;
  }
  /// Whether the child has exited (it stays unreaped until stop()).
  bool exited() const {
    if (pid_ <= 0) return true;
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == pid_;
  }
  /// Waits up to `timeout` for the child to exit and reaps it: its exit
  /// status (128 + signal when killed), or -1 when it is still running.
  int wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        output();
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      if (!read_some(20)) usleep(5000);
    }
    return -1;
  }
  /// The child's process id while it runs (-1 once reaped).
  pid_t pid() const { return pid_; }
  /// Sends `sig` to the child alone.
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  /// kill -9 of its process group, and reaped.
  void kill_now() { stop(std::chrono::milliseconds(0)); }
  /// SIGTERM to its process group, up to `grace` for a clean exit, then
  /// SIGKILL to the group (the child, if it runs on, and anything it started);
  /// always reaped. The child is reaped last, so that its id, which names the
  /// group, cannot be reused meanwhile.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(2)) {
    if (pid_ <= 0) return;
    if (grace.count() > 0 && ::kill(-pid_, SIGTERM) != 0) ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + grace;
    while (!exited() && std::chrono::steady_clock::now() < deadline)
      if (!read_some(20)) usleep(5000);  // EOF or quiet
    if (::kill(-pid_, SIGKILL) != 0) ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  const std::string& output() {
    while (read_some(0)) {
    }
    return output_;
  }

 private:
  bool read_some(int timeout_ms) {
    if (out_ < 0) return false;
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    ssize_t n = read(out_, buf, sizeof buf);
    if (n <= 0) return false;
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string output_;
};

// Whether a TCP listener could bind 127.0.0.1:port just now.
inline bool port_is_free(uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  bool free = bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(s);
  return free;
}

// The first port the kernel hands to outgoing connections (Linux's
// ip_local_port_range; 32768 when it cannot be read).
inline int first_ephemeral_port() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return range >> low && low > 0 ? low : 32768;
}

/// A TCP port on 127.0.0.1 that was free a moment ago, for a server started
/// next. It lies below the kernel's range for outgoing connections, so that
/// no client's connection (the caller's own among them) can take it before
/// the server binds it, as a port the kernel picked could be; the random
/// pick keeps processes that look for ports at once apart.
inline uint16_t free_port() {
  static std::mt19937 pick(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  int high = first_ephemeral_port();
  int low = std::max(1024, high - 12000);
  for (int attempt = 0; attempt < 500 && high > low; ++attempt) {
    auto port =
        static_cast<uint16_t>(low + static_cast<int>(pick() % static_cast<unsigned>(high - low)));
    if (port_is_free(port)) return port;
  }
  throw std::runtime_error("no free port on 127.0.0.1 below " + std::to_string(high));
}

/// "127.0.0.1:p1,127.0.0.1:p2": a cluster's --ps-hosts or --worker-hosts.
inline std::string loopback_hosts(const std::vector<uint16_t>& ports) {
  std::string s;
  for (auto p : ports) {
    if (!s.empty()) s += ',';
    s += "127.0.0.1:" + std::to_string(p);
  }
  return s;
}

}  // namespace actorflow::testing
