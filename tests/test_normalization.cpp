// Batch normalization as a layer in a session: the moving averages'
// updates (Keras's formula, run with the training step through the
// update_ops collection), inference over them, and a moving variance
// restored negative. The ops themselves are in tests/ops/normalization_cases.cpp.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "actors/checkpoint.hpp"
#include "actors/session.hpp"
#include "ops/math.hpp"
#include "ops/normalization.hpp"
#include "ops/reduce.hpp"
#include "ops/train.hpp"

namespace actorflow {
namespace {

tensor batch() {
  // Channel 0 holds {1, 3} (mean 2, unbiased variance 2), channel 1 {2, 6} (4, 8).
  return tensor::from_vector<float>({1, 2, 3, 6}, shape{2, 1, 1, 2});
}

std::vector<float> values_of(session& s, const variable& v) {
  return s.run({}, {v.value()})[0].to_vector<float>();
}

struct bn_model {
  graph g;
  output x;
  batch_norm_layer_params params;
  output y_train, y_eval;
  operation step;

  bn_model() {
    x = placeholder(g, dtype::float32, {-1, 1, 1, 2}, "x");
    params = make_batch_norm_layer(g, 2, "bn", 0.9, 0.001);
    y_train = batch_norm_layer(x, params, true, "bn_train");
    y_eval = batch_norm_layer(x, params, false, "bn_eval");
    auto loss = reduce_sum(square(y_train), {}, false, "loss");
    auto train = sgd(0.1).minimize(loss);
    step = train_step_with_updates(g, train);
  }
};

TEST_CASE("a training step updates the moving averages as Keras does, and trains gamma and beta") {
  bn_model m;
  session s(m.g);
  s.run({}, {}, {global_variables_initializer(m.g)});
  s.run({{m.x, batch()}}, {}, {m.step});
  // moving = moving * 0.9 + batch * 0.1, from zeros and ones.
  auto mean = values_of(s, m.params.moving_mean);
  auto variance = values_of(s, m.params.moving_variance);
  CHECK(mean[0] == doctest::Approx(0.2));
  CHECK(mean[1] == doctest::Approx(0.4));
  CHECK(variance[0] == doctest::Approx(0.9 + 0.2));
  CHECK(variance[1] == doctest::Approx(0.9 + 0.8));
  // gamma and beta are trained (the loss depends on them); the moving
  // averages are not among the optimizer's variables.
  auto gamma = values_of(s, m.params.gamma);
  CHECK(gamma[0] != doctest::Approx(1.0));
  s.run({{m.x, batch()}}, {}, {m.step});
  CHECK(values_of(s, m.params.moving_mean)[0] == doctest::Approx(0.2 * 0.9 + 0.2));
}

TEST_CASE("inference normalizes with the moving averages, training with the batch") {
  bn_model m;
  session s(m.g);
  s.run({}, {}, {global_variables_initializer(m.g)});
  // Fresh averages (mean 0, variance 1): inference is y = x / sqrt(1 + eps).
  auto out = s.run({{m.x, batch()}}, {m.y_eval, m.y_train});
  auto eval = out[0].to_vector<float>();
  auto train = out[1].to_vector<float>();
  CHECK(eval[0] == doctest::Approx(1 / std::sqrt(1.001)));
  CHECK(eval[3] == doctest::Approx(6 / std::sqrt(1.001)));
  CHECK(train[0] == doctest::Approx(-1 / std::sqrt(1.001)));
  CHECK(train[2] == doctest::Approx(1 / std::sqrt(1.001)));
  // Fetching the training output without the step changes no average.
  CHECK(values_of(s, m.params.moving_mean)[0] == 0.f);
}

TEST_CASE("a moving variance restored negative fails inference, naming the node") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("actorflow_bn_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "bad.afck").string();
  {
    bn_model m;
    session s(m.g);
    s.run({}, {}, {global_variables_initializer(m.g)});
    auto negative = tensor::from_vector<float>({1, -0.5f}, shape{2});
    s.run({}, {assign(m.params.moving_variance, constant(m.g, negative))});
    save_checkpoint(s, path, 1);
  }
  bn_model m;
  session s(m.g);
  restore_checkpoint(s, path);
  CHECK_THROWS_WITH_AS(s.run({{m.x, batch()}}, {m.y_eval}),
                       doctest::Contains("variance[1] is -0.5"), error);
  try {
    s.run({{m.x, batch()}}, {m.y_eval});
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("bn_eval") != std::string::npos);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace actorflow
