// The LSTM language model (apps/lib/lstm_lm.hpp, apps/lib/lm_training.hpp):
// the cell against Keras's formula, the gradients of the cell and of a 3-step
// lstm_over_time against float64 central finite differences, and training on
// a slice of Debian's fortunes: the loss falls, and a run resumed from a
// checkpoint repeats the uninterrupted run's losses bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "actors/checkpoint.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "apps/lib/lm_training.hpp"
#include "apps/lib/lstm_lm.hpp"
#include "core/gradients.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"

using namespace actorflow;
namespace fs = std::filesystem;

namespace {

tensor random_doubles(shape dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  tensor t(dtype::float64, dims);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<double>()[i] = d(rng);
  return t;
}

// A differentiable graph of placeholders: loss = sum_k sum(outputs_k * w_k)
// with fixed random w_k, so that every output's gradient is checked.
struct checked_graph {
  graph g;
  std::vector<output> inputs;
  std::vector<tensor> values;
  output loss;

  output input(shape dims, const std::string& name) {
    inputs.push_back(placeholder(g, dtype::float64, dims, name));
    values.push_back(random_doubles(dims, 100 + values.size()));
    return inputs.back();
  }
  void set_loss(const std::vector<output>& outputs) {
    for (size_t k = 0; k < outputs.size(); ++k) {
      auto w = constant(g, random_doubles(outputs[k].dims(), 900 + k));
      auto term = reduce_sum(outputs[k] * w);
      loss = k == 0 ? term : loss + term;
    }
  }
};

feed_list feeds_of(const checked_graph& c) {
  feed_list f;
  for (size_t i = 0; i < c.inputs.size(); ++i) f.emplace_back(c.inputs[i], c.values[i]);
  return f;
}

// gradients() against central differences of the loss, element by element.
void check_gradients(checked_graph& c) {
  auto grads = gradients({c.loss}, c.inputs);
  session s(c.g);
  auto analytic = s.run(feeds_of(c), grads);
  const double eps = 1e-6;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    CAPTURE(c.inputs[i].name());
    for (int64_t j = 0; j < c.values[i].num_elements(); ++j) {
      CAPTURE(j);
      auto at = [&](double delta) {
        auto feeds = feeds_of(c);
        tensor moved = c.values[i].clone();
        moved.mutable_data<double>()[j] += delta;
        feeds[i].second = moved;
        return s.eval(c.loss, feeds).item<double>();
      };
      double numeric = (at(eps) - at(-eps)) / (2 * eps);
      CHECK(std::abs(analytic[i].data<double>()[j] - numeric) <= 1e-6 * (1 + std::abs(numeric)));
    }
  }
}

double sigmoid_of(double z) { return 1 / (1 + std::exp(-z)); }

}  // namespace

TEST_CASE("lstm_cell computes Keras's LSTMCell: gates i, f, g, o") {
  graph g;
  // batch 1, E = 1, H = 1: z = [x, h] @ kernel + bias has one column per gate.
  auto x = constant(g, tensor::from_vector<double>({0.5}, {1, 1}));
  auto h = constant(g, tensor::from_vector<double>({-0.3}, {1, 1}));
  auto c = constant(g, tensor::from_vector<double>({0.8}, {1, 1}));
  std::vector<double> k{0.1, 0.2, 0.3, 0.4, -0.5, 0.6, -0.7, 0.8};  // rows x, h
  auto kernel = constant(g, tensor::from_vector<double>(k, {2, 4}));
  std::vector<double> b{0.05, 1.0, -0.1, 0.2};
  auto bias = constant(g, tensor::from_vector<double>(b, {4}));
  auto next = lm::lstm_cell(x, h, c, kernel, bias);
  session s(g);
  auto out = s.run({}, {next.h, next.c});
  auto z = [&](int gate) {
    return 0.5 * k[size_t(gate)] - 0.3 * k[size_t(4 + gate)] + b[size_t(gate)];
  };
  double want_c = sigmoid_of(z(1)) * 0.8 + sigmoid_of(z(0)) * std::tanh(z(2));
  double want_h = sigmoid_of(z(3)) * std::tanh(want_c);
  CHECK(out[1].item<double>() == doctest::Approx(want_c).epsilon(1e-12));
  CHECK(out[0].item<double>() == doctest::Approx(want_h).epsilon(1e-12));
}

