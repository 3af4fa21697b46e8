// Automatic differentiation: the graph transformation and its errors. Every
// op's gradient is checked against finite differences in test_ops.
#include <doctest/doctest.h>

#include "actors/session.hpp"
#include "ops/array.hpp"
#include "core/gradients.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"

using namespace actorflow;

namespace {

tensor doubles(std::vector<double> v, shape dims) { return tensor::from_vector<double>(v, dims); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

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
  CHECK(error_of([&] { gradients({y}, {a}, {constant(g, tensor::scalar<float>(1))}); })
            .find("grad_ys[0]") != std::string::npos);
}
