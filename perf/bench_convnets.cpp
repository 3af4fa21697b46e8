#include "perf/bench_convnets.hpp"

#include <fmt/format.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <regex>

#include "actors/session.hpp"
#include "actors/trace/chrome_trace.hpp"
#include "actors/trace/op_profile.hpp"
#include "apps/lib/convnets.hpp"
#include "apps/lib/image_models.hpp"
#include "core/gradients.hpp"
#include "devices/cpu/conv_library.hpp"
#include "ops/array.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/normalization.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

namespace {

constexpr int batch = 16;
// Steps timed per model (after one warm-up step): about 10 s of work each.
int timed_steps(const std::string& model) { return model == "vgg_a" ? 3 : 5; }

struct step_times {
  double ms;           // as shipped
  double own_conv_ms;  // with actorflow's own convolution kernels (oneDNN's primitives off)
};

// Steps with oneDNN's convolution primitives on and off in alternating rounds,
// so that both see the same machine (a shared machine's speed drifts).
step_times convnet_step_ms(const std::string& model) {
  graph g;
  auto net = models::make_convnet(g, model, batch);
  operation train = sgd(0.01).minimize(net.loss);
  session s(g);
  s.run({global_variables_initializer(g)});
  tensor images(dtype::float32, {batch, net.image_size, net.image_size, 3});
  images.mutable_flat<float>() = (Eigen::ArrayXf::Random(images.num_elements()) + 1.0f) * 0.5f;
  tensor labels(dtype::int32, {batch});
  std::mt19937 rng(7);
  for (int i = 0; i < batch; ++i) labels.mutable_data<int32_t>()[i] = int32_t(rng() % 1000);
  feed_list feeds{{net.images, images}, {net.labels, labels}};
  run_metadata md;
  auto step = [&] { s.run({}, feeds, {net.loss}, {train}, &md); };
  std::vector<double> shipped, own;
  for (int round = 0; round < timed_steps(model) + 1; ++round)
    for (bool library : {true, false}) {
      cpu::use_conv_library(library);
      const double t0 = now_seconds();
      step();
      // The first round makes each side's primitives and buffers: not timed.
      if (round > 0) (library ? shipped : own).push_back(now_seconds() - t0);
    }
  cpu::use_conv_library(true);
  if (std::getenv("ACTORFLOW_BENCH_PROFILE")) {  // where a step's time goes, on stderr
    op_profile profile;
    s.run(run_options{.trace = true}, feeds, {net.loss}, {train}, &md);
    profile.add(md);
    std::cerr << model << ":\n" << profile.table(12) << "\n";
  }
  return {1000.0 * median(std::move(shipped)), 1000.0 * median(std::move(own))};
}

// Overfeat's first fully connected layer's SGD update, w -= lr * x^T dy
// (36864 x 3072 weights, batch 16): as the graph optimizer makes it
// (apply_sgd_matmul) and as built (matmul, then apply_sgd), in alternating
// rounds. Milliseconds each.
std::pair<double, double> dense_sgd_update_ms() {
  graph g;
  auto x = placeholder(g, dtype::float32, {batch, 36864}, "x");
  auto dy = placeholder(g, dtype::float32, {batch, 3072}, "dy");
  auto w = make_variable(fill(g, {36864, 3072}, 0.0), "w");
  operation train = sgd(0.01).apply_gradients({{matmul(x, dy, true, false), w}});
  session fused(g), as_built(g, {.optimize = false});
  for (session* s : {&fused, &as_built}) s->run({global_variables_initializer(g)});
  tensor xv(dtype::float32, {batch, 36864}), dyv(dtype::float32, {batch, 3072});
  xv.mutable_flat<float>() = Eigen::ArrayXf::Random(xv.num_elements());
  dyv.mutable_flat<float>() = Eigen::ArrayXf::Random(dyv.num_elements());
  const feed_list feeds{{x, xv}, {dy, dyv}};
  std::vector<double> on, off;
  for (int round = 0; round < 8; ++round)
    for (session* s : {&fused, &as_built}) {
      const double t0 = now_seconds();
      s->run(feeds, {}, {train});
      if (round > 0) (s == &fused ? on : off).push_back(now_seconds() - t0);
    }
  return {1000.0 * median(std::move(on)), 1000.0 * median(std::move(off))};
}

std::optional<double> torch_convnet_step_ms(const std::string& model) {
  static const std::regex field(R"(step_ms=([0-9.]+))");
  return run_torch_reference(perf_dir() + "/torch_convnets.py",
                             fmt::format("{} {} {}", model, timed_steps(model), batch), field);
}

// ResNet-50 and Inception-v3 at image sizes that keep the group in minutes
// on 2 cores: 112 for ResNet-50 (a quarter of 224's work), 150 for
// Inception-v3 (a quarter of 299's; without the auxiliary head, which needs
// 299). Batch 16, training mode, SGD; PyTorch runs torchvision's models.
struct image_model_run {
  const char* name;
  int64_t size;
};
constexpr image_model_run image_model_runs[] = {{"resnet50", 112}, {"inception_v3", 150}};
constexpr int image_model_steps = 4;

double image_model_step_ms(const image_model_run& run) {
  graph g;
  auto m = models::make_image_model(
      run.name, {.image_size = run.size, .channels = 3, .classes = 1000, .aux_logits = false});
  auto images = placeholder(g, dtype::float32, {batch, run.size, run.size, 3}, "images");
  auto labels = placeholder(g, dtype::int32, {batch}, "labels");
  auto loss = models::image_model_loss(m->apply(images, true), labels);
  auto train = train_step_with_updates(g, sgd(0.01).minimize(loss, m->trainable_variables()));
  session s(g);
  s.run({global_variables_initializer(g)});
  tensor image_values(dtype::float32, {batch, run.size, run.size, 3});
  image_values.mutable_flat<float>() =
      (Eigen::ArrayXf::Random(image_values.num_elements()) + 1.0f) * 0.5f;
  tensor label_values(dtype::int32, {batch});
  std::mt19937 rng(7);
  for (int i = 0; i < batch; ++i) label_values.mutable_data<int32_t>()[i] = int32_t(rng() % 1000);
  feed_list feeds{{images, image_values}, {labels, label_values}};
  std::vector<double> times;
  for (int i = 0; i < image_model_steps + 1; ++i) {
    const double t0 = now_seconds();
    s.run(feeds, {loss}, {train});
    if (i > 0) times.push_back(now_seconds() - t0);  // the first makes the primitives
  }
  if (std::getenv("ACTORFLOW_BENCH_PROFILE")) {  // where a step's time goes, on stderr
    op_profile profile;
    run_metadata md;
    s.run(run_options{.trace = true}, feeds, {loss}, {train}, &md);
    profile.add(md);
    std::cerr << run.name << ":\n" << profile.table(12) << "\n";
    if (const char* dir = std::getenv("ACTORFLOW_BENCH_TRACE_DIR"))  // the step's timeline
      write_chrome_trace(std::string(dir) + "/" + run.name + "-trace.json", md);
  }
  return 1000.0 * median(std::move(times));
}

std::optional<double> torch_image_model_step_ms(const image_model_run& run) {
  static const std::regex field(R"(step_ms=([0-9.]+))");
  return run_torch_reference(
      perf_dir() + "/torch_image_models.py",
      fmt::format("step {} {} {} {}", run.name, image_model_steps, batch, run.size), field);
}

// One training-mode batch normalization, forward and backward (dx, dscale,
// doffset), over [16, 28, 28, 256] (ResNet-50's first stage at 112-pixel
// images): fused_batch_norm and its gradient op, against the same
// arithmetic from reductions and element-wise ops differentiated by
// gradients(), in alternating rounds. Milliseconds each.
std::pair<double, double> batch_norm_ms() {
  graph g;
  const shape dims{16, 28, 28, 256};
  auto x = placeholder(g, dtype::float32, dims, "x");
  auto dy = placeholder(g, dtype::float32, dims, "dy");
  auto scale = constant(g, tensor::from_vector<float>(std::vector<float>(256, 1.5f), shape{256}));
  auto offset = constant(g, tensor::from_vector<float>(std::vector<float>(256, 0.1f), shape{256}));
  auto fetch_gradients = [&](output y) {
    auto grads = gradients({reduce_sum(mul(y, dy))}, {x, scale, offset});
    return std::vector<output>(grads.begin(), grads.end());
  };
  auto fused = fetch_gradients(fused_batch_norm(x, scale, offset, {}, {}).y);
  auto mean = reduce_mean(x, {0, 1, 2});
  auto centred = sub(x, mean);
  auto inv_std = rsqrt(add(reduce_mean(square(centred), {0, 1, 2}), scalar<float>(g, 1e-3f)));
  auto composed = fetch_gradients(add(mul(mul(centred, inv_std), scale), offset));
  session s(g);
  tensor xv(dtype::float32, dims), dyv(dtype::float32, dims);
  xv.mutable_flat<float>() = Eigen::ArrayXf::Random(xv.num_elements());
  dyv.mutable_flat<float>() = Eigen::ArrayXf::Random(dyv.num_elements());
  const feed_list feeds{{x, xv}, {dy, dyv}};
  std::vector<double> fused_times, composed_times;
  for (int round = 0; round < 11; ++round)
    for (auto* fetches : {&fused, &composed}) {
      const double t0 = now_seconds();
      s.run(feeds, *fetches);
      if (round > 0)
        (fetches == &fused ? fused_times : composed_times).push_back(now_seconds() - t0);
    }
  return {1000.0 * median(std::move(fused_times)), 1000.0 * median(std::move(composed_times))};
}

}  // namespace