TEST_CASE("the LSTM cell's gradients match float64 finite differences") {
  checked_graph c;
  const int64_t batch = 2, in = 3, hidden = 2;
  auto x = c.input({batch, in}, "x");
  auto h = c.input({batch, hidden}, "h");
  auto cell = c.input({batch, hidden}, "c");
  auto kernel = c.input({in + hidden, 4 * hidden}, "kernel");
  auto bias = c.input({4 * hidden}, "bias");
  auto next = lm::lstm_cell(x, h, cell, kernel, bias);
  c.set_loss({next.h, next.c});
  check_gradients(c);
}

TEST_CASE("a 3-step lstm_over_time's gradients match float64 finite differences") {
  checked_graph c;
  const int64_t steps = 3, batch = 2, in = 3, hidden = 2;
  auto inputs = c.input({steps, batch, in}, "inputs");
  auto h0 = c.input({batch, hidden}, "h0");
  auto c0 = c.input({batch, hidden}, "c0");
  auto kernel = c.input({in + hidden, 4 * hidden}, "kernel");
  auto bias = c.input({4 * hidden}, "bias");
  auto seq = lm::lstm_over_time(inputs, h0, c0, kernel, bias);
  CHECK(seq.outputs.dims() == shape{steps, batch, hidden});
  c.set_loss({seq.outputs, seq.h, seq.c});
  check_gradients(c);
}

namespace {

// The first `tokens` training and validation tokens of the real corpus.
std::unique_ptr<apps::lm_trainer> small_trainer(const fortunes_corpus& corpus, int64_t tokens,
                                                bool full_softmax) {
  lm::lm_config config;
  config.vocab = corpus.vocab_size();
  config.streams = 8;
  config.full_softmax = full_softmax;
  config.seed = 3;
  auto head = [&](const std::vector<int64_t>& ids) {
    return std::vector<int64_t>(ids.begin(), ids.begin() + std::min<int64_t>(tokens, ids.size()));
  };
  return std::make_unique<apps::lm_trainer>(config, head(corpus.train), head(corpus.valid));
}

double mean(const std::vector<float>& v, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += v[i];
  return sum / double(to - from);
}

}  // namespace

TEST_CASE("an epoch on a slice of fortunes lowers the loss and the perplexity" *
          doctest::test_suite("fortunes")) {
  if (!testing::have_fortunes()) return;
  auto corpus = load_fortunes();
  for (bool full : {false, true}) {
    CAPTURE(full);
    // 8 streams x 35 steps x 24 segments.
    auto lm = small_trainer(corpus, 8 * 35 * 24 + 1, full);
    lm->sess().run({global_variables_initializer(lm->g())});
    REQUIRE(lm->steps_per_epoch() == 24);
    double before = lm->validation_perplexity();
    std::vector<float> losses;
    for (int64_t step = 0; step < lm->steps_per_epoch(); ++step)
      losses.push_back(lm->run_step(step));
    double after = lm->validation_perplexity();
    CHECK(mean(losses, 18, 24) < mean(losses, 0, 6) - 0.5);
    CHECK(after < 0.8 * before);
  }
}

TEST_CASE("a resumed lstm_lm run repeats the uninterrupted run's losses exactly" *
          doctest::test_suite("fortunes")) {
  if (!testing::have_fortunes()) return;
  auto corpus = load_fortunes();
  auto dir = fs::temp_directory_path() / "actorflow-resume-lstm_lm";
  fs::remove_all(dir);
  // 6 segments per epoch: the stop at step 8 is mid-epoch (state carried in
  // the checkpoint), and the run crosses two epoch starts (state reset).
  const int64_t tokens = 8 * 35 * 6 + 1, stop = 8, total = 14;
  std::vector<float> whole, resumed;
  {
    auto lm = small_trainer(corpus, tokens, false);
    REQUIRE(lm->steps_per_epoch() == 6);
    lm->sess().run({global_variables_initializer(lm->g())});
    checkpoint_manager ckpt(dir.string(), 2);
    for (int64_t step = 0; step < total; ++step) {
      whole.push_back(lm->run_step(step));
      if (step + 1 == stop) ckpt.save(lm->sess(), stop);
    }
  }
  {
    auto lm = small_trainer(corpus, tokens, false);
    checkpoint_manager ckpt(dir.string(), 2);
    auto r = ckpt.restore_latest(lm->sess());
    REQUIRE(r.restored);
    REQUIRE(r.step == stop);
    CHECK(lm->sess().eval(global_step(lm->g())).item<int64_t>() == stop);
    for (int64_t step = stop; step < total; ++step) resumed.push_back(lm->run_step(step));
  }
  for (size_t i = 0; i < resumed.size(); ++i) {
    CAPTURE(i);
    CHECK(resumed[i] == whole[size_t(stop) + i]);  // bit for bit
  }
  fs::remove_all(dir);
}
