// Automatic differentiation: the graph transformation and its errors. Every
// op's gradient is checked against finite differences in test_ops.
#include <doctest/doctest.h>

#include <cmath>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/conv.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/pool.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;

namespace {

tensor doubles(std::vector<double> v, shape dims) { return tensor::from_vector<double>(v, dims); }

}  // namespace

TEST_CASE("gradients of a small network through variables and broadcasting") {
  graph g;
  auto x = placeholder(g, dtype::float64, {-1, 2}, "x");
  auto w = make_variable(constant(g, doubles({1, 2, 3, 4}, {2, 2})), "w");
  auto b = make_variable(constant(g, doubles({0.5, -0.5}, {2})), "b");
  // loss = sum((x w + b) * x): the x path is used twice, b broadcasts over rows.
  auto y = (matmul(x, w) + b.value()) * x;
  auto loss = reduce_sum(y);
  auto grads = gradients({loss}, {w, b, x});
  REQUIRE(grads.size() == 3);
  session s(g);
  s.run({global_variables_initializer(g)});
  auto xv = doubles({1, 2, 3, 4}, {2, 2});
  auto out = s.run({{x, xv}}, {grads[0], grads[1], grads[2]});
  // d/dw[k][j] = sum_i x[i][k] x[i][j]
  CHECK(out[0].to_vector<double>() == std::vector<double>{10, 14, 14, 20});
  // d/db[j] = sum_i x[i][j]
  CHECK(out[1].to_vector<double>() == std::vector<double>{4, 6});
  // d/dx[i][k] = sum_j w[k][j] x[i][j] + (x w + b)[i][k]
  // row 0: x w + b = (7.5, 9.5); w x0 = (1*1+2*2, 3*1+4*2) = (5, 11)
  // row 1: x w + b = (15.5, 21.5); w x1 = (1*3+2*4, 3*3+4*4) = (11, 25)
  CHECK(out[2].to_vector<double>() == std::vector<double>{12.5, 20.5, 26.5, 46.5});
}

TEST_CASE("gradients: unconnected xs, stop_gradient, seeds and errors") {
  graph g;
  auto a = placeholder(g, dtype::float64, {2}, "a");
  auto unused = placeholder(g, dtype::float64, {2}, "unused");
  auto y = a * stop_gradient(a) + a;
  auto grads = gradients({y}, {a, unused}, {constant(g, doubles({1, 10}, {2}))});
  CHECK(grads[0].valid());
  CHECK_FALSE(grads[1].valid());
  session s(g);
  // d/da (a * const(a) + a) = a + 1, seeded with (1, 10).
  auto out = s.run({{a, doubles({2, 3}, {2})}}, {grads[0]});
  CHECK(out[0].to_vector<double>() == std::vector<double>{3, 40});

  CHECK(error_of([&] { gradients({shape_of(a)}, {a}); }).find("only float tensors") !=
        std::string::npos);
  CHECK(error_of([&] {
          gradients({y}, {a}, {constant(g, tensor::scalar<float>(1))});
        }).find("grad_ys[0]") != std::string::npos);
}

// Summing a tensor's many gradient terms, and the zeros for an output with
// none, add nodes while the driver walks the node: the graph's node storage
// moves under it (a crash, or an ASan report, before it read the node first).
TEST_CASE("gradients of a tensor with many consumers and of a split with unused parts") {
  graph g;
  auto x = placeholder(g, dtype::float64, {2}, "x");
  output total = x;
  for (int i = 1; i <= 500; ++i) total = add(total, mul(x, scalar(g, double(i))));
  auto parts = split(x, 2);
  auto loss = add(reduce_sum(total), reduce_sum(parts[1]));
  auto dx = gradients({loss}, {x})[0];
  session s(g);
  auto out = s.eval(dx, {{x, tensor::from_vector<double>({1, 2})}});
  CHECK(out.to_vector<double>() == std::vector<double>{1 + 500 * 501 / 2, 2 + 500 * 501 / 2});
}

TEST_CASE("gradients through an op marked not differentiable name the op") {
  graph g;
  auto x = placeholder(g, dtype::float64, {2, 3}, "x");
  auto y = reduce_sum(bias_add_grad(x, "sums"));
  auto what = error_of([&] { gradients({y}, {x}); });
  CHECK(what.find("op 'bias_add_grad' (node 'sums') is not differentiable") != std::string::npos);
  // An op with float outputs off the path from x to y does not matter.
  auto z = reduce_sum(x) + reduce_sum(bias_add_grad(constant(g, doubles({1, 2}, {1, 2}))));
  CHECK(gradients({z}, {x})[0].valid());
}

TEST_CASE("gradients with a -1 batch dim read the batch size at run time") {
  graph g;
  auto x = placeholder(g, dtype::float64, {-1, 3}, "x");
  auto grads = gradients({reduce_mean(x), reduce_mean(x, {0}), reduce_sum(reshape(x, {-1}))}, {x});
  auto per_row = gradients({reduce_mean(square(x), {1})}, {x});
  session s(g);
  auto xv = doubles({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3});
  auto out = s.run({{x, xv}}, {grads[0], per_row[0]});
  REQUIRE(out[0].dims() == shape{4, 3});
  // 1/12 from the mean of all, 1/4 from the column means, 1 from the sum.
  for (double v : out[0].to_vector<double>()) CHECK(v == doctest::Approx(1.0 / 12 + 0.25 + 1));
  // d/dx mean(x^2 over a row of 3) = 2x / 3.
  auto d = out[1].to_vector<double>();
  for (size_t i = 0; i < d.size(); ++i) CHECK(d[i] == doctest::Approx(2.0 * double(i + 1) / 3));
  // Another batch size in the same graph.
  auto two = s.run({{x, doubles({1, 2, 3, 4, 5, 6}, {2, 3})}}, {grads[0]});
  REQUIRE(two[0].dims() == shape{2, 3});
  CHECK(two[0].to_vector<double>()[0] == doctest::Approx(1.0 / 6 + 0.5 + 1));
}

