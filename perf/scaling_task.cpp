// actorflow-scaling-task: one task of the paper's synchronous replica
// microbenchmark (section 6.2, Figure 6), run by actorflow-bench's scaling
// group in an emulated network (perf/cluster_sim.hpp). A ps task serves; a
// worker, each step, fetches the model's parameters from every ps task,
// computes a trivial gradient (the parameters themselves: the gradient of
// half their sum of squares) and sends it back to the accumulators beside
// the parameters; the chief (worker 0) aggregates every worker's gradient
// and applies it (sync_replicas, no backup workers), as in the paper.
//
//   --model scalar   one float per ps task (4 bytes each)
//   --model dense    --model-mb MB of float32, split evenly over the ps tasks
//   --model sparse   a --model-mb MB table of 64-float rows, split by rows
//                    over the ps tasks; each step looks up --rows random rows
//                    (embedding_lookup) and updates only those
//
// The chief prints `step_ms_median=<ms> steps=<n>` over the steps after
// --warmup, each step timed from one token to the next (one global step).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>
#include <vector>

#include "actors/session.hpp"
#include "apps/lib/cluster_app.hpp"
#include "apps/lib/cluster_steps.hpp"
#include "core/device_name.hpp"
#include "ops/array.hpp"
#include "ops/embedding.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/sync_replicas.hpp"
#include "ops/train.hpp"

namespace {

using namespace actorflow;
using namespace actorflow::apps;

struct scaling_flags {
  std::string model = "scalar";
  double model_mb = 100;
  int rows = 32, steps = 100, warmup = 10, threads = 1;
};

constexpr int64_t row_floats = 64;

struct scaling_graph {
  graph g;
  output loss, ids;  // ids: the sparse model's rows to look up
  int64_t table_rows = 0;
};

std::string ps_device(int p) { return "/job:ps/task:" + std::to_string(p); }

// The loss whose gradient is the parameters read: fetching them is the step.
void build(scaling_graph& t, const scaling_flags& f, int num_ps) {
  auto& g = t.g;
  const double bytes = f.model_mb * 1e6;
  std::vector<output> parts;
  if (f.model == "scalar" || f.model == "dense") {
    auto floats =
        f.model == "scalar" ? int64_t{1} : std::max<int64_t>(1, int64_t(bytes / 4 / num_ps));
    for (int p = 0; p < num_ps; ++p) {
      variable v = [&] {
        auto on = g.device_scope(ps_device(p));
        return make_variable(fill(g, {floats}, 0.5), fmt::format("{}_{}", f.model, p));
      }();
      // Here, on the worker: the parameters travel to it, the gradient back.
      parts.push_back(l2_loss(v.value()));
    }
  } else if (f.model == "sparse") {
    t.table_rows = std::max<int64_t>(num_ps, int64_t(bytes / 4 / row_floats));
    std::vector<std::string> devices;
    for (int p = 0; p < num_ps; ++p) devices.push_back(ps_device(p));
    // Each part's initial value made beside it: made here, a large table
    // would cross the network at the first step.
    auto table = make_partitioned_variable(
        g, {t.table_rows, row_floats}, num_ps,
        [](graph& g, shape dims, int k) {
          auto on = g.device_scope(ps_device(k));
          return fill(g, dims, 0.5);
        },
        "table", devices);
    t.ids = placeholder(g, dtype::int64, {f.rows}, "ids");
    parts.push_back(l2_loss(embedding_lookup(table, t.ids)));
  } else {
    fail("scaling", "--model " + f.model + ": scalar, dense or sparse");
  }
  t.loss = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) t.loss = add(t.loss, parts[i]);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_worker(const scaling_flags& f, const cluster_setup& setup) {
  const int num_ps = setup.spec.num_tasks("ps"), workers = setup.spec.num_tasks("worker");
  if (num_ps < 1) fail("scaling", "the cluster needs at least one ps task");
  const bool chief = setup.task == 0;
  scaling_graph t;
  // The global step, the token queue and the accumulators on the ps tasks,
  // the rest on this worker, as a cluster trainer places them.
  auto placement = t.g.device_function_scope(replica_device_setter(num_ps, setup.task_name()));
  build(t, f, num_ps);
  auto opt = make_optimizer("sgd", 1e-6);
  auto sync = sync_replicas(*opt, t.loss, workers, workers, setup.task_name());
  auto init = global_variables_initializer(t.g);
  auto ready = global_variables_initialized(t.g);
  auto initializers = variable_initializers(t.g);
  auto rt = std::make_shared<runtime>(task_runtime_options(setup, f.threads));
  auto cluster = std::make_shared<cluster_connection>(rt, setup.spec, setup.task_name(),
                                                      recovering_cluster_options(60));
  session s(t.g, cluster);
  recovery_ops recovery{init, ready, [&](session& s) { s.run({sync.local_step_init}); },
                        initializers};
  recovering_runner run(s, recovery, chief, 60);
  const int64_t last_step = f.warmup + f.steps;
  bool restarted = run.initialize_or_wait(sync.global_step);
  std::unique_ptr<aggregation_thread> aggregation;
  // A scaling task never starts after its run has ended: first step 0.
  if (chief)
    aggregation = std::make_unique<aggregation_thread>(s, sync, run, 0, last_step, restarted);
  std::mt19937_64 rng(uint64_t(setup.task) * 7919 + 1);
  std::uniform_int_distribution<int64_t> row(0, std::max<int64_t>(0, t.table_rows - 1));
  std::vector<double> ms;
  for (int64_t step = 0;; ++step) {
    feed_list feeds;
    if (t.table_rows > 0) {
      std::vector<int64_t> ids(size_t(f.rows));
      for (auto& id : ids) id = row(rng);
      feeds.emplace_back(t.ids, tensor::from_vector<int64_t>(ids));
    }
    auto t0 = std::chrono::steady_clock::now();
    try {
      s.run(feeds, {}, {sync.worker_train});
    } catch (const error& e) {
      if (chief_finished(e)) break;
      throw;
    }
    if (step >= f.warmup)
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (aggregation && !aggregation->join()) fail("scaling", "the chief's aggregation failed");
  fmt::print("{} step_ms_median={:.3f} steps={}\n", setup.task_name(), median(ms), ms.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"actorflow-scaling-task: a task of the synchronous replica microbenchmark"};
  cluster_flags cf;
  add_cluster_flags(app, cf);
  scaling_flags f;
  app.add_option("--model", f.model, "scalar, dense or sparse")
      ->check(CLI::IsMember({"scalar", "dense", "sparse"}));
  app.add_option("--model-mb", f.model_mb, "dense and sparse: the model's size in MB (10^6 B)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--rows", f.rows, "sparse: rows looked up per step")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", f.steps, "timed global steps")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", f.warmup, "global steps before the timed ones")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--threads", f.threads, "threads of this task")->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  try {
    auto setup = resolve_cluster(cf);
    if (!setup.enabled()) fail("scaling", "give the cluster: --job, --task, --ps-hosts, ...");
    if (setup.job == "ps") return serve_task(setup, cf.bind, "", f.threads);
    return run_worker(f, setup);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
