#include "perf/reference_launch.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>

extern char** environ;

namespace actorflow::bench {

namespace {

std::mutex& environment_lock() {
  static std::mutex lock;
  return lock;
}

std::optional<std::vector<std::string>>& captured() {
  static std::optional<std::vector<std::string>> environment;
  return environment;
}

}  // namespace

void capture_caller_environment() {
  std::lock_guard<std::mutex> guard(environment_lock());
  if (captured()) return;
  std::vector<std::string> entries;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) entries.emplace_back(*e);
  captured() = std::move(entries);
}

const std::vector<std::string>& caller_environment() {
  capture_caller_environment();
  return *captured();
}

const std::vector<std::string>& bench_environment() {
  // oneDNN runs on OpenMP (one thread per caller, devices/cpu/gemm_library.cpp):
  // should any OpenMP thread idle, it must not spin while the session runs.
  // Debian's libdnnl uses GNU libgomp, which reads OMP_WAIT_POLICY once, when
  // it is loaded, before main: this setting reaches an OpenMP runtime that
  // reads it later (LLVM's libomp reads it at its first parallel region),
  // not libgomp. Set OMP_WAIT_POLICY before starting the bench to change
  // libgomp's; the references then see it too, as the caller's.
  static const std::vector<std::string> entries{"OMP_WAIT_POLICY=passive"};
  return entries;
}

void set_bench_environment() {
  capture_caller_environment();
  for (const auto& entry : bench_environment()) {
    auto eq = entry.find('=');
    setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 0);
  }
}

std::optional<child_output> run_child(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto& environment = caller_environment();
  std::vector<char*> envp;
  for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  // posix_spawnp looks argv[0] up on this process's PATH, which the bench
  // does not change: the caller's.
  int failed = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (failed != 0) {
    close(out[0]);
    return std::nullopt;
  }
  child_output result;
  char buf[4096];
  for (;;) {
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n > 0) {
      result.out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return std::nullopt;
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::optional<std::string> run_child_output(const std::vector<std::string>& argv) {
  auto r = run_child(argv);
  if (!r || r->exit_status != 0) return std::nullopt;
  return std::move(r->out);
}

}  // namespace actorflow::bench
