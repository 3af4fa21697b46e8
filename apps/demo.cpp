// actorflow-demo: fits a linear model y = X w + b by gradient descent, with the
// gradient written out as graph ops, to show a graph with variables, feeds and
// an update op running on the actor runtime. (Training with automatic
// differentiation and real data comes with actorflow-train.)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <random>

#include "actors/session.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"

using namespace actorflow;

int main(int argc, char** argv) {
  CLI::App app{"actorflow-demo: linear regression on the actor runtime"};
  int steps = 200, batch = 256, features = 8;
  double lr = 0.1;
  app.add_option("--steps", steps, "gradient steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "examples per step")->check(CLI::PositiveNumber);
  app.add_option("--features", features, "input features")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  graph g;
  auto x = placeholder(g, dtype::float32, {batch, features}, "x");
  auto y = placeholder(g, dtype::float32, {batch, 1}, "y");
  auto w = make_variable(random_normal(g, {features, 1}, dtype::float32, 0.0, 0.1, 1), "w");
  auto b = make_variable(scalar(g, 0.0f), "b");
  auto err = matmul(x, w) + b.value() - y;
  auto loss = reduce_mean(square(err), {}, false, "loss");
  // d loss / d w = 2/N X^T err, d loss / d b = 2 mean(err)
  auto grad_w = matmul(x, err, true, false) * (2.0 / batch);
  auto grad_b = reduce_mean(err) * 2.0;
  auto train = group(g,
                     {operation(&g, assign_sub(w, grad_w * lr).ref().node),
                      operation(&g, assign_sub(b, grad_b * lr).ref().node)},
                     "train");

  // Synthetic data: y = X w_true + 0.5 + noise.
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(static_cast<size_t>(features));
  for (int j = 0; j < features; ++j) w_true[size_t(j)] = float(j % 2 ? -j : j) * 0.5f;
  auto make_batch = [&] {
    tensor xs(dtype::float32, {batch, features}), ys(dtype::float32, {batch, 1});
    auto xm = xs.mutable_matrix<float>();
    auto ym = ys.mutable_matrix<float>();
    for (int i = 0; i < batch; ++i) {
      float target = 0.5f;
      for (int j = 0; j < features; ++j) {
        xm(i, j) = normal(rng);
        target += xm(i, j) * w_true[size_t(j)];
      }
      ym(i, 0) = target + 0.01f * normal(rng);
    }
    return feed_list{{x, xs}, {y, ys}};
  };

  session s(g);
  s.run({global_variables_initializer(g)});
  fmt::print("actorflow-demo: linear regression, {} features, batch {}, lr {}\n", features, batch,
             lr);
  float last = 0;
  for (int step = 1; step <= steps; ++step) {
    auto out = s.run(make_batch(), {loss}, {train});
    last = out[0].item<float>();
    if (step == 1 || step % 25 == 0 || step == steps)
      fmt::print("step {:4d}  loss {:.6f}\n", step, last);
  }
  auto learned = s.eval(w).to_vector<float>();
  float max_diff = 0;
  for (int j = 0; j < features; ++j)
    max_diff = std::max(max_diff, std::abs(learned[size_t(j)] - w_true[size_t(j)]));
  fmt::print("learned b={:.4f} (true 0.5), max |w - w_true| = {:.4f}\n", s.eval(b).item<float>(),
             max_diff);
  fmt::print("final_loss={:.6f}\n", last);
  return max_diff < 0.05f ? 0 : 1;
}
