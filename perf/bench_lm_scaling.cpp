#include "perf/bench_lm_scaling.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "perf/bench_control.hpp"
#include "perf/bench_util.hpp"
#include "perf/cluster_sim.hpp"
#include "perf/ps_cluster.hpp"
#include "perf/svg_plot.hpp"
#include "schema/file_io.hpp"

namespace actorflow::bench {

namespace {

constexpr int workers = 4, port = 7000;
constexpr int warmup_steps = 3;              // per worker, untimed
constexpr int64_t words_per_step = 32 * 35;  // 32 streams x 35 time steps, both systems
constexpr double run_timeout_s = 900;

// The softmax's two forms and their runs: each global step is one worker's
// step (asynchronous training), so a run is about steps / 4 steps a worker.
struct softmax_form {
  bool full;
  const char* suffix;  // of the row keys
  double link_bps;     // every task's link, each way
  int global_steps;
};

// Sampled: a worker step moves the LSTM's weights and gradients (about 4 MB)
// and the rows it touches, some 5 MB; at 100 Mbit/s one ps task's link
// needs about 2 s for the 4 workers' steps, 4 ps tasks' links about what
// the 2 cores need (measured: 0.2 s of CPU a worker step). Full: TensorFlow
// concatenates the softmax's shards at the worker (10 MB in and 10 MB out a
// step), actorflow sends each ps task the hidden states (1 MB in, 1 MB
// out): a faster link, and fewer steps.
const softmax_form forms[] = {{false, "", 100e6, 40}, {true, "_full", 200e6, 24}};

struct lm_outcome {
  double words_per_s = NAN;
  std::string note;  // the CPU use, or why it failed
};

// The figure from every worker's timed steps: (first clock start, last
// step's end, words), as tf_lm_cluster.py's supervisor computes it.
struct timed_words {
  double start = INFINITY, end = -INFINITY, words = 0;
  void add(double t0, double t1, double w) {
    start = std::min(start, t0), end = std::max(end, t1), words += w;
  }
  double per_second() const { return end > start ? words / (end - start) : NAN; }
};

// actorflow-train's workers print "progress step=<global> t=<unix seconds>"
// after each of their steps: the clock starts at the warm-up's last.
std::optional<timed_words> actorflow_words(const sim_run_result& r) {
  static const std::regex progress(R"(progress step=\d+ t=([0-9.]+))");
  timed_words out;
  for (auto& t : r.tasks) {
    if (t.task.job != "worker") continue;
    std::vector<double> times;
    for (std::sregex_iterator it(t.output.begin(), t.output.end(), progress), end; it != end; ++it)
      times.push_back(std::stod((*it)[1]));
    if (times.size() <= warmup_steps) return std::nullopt;
    out.add(times[warmup_steps - 1], times.back(),
            double(times.size() - warmup_steps) * words_per_step);
  }
  return out;
}

// tf_lm_cluster.py's workers print {"steps": .., "words": .., "t0": .., "t1": ..}.
std::optional<timed_words> tensorflow_words(const sim_run_result& r) {
  static const std::regex result(
      R"(\{"steps": \d+, "words": (\d+), "t0": ([0-9.e+-]+), "t1": ([0-9.e+-]+))");
  timed_words out;
  for (auto& t : r.tasks) {
    if (t.task.job != "worker") continue;
    std::smatch m;
    if (!std::regex_search(t.output, m, result)) return std::nullopt;
    out.add(std::stod(m[2]), std::stod(m[3]), std::stod(m[1]));
  }
  return out;
}

std::vector<std::string> actorflow_task(const softmax_form& f) {
  std::vector<std::string> argv{ACTORFLOW_TRAIN_BINARY,
                                "--job",
                                "{job}",
                                "--task",
                                "{index}",
                                "--ps-hosts",
                                "{ps_hosts}",
                                "--worker-hosts",
                                "{worker_hosts}",
                                "--bind",
                                "{ip}",
                                "--model",
                                "lstm_lm",
                                "--threads",
                                "1",
                                "--max-steps",
                                std::to_string(f.global_steps),
                                "--progress-every",
                                "1",
                                "--max-valid-tokens",
                                "4000",  // the chief's last evaluation: untimed, kept short
                                "--out",
                                "{out}/{job}{index}"};
  if (f.full) argv.push_back("--full-softmax");
  return argv;
}

// The cluster as tf_lm_cluster.py's tasks take it: JSON of each job's addresses.
std::string cluster_json(const netns_cluster& sim) {
  auto quoted = [&](const std::string& job) {
    std::string hosts = sim.hosts(job, port), out;
    size_t start = 0;
    while (start <= hosts.size()) {
      size_t comma = std::min(hosts.find(',', start), hosts.size());
      out += (out.empty() ? "\"" : ", \"") + hosts.substr(start, comma - start) + "\"";
      start = comma + 1;
    }
    return "[" + out + "]";
  };
  return "{\"ps\": " + quoted("ps") + ", \"worker\": " + quoted("worker") + "}";
}

std::vector<std::string> tensorflow_task(const std::string& python, const softmax_form& f, int ps,
                                         const netns_cluster& sim) {
  std::vector<std::string> argv{python,           perf_dir() + "/tf_lm_cluster.py",
                                "--workers",      std::to_string(workers),
                                "--ps",           std::to_string(ps),
                                "--max-steps",    std::to_string(f.global_steps),
                                "--warmup",       std::to_string(warmup_steps),
                                "--no-eval",      "--role",
                                "{job}",          "--task",
                                "{index}",        "--cluster",
                                cluster_json(sim)};
  if (f.full) argv.push_back("--full-softmax");
  return argv;
}

// One run: `ps` ps tasks and 4 workers of one system on the emulated network.
lm_outcome run_lm(const softmax_form& f, int ps, const std::optional<std::string>& tf_python) {
  lm_outcome out;
  cluster_sim_options o;
  o.ps = ps, o.workers = workers, o.link_bps = f.link_bps;
  netns_cluster sim(o);
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("actorflow-lm-scaling-{}-{}", getpid(), ps);
  std::filesystem::create_directories(dir);
  auto argv = tf_python ? tensorflow_task(*tf_python, f, ps, sim) : actorflow_task(f);
  auto r = run_tasks(sim, argv, port, run_timeout_s, dir.string());
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (interrupted()) throw std::runtime_error("interrupted");  // no run after it
  if (r.status != 0) {
    out.note = "failed: " + r.why;
    return out;
  }
  auto words = tf_python ? tensorflow_words(r) : actorflow_words(r);
  if (!words) {
    out.note = "failed: a worker printed no timed steps: " + tail(r.of("worker0").output);
    return out;
  }
  out.words_per_s = words->per_second();
  double ps_cpu = 0, worker_cpu = 0;
  for (auto& t : r.tasks) (t.task.job == "ps" ? ps_cpu : worker_cpu) += t.cpu_seconds / r.seconds;
  out.note = fmt::format(
      "{} ps + {} workers at {}, asynchronous, {} softmax, {} global steps ({} untimed per "
      "worker); CPU over the run: ps tasks {:.2f} cores, workers {:.2f}",
      ps, workers, rate_text(f.link_bps), f.full ? "full" : "sampled", f.global_steps, warmup_steps,
      ps_cpu, worker_cpu);
  return out;
}

void add_outcome(const add_row_fn& add_row, const std::string& key, const lm_outcome& o,
                 const std::string& extra) {
  if (std::isnan(o.words_per_s)) {
    std::cerr << "  scaling: " << key << ": " << o.note << "\n";
    return;
  }
  add_row(key, o.words_per_s, "words/s", o.note + extra);
}

void write_figure(const std::vector<plot_panel>& panels, const std::string& path) {
  std::string note = fmt::format(
      "The LSTM language model (embedding 256, LSTM 256, 10,000 words) on Debian's fortunes,\n"
      "4 asynchronous workers (the paper's Figure 9: 32 to 256), the embedding and softmax\n"
      "split over the ps tasks, the LSTM's weights whole, each on one ps task.\n"
      "Each task a process in a network namespace of its own behind a link shaped by tc tbf\n"
      "(full duplex): sampled softmax {}, full softmax {}. This simulates a cluster of up to\n"
      "12 machines on the {} cores of one: each row's note in the JSON gives the CPU used.",
      rate_text(forms[0].link_bps), rate_text(forms[1].link_bps),
      std::thread::hardware_concurrency());
  write_file_atomically(path,
                        {svg_figure("actorflow: the language model's training rate against ps "
                                    "tasks, on an emulated network",
                                    panels, note)},
                        "[scaling] ");
  std::cerr << "  scaling: the language model's figure is in " << path << "\n";
}

}  // namespace

void add_lm_scaling_rows(const add_row_fn& add_row, const std::string& svg) {
  auto tf = tensorflow_python();
  if (!tf) std::cerr << "  scaling: TensorFlow not found ($ACTORFLOW_TF_PYTHON): no tf_lm rows\n";
  std::vector<plot_panel> panels;
  for (const softmax_form& f : forms) {
    plot_series ours{"actorflow", "#2471a3"}, theirs{"TensorFlow", "#c0392b"};
    for (int ps : {1, 2, 4, 8}) {
      auto o = run_lm(f, ps, std::nullopt);
      ours.points.emplace_back(ps, o.words_per_s);
      add_outcome(add_row, fmt::format("lm_ps_words_per_s{}_ps{}", f.suffix, ps), o, "");
      if (!tf) continue;
      auto t = run_lm(f, ps, tf);
      theirs.points.emplace_back(ps, t.words_per_s);
      add_outcome(add_row, fmt::format("tf_lm_ps_words_per_s{}_ps{}", f.suffix, ps), t,
                  fmt::format("; TensorFlow (perf/tf_lm_cluster.py's tasks); actorflow {:.2f}x",
                              o.words_per_s / t.words_per_s));
    }
    panels.push_back({f.full ? "full softmax" : "sampled softmax (512)",
                      "ps tasks",
                      "words/s",
                      true,
                      {ours, theirs}});
  }
  if (!svg.empty()) write_figure(panels, svg);
}

}  // namespace actorflow::bench
