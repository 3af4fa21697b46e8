// actorflow-bench: runtime and kernel benchmarks, with their references
// measured in the same run. `--json` prints one JSON object on stdout and the
// table on stderr.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "devices/cpu/gemm_library.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/state.hpp"
#include "perf/bench_chaos.hpp"
#include "perf/bench_checkpoint.hpp"
#include "perf/bench_control.hpp"
#include "perf/bench_conv.hpp"
#include "perf/bench_convnets.hpp"
#include "perf/bench_devices.hpp"
#include "perf/bench_dist.hpp"
#include "perf/bench_gemm.hpp"
#include "perf/bench_gpu.hpp"
#include "perf/bench_lm_cluster.hpp"
#include "perf/bench_scaling.hpp"
#include "perf/bench_serve.hpp"
#include "perf/bench_stragglers.hpp"
#include "perf/bench_train.hpp"
#include "perf/bench_util.hpp"
#include "perf/reference_launch.hpp"

using namespace actorflow;
using namespace actorflow::bench;

std::string actorflow::bench::perf_dir() {
  const char* chosen = std::getenv("ACTORFLOW_PERF_DIR");
  return chosen != nullptr && *chosen != '\0' ? chosen : ACTORFLOW_PERF_DIR;
}

namespace {

constexpr int chain_length = 1000;

struct row {
  std::string key;
  double value;  // NaN: not measured (the note says why); left out of the JSON
  std::string unit;
  std::string note;
};

// x -> x + 1 -> ... 1000 times, one node per add.
output build_chain(graph& g, output x) {
  auto one = scalar(g, 1.0f, "one");
  for (int i = 0; i < chain_length; ++i) x = add(x, one);
  return x;
}

double chain_us_per_node() {
  graph g;
  auto x = placeholder(g, dtype::float32, {}, "x");
  auto y = build_chain(g, x);
  session s(g);
  feed_list feeds{{x, tensor::scalar(0.0f)}};
  double secs = median_seconds(15, 3, [&] {
    for (int i = 0; i < 20; ++i) s.run(feeds, {y});
  });
  return secs / 20 / chain_length * 1e6;
}

double pipelined_us_per_node(int in_flight) {
  graph g;
  auto x = placeholder(g, dtype::float32, {}, "x");
  auto y = build_chain(g, x);
  session s(g);
  feed_list feeds{{x, tensor::scalar(0.0f)}};
  const int steps = 320;
  double secs = median_seconds(7, 1, [&] {
    std::vector<std::future<std::vector<tensor>>> window;
    for (int i = 0; i < steps; ++i) {
      if (static_cast<int>(window.size()) == in_flight) {
        window.front().get();
        window.erase(window.begin());
      }
      window.push_back(s.run_async(feeds, {y}));
    }
    for (auto& f : window) f.get();
  });
  return secs / steps / chain_length * 1e6;
}

// One node fans out to 1000 independent adds, which one concat gathers.
double wide_us_per_node() {
  graph g;
  auto x = placeholder(g, dtype::float32, {1}, "x");
  std::vector<output> branches;
  for (int i = 0; i < chain_length; ++i) branches.push_back(add(x, scalar(g, float(i))));
  auto y = concat(branches, 0);
  session s(g);
  feed_list feeds{{x, tensor::from_vector<float>({0.0f})}};
  double secs = median_seconds(15, 3, [&] {
    for (int i = 0; i < 10; ++i) s.run(feeds, {y});
  });
  return secs / 10 / chain_length * 1e6;
}

// One step through 10 scalar adds, with the adds in both branches of a cond
// (the branch alternating per step) or with no cond: what a cond costs a step.
double cond_step_us(bool with_cond) {
  graph g;
  auto p = placeholder(g, dtype::boolean, {}, "p");
  auto x = placeholder(g, dtype::float32, {}, "x");
  auto adds = [&](float by) {
    output y = x;
    for (int i = 0; i < 10; ++i) y = add(y, scalar(g, by));
    return y;
  };
  auto y = with_cond ? cond(
                           p, [&] { return adds(1); }, [&] { return adds(-1); })
                     : adds(1);
  session s(g);
  std::vector<feed_list> feeds;
  for (bool b : {true, false}) {
    feed_list f;
    f.reserve(2);  // and GCC 12 sees no -Warray-bounds in the growth of a list of one
    f.emplace_back(x, tensor::scalar<float>(1));
    if (with_cond) f.emplace_back(p, tensor::scalar<bool>(b));
    feeds.push_back(std::move(f));
  }
  for (int i = 0; i < 50; ++i) s.run(feeds[i % 2], {y});
  constexpr int steps = 500;
  double secs = median_seconds(15, 3, [&] {
    for (int i = 0; i < steps; ++i) s.run(feeds[i % 2], {y});
  });
  return secs / steps * 1e6;
}

// The PyTorch reference, when python3-torch is installed.
std::optional<double> torch_chain_us_per_op() {
  static const std::regex line(R"(scalar add chain: ([0-9.]+) us/op)");
  return run_torch_reference("torch_overhead.py", "", line);
}

}  // namespace

