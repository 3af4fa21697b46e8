// Training with variables on an accelerator, the same checks for the stand-in
// (tests/test_device_variables.cpp) and a GPU (tests/cuda/gpu_kernel_tests.cpp):
// the Fashion-MNIST MLP trained a few steps with each optimizer, its variables
// and slots living in the device's memory, against the same steps on the CPU.
#pragma once
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/lm_training.hpp"
#include "ops/case_inputs.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"

namespace actorflow::testing {

/// A runtime of one CPU device (one thread) and the accelerator stand-in,
/// with `memory_bytes` of device memory (0: no limit); no GPU.
inline std::shared_ptr<runtime> with_stand_in(size_t memory_bytes = 0) {
  return std::make_shared<runtime>(runtime_options{.compute_threads = 1,
                                                   .gpus = 0,
                                                   .stand_in_devices = 1,
                                                   .stand_in_memory_bytes = memory_bytes});
}

/// A runtime of one CPU device (one thread): the results to compare with.
inline std::shared_ptr<runtime> cpu_only() {
  return std::make_shared<runtime>(runtime_options{.compute_threads = 1, .gpus = 0});
}

inline accelerator& stand_in_of(runtime& rt) {
  auto* d = rt.find_device("stand_in", 0);
  REQUIRE(d != nullptr);
  REQUIRE(d->accel != nullptr);
  return *d->accel;
}

/// What the session's placement log says of `node`; fails when it has none.
inline placement_entry entry_of(const session& s, const std::string& node) {
  for (auto& e : s.placement_log())
    if (e.node == node) return e;
  FAIL("no placement log entry for '" << node << "'");
  return {};
}

/// The device's memory in use once every launch has let go of its values
/// (the last launch's state may go a moment after the step's answer).
inline size_t settled_bytes_in_use(accelerator& a) {
  for (int i = 0; i < 1000 && a.stats().memory.bytes_in_use > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return a.stats().memory.bytes_in_use;
}

struct device_training {
  std::vector<float> losses;
  std::map<std::string, variable_state> variables;
  std::vector<placement_entry> log;
  /// Bytes the device copied in and out per step, from the second step on.
  int64_t bytes_in_per_step = 0, bytes_out_per_step = 0;
};

inline constexpr int device_training_batch = 16;

// A rate at which each optimizer's loss falls over the few steps.
inline double learning_rate_for(const std::string& optimizer) {
  return optimizer == "adam" || optimizer == "rmsprop" ? 1e-3 : 0.05;
}

// Trains the MLP with `optimizer` for `steps` steps on /cpu:0 (device "") or
// with every layer on `device`, from `start` (restored) or from the
// initializers; two fixed batches in turn, so that the loss falls.
inline device_training train_mlp_on(const std::shared_ptr<runtime>& rt, const std::string& device,
                                    const std::string& optimizer, int steps,
                                    const std::map<std::string, variable_state>* start = nullptr) {
  constexpr int batch = device_training_batch;
  graph g;
  auto images = placeholder(g, dtype::float32, shape{batch, 28, 28, 1}, "images");
  auto labels = placeholder(g, dtype::int32, shape{batch}, "labels");
  std::vector<std::string> devices;
  if (!device.empty()) devices.push_back(device);
  auto net = models::make_classifier(g, "mlp", 5, devices);
  auto loss = models::mean_cross_entropy(net->logits(images), labels);
  auto train = make_optimizer(optimizer, learning_rate_for(optimizer))->minimize(loss);
  session s(g, rt);
  if (start)
    s.restore_variables(*start);
  else
    s.run({global_variables_initializer(g)});
  random_source rnd;
  std::vector<feed_list> batches;
  for (int b = 0; b < 2; ++b)
    batches.push_back({{images, rnd.uniform(dtype::float32, shape{batch, 28, 28, 1}, 0, 1)},
                       {labels, rnd.uniform(dtype::int32, shape{batch}, 0, 9)}});
  accelerator* accel = nullptr;
  if (!device.empty())
    for (auto& d : rt->devices()) accel = d.name == device ? d.accel : accel;
  device_training out;
  accelerator_stats after_first;
  for (int step = 0; step < steps; ++step) {
    out.losses.push_back(s.run(batches[step % 2], {loss}, {train})[0].item<float>());
    if (step == 0 && accel) after_first = accel->stats();
  }
  if (accel && steps > 1) {
    auto end = accel->stats();
    out.bytes_in_per_step = (end.bytes_copied_in - after_first.bytes_copied_in) / (steps - 1);
    out.bytes_out_per_step = (end.bytes_copied_out - after_first.bytes_copied_out) / (steps - 1);
  }
  out.variables = s.snapshot_variables();
  out.log = s.placement_log();
  return out;
}

// Each value and slot of `got` within `epsilon` (relative) of `want`'s.
inline void check_same_variables(const std::map<std::string, variable_state>& want,
                                 const std::map<std::string, variable_state>& got, double epsilon) {
  REQUIRE(got.size() == want.size());
  auto close = [&](const tensor& a, const tensor& b, const std::string& what) {
    REQUIRE_MESSAGE(a.type() == b.type(), what);
    REQUIRE_MESSAGE(a.dims() == b.dims(), what);
    if (a.type() == dtype::int64) {
      CHECK_MESSAGE(a.equals(b), what);
      return;
    }
    auto x = a.to_vector<float>(), y = b.to_vector<float>();
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i)
      bad += !(y[i] == doctest::Approx(x[i]).epsilon(epsilon).scale(1e-3));
    CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << x.size() << " elements differ");
  };
  for (auto& [name, state] : want) {
    auto& other = got.at(name);
    close(state.value, other.value, name);
    REQUIRE_MESSAGE(other.slots.size() == state.slots.size(), name);
    for (auto& [slot, value] : state.slots) close(value, other.slots.at(slot), name + "/" + slot);
  }
}