TEST_CASE("gradients of a softmax classifier with a -1 batch dim") {
  graph g;
  auto x = placeholder(g, dtype::float64, {-1, 2}, "x");
  auto labels = placeholder(g, dtype::int64, {-1}, "labels");
  auto w = make_variable(constant(g, doubles({1, -1, 0.5, 2, 0, 1}, {2, 3})), "w");
  auto xent = sparse_softmax_cross_entropy_with_logits(matmul(x, w), labels);
  auto loss = reduce_mean(xent.loss);
  auto dw = gradients({loss}, {w})[0];
  // The same gradient by hand: x^T (softmax - onehot) / batch.
  auto by_hand = matmul(x, xent.backprop, true, false) / 3.0;
  session s(g);
  s.run({global_variables_initializer(g)});
  auto out = s.run({{x, doubles({1, 2, -1, 0.5, 0, 3}, {3, 2})},
                    {labels, tensor::from_vector<int64_t>({2, 0, 1})}},
                   {dw, by_hand});
  auto got = out[0].to_vector<double>(), want = out[1].to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]));
}

TEST_CASE("gradients: second order, the pow guard, and shapes unknown at build time") {
  graph g;
  auto x = placeholder(g, dtype::float64, {3}, "x");
  auto dx = gradients({reduce_sum(tanh(x))}, {x})[0];
  auto ddx = gradients({reduce_sum(dx)}, {x})[0];
  // d/dx b^x at b <= 0 is taken as 0 (as TensorFlow), not NaN.
  auto base = constant(g, doubles({-2, 0, 2}, {3}));
  auto dexp = gradients({reduce_sum(pow(base, x))}, {x})[0];
  session s(g);
  auto out = s.run({{x, doubles({-0.5, 0.25, 1}, {3})}}, {ddx, dexp});
  auto second = out[0].to_vector<double>();
  std::vector<double> xs = {-0.5, 0.25, 1};
  for (size_t i = 0; i < 3; ++i) {
    double t = std::tanh(xs[i]);
    CHECK(second[i] == doctest::Approx(-2 * t * (1 - t * t)));
  }
  auto d = out[1].to_vector<double>();
  CHECK(d[0] == 0);
  CHECK(d[1] == 0);
  CHECK(d[2] == doctest::Approx(std::pow(2.0, 1.0) * std::log(2.0)));

  // Tiling a tensor with two unknown dims leaves its gradient's shape undetermined.
  auto u = placeholder(g, dtype::float64, {-1, -1}, "u");
  auto what = error_of([&] { gradients({reduce_sum(tile(u, {2, 2}, "tiled"))}, {u}); });
  CHECK(what.find("[tile] cannot form the gradient of node 'tiled'") != std::string::npos);
}

TEST_CASE("gradients of a float32 convolutional classifier with a -1 batch dim") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 6, 6, 1}, "images");
  auto labels = placeholder(g, dtype::int32, {-1}, "labels");
  auto ones = [&](shape dims, float v) {
    std::vector<float> values(size_t(dims.num_elements()), v);
    return constant(g, tensor::from_vector<float>(values, dims));
  };
  auto filter = make_variable(ones({3, 3, 1, 2}, 0.1f), "filter");
  auto w = make_variable(ones({18, 3}, 0.05f), "w");
  auto b = make_variable(ones({3}, 0.f), "b");
  auto h = relu(conv2d(x, filter, {1, 1}, "SAME"));
  auto pooled = max_pool(h, {2, 2}, {2, 2}, "VALID");  // (-1,3,3,2)
  auto logits = bias_add(matmul(reshape(pooled, {-1, 18}), w), b);
  auto loss = reduce_mean(sparse_softmax_cross_entropy_with_logits(logits, labels).loss);
  auto grads = gradients({loss}, {filter, w, b});
  session s(g);
  s.run({global_variables_initializer(g)});
  std::vector<float> pixels(72);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = float(i % 7) / 7.f;
  auto out = s.run({{x, tensor::from_vector<float>(pixels, {2, 6, 6, 1})},
                    {labels, tensor::from_vector<int32_t>({0, 2})}},
                   {grads[0], grads[1], grads[2]});
  CHECK(out[0].dims() == shape{3, 3, 1, 2});
  CHECK(out[1].dims() == shape{18, 3});
  CHECK(out[2].dims() == shape{3});
  // Equal logits: softmax 1/3 each, so db = mean over the batch of (1/3 - onehot).
  auto db = out[2].to_vector<float>();
  CHECK(db[0] == doctest::Approx(1.0 / 3 - 0.5));
  CHECK(db[1] == doctest::Approx(1.0 / 3));
  CHECK(db[2] == doctest::Approx(1.0 / 3 - 0.5));
}
