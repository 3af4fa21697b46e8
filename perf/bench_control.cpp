#include "perf/bench_control.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "actors/session.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/state.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

namespace {

double per_iteration_us(session& s, const feed_list& feeds, const output& result, int iterations) {
  double secs = median_seconds(5, 1, [&] { s.run(feeds, {result}); });
  return secs * 1e6 / iterations;
}

}  // namespace

double while_us_per_iteration(int iterations) {
  graph g;
  auto n = placeholder(g, dtype::int32, {}, "n");
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], n); },
      [&](const std::vector<output>& v) {
        return std::vector<output>{v[0] + scalar<int32_t>(g, 1), v[1] + scalar<float>(g, 1)};
      },
      {scalar<int32_t>(g, 0), scalar<float>(g, 0)});
  session s(g);
  return per_iteration_us(s, {{n, tensor::scalar<int32_t>(iterations)}}, outs[1], iterations);
}

double while_us_per_iteration_4ops(int iterations) {
  graph g;
  auto n = placeholder(g, dtype::int32, {}, "n");
  auto x = placeholder(g, dtype::float32, {64, 64}, "x");
  tensor weights(dtype::float32, shape{64, 64});
  for (int i = 0; i < 64 * 64; ++i) weights.mutable_data<float>()[i] = 0.1f * std::sin(float(i));
  auto w = constant(g, weights);
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], n); },
      [&](const std::vector<output>& v) {
        return std::vector<output>{v[0] + scalar<int32_t>(g, 1), tanh(matmul(v[1], w) + 1.0) * 0.5};
      },
      {scalar<int32_t>(g, 0), x});
  session s(g);
  tensor ones(dtype::float32, shape{64, 64});
  std::fill(ones.mutable_data<float>(), ones.mutable_data<float>() + 64 * 64, 1.0f);
  return per_iteration_us(s, {{n, tensor::scalar<int32_t>(iterations)}, {x, ones}}, outs[1],
                          iterations);
}

std::optional<std::string> tensorflow_python() {
  if (const char* p = std::getenv("ACTORFLOW_TF_PYTHON"); p != nullptr && *p) return p;
  if (python_runs("python3", "import tensorflow")) return "python3";
  return std::nullopt;
}

std::optional<std::string> run_tf_reference(const std::string& script, const std::string& args) {
  auto path = reference_script(script, "TensorFlow");
  if (!path) return std::nullopt;
  auto python = tensorflow_python();
  if (!python) return std::nullopt;
  return run_reference_script(*python, *path, args);
}

std::optional<tf_while_figures> tf_while_reference(int iterations) {
  auto out = run_tf_reference("tf_while.py", std::to_string(iterations));
  static const std::regex line(R"(us_per_iteration=([0-9.]+) us_per_iteration_4ops=([0-9.]+))");
  std::smatch m;
  if (!out || !std::regex_search(*out, m, line)) return std::nullopt;
  return tf_while_figures{std::stod(m[1]), std::stod(m[2])};
}

std::optional<double> tf_lstm_lm_words_per_s() {
  auto out = run_tf_reference("tf_lstm_lm.py", "1");
  static const std::regex line(R"(words_per_s=([0-9.]+))");
  std::smatch m;
  if (!out || !std::regex_search(*out, m, line)) return std::nullopt;
  return std::stod(m[1]);
}

}  // namespace actorflow::bench