// The LSTM LM's training rate: a few hundred steps, not an epoch; beside it
// TensorFlow's over one epoch of the reference tf_lstm_lm.py (sampled
// softmax) when TensorFlow is importable.
template <class add_row_fn, class add_failure_fn>
void add_lstm_lm_rows(add_row_fn& add_row, add_failure_fn& add_failure) {
  const char* note = "LSTM LM on fortunes, 35x32 words per step";
  auto tf = tf_lstm_lm_words_per_s();
  for (auto [full, key, steps] : {std::tuple{false, "lstm_lm_words_per_s", 200},
                                  std::tuple{true, "lstm_lm_words_per_s_full", 60}}) {
    try {
      double ours = lstm_lm_words_per_s(full, steps);
      std::string vs_tf =
          tf && !full ? fmt::format("; {:.2f}x TensorFlow in this run, target >= 1.5", ours / *tf)
                      : "";
      add_row(key, ours, "words/s",
              fmt::format("{}, {} softmax{}", note, full ? "full" : "sampled (512)", vs_tf));
    } catch (const std::exception& e) {
      add_failure(key, e.what());
    }
  }
  if (tf)
    add_row("tf_lstm_lm_words_per_s", *tf, "words/s",
            "TensorFlow 1 epoch, sampled softmax (perf-ref's tf_lstm_lm.py)");
}

