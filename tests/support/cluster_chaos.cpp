#include "tests/support/cluster_chaos.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <regex>
#include <stdexcept>

#include "tests/support/child_process.hpp"

namespace actorflow::testing {

namespace {

// Wall-clock seconds: the workers stamp their progress lines with it.
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Uniform in [lo, hi] from the engine's top 53 bits: the same sequence on
// every standard library, unlike std::uniform_real_distribution.
double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * double(rng() >> 11) * 0x1.0p-53;
}

template <class... Args>
std::string format(const char* f, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

const std::regex checkpoint_line("checkpoint step=([0-9]+) saved in");
const std::regex recovery_line(
    "recovery: restored checkpoint step=([0-9]+) \\(global step was ([0-9]+): ([0-9]+) steps "
    "lost\\)");
const std::regex accuracy_line("test_acc=([0-9.]+)");
const std::regex perplexity_line("^valid_ppl=([0-9.]+) words_per_s=");

// One task of the cluster: its command line, kept for its restarts, and its
// current process.
struct task_slot {
  chaos_task task;
  std::vector<std::string> argv;
  std::unique_ptr<child_process> proc;
  size_t parsed = 0;  // bytes of the process's output already split into lines
  int status = -1;    // the process's exit status once it exited by itself
};

class chaos_run {
 public:
  explicit chaos_run(const chaos_options& o);
  ~chaos_run();
  chaos_result run();

 private:
  void start_cluster();
  bool start_ps_tasks();
  bool start(task_slot& t, double timeout);
  bool pump(double until, const std::function<bool()>& done = {});
  void read_lines(task_slot& t);
  void parse_lines(task_slot& t);
  void on_line(task_slot& t, const std::string& line, double at);
  void on_progress(int64_t step, double t);
  void on_chief_line(const std::string& line, double at);
  void chaos_loop();
  task_slot* pick_victim();
  void kill_and_restart(task_slot& victim);
  bool chief_exited() const { return !slots_[chief_].proc || slots_[chief_].status >= 0; }
  bool workers_exited() const;
  void stop_all();
  std::vector<std::string> command(const chaos_task& t) const;
  void finish_result();

  chaos_options o_;
  std::string dir_;
  std::vector<uint16_t> ps_ports_, worker_ports_;
  std::vector<task_slot> slots_;  // the ps tasks, then the workers
  size_t chief_ = 0;              // worker 0's slot
  std::mt19937_64 rng_;
  double started_ = 0, deadline_ = 0, first_step_at_ = -1, chief_exit_at_ = -1;
  // The newest progress line's step, not the highest ever: a restore that
  // went back (or a ps task that came back empty) sets the step back.
  int64_t last_step_ = 0;
  chaos_result r_;
};

std::atomic<int> runs{0};

chaos_run::chaos_run(const chaos_options& o) : o_(o), rng_(o.seed) {
  if (o.ps < 1 || o.workers < 1) throw std::invalid_argument("a chaos run needs tasks");
  if (access(o.train_binary.c_str(), X_OK) != 0)
    throw std::invalid_argument("no actorflow-train at '" + o.train_binary + "'");
  dir_ = (std::filesystem::temp_directory_path() /
          ("actorflow-chaos-" + std::to_string(getpid()) + "-" + std::to_string(runs++)))
             .string();
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  for (int i = 0; i < o.ps; ++i) slots_.push_back({{"ps", i}, {}, {}, 0, -1});
  chief_ = slots_.size();
  for (int i = 0; i < o.workers; ++i) slots_.push_back({{"worker", i}, {}, {}, 0, -1});
}

chaos_run::~chaos_run() {
  stop_all();
  if (!o_.keep_dir) std::filesystem::remove_all(dir_);
}

std::vector<std::string> chaos_run::command(const chaos_task& t) const {
  std::vector<std::string> argv{o_.train_binary,
                                "--job",
                                t.job,
                                "--task",
                                std::to_string(t.index),
                                "--ps-hosts",
                                loopback_hosts(ps_ports_),
                                "--worker-hosts",
                                loopback_hosts(worker_ports_),
                                "--threads",
                                std::to_string(o_.threads)};
  auto add = [&](const std::vector<std::string>& flags) {
    argv.insert(argv.end(), flags.begin(), flags.end());
  };
  if (t.job == "ps") {
    add(o_.ps_flags);
    return argv;
  }
  // A restarted chief writes into the same --out.
  add({"--out", dir_ + "/" + t.name(), "--progress-every", "1"});
  add(o_.worker_flags);
  if (t.index != 0) return argv;
  add(o_.chief_flags);
  if (o_.checkpoint_every > 0)
    add({"--checkpoint-dir", dir_ + "/checkpoints", "--checkpoint-every",
         std::to_string(o_.checkpoint_every)});
  return argv;
}

// Starts t's process (a fresh one); a ps task must say it serves within
// `timeout` s. False, with the reason in r_.failure, when it did not.
bool chaos_run::start(task_slot& t, double timeout) {
  t.proc = std::make_unique<child_process>(t.argv);
  t.parsed = 0;
  t.status = -1;
  r_.logs[t.task.name()] += format("--- started at %.3f s ---\n", unix_now() - started_);
  if (t.task.job != "ps") return true;
  bool up = pump(std::min(deadline_, unix_now() + timeout), [&] {
    return t.proc->output().find("serving on") != std::string::npos || t.status >= 0;
  });
  if (up && t.status < 0) return true;
  r_.failure = t.task.name() + " did not start serving: " + t.proc->output().substr(0, 400);
  return false;
}

// The ps tasks first, on fresh ports; all again on new ports when one found
// its port taken (the others' command lines name it).
bool chaos_run::start_ps_tasks() {
  for (int attempt = 0; attempt < 3; ++attempt) {
    ps_ports_.clear(), worker_ports_.clear();
    for (int i = 0; i < o_.ps; ++i) ps_ports_.push_back(free_port());
    for (int i = 0; i < o_.workers; ++i) worker_ports_.push_back(free_port());
    bool all = true;
    for (int i = 0; i < o_.ps && all; ++i) {
      auto& t = slots_[size_t(i)];
      t.argv = command(t.task);
      all = start(t, 30);
    }
    if (all) return true;
    bool port_taken = r_.failure.find("cannot listen") != std::string::npos;
    for (int i = 0; i < o_.ps; ++i) slots_[size_t(i)].proc.reset();
    if (!port_taken) return false;
    r_.failure.clear();
  }
  return false;
}

void chaos_run::start_cluster() {
  started_ = unix_now();
  deadline_ = started_ + o_.timeout_seconds;
  if (!start_ps_tasks()) return;
  for (size_t i = chief_; i < slots_.size(); ++i) {
    slots_[i].argv = command(slots_[i].task);
    start(slots_[i], 0);
  }
}

// Reads every task's output until `until` (unix seconds) or until done();
// false when the run's deadline came first.
bool chaos_run::pump(double until, const std::function<bool()>& done) {
  for (;;) {
    for (auto& t : slots_) read_lines(t);
    if (done && done()) return true;
    double now = unix_now();
    if (now >= deadline_) {
      r_.timed_out = true;
      if (r_.failure.empty())
        r_.failure = format("the run's timeout (%.0f s) came first", o_.timeout_seconds);
      return false;
    }
    if (now >= until) return true;
    usleep(20000);
  }
}

void chaos_run::read_lines(task_slot& t) {
  if (!t.proc) return;
  // A process this harness killed is reaped already and read by parse_lines.
  if (t.status < 0 && t.proc->pid() > 0 && t.proc->exited()) {
    t.status = t.proc->wait_exit(std::chrono::milliseconds(1000));
    if (&t == &slots_[chief_]) chief_exit_at_ = unix_now();
  }
  parse_lines(t);
}

void chaos_run::parse_lines(task_slot& t) {
  const std::string& out = t.proc->output();
  double at = unix_now();
  for (size_t nl; (nl = out.find('\n', t.parsed)) != std::string::npos; t.parsed = nl + 1)
    on_line(t, out.substr(t.parsed, nl - t.parsed), at);
}

void chaos_run::on_line(task_slot& t, const std::string& line, double at) {
  long long step = 0;
  double stamp = 0;
  if (std::sscanf(line.c_str(), "progress step=%lld t=%lf", &step, &stamp) == 2) {
    on_progress(step, stamp);
    return;  // kept out of the logs: one per step
  }
  if (std::sscanf(line.c_str(), "aggregated step=%lld t=%lf", &step, &stamp) == 2) {
    r_.aggregations.emplace_back(step, stamp);
    return;  // the same
  }
  r_.logs[t.task.name()] += line + "\n";
  if (line.find("error") != std::string::npos && r_.error_lines.size() < 100)
    r_.error_lines.push_back(format("%.1f s %s: ", at - started_, t.task.name().c_str()) + line);
  if (&t == &slots_[chief_]) on_chief_line(line, at);
}

// "Steps flow again" after a restart: a worker completed a step after the
// new process started. In synchronous training a worker's step completes
// only when the chief applied an aggregate, so that is a global step made
// with the task back.
void chaos_run::on_progress(int64_t step, double t) {
  if (first_step_at_ < 0) first_step_at_ = t;
  last_step_ = step;
  for (auto& k : r_.kills) {
    if (k.restarted_at < 0 || t < k.restarted_at) continue;
    if (k.gap < 0) k.gap = t - k.restarted_at, k.first_step_after = step;
    if (k.caught_up < 0 && step > k.step_before) k.caught_up = t - k.restarted_at;
  }
}

void chaos_run::on_chief_line(const std::string& line, double at) {
  std::smatch m;
  if (std::regex_search(line, m, checkpoint_line)) {
    r_.checkpoints.emplace_back(at, std::stoll(m[1]));
  } else if (std::regex_search(line, m, recovery_line)) {
    chaos_recovery rec{at, std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), -1};
    // The kill it recovers from: the last one before the line.
    for (auto& k : r_.kills)
      if (k.killed_at <= at) rec.checkpoint_before_kill = k.checkpoint_before;
    r_.recoveries.push_back(rec);
  } else if (line.rfind("test_acc=", 0) == 0 && std::regex_search(line, m, accuracy_line)) {
    // The final line only: the epochs' report lines hold a test_acc= too.
    r_.test_acc = std::stod(m[1]);
  } else if (std::regex_search(line, m, perplexity_line)) {
    // The final line only: the epochs' lines hold a valid_ppl= after other text.
    r_.valid_ppl = std::stod(m[1]);
  }
}

task_slot* chaos_run::pick_victim() {
  std::vector<task_slot*> running;
  for (auto& t : slots_) {
    bool allowed = o_.victims.empty() ||
                   std::any_of(o_.victims.begin(), o_.victims.end(), [&](const chaos_task& v) {
                     return v.job == t.task.job && v.index == t.task.index;
                   });
    if (allowed && t.proc && t.status < 0) running.push_back(&t);
  }
  if (running.empty()) return nullptr;
  return running[size_t(rng_() % running.size())];
}

void chaos_run::kill_and_restart(task_slot& victim) {
  read_lines(victim);  // what it printed before the kill
  chaos_kill k;
  k.task = victim.task;
  k.step_before = last_step_;
  if (!r_.checkpoints.empty()) k.checkpoint_before = r_.checkpoints.back().second;
  k.killed_at = unix_now();
  victim.proc->kill_now();
  parse_lines(victim);  // what was still in the pipe
  victim.proc.reset();
  r_.kills.push_back(k);
  if (!o_.restart) return;
  double delay = uniform(rng_, o_.restart_min, o_.restart_max);
  if (!pump(k.killed_at + delay)) return;
  // A ps task's port may still be held for a moment: a few tries.
  for (int attempt = 0; attempt < 5; ++attempt) {
    double at = unix_now();
    if (start(victim, 30)) {
      r_.kills.back().restarted_at = at;
      r_.kills.back().restart_error.clear();
      r_.failure.clear();
      return;
    }
    r_.kills.back().restart_error = r_.failure;
    victim.proc.reset();
    if (r_.timed_out || !pump(unix_now() + 1)) return;
  }
}

// Kills from the first completed step for chaos_seconds, one at a time;
// stops early when the chief finished (nothing left to disturb).
void chaos_run::chaos_loop() {
  if (o_.chaos_seconds <= 0) return;
  const double end = first_step_at_ + o_.chaos_seconds;
  double next = first_step_at_ + uniform(rng_, o_.kill_every_min, o_.kill_every_max);
  while (next <= end) {
    if (!pump(next, [&] { return chief_exited(); }) || chief_exited()) return;
    task_slot* victim = pick_victim();
    if (!victim) return;
    kill_and_restart(*victim);
    if (r_.timed_out || !r_.kills.back().restart_error.empty()) return;
    // From the kill, but never before its restart.
    next = std::max(r_.kills.back().killed_at + uniform(rng_, o_.kill_every_min, o_.kill_every_max),
                    unix_now() + 1);
  }
}

bool chaos_run::workers_exited() const {
  for (size_t i = chief_; i < slots_.size(); ++i)
    if (slots_[i].proc && slots_[i].status < 0) return false;
  return true;
}

void chaos_run::stop_all() {
  for (auto it = slots_.rbegin(); it != slots_.rend(); ++it)
    if (it->proc) {
      read_lines(*it);
      it->proc->stop();
      read_lines(*it);
    }
}

chaos_result chaos_run::run() {
  try {
    start_cluster();
    if (r_.failure.empty() &&
        pump(deadline_, [&] { return first_step_at_ >= 0 || chief_exited(); })) {
      if (first_step_at_ < 0) first_step_at_ = unix_now();
      chaos_loop();
      // Training finishes: the chief first, then the others (bounded).
      if (pump(deadline_, [&] { return chief_exited(); }))
        pump(std::min(deadline_, unix_now() + 60), [&] { return workers_exited(); });
    }
  } catch (const std::exception& e) {
    r_.failure = std::string("the harness failed: ") + e.what();
  }
  // Before the ps tasks are stopped: one that exited by itself crashed.
  for (auto& t : slots_) r_.exit_status[t.task.name()] = t.proc ? t.status : -1;
  stop_all();
  finish_result();
  return std::move(r_);
}

// Times on the chaos clock (from the first completed step).
void chaos_run::finish_result() {
  double t0 = first_step_at_ >= 0 ? first_step_at_ : started_;
  r_.chaos_started = t0 - started_;
  r_.wall_seconds = (chief_exit_at_ >= 0 ? chief_exit_at_ : unix_now()) - started_;
  r_.last_step = last_step_;
  for (auto& k : r_.kills) {
    k.killed_at -= t0;
    if (k.restarted_at >= 0) k.restarted_at -= t0;
  }
  for (auto& rec : r_.recoveries) rec.at -= t0;
  for (auto& c : r_.checkpoints) c.first -= t0;
}

}  // namespace