void add_image_model_rows(const add_row_fn& add_row, bool with_torch) {
  const auto [fused_bn, composed_bn] = batch_norm_ms();
  add_row("batch_norm_fused_ms", fused_bn, "ms",
          fmt::format("training batch norm [16,28,28,256], forward and backward, by "
                      "fused_batch_norm and its gradient op; {:.2f}x the composed ops below "
                      "(alternating rounds)",
                      fused_bn / composed_bn));
  add_row("batch_norm_composed_ms", composed_bn, "ms",
          "the same from reduce_mean, sub, square, rsqrt, mul and add, differentiated by "
          "gradients()");
  for (const auto& run : image_model_runs) {
    const double ours = image_model_step_ms(run);
    std::optional<double> ref;
    if (with_torch) ref = torch_image_model_step_ms(run);
    const std::string setting =
        fmt::format("batch {}, {}x{} images, training mode, SGD", batch, run.size, run.size);
    add_row(fmt::format("{}_step_ms", run.name), ours, "ms",
            ref ? fmt::format("{}; {:.2f}x PyTorch; target <= 0.8x", setting, ours / *ref)
                : setting + "; PyTorch not measured");
    if (ref)
      add_row(fmt::format("torch_{}_step_ms", run.name), *ref, "ms",
              "torchvision's model (perf/torch_image_models.py), same batch, 2 threads, same "
              "machine");
  }
}