int main(int argc, char** argv) {
  // The caller's environment is captured first, for the references
  // (perf/reference_launch.hpp); then the bench sets its own variables.
  capture_caller_environment();
  set_bench_environment();
  CLI::App app{"actorflow benchmarks: runtime overhead and kernels, beside their references"};
  bool json = false;
  bool skip_torch = false;
  std::string only;
  app.add_flag("--json", json, "print one JSON object on stdout (the table goes to stderr)");
  std::string reference_dir;
  app.add_flag("--no-torch", skip_torch, "skip the PyTorch reference");
  // No default: the reference scripts live outside this repository (the
  // project's perf-ref), so no path to them is compiled in.
  app.add_option("--reference-dir", reference_dir,
                 "the PyTorch and TensorFlow reference scripts' directory (perf-ref); "
                 "default $ACTORFLOW_PERF_REF; without either, those references are skipped")
      ->envname("ACTORFLOW_PERF_REF");
  app.add_option(
         "--only", only,
         "run one group: runtime, control, gemm, conv, train, mlp, cnn, embedding, "
         "devices, gpu, trace, dist (default: all of these), or convnets (image_models: only its "
         "ResNet-50 and Inception-v3), lm_cluster, chaos, "
         "serve, scaling, stragglers (long) or checkpoint (writes several GiB): only when named")
      ->check(CLI::IsMember({"runtime",      "control", "gemm",    "conv",  "convnets",
                             "image_models", "train",   "mlp",     "cnn",   "embedding",
                             "devices",      "gpu",     "trace",   "dist",  "lm_cluster",
                             "checkpoint",   "chaos",   "scaling", "serve", "stragglers"}));
  serve_bench_options serve;
  app.add_option("--serve-seconds", serve.seconds,
                 "the serve group's seconds per closed-loop measurement (default 2)")
      ->check(CLI::Range(0.2, 60.0));
  checkpoint_bench_options checkpoint;
  app.add_option("--checkpoint-gb", checkpoint.gib,
                 "the checkpoint group's model size in GiB (default 1)")
      ->envname("ACTORFLOW_BENCH_CHECKPOINT_GB")
      ->check(CLI::Range(0.01, 64.0));
  app.add_option("--checkpoint-dir", checkpoint.dir,
                 "where the checkpoint group writes (default: a fresh directory under $TMPDIR, "
                 "removed afterwards)")
      ->envname("ACTORFLOW_BENCH_CHECKPOINT_DIR");
  uint64_t chaos_seed = 1;
  app.add_option("--chaos-seed", chaos_seed,
                 "the chaos group's seed: which task is killed when, and its restart's delay")
      ->capture_default_str();
  scaling_bench_options scaling;
  app.add_option("--scaling-experiments", scaling.experiments,
                 "the scaling group's experiments: scalar, dense, sparse (Figure 6), lm "
                 "(Figure 9) or all")
      ->check(CLI::IsMember({"scalar", "dense", "sparse", "lm", "all"}))
      ->capture_default_str();
  app.add_option("--scaling-max-workers", scaling.max_workers,
                 "the scaling group's most workers (1, 2, 4, ... up to it)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--scaling-svg", scaling.svg,
                 "where the scaling group's Figure 6 goes (empty: none)")
      ->capture_default_str();
  app.add_option("--scaling-lm-svg", scaling.lm_svg,
                 "where the scaling group's Figure 9 (the language model) goes (empty: none)")
      ->capture_default_str();
  std::string stragglers_svg = "stragglers-figure8.svg";
  app.add_option("--stragglers-svg", stragglers_svg,
                 "where the stragglers group's figure (laid out like Figure 8) goes (empty: none)")
      ->capture_default_str();
  std::string chaos_models = "all";
  app.add_option("--chaos-models", chaos_models,
                 "the chaos group's models: mlp, lm or all (mlp, then lm)")
      ->check(CLI::IsMember({"mlp", "lm", "all"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  bench::reference_dir() = reference_dir;

  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<row> rows;
  auto add_row = [&](std::string key, double v, std::string unit, std::string note = "") {
    rows.push_back({std::move(key), v, std::move(unit), std::move(note)});
    std::cerr << fmt::format("  measured {:<28} {:>10.3f} {}\n", rows.back().key, v,
                             rows.back().unit);
  };
  auto add_failure = [&](std::string key, std::string why) {
    rows.push_back({std::move(key), std::nan(""), "", std::move(why)});
    std::cerr << fmt::format("  not measured {:<24} {}\n", rows.back().key, rows.back().note);
  };

  auto wanted = [&](const char* group) { return only.empty() || only == group; };
  if (wanted("runtime")) {
    add_row("chain_us_per_node", chain_us_per_node(), "us", "target <= 1.0, aim 0.5");
    add_row("pipelined_us_per_node", pipelined_us_per_node(16), "us",
            "16 steps in flight; target <= 0.25");
    add_row("wide_us_per_node", wide_us_per_node(), "us", "1000-way fan-out and fan-in");
    if (!skip_torch)
      if (auto t = torch_chain_us_per_op())
        add_row("torch_chain_us_per_op", *t, "us", "PyTorch eager, same machine");
  }
  if (wanted("control")) {
    double plain = cond_step_us(false), with_cond = cond_step_us(true);
    add_row("cond_us", with_cond, "us",
            "a step through a cond whose branches hold 10 scalar adds each");
    add_row("cond_free_us", plain, "us",
            fmt::format("the same 10 adds without the cond; the cond adds {:.1f} us",
                        with_cond - plain));
    auto tf = tf_while_reference(100000);
    double scalar_loop = while_us_per_iteration(100000);
    double matmul_loop = while_us_per_iteration_4ops(10000);
    add_row("while_us_per_iteration", scalar_loop, "us",
            tf ? fmt::format("100,000 iterations of a scalar add; TensorFlow {:.2f} us in this run "
                             "(ratio {:.2f}); target <= 1.0",
                             tf->us_per_iteration, scalar_loop / tf->us_per_iteration)
               : std::string("100,000 iterations of a scalar add; target <= 1.0 (TensorFlow not "
                             "found: set ACTORFLOW_TF_PYTHON)"));
    add_row("while_us_per_iteration_4ops", matmul_loop, "us",
            tf ? fmt::format("10,000 iterations of tanh(x@w+1)*0.5 on 64x64; TensorFlow {:.2f} us "
                             "in this run (ratio {:.2f}); target ratio <= 0.6",
                             tf->us_per_iteration_4ops, matmul_loop / tf->us_per_iteration_4ops)
               : std::string("10,000 iterations of tanh(x@w+1)*0.5 on 64x64; target <= 0.6 x "
                             "TensorFlow's"));
    if (tf) {
      add_row("tf_while_us_per_iteration", tf->us_per_iteration, "us", "TensorFlow graph mode");
      add_row("tf_while_us_per_iteration_4ops", tf->us_per_iteration_4ops, "us",
              "TensorFlow graph mode");
    }
    add_lstm_lm_rows(add_row, add_failure);
  }
  const add_row_fn add_row_or_failure = [&](std::string key, double v, std::string unit,
                                            std::string note) {
    if (std::isnan(v))
      add_failure(std::move(key), std::move(note));
    else
      add_row(std::move(key), v, std::move(unit), std::move(note));
  };
  if (wanted("gemm")) add_gemm_rows(add_row_or_failure, threads);
  if (wanted("conv")) add_conv_rows(add_row_or_failure);
  if (only == "convnets") add_convnet_rows(add_row_or_failure, !skip_torch);
  if (only == "image_models") add_image_model_rows(add_row_or_failure, !skip_torch);
  for (auto [model, steps, target] : {std::tuple{"mlp", 200, 0.5}, std::tuple{"cnn", 30, 0.7}}) {
    if (!wanted("train") && only != model) continue;
    // The step with the CPU GEMM library, with Eigen's products, in mixed
    // precision (bfloat16 products) and without the graph optimizer, in
    // alternating rounds.
    std::vector<double> with_library, with_eigen, with_bf16, as_built;
    for (int round = 0; round < 3; ++round) {
      with_library.push_back(train_step_ms(model, 128, steps));
      cpu::use_gemm_library(false);
      with_eigen.push_back(train_step_ms(model, 128, steps));
      cpu::use_gemm_library(true);
      with_bf16.push_back(train_step_ms(model, 128, steps, {}, models::precision::bf16));
      as_built.push_back(
          train_step_ms(model, 128, steps, {}, models::precision::fp32, {.optimize = false}));
    }
    double ours = median(with_library), eigen = median(with_eigen), bf16 = median(with_bf16);
    std::optional<double> ref;
    if (!skip_torch) ref = torch_train_step_ms(model, 128, steps);
    std::string note = ref ? fmt::format("{:.2f}x PyTorch; target <= {:.1f}x", ours / *ref, target)
                           : "PyTorch not measured";
    add_row(fmt::format("{}_step_ms", model), ours, "ms",
            fmt::format("GEMM by {}; {}", cpu::gemm_library(), note));
    add_row(fmt::format("{}_step_ms_eigen", model), eigen, "ms",
            fmt::format("the same step with Eigen's GEMM ({:.2f}x the above)", eigen / ours));
    add_row(fmt::format("{}_bf16_step_ms", model), bf16, "ms",
            fmt::format("--precision bf16: bfloat16 products, float32 weights ({:.2f}x {}_step_ms, "
                        "alternating rounds)",
                        bf16 / ours, model));
    add_row(fmt::format("{}_step_ms_unoptimized", model), median(as_built), "ms",
            fmt::format("the same step without the graph optimizer ({:.2f}x the above)",
                        median(as_built) / ours));
    if (ref) add_row(fmt::format("torch_{}_step_ms", model), *ref, "ms", "PyTorch, same machine");
  }

  if (wanted("embedding")) {
    // 500K x 64 float32 (128 MB) in 4 shards, 1024 ids per step, AdaGrad.
    double by_rows = embedding_step_ms(true, 500000, 64, 1024, 50);
    double dense = embedding_step_ms(false, 500000, 64, 1024, 10);
    add_row("embedding_step_ms_rows", by_rows, "ms", "AdaGrad on the 1024 rows named");
    add_row("embedding_step_ms_dense", dense, "ms", "the same step updating all 500K rows");
    add_row("embedding_rows_speedup", dense / by_rows, "x", "dense over row updates");
    // The same table trained synchronously by 2 replicas (sync_replicas).
    double sync_rows = sync_embedding_step_ms(true, 500000, 64, 1024, 30);
    double sync_dense = sync_embedding_step_ms(false, 500000, 64, 1024, 10);
    add_row("sync_embedding_step_ms_rows", sync_rows, "ms",
            "2 replicas; sparse accumulators, row updates");
    add_row("sync_embedding_step_ms_dense", sync_dense, "ms",
            "the same with dense accumulators and updates");
    add_row("sync_embedding_rows_speedup", sync_dense / sync_rows, "x", "dense over rows");
  }

  if (wanted("trace")) {
    auto [plain, traced] = traced_step_ms(128, 300);
    add_row("untraced_mlp_step_ms", plain, "ms", "the same steps untraced, in alternating blocks");
    add_row("traced_mlp_step_ms", traced, "ms",
            fmt::format("run_options{{.trace = true}}: {:.2f}x untraced; target <= 1.2",
                        traced / plain));
  }
  if (wanted("devices")) {
    auto d = device_benchmarks();
    add_row("mlp_step_ms", d.mlp_step_ms, "ms", "one CPU device, one step at a time");
    add_row("mlp_step_ms_8_in_flight", d.mlp_step_ms_8_in_flight, "ms",
            "one CPU device, 8 steps in flight");
    add_row("two_device_mlp_step_ms", d.two_device_mlp_step_ms, "ms",
            fmt::format("fc1 on /cpu:0, fc2+fc3 on /cpu:1, 8 in flight; {:.2f}x one device with "
                        "8 in flight, {:.2f}x one at a time",
                        d.two_device_mlp_step_ms / d.mlp_step_ms_8_in_flight,
                        d.two_device_mlp_step_ms / d.mlp_step_ms));
    add_row("device_copy_gbps", d.device_copy_gbps, "GB/s",
            fmt::format("64 MiB into the stand-in's memory and out; {:.2f}x two plain memcpy",
                        d.device_copy_gbps / d.memcpy_gbps));
    add_row("memcpy_gbps", d.memcpy_gbps, "GB/s", "the same 128 MiB moved by two memcpy calls");
  }
  if (wanted("gpu")) add_gpu_rows(add_row_or_failure, add_failure, !skip_torch);
  if (wanted("dist")) {
    // Two actorflow-node PS tasks on 127.0.0.1, started and reaped here.
    auto d = dist_benchmarks();
    if (d.null_step_ms_1w_2ps)
      add_row("null_step_ms_1w_2ps", *d.null_step_ms_1w_2ps, "ms",
              "TF paper: 1.8 ms (1 worker, datacenter net); target <= 0.3 on loopback");
    if (d.caf_round_trip_ms)
      add_row("caf_round_trip_ms", *d.caf_round_trip_ms, "ms",
              "bare CAF ping to a PS task and back: a null step needs 2");
    if (d.null_step_ms_1w_2ps && d.caf_round_trip_ms)
      add_row("null_step_in_round_trips", *d.null_step_ms_1w_2ps / *d.caf_round_trip_ms, "x",
              "null step (1 worker) over the CAF round trip; the floor is 2");
    if (d.null_step_ms_4w_2ps)
      add_row("null_step_ms_4w_2ps", *d.null_step_ms_4w_2ps, "ms",
              "4 workers in lockstep (own CAF nodes), 2 PS, shared cores");
    if (d.transfer_gbps)
      add_row("transfer_gbps", *d.transfer_gbps, "GB/s",
              "64 MiB fed on the worker, reduce_sum on /job:ps/task:0");
    if (d.transfer_gbps_bf16)
      add_row("transfer_gbps_bf16", *d.transfer_gbps_bf16, "GB/s",
              d.transfer_gbps
                  ? fmt::format("the same as bfloat16 on the wire ({:.2f}x transfer_gbps); "
                                "float32 bytes delivered",
                                *d.transfer_gbps_bf16 / *d.transfer_gbps)
                  : std::string("the same as bfloat16 on the wire"));
    if (d.tcp_gbps)
      add_row("tcp_gbps", *d.tcp_gbps, "GB/s", "plain TCP loopback copy of 64 MiB, 1-byte ack");
    if (d.transfer_gbps && d.tcp_gbps)
      add_row("transfer_ratio_of_tcp", *d.transfer_gbps / *d.tcp_gbps, "x", "target >= 0.5");
    if (d.null_step_ms_1w_2ps_secret)
      add_row("null_step_ms_1w_2ps_secret", *d.null_step_ms_1w_2ps_secret, "ms",
              "the 1-worker null step, every connection proving a cluster secret");
    if (d.transfer_gbps_secret)
      add_row("transfer_gbps_secret", *d.transfer_gbps_secret, "GB/s",
              "the 64 MiB transfer, every connection proving a cluster secret");
    if (d.null_step_ms_1w_2ps_tls)
      add_row("null_step_ms_1w_2ps_tls", *d.null_step_ms_1w_2ps_tls, "ms",
              "the 1-worker null step over mutual TLS");
    if (d.transfer_gbps_tls)
      add_row("transfer_gbps_tls", *d.transfer_gbps_tls, "GB/s",
              "the 64 MiB transfer over mutual TLS");
    if (d.dist_mlp_examples_per_s)
      add_row("dist_mlp_examples_per_s", *d.dist_mlp_examples_per_s, "ex/s",
              "sync MLP, 2 workers + 1 PS (Adam, batch 128 each), shared cores");
    if (d.mlp_examples_per_s)
      add_row("mlp_examples_per_s", *d.mlp_examples_per_s, "ex/s", "the same MLP in one process");
    if (d.dist_mlp_examples_per_s && d.mlp_examples_per_s)
      add_row("dist_mlp_ratio_of_single", *d.dist_mlp_examples_per_s / *d.mlp_examples_per_s, "x",
              "2 workers on the same 2 cores as one process");
    for (auto& e : d.errors) add_failure("dist", e);
  }

  if (only == "checkpoint") {
    try {
      add_checkpoint_rows(add_row_or_failure, checkpoint);
    } catch (const std::exception& e) {
      add_failure("checkpoint", e.what());
    }
  }
  if (only == "chaos") add_chaos_rows(add_row_or_failure, chaos_seed, chaos_models);
  if (only == "stragglers") {
    try {
      add_straggler_rows(add_row_or_failure, stragglers_svg);
    } catch (const std::exception& e) {
      add_failure("stragglers", e.what());
    }
  }
  if (only == "serve") {
    try {
      add_serve_rows(add_row_or_failure, serve);
    } catch (const std::exception& e) {
      add_failure("serve", e.what());
    }
  }
  if (only == "scaling") {
    try {
      add_scaling_rows(add_row_or_failure, scaling);
    } catch (const std::exception& e) {
      add_failure("scaling", e.what());
    }
  }

  if (only == "lm_cluster") {
    auto lm = lm_cluster_benchmarks();
    for (auto& r : lm.rows) add_row(r.key, r.value, r.unit, r.note);
    for (auto& e : lm.errors) add_failure("lm_cluster", e);
  }

  std::ostream& table = json ? std::cerr : std::cout;
  table << fmt::format("\nactorflow-bench ({} cores)\n{:<28} {:>10}  {:<8} {}\n", threads,
                       "benchmark", "value", "unit", "note");
  for (auto& r : rows)
    if (std::isnan(r.value))
      table << fmt::format("{:<28} {:>10}  {:<8} {}\n", r.key, "-", "", r.note);
    else
      table << fmt::format("{:<28} {:>10.3f}  {:<8} {}\n", r.key, r.value, r.unit, r.note);
  if (json) {
    nlohmann::json out;
    for (auto& r : rows)
      if (!std::isnan(r.value)) out[r.key] = r.value;
    out["cores"] = threads;
    std::cout << out.dump(2) << std::endl;
  }
  return 0;
}