int64_t chaos_result::steps_lost() const {
  int64_t n = 0;
  for (auto& r : recoveries) n += r.lost;
  return n;
}

int64_t chaos_result::lost_bound() const {
  int64_t n = 0;
  for (auto& r : recoveries) n += r.bound();
  return n;
}

double chaos_result::max_gap() const {
  double g = 0;
  for (auto& k : kills) {
    if (k.gap < 0) return -1;
    g = std::max(g, k.gap);
  }
  return g;
}

std::string chaos_result::table() const {
  std::string s =
      "kill  task     killed_s  restarted_s  step_before  ckpt_before  first_after  "
      "gap_s  caught_up_s  taken_back\n";
  for (size_t i = 0; i < kills.size(); ++i) {
    auto& k = kills[i];
    s += format("%4zu  %-7s  %8.1f  %11.1f  %11lld  %11lld  %11lld  %5.1f  %11.1f  %10lld", i + 1,
                k.task.name().c_str(), k.killed_at, k.restarted_at, (long long)k.step_before,
                (long long)k.checkpoint_before, (long long)k.first_step_after, k.gap, k.caught_up,
                (long long)k.taken_back());
    s += k.restart_error.empty() ? "\n" : "  restart failed: " + k.restart_error + "\n";
  }
  for (auto& r : recoveries)
    s += format(
        "recovery at %.1f s: restored step %lld, global step was %lld: %lld lost (bound "
        "%lld: the checkpoint before the kill was %lld)\n",
        r.at, (long long)r.restored, (long long)r.global_step, (long long)r.lost,
        (long long)r.bound(), (long long)r.checkpoint_before_kill);
  s += format(
      "%zu kills, max gap %.1f s, %zu checkpoints, %zu recoveries, steps lost %lld (bound "
      "%lld), last step %lld, test_acc %.4f, valid_ppl %.2f, wall %.1f s (chaos from %.1f s)%s\n",
      kills.size(), max_gap(), checkpoints.size(), recoveries.size(), (long long)steps_lost(),
      (long long)lost_bound(), (long long)last_step, test_acc, valid_ppl, wall_seconds,
      chaos_started, timed_out ? ", timed out" : "");
  for (auto& [task, status] : exit_status) s += format("%s exit %d; ", task.c_str(), status);
  if (!failure.empty()) s += "\nfailure: " + failure;
  return s + "\n";
}

std::string chaos_result::problems() const {
  // A task killed and, as asked (chaos_options::restart false), not started
  // again has no exit status.
  auto killed_for_good = [&](const std::string& task) {
    return std::any_of(kills.begin(), kills.end(), [&](const chaos_kill& k) {
      return k.task.name() == task && k.restarted_at < 0 && k.restart_error.empty();
    });
  };
  std::string s = failure;
  auto add = [&s](const std::string& part) { s += (s.empty() ? "" : "; ") + part; };
  for (auto& [task, status] : exit_status)
    if (status != (task.rfind("worker", 0) == 0 ? 0 : -1) && !killed_for_good(task))
      add(task + " exit " + std::to_string(status));
  for (size_t i = 0; i < error_lines.size() && i < 3; ++i) add(error_lines[i]);
  return s;
}

chaos_result run_chaos(const chaos_options& options) { return chaos_run(options).run(); }

}  // namespace actorflow::testing