void add_convnet_rows(const add_row_fn& add_row, bool with_torch) {
  const auto [fused_update, unfused_update] = dense_sgd_update_ms();
  add_row("overfeat_fc1_sgd_update_ms", fused_update, "ms",
          fmt::format("w -= lr * x^T dy, 36864x3072 weights, batch {}, by apply_sgd_matmul; "
                      "{:.2f}x the matmul and apply_sgd it replaces (alternating rounds)",
                      batch, fused_update / unfused_update));
  add_row("overfeat_fc1_sgd_update_ms_unfused", unfused_update, "ms",
          "the same update as built: the gradient written out by matmul, then apply_sgd");
  for (const auto& model : models::convnet_names()) {
    const auto [ours, own_conv] = convnet_step_ms(model);
    std::optional<double> ref;
    if (with_torch) ref = torch_convnet_step_ms(model);
    add_row(fmt::format("{}_step_ms", model), ours, "ms",
            ref ? fmt::format("batch {}; {:.2f}x PyTorch; target <= 0.8x", batch, ours / *ref)
                : fmt::format("batch {}; PyTorch not measured", batch));
    add_row(fmt::format("{}_step_ms_own_conv", model), own_conv, "ms",
            fmt::format("the same step with actorflow's own convolution kernels, in alternating "
                        "rounds ({:.2f}x the above)",
                        own_conv / ours));
    if (ref)
      add_row(fmt::format("torch_{}_step_ms", model), *ref, "ms",
              "PyTorch, same layers (perf/torch_convnets.py), same machine");
  }
  add_image_model_rows(add_row, with_torch);
}

}  // namespace actorflow::bench