// Every optimizer: the losses and the final variables (slots included) on
// `device` are the CPU's, and a step moves only the batch, the learning rate
// and the loss across the cut, never a weight or a gradient.
inline void check_training_on(const std::shared_ptr<runtime>& cpu,
                              const std::shared_ptr<runtime>& rt, const std::string& device,
                              double epsilon) {
  constexpr int steps = 4;
  for (const char* optimizer : {"sgd", "momentum", "adam", "rmsprop", "adagrad"}) {
    CAPTURE(optimizer);
    auto want = train_mlp_on(cpu, "", optimizer, steps);
    auto got = train_mlp_on(rt, device, optimizer, steps);
    REQUIRE(got.losses.size() == want.losses.size());
    for (size_t i = 0; i < want.losses.size(); ++i)
      CHECK(got.losses[i] == doctest::Approx(want.losses[i]).epsilon(epsilon));
    CHECK(want.losses.back() < want.losses.front());
    check_same_variables(want.variables, got.variables, epsilon * 10);
    int variables_there = 0, updates_there = 0;
    for (auto& e : got.log) {
      variables_there += e.op == "variable" && e.device == device;
      updates_there += e.op.rfind("apply_", 0) == 0 && e.device == device;
      CHECK_MESSAGE((e.op != "variable" || e.device == device), e.node << " on " << e.device);
    }
    CHECK(variables_there == 6);  // three layers' weights and biases
    CHECK(updates_there == 6);
    // In: the images, the logits' gradient (the loss is on the CPU) and a few
    // scalars; out: the logits. The smallest weight matrix is 20 KiB.
    const int64_t images_bytes = device_training_batch * 28 * 28 * 4;
    CHECK(got.bytes_in_per_step < images_bytes + 4096);
    CHECK(got.bytes_out_per_step < 4096);
  }
}

// A small LSTM language model on random words, 5 steps on `device` (empty:
// no hint): the recurrence as a loop, the embedding's gather, the sampled or
// full softmax, Adam's slots. Its losses, and its placement log in `log`.
inline std::vector<float> lm_losses(const std::shared_ptr<runtime>& rt, const std::string& device,
                                    bool full_softmax,
                                    std::vector<placement_entry>* log = nullptr) {
  lm::lm_config c;
  c.vocab = 300;
  c.embedding = 16;
  c.hidden = 16;
  c.steps = 6;
  c.streams = 4;
  c.sampled = 24;
  c.full_softmax = full_softmax;
  c.seed = 7;
  std::mt19937 rng(11);
  std::vector<int64_t> words(static_cast<size_t>(c.streams * c.steps * 8 + 1));
  for (auto& w : words) w = std::uniform_int_distribution<int64_t>(0, c.vocab - 1)(rng);
  apps::lm_trainer lm(c, words, words, apps::lm_placement{.rt = rt, .device = device});
  lm.sess().run({global_variables_initializer(lm.g())});
  std::vector<float> losses;
  for (int64_t step = 0; step < 5; ++step) losses.push_back(lm.run_step(step));
  if (log) *log = lm.sess().placement_log();
  return losses;
}

}  // namespace actorflow::testing
