#include "perf/bench_gpu.hpp"

#include <fmt/format.h>

#include <Eigen/Core>
#include <random>
#include <regex>
#include <tuple>

#include "actors/session.hpp"
#include "apps/lib/convnets.hpp"
#include "apps/lib/lm_training.hpp"
#include "devices/cuda/gpu_support.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "perf/bench_train.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

namespace {

// ---- Table 1 -----------------------------------------------------------------

struct table1_model {
  const char* name;
  int batch;          // the paper's
  double titan_x_ms;  // TensorFlow on a Titan X, the paper's Table 1
};
constexpr table1_model table1[] = {
    {"alexnet", 128, 81}, {"overfeat", 128, 279}, {"vgg_a", 64, 540}, {"googlenet", 128, 445}};
constexpr int table1_steps = 10;

// Median milliseconds of a training step (forward, backward, SGD) of `model`
// with every node on /gpu:0, random images fed from the host as a user's are.
double gpu_convnet_step_ms(const table1_model& m) {
  graph g;
  models::convnet net;
  {
    auto on_gpu = g.device_scope("/gpu:0");
    net = models::make_convnet(g, m.name, m.batch);
  }
  operation train = sgd(0.01).minimize(net.loss);
  session s(g);
  s.run({global_variables_initializer(g)});
  tensor images(dtype::float32, {m.batch, net.image_size, net.image_size, 3});
  images.mutable_flat<float>() = (Eigen::ArrayXf::Random(images.num_elements()) + 1.0f) * 0.5f;
  tensor labels(dtype::int32, {m.batch});
  std::mt19937 rng(7);
  for (int i = 0; i < m.batch; ++i) labels.mutable_data<int32_t>()[i] = int32_t(rng() % 1000);
  feed_list feeds{{net.images, images}, {net.labels, labels}};
  for (int i = 0; i < 3; ++i) s.run(feeds, {net.loss}, {train});  // cuDNN's choices, the pools
  std::vector<double> times;
  for (int i = 0; i < table1_steps; ++i) {
    const double t0 = now_seconds();
    s.run(feeds, {net.loss}, {train});  // the loss comes to the host: the step is done
    times.push_back(now_seconds() - t0);
  }
  return 1000.0 * median(std::move(times));
}

std::optional<double> torch_gpu_convnet_step_ms(const table1_model& m) {
  static const std::regex field(R"(step_ms=([0-9.]+))");
  return run_torch_reference(perf_dir() + "/torch_convnets.py",
                             fmt::format("{} {} {} 2 cuda", m.name, table1_steps, m.batch), field);
}

// ---- the language model ------------------------------------------------------------

std::optional<double> torch_gpu_lm_words_per_s(bool full, int steps) {
  static const std::regex field(R"(words_per_s=([0-9.]+))");
  return run_torch_reference(perf_dir() + "/torch_gpu_lm.py",
                             fmt::format("{} {}", full ? "full" : "sampled", steps), field);
}

template <class Ours, class Theirs>
void add_pair(const add_row_fn& add_row, const std::string& key, const std::string& unit,
              double ours, const std::optional<double>& ref, const std::string& what,
              Ours ratio_note, Theirs ref_note) {
  add_row(key, ours, unit, ref ? what + "; " + ratio_note(*ref) : what + "; PyTorch not measured");
  if (ref) add_row("torch_" + key, *ref, unit, ref_note);
}

}  // namespace

void add_gpu_rows(const add_row_fn& add_row, const add_failure_fn& add_failure, bool with_torch) {
  if (!runtime::shared()->find_device("gpu", 0)) {
    add_failure("gpu_mlp_step_ms", "no GPU: " + gpu::gpu_placement_refusal());
    return;
  }
  // The MLP's step is mostly the runtime's cost per op: its target is tighter.
  for (auto [model, steps, target] : {std::tuple{"mlp", 500, 0.8}, std::tuple{"cnn", 200, 1.0}}) {
    double ours = train_step_ms(model, 128, steps, {"/gpu:0"});
    auto ref = with_torch ? torch_gpu_step_ms(model, 128, steps) : std::nullopt;
    add_pair(
        add_row, fmt::format("gpu_{}_step_ms", model), "ms", ours, ref, "batch 128",
        [&](double r) {
          return fmt::format("{:.2f}x PyTorch on the same GPU; target <= {}", ours / r, target);
        },
        "PyTorch with CUDA, same GPU (perf/torch_gpu_fmnist.py)");
  }
  // Words/s: higher is better; the LM's target is the tighter one.
  for (auto [full, key, steps] : {std::tuple{false, "gpu_lstm_lm_words_per_s", 200},
                                  std::tuple{true, "gpu_lstm_lm_words_per_s_full", 100}}) {
    try {
      double ours = lstm_lm_words_per_s(full, steps, "/gpu:0");
      auto ref = with_torch ? torch_gpu_lm_words_per_s(full, steps) : std::nullopt;
      add_pair(
          add_row, key, "words/s", ours, ref, "35 steps x 32 streams, 256 wide, 10001 words, Adam",
          [&](double r) {
            return fmt::format(
                "{:.2f}x PyTorch's words/s on the same GPU; target >= 1.25 "
                "(its time at most 0.8x)",
                ours / r);
          },
          "PyTorch with CUDA (cuDNN's LSTM), same GPU (perf/torch_gpu_lm.py)");
    } catch (const std::exception& e) {
      add_failure(key, e.what());
    }
  }
  for (const auto& m : table1) {
    const std::string key = fmt::format("gpu_{}_step_ms", m.name);
    try {
      double ours = gpu_convnet_step_ms(m);
      auto ref = with_torch ? torch_gpu_convnet_step_ms(m) : std::nullopt;
      add_pair(
          add_row, key, "ms", ours, ref, fmt::format("batch {} (Table 1's)", m.batch),
          [&](double r) {
            return fmt::format(
                "{:.2f}x PyTorch on the same GPU; target <= 1.0; the paper's "
                "TensorFlow on a Titan X: {} ms (context only)",
                ours / r, m.titan_x_ms);
          },
          "PyTorch with cuDNN, same GPU, same layers (perf/torch_convnets.py ... cuda)");
    } catch (const std::exception& e) {
      add_failure(key, e.what());
    }
  }
}

}  // namespace actorflow::bench
