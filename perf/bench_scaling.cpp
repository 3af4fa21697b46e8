#include "perf/bench_scaling.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "perf/bench_control.hpp"
#include "perf/bench_lm_scaling.hpp"
#include "perf/bench_util.hpp"
#include "perf/cluster_sim.hpp"
#include "perf/svg_plot.hpp"
#include "schema/file_io.hpp"

namespace actorflow::bench {

namespace {

constexpr int ps_tasks = 16, port = 7000;

// The links: the scalar model's steps are latency, any rate does; the dense
// and sparse rates are low enough that on 2 cores the kernel moves every
// task's traffic through the veths and the bridge with cores to spare.
constexpr double scalar_link_bps = 1e9;
constexpr double dense_100mb_link_bps = 100e6;
constexpr double dense_1gb_link_bps = 1e9;
constexpr double sparse_link_bps = 100e6;

struct experiment {
  std::string model;  // scalar, dense, sparse
  /// The task's program: actorflow-scaling-task, or Python and tf_sync_step.py.
  std::vector<std::string> program{ACTORFLOW_SCALING_TASK_BINARY};
  double model_mb = 0;
  int workers = 1, ps = ps_tasks;
  double link_bps = 1e9;
  int steps = 20, warmup = 3;
  double timeout_s = 600;
};

struct outcome {
  double step_ms = NAN;
  std::string note;  // the CPU use, or why it failed
};

// MB a machine can still give (MemAvailable).
double available_mb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb / 1e3;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

// The memory an experiment needs, roughly: the ps tasks hold the model and,
// a dense model's, its accumulators and every worker's gradient as it arrives;
// a dense worker holds what it fetched, its gradient and the messages'
// copies of both (measured: 4 dense 1 GB workers were killed for memory on
// a machine of 24 GB); every process some 60 MB of its own.
double needed_mb(const experiment& e) {
  bool dense = e.model == "dense";
  double ps = (dense ? 2 + e.workers : 1) * e.model_mb;  // a sparse accumulator holds rows
  double per_worker = dense ? 5 * e.model_mb : 1;
  return ps + e.workers * per_worker + (e.ps + e.workers) * 60;
}

outcome run_experiment(const experiment& e) {
  outcome out;
  double need = needed_mb(e), have = available_mb();
  if (need > 0.8 * have) {
    out.note = fmt::format("skipped: needs about {:.0f} MB, the machine has {:.0f} MB available",
                           need, have);
    return out;
  }
  cluster_sim_options o;
  o.ps = e.ps, o.workers = e.workers, o.link_bps = e.link_bps;
  netns_cluster sim(o);
  std::vector<std::string> argv = e.program;
  for (auto a : {"--job", "{job}", "--task", "{index}", "--ps-hosts", "{ps_hosts}",
                 "--worker-hosts", "{worker_hosts}"})
    argv.push_back(a);
  // actorflow binds 127.0.0.1 unless told; TensorFlow binds every address.
  if (e.program.size() == 1) argv.insert(argv.end(), {"--bind", "{ip}"});
  argv.insert(argv.end(),
              {"--model", e.model, "--model-mb", fmt::format("{}", e.model_mb), "--steps",
               std::to_string(e.steps), "--warmup", std::to_string(e.warmup)});
  auto r = run_tasks(sim, argv, port, e.timeout_s);
  if (interrupted()) throw std::runtime_error("interrupted");  // no experiment after it
  if (r.status != 0) {
    out.note = "failed: " + r.why;
    return out;
  }
  std::smatch m;
  const std::string& chief = r.of("worker0").output;
  if (!std::regex_search(chief, m, std::regex("step_ms_median=([0-9.]+)"))) {
    out.note = "failed: no step_ms_median in the chief's output: " + chief;
    return out;
  }
  out.step_ms = std::stod(m[1]);
  double ps_cpu = 0, worker_cpu = 0, ps_max = 0, worker_max = 0;
  for (auto& t : r.tasks) {
    double cores = t.cpu_seconds / r.seconds;
    (t.task.job == "ps" ? ps_cpu : worker_cpu) += cores;
    (t.task.job == "ps" ? ps_max : worker_max) =
        std::max(t.task.job == "ps" ? ps_max : worker_max, cores);
  }
  out.note = fmt::format(
      "{} ps + {} workers at {}, median of {} steps; CPU over the run: ps tasks {:.2f} cores "
      "(the busiest {:.2f}), workers {:.2f} (the busiest {:.2f})",
      e.ps, e.workers, rate_text(e.link_bps), e.steps, ps_cpu, ps_max, worker_cpu, worker_max);
  return out;
}

// What the figure shows, gathered as the experiments run.
struct figure {
  plot_series scalar{"actorflow", "#2471a3"}, tf_scalar{"TensorFlow", "#c0392b"};
  plot_series dense_100mb{"actorflow", "#2471a3"}, line_100mb{"line rate", "#888", {}, true};
  plot_series tf_dense_100mb{"TensorFlow", "#c0392b"};
  plot_series dense_1gb{"actorflow", "#2471a3"}, line_1gb{"line rate", "#888", {}, true};
  plot_series sparse{"actorflow, 4 workers", "#2471a3"};
};

std::vector<int> worker_counts(int max_workers) {
  std::vector<int> out;
  for (int w = 1; w <= max_workers; w *= 2) out.push_back(w);
  return out;
}

// The milliseconds a dense step's bytes need on the busiest link: each
// worker's link carries the whole model in (the parameters) and out (the
// gradient), each ps task's its share of every worker's. The two go one
// after the other: the gradient needs the loss, which needs every part.
double line_rate_ms(double model_mb, int workers, double link_bps) {
  double bytes_each_way = model_mb * 1e6 * std::max(1.0, double(workers) / ps_tasks);
  return 2 * bytes_each_way * 8 / link_bps * 1e3;
}

void add_outcome(const add_row_fn& add_row, const std::string& key, const outcome& o,
                 const std::string& unit, double value, const std::string& what) {
  add_row(key, std::isnan(o.step_ms) ? NAN : value, unit, what + "; " + o.note);
}

// The emulated links against their configured rates, at each rate the
// experiments use: raw TCP between two namespaces (cluster-sim --calibrate),
// and an actorflow tensor transfer (a dense 100 MB model on 1 ps task and 1
// worker: the parameters in, the gradient out).
void calibration_rows(const add_row_fn& add_row) {
  for (double bps : {dense_100mb_link_bps, dense_1gb_link_bps}) {
    testing::child_process p({CLUSTER_SIM_BINARY, "--calibrate", "--link", rate_text(bps)});
    int status = p.wait_exit(std::chrono::seconds(60));
    std::smatch m;
    std::string out = p.output();
    bool ok = status == 0 && std::regex_search(out, m, std::regex("configured: ([0-9.]+) of it"));
    add_row(fmt::format("scaling_calibration_tcp_ratio_{}", rate_text(bps)),
            ok ? std::stod(m[1]) : NAN, "x",
            ok ? "raw TCP between two namespaces over the configured rate"
               : "cluster-sim --calibrate failed: " + out);
    experiment e{"dense"};
    e.model_mb = 100, e.ps = 1, e.link_bps = bps, e.steps = 3, e.warmup = 1;
    auto o = run_experiment(e);
    double needs = line_rate_ms(100, 1, bps);
    add_outcome(add_row, fmt::format("scaling_calibration_tensor_ratio_{}", rate_text(bps)), o, "x",
                needs / o.step_ms,
                fmt::format("an actorflow transfer of 100 MB each way (1 ps, 1 worker) over the "
                            "configured rate: {:.0f} ms against {:.0f} ms",
                            o.step_ms, needs));
  }
}

// TensorFlow's task: Python (one that imports TensorFlow) and tf_sync_step.py.
std::optional<std::vector<std::string>> tensorflow_task() {
  auto python = tensorflow_python();
  if (!python) return std::nullopt;
  return std::vector<std::string>{*python, perf_dir() + "/tf_sync_step.py"};
}

void scalar_rows(const add_row_fn& add_row, const scaling_bench_options& opts, figure& fig) {
  auto tf = tensorflow_task();
  if (!tf) std::cerr << "  scaling: TensorFlow not found ($ACTORFLOW_TF_PYTHON): no tf_ rows\n";
  for (int w : worker_counts(opts.max_workers)) {
    experiment e{"scalar"};
    e.workers = w, e.link_bps = scalar_link_bps, e.steps = 200, e.warmup = 20;
    auto o = run_experiment(e);
    add_outcome(add_row, fmt::format("sync_scalar_step_ms_w{}", w), o, "ms", o.step_ms,
                "a float per ps task, fetched, a trivial gradient sent back, aggregated by the "
                "chief");
    fig.scalar.points.emplace_back(w, o.step_ms);
    if (!tf) continue;
    e.program = *tf, e.timeout_s = 900;
    auto t = run_experiment(e);
    fig.tf_scalar.points.emplace_back(w, t.step_ms);
    add_outcome(add_row, fmt::format("tf_sync_scalar_step_ms_w{}", w), t, "ms", t.step_ms,
                fmt::format("TensorFlow (perf/tf_sync_step.py, SyncReplicasOptimizer), the same "
                            "cluster; actorflow's is {:.2f}x (target <= 0.2)",
                            o.step_ms / t.step_ms));
  }
}

// TensorFlow's step of the same experiment, beside actorflow's `ours` (ms).
void tf_row(const add_row_fn& add_row, const std::optional<std::vector<std::string>>& tf,
            experiment e, const std::string& key, double ours, plot_series* series = nullptr) {
  if (!tf) return;
  e.program = *tf;
  auto t = run_experiment(e);
  if (series) series->points.emplace_back(e.workers, t.step_ms / 1e3);
  add_outcome(add_row, key, t, "ms", t.step_ms,
              fmt::format("TensorFlow (perf/tf_sync_step.py), the same cluster; actorflow's step "
                          "is {:.2f}x",
                          ours / t.step_ms));
}

void dense_rows(const add_row_fn& add_row, const scaling_bench_options& opts, figure& fig) {
  auto tf = tensorflow_task();
  for (auto [mb, link, tag, steps] : {std::tuple{100.0, dense_100mb_link_bps, "100mb", 5},
                                      std::tuple{1000.0, dense_1gb_link_bps, "1gb", 3}})
    for (int w : worker_counts(opts.max_workers)) {
      experiment e{"dense"};
      e.model_mb = mb, e.workers = w, e.link_bps = link, e.steps = steps, e.warmup = 1;
      e.timeout_s = 1800;
      auto o = run_experiment(e);
      double needs = line_rate_ms(mb, w, link);
      (mb < 500 ? fig.dense_100mb : fig.dense_1gb).points.emplace_back(w, o.step_ms / 1e3);
      (mb < 500 ? fig.line_100mb : fig.line_1gb).points.emplace_back(w, needs / 1e3);
      add_outcome(add_row, fmt::format("sync_dense_{}_line_rate_ratio_w{}", tag, w), o, "x",
                  o.step_ms / needs,
                  fmt::format("step {:.0f} ms over the {:.0f} ms its bytes need at {} (target "
                              "<= 1.3)",
                              o.step_ms, needs, rate_text(link)));
      // TensorFlow's 100 MB steps (its 1 GB ones would take hours here).
      if (mb < 500)
        tf_row(add_row, tf, e, fmt::format("tf_sync_dense_100mb_step_ms_w{}", w), o.step_ms,
               &fig.tf_dense_100mb);
    }
}

void sparse_rows(const add_row_fn& add_row, const scaling_bench_options& opts, figure& fig) {
  // The largest table: what half the memory available holds (the ps tasks
  // keep it once, the accumulators only the rows a step touches).
  double largest_mb = std::floor(available_mb() * 0.5 / 1000) * 1000;
  int w = std::min(opts.max_workers, 4);
  experiment e{"sparse"};
  e.model_mb = 1000, e.workers = w, e.link_bps = sparse_link_bps, e.steps = 100, e.warmup = 10;
  e.timeout_s = 900;
  auto small = run_experiment(e);
  add_outcome(add_row, "sync_sparse_1gb_step_ms", small, "ms", small.step_ms,
              fmt::format("a 1 GB table, 32 random rows a step, {} workers", w));
  tf_row(add_row, tensorflow_task(), e, "tf_sync_sparse_1gb_step_ms", small.step_ms);
  e.model_mb = largest_mb, e.timeout_s = 1800;
  auto large = run_experiment(e);
  fig.sparse.points = {{1, small.step_ms}, {largest_mb / 1000, large.step_ms}};
  add_outcome(add_row, "sync_sparse_max_step_ms", large, "ms", large.step_ms,
              fmt::format("a {:.0f} GB table (half the memory available), the same steps; {:.2f}x "
                          "the 1 GB table's (target within 1.1)",
                          largest_mb / 1000, large.step_ms / small.step_ms));
}

// Figure 6's layout: step time against workers, one panel per model.
void write_figure(const figure& fig, const std::string& path) {
  std::vector<plot_panel> panels{
      {"scalar (4 B per ps task)",
       "workers",
       "median step (ms)",
       true,
       {fig.scalar, fig.tf_scalar}},
      {"dense 100 MB",
       "workers",
       "median step (s)",
       true,
       {fig.dense_100mb, fig.tf_dense_100mb, fig.line_100mb}},
      {"dense 1 GB", "workers", "median step (s)", true, {fig.dense_1gb, fig.line_1gb}},
      {"sparse, 32 rows a step", "table (GB)", "median step (ms)", true, {fig.sparse}}};
  std::string note = fmt::format(
      "Synchronous replicas (the paper's Figure 6): 16 ps tasks and the workers, each task a "
      "process in a network namespace of its own, behind a link shaped by tc tbf (full duplex, "
      "MTU 9000).\n"
      "Links: scalar {}, dense 100 MB {}, dense 1 GB {}, sparse {}. Line rate: the time a dense "
      "step's bytes need on its busiest link (the model in, then the gradient out).\n"
      "This simulates a cluster of up to 32 machines on the {} cores of one: each row's note in "
      "the JSON gives the CPU the tasks used.",
      rate_text(scalar_link_bps), rate_text(dense_100mb_link_bps), rate_text(dense_1gb_link_bps),
      rate_text(sparse_link_bps), std::thread::hardware_concurrency());
  write_file_atomically(path,
                        {svg_figure("actorflow: synchronous replica microbenchmark on an "
                                    "emulated network",
                                    panels, note)},
                        "[scaling] ");
  std::cerr << "  scaling: the figure is in " << path << "\n";
}

}  // namespace

void add_scaling_rows(const add_row_fn& add_row, const scaling_bench_options& options) {
  if (auto why = namespaces_unavailable(); !why.empty()) {
    std::cerr << "  scaling: skipped: the emulated network cannot be made here: " << why << "\n";
    return;
  }
  const std::string& which = options.experiments;
  figure fig;
  calibration_rows(add_row);
  if (which == "all" || which == "scalar") scalar_rows(add_row, options, fig);
  if (which == "all" || which == "dense") dense_rows(add_row, options, fig);
  if (which == "all" || which == "sparse") sparse_rows(add_row, options, fig);
  if (which != "lm" && !options.svg.empty()) write_figure(fig, options.svg);
  if (which == "all" || which == "lm") add_lm_scaling_rows(add_row, options.lm_svg);
}

}  // namespace actorflow::bench
