// The generic numeric gradient check (as flashlight's jacobian test): for each
// case, y = op(inputs) and loss = sum_j sum(y_j * w_j) with fixed random
// weights; gradients() builds d loss / d input in the graph, a session runs it,
// and central finite differences of the op's eager kernel must agree within a
// tight float64 tolerance. Every op with a gradient must have a case. Inputs
// stay away from the points where an op is not differentiable (ties for max and
// the pools, 0 for relu and abs).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/grad_cases.hpp"
#include "ops/math.hpp"
#include "ops/op_cases.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {

std::vector<grad_case>& grad_cases() {
  static std::vector<grad_case> cases;
  return cases;
}

namespace {

using ints = std::vector<int64_t>;

// ---- inputs ------------------------------------------------------------------

std::mt19937_64& rng() {
  static std::mt19937_64 r(20240611);
  return r;
}

tensor uniform(shape dims, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(dims.num_elements()));
  for (auto& x : v) x = d(rng());
  return make<double>(std::move(dims), v);
}

tensor positive(shape dims) { return uniform(std::move(dims), 0.5, 2); }

// |x| in [0.2, 1.2) with random signs: away from the kinks of relu, abs and sign.
tensor nonzero(shape dims) {
  tensor t = uniform(dims, 0.2, 1.2);
  std::bernoulli_distribution flip(0.5);
  for (int64_t i = 0; i < t.num_elements(); ++i)
    if (flip(rng())) t.mutable_data<double>()[i] *= -1;
  return t;
}

// All different and 0.1 apart: no ties for max, min and max_pool.
tensor distinct(shape dims) {
  std::vector<double> v(static_cast<size_t>(dims.num_elements()));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), rng());
  for (auto& x : v) x = 0.1 * x - 0.05 * static_cast<double>(v.size());
  return make<double>(std::move(dims), v);
}

// Multiples of 0.1 in [-1, 1], shifted by `offset`: tensors with different
// offsets never tie (maximum, minimum).
tensor grid(shape dims, double offset) {
  std::uniform_int_distribution<int> d(-10, 10);
  std::vector<double> v(static_cast<size_t>(dims.num_elements()));
  for (auto& x : v) x = 0.1 * d(rng()) + offset;
  return make<double>(std::move(dims), v);
}

// Rows that sum to 1: labels for the dense cross-entropy.
tensor distributions(int64_t rows, int64_t cols) {
  tensor t = uniform({rows, cols}, 0.1, 1);
  double* p = t.mutable_data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = std::accumulate(p + r * cols, p + (r + 1) * cols, 0.0);
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] /= sum;
  }
  return t;
}

tensor ids(shape dims, std::vector<int64_t> v) { return make<int64_t>(std::move(dims), v); }
tensor ids32(shape dims, std::vector<int32_t> v) { return make<int32_t>(std::move(dims), v); }
tensor to_float32(const tensor& t) {
  return run_kernel("cast", {t}, {{"dtype", dtype::float32}})[0];
}

attr_map window(ints ksize, ints strides, const std::string& padding) {
  return {{"ksize", std::move(ksize)}, {"strides", std::move(strides)}, {"padding", padding}};
}
attr_map conv(ints strides, const std::string& padding) {
  return {{"strides", std::move(strides)}, {"padding", padding}};
}
attr_map axes(ints a, bool keep_dims = false) {
  return {{"axes", std::move(a)}, {"keep_dims", keep_dims}};
}

// ---- the table -----------------------------------------------------------------

std::vector<grad_case> unary_cases() {
  std::vector<grad_case> cases;
  for (const char* op : {"neg", "exp", "square", "sigmoid", "tanh", "identity"}) {
    cases.push_back({.op = op, .label = "(2,3)", .inputs = {uniform({2, 3})}});
    cases.push_back({.op = op, .label = "scalar", .inputs = {uniform({})}});
  }
  for (const char* op : {"abs", "sign", "relu"})
    cases.push_back({.op = op, .label = "(2,3) away from 0", .inputs = {nonzero({2, 3})}});
  for (const char* op : {"log", "sqrt", "rsqrt", "reciprocal"})
    cases.push_back({.op = op, .label = "(2,3) positive", .inputs = {positive({2, 3})}});
  cases.push_back({.op = "reciprocal", .label = "negative", .inputs = {uniform({4}, -2, -0.5)}});
  cases.push_back(
      {.op = "relu", .label = "unknown dim 0", .inputs = {nonzero({3, 2})}, .unknown_dim0 = {0}});
  // Derivative helpers: (dy, x) for relu_grad, (y, dy) for the others.
  cases.push_back(
      {.op = "relu_grad", .label = "(2,3)", .inputs = {uniform({2, 3}), nonzero({2, 3})}});
  cases.push_back({.op = "sigmoid_grad",
                   .label = "(2,3)",
                   .inputs = {uniform({2, 3}, 0.1, 0.9), uniform({2, 3})}});
  cases.push_back(
      {.op = "tanh_grad", .label = "(2,3)", .inputs = {uniform({2, 3}), uniform({2, 3})}});
  for (const char* op : {"sqrt_grad", "rsqrt_grad", "reciprocal_grad"})
    cases.push_back({.op = op, .label = "(2,3)", .inputs = {positive({2, 3}), uniform({2, 3})}});
  cases.push_back({.op = "cast",
                   .label = "float64 to float64",
                   .inputs = {uniform({2, 3})},
                   .attrs = {{"dtype", dtype::float64}}});
  // float32 on one side: a larger step (the function is linear) and tolerance.
  cases.push_back({.op = "cast",
                   .label = "float64 to float32",
                   .inputs = {uniform({2, 3})},
                   .attrs = {{"dtype", dtype::float32}},
                   .tolerance = 1e-4,
                   .eps = 1e-2});
  cases.push_back({.op = "cast",
                   .label = "float32 to float64",
                   .inputs = {to_float32(uniform({2, 3}))},
                   .attrs = {{"dtype", dtype::float64}},
                   .tolerance = 1e-4,
                   .eps = 1e-2});
  return cases;
}

// Same shapes, a row against a matrix, a column against a row, a scalar.
std::vector<grad_case> binary_cases() {
  std::vector<grad_case> cases;
  auto shapes = std::vector<std::pair<shape, shape>>{
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1}, {1, 3}}, {{}, {2, 3}}, {{2, 3}, {}}};
  for (auto& [a, b] : shapes) {
    std::string label = a.to_string() + " and " + b.to_string();
    for (const char* op : {"add", "sub", "mul"})
      cases.push_back({.op = op, .label = label, .inputs = {uniform(a), uniform(b)}});
    cases.push_back({.op = "div", .label = label, .inputs = {uniform(a), nonzero(b)}});
    cases.push_back({.op = "pow", .label = label, .inputs = {positive(a), uniform(b, -2, 2)}});
    for (const char* op : {"maximum", "minimum"})
      cases.push_back({.op = op, .label = label, .inputs = {grid(a, 0), grid(b, 0.05)}});
  }
  cases.push_back({.op = "add",
                   .label = "unknown dim 0 against a row",
                   .inputs = {uniform({4, 3}), uniform({3})},
                   .unknown_dim0 = {0}});
  cases.push_back({.op = "mul",
                   .label = "both with unknown dim 0",
                   .inputs = {uniform({4, 1}), uniform({4, 3})},
                   .unknown_dim0 = {0, 1}});
  auto cond = make<bool>({2, 3}, {true, false, false, true, true, false});
  cases.push_back(
      {.op = "select", .label = "same shapes", .inputs = {cond, uniform({2, 3}), uniform({2, 3})}});
  cases.push_back({.op = "select",
                   .label = "broadcast condition and scalar",
                   .inputs = {make<bool>({3}, {true, false, true}), uniform({2, 3}), uniform({})}});
  return cases;
}

std::vector<grad_case> reduce_cases() {
  std::vector<grad_case> cases;
  auto add_all = [&](const char* op, auto make_input) {
    cases.push_back({.op = op, .label = "all", .inputs = {make_input(shape{2, 3})}});
    cases.push_back(
        {.op = op, .label = "axis 0", .inputs = {make_input(shape{2, 3})}, .attrs = axes({0})});
    cases.push_back({.op = op,
                     .label = "axis -1 keep_dims",
                     .inputs = {make_input(shape{2, 3})},
                     .attrs = axes({-1}, true)});
    cases.push_back({.op = op,
                     .label = "axes 0 and 2 of rank 3",
                     .inputs = {make_input(shape{2, 3, 2})},
                     .attrs = axes({0, 2})});
    cases.push_back({.op = op,
                     .label = "all keep_dims",
                     .inputs = {make_input(shape{2, 2, 2})},
                     .attrs = axes({}, true)});
    cases.push_back({.op = op,
                     .label = "axis 0, unknown dim 0",
                     .inputs = {make_input(shape{4, 3})},
                     .attrs = axes({0}),
                     .unknown_dim0 = {0}});
    cases.push_back({.op = op,
                     .label = "axis 1, unknown dim 0",
                     .inputs = {make_input(shape{4, 3})},
                     .attrs = axes({1}),
                     .unknown_dim0 = {0}});
  };
  add_all("sum", [](shape s) { return uniform(s); });
  add_all("mean", [](shape s) { return uniform(s); });
  add_all("max", [](shape s) { return distinct(s); });
  add_all("min", [](shape s) { return distinct(s); });
  add_all("prod", [](shape s) { return uniform(s, 0.5, 1.5); });
  cases.push_back({.op = "prod",
                   .label = "rows with one and two zeros",
                   .inputs = {make<double>({3, 3}, {0, 2, 3, 0, 0, 1.5, -1, 2, 0.5})},
                   .attrs = axes({1})});
  cases.push_back({.op = "l2_loss", .label = "(2,3)", .inputs = {uniform({2, 3})}});
  cases.push_back({.op = "sum_to_shape_of",
                   .label = "(2,3) to (3)",
                   .inputs = {uniform({2, 3}), uniform({3})}});
  cases.push_back({.op = "sum_to_shape_of",
                   .label = "(2,3,2) to (3,1), unknown dim 0",
                   .inputs = {uniform({2, 3, 2}), uniform({3, 1})},
                   .unknown_dim0 = {0, 1}});
  return cases;
}

std::vector<grad_case> array_cases() {
  std::vector<grad_case> c;
  c.push_back({.op = "reshape",
               .label = "(2,3) to (3,2)",
               .inputs = {uniform({2, 3})},
               .attrs = {{"shape", ints{3, 2}}}});
  c.push_back({.op = "reshape",
               .label = "unknown dim 0 to (-1)",
               .inputs = {uniform({4, 3})},
               .attrs = {{"shape", ints{-1}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "reshape_like",
               .label = "(2,3) like (3,1,2), unknown dims",
               .inputs = {uniform({2, 3}), uniform({3, 1, 2})},
               .unknown_dim0 = {0, 1}});
  c.push_back({.op = "transpose", .label = "reversed", .inputs = {uniform({2, 3, 4})}});
  c.push_back({.op = "transpose",
               .label = "perm (1,2,0)",
               .inputs = {uniform({2, 3, 4})},
               .attrs = {{"perm", ints{1, 2, 0}}}});
  c.push_back({.op = "expand_dims",
               .label = "axis 1",
               .inputs = {uniform({2, 3})},
               .attrs = {{"axis", int64_t{1}}}});
  c.push_back({.op = "expand_dims",
               .label = "axis -1, unknown dim 0",
               .inputs = {uniform({2, 3})},
               .attrs = {{"axis", int64_t{-1}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "squeeze", .label = "all size-1 dims", .inputs = {uniform({1, 3, 1, 2})}});
  c.push_back({.op = "squeeze",
               .label = "axis 1, unknown dim 0",
               .inputs = {uniform({2, 1, 3})},
               .attrs = {{"axes", ints{1}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "concat",
               .label = "axis 0",
               .inputs = {uniform({1, 3}), uniform({2, 3})},
               .attrs = {{"axis", int64_t{0}}}});
  c.push_back({.op = "concat",
               .label = "three along axis -1",
               .inputs = {uniform({2, 1}), uniform({2, 3}), uniform({2, 2})},
               .attrs = {{"axis", int64_t{-1}}}});
  c.push_back({.op = "concat",
               .label = "axis 0, one unknown size",
               .inputs = {uniform({3, 2}), uniform({2, 2})},
               .attrs = {{"axis", int64_t{0}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "concat",
               .label = "axis 0, two unknown sizes",
               .inputs = {uniform({3, 2}), uniform({1, 2}), uniform({2, 2})},
               .attrs = {{"axis", int64_t{0}}},
               .unknown_dim0 = {0, 2}});
  c.push_back({.op = "split_like",
               .label = "axis 1, unknown dim 0",
               .inputs = {uniform({3, 5}), uniform({3, 2}), uniform({1, 3})},
               .attrs = {{"axis", int64_t{1}}},
               .unknown_dim0 = {0, 1}});
  c.push_back({.op = "concat",
               .label = "one input",
               .inputs = {uniform({2, 2})},
               .attrs = {{"axis", int64_t{1}}}});
  c.push_back({.op = "split",
               .label = "3 parts along axis 1",
               .inputs = {uniform({2, 6})},
               .attrs = {{"axis", int64_t{1}}, {"num_splits", int64_t{3}}}});
  c.push_back({.op = "split",
               .label = "sizes (1,-1) along axis 0, unknown dim 0",
               .inputs = {uniform({4, 2})},
               .attrs = {{"axis", int64_t{0}}, {"sizes", ints{1, -1}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "slice",
               .label = "inner block",
               .inputs = {uniform({3, 4})},
               .attrs = {{"begin", ints{1, 1}}, {"size", ints{2, 2}}}});
  c.push_back({.op = "slice",
               .label = "to the end of an unknown dim",
               .inputs = {uniform({4, 3})},
               .attrs = {{"begin", ints{1, 1}}, {"size", ints{-1, 1}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "pad",
               .label = "both sides, value 2",
               .inputs = {uniform({2, 3})},
               .attrs = {{"paddings", ints{1, 0, 2, 1}}, {"value", 2.0}}});
  c.push_back({.op = "pad",
               .label = "not after an unknown dim",
               .inputs = {uniform({3, 2})},
               .attrs = {{"paddings", ints{2, 0, 1, 1}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "tile",
               .label = "(2,3) by (2,1)",
               .inputs = {uniform({2, 3})},
               .attrs = {{"multiples", ints{2, 1}}}});
  c.push_back({.op = "tile",
               .label = "(2,1,2) by (2,3,2)",
               .inputs = {uniform({2, 1, 2})},
               .attrs = {{"multiples", ints{2, 3, 2}}}});
  c.push_back({.op = "tile",
               .label = "unknown dim 0 by (1,3)",
               .inputs = {uniform({2, 2})},
               .attrs = {{"multiples", ints{1, 3}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "tile",
               .label = "unknown dim 0 by (2,2)",
               .inputs = {uniform({2, 2})},
               .attrs = {{"multiples", ints{2, 2}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "gather",
               .label = "axis 0, repeated indices",
               .inputs = {uniform({4, 3}), ids({3}, {1, 3, 1})},
               .attrs = {{"axis", int64_t{0}}}});
  c.push_back({.op = "gather",
               .label = "axis 1, int32 (2,2) indices, unknown dim 0",
               .inputs = {uniform({2, 3, 2}), ids32({2, 2}, {2, 0, 0, 1})},
               .attrs = {{"axis", int64_t{1}}},
               .unknown_dim0 = {0}});
  c.push_back({.op = "dynamic_partition",
               .label = "rows of (4,3) into 3 partitions, one empty",
               .inputs = {uniform({4, 3}), make<int32_t>({4}, {1, 0, 1, 0})},
               .attrs = {{"num_partitions", int64_t{3}}}});
  c.push_back({.op = "dynamic_partition",
               .label = "2-D partitions of a (2,2) matrix",
               .inputs = {uniform({2, 2}), make<int32_t>({2, 2}, {1, 0, 0, 1})},
               .attrs = {{"num_partitions", int64_t{2}}}});
  c.push_back({.op = "dynamic_stitch",
               .label = "two parts of (2,3) rows into 4 rows",
               .inputs = {ids({2}, {0, 2}), ids({2}, {3, 1}), uniform({2, 3}), uniform({2, 3})}});
  c.push_back({.op = "scatter_add_into",
               .label = "rows at indices",
               .inputs = {make<double>({3, 2}, {1, 2, 3, 4, 5, 6}),
                          make<double>({2, 2}, {0.5, -1, 2, 0.25}), make<int32_t>({2}, {2, 0})}});
  c.push_back({.op = "scatter_add_like",
               .label = "axis 0, repeated indices",
               .inputs = {uniform({3, 2}), ids({3}, {2, 0, 2}), uniform({4, 2})},
               .attrs = {{"axis", int64_t{0}}}});
  c.push_back({.op = "scatter_add_like",
               .label = "axis -1, unknown dim 0",
               .inputs = {uniform({2, 3}), ids32({3}, {1, 1, 0}), uniform({2, 2})},
               .attrs = {{"axis", int64_t{-1}}},
               .unknown_dim0 = {0, 2}});
  c.push_back({.op = "broadcast_to",
               .label = "(3) to (2,3)",
               .inputs = {uniform({3})},
               .attrs = {{"shape", ints{2, 3}}}});
  c.push_back({.op = "broadcast_to",
               .label = "(2,1) to (2,2,3)",
               .inputs = {uniform({2, 1})},
               .attrs = {{"shape", ints{2, 2, 3}}}});
  c.push_back({.op = "broadcast_like",
               .label = "(1,3) like (4,3), unknown dim 0",
               .inputs = {uniform({1, 3}), uniform({4, 3})},
               .unknown_dim0 = {1}});
  c.push_back({.op = "zeros_like", .label = "(2,2)", .inputs = {uniform({2, 2})}});
  c.push_back({.op = "ones_like", .label = "(2,2)", .inputs = {uniform({2, 2})}});
  return c;
}

std::vector<grad_case> nn_cases() {
  std::vector<grad_case> c;
  // matmul: each transpose flag, batches, and a rank-2 operand shared by the batch.
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      c.push_back({.op = "matmul",
                   .label = std::string("transpose_a ") + (ta ? "1" : "0") + ", transpose_b " +
                            (tb ? "1" : "0"),
                   .inputs = {uniform(ta ? shape{3, 2} : shape{2, 3}),
                              uniform(tb ? shape{4, 3} : shape{3, 4})},
                   .attrs = {{"transpose_a", ta}, {"transpose_b", tb}}});
  c.push_back(
      {.op = "matmul", .label = "batched", .inputs = {uniform({2, 2, 3}), uniform({2, 3, 2})}});
  c.push_back({.op = "matmul",
               .label = "batched by shared",
               .inputs = {uniform({2, 2, 3}), uniform({3, 2})}});
  c.push_back({.op = "matmul",
               .label = "shared by batched, transposed",
               .inputs = {uniform({3, 2}), uniform({2, 2, 3})},
               .attrs = {{"transpose_a", true}, {"transpose_b", true}}});
  c.push_back({.op = "matmul",
               .label = "unknown batch rows",
               .inputs = {uniform({4, 3}), uniform({3, 2})},
               .unknown_dim0 = {0}});
  c.push_back({.op = "bias_add", .label = "(2,3)", .inputs = {uniform({2, 3}), uniform({3})}});
  c.push_back({.op = "bias_add",
               .label = "rank 4, unknown dim 0",
               .inputs = {uniform({2, 2, 2, 3}), uniform({3})},
               .unknown_dim0 = {0}});
  // The mask is a function of (seed, counter, index) alone: finite differences see it fixed.
  c.push_back({.op = "dropout",
               .label = "rate 0.5, unknown dim 0",
               .inputs = {uniform({3, 4}), scalar_of<int64_t>(7)},
               .attrs = {{"rate", 0.5}, {"seed", int64_t{3}}},
               .unknown_dim0 = {0}});
  for (const char* op : {"softmax", "log_softmax"}) {
    c.push_back({.op = op, .label = "(2,4)", .inputs = {uniform({2, 4}, -2, 2)}});
    c.push_back({.op = op,
                 .label = "rank 3, unknown dim 0",
                 .inputs = {uniform({2, 2, 3}, -2, 2)},
                 .unknown_dim0 = {0}});
  }
  c.push_back({.op = "softmax_cross_entropy_with_logits",
               .label = "(3,4)",
               .inputs = {uniform({3, 4}, -2, 2), distributions(3, 4)}});
  c.push_back({.op = "softmax_cross_entropy_with_logits",
               .label = "unknown batch",
               .inputs = {uniform({2, 3}, -2, 2), distributions(2, 3)},
               .unknown_dim0 = {0, 1}});
  c.push_back({.op = "sparse_softmax_cross_entropy_with_logits",
               .label = "(3,4) int64 labels",
               .inputs = {uniform({3, 4}, -2, 2), ids({3}, {0, 3, 1})}});
  c.push_back({.op = "sparse_softmax_cross_entropy_with_logits",
               .label = "int32 labels, unknown batch",
               .inputs = {uniform({2, 3}, -2, 2), ids32({2}, {2, 2})},
               .unknown_dim0 = {0, 1}});
  return c;
}

std::vector<grad_case> conv_pool_cases() {
  std::vector<grad_case> c;
  c.push_back({.op = "conv2d",
               .label = "VALID, stride 1",
               .inputs = {uniform({1, 5, 5, 2}), uniform({3, 3, 2, 3})},
               .attrs = conv({1, 1}, "VALID")});
  c.push_back({.op = "conv2d",
               .label = "SAME, stride 2, unknown batch",
               .inputs = {uniform({2, 5, 4, 2}), uniform({3, 2, 2, 2})},
               .attrs = conv({2, 2}, "SAME"),
               .unknown_dim0 = {0}});
  c.push_back({.op = "conv2d",
               .label = "VALID, strides (1,2,2,1)",
               .inputs = {uniform({1, 6, 6, 1}), uniform({2, 2, 1, 2})},
               .attrs = conv({1, 2, 2, 1}, "VALID")});
  c.push_back({.op = "conv2d",
               .label = "SAME, stride 1",
               .inputs = {uniform({1, 4, 5, 3}), uniform({3, 3, 3, 2})},
               .attrs = conv({1, 1}, "SAME")});
  c.push_back({.op = "conv2d_backprop_input",
               .label = "VALID, stride 1",
               .inputs = {uniform({1, 5, 5, 2}), uniform({3, 3, 2, 3}), uniform({1, 3, 3, 3})},
               .attrs = conv({1, 1}, "VALID")});
  c.push_back({.op = "conv2d_backprop_input",
               .label = "SAME, stride 2",
               .inputs = {uniform({2, 5, 4, 2}), uniform({3, 2, 2, 2}), uniform({2, 3, 2, 2})},
               .attrs = conv({2, 2}, "SAME")});
  c.push_back({.op = "conv2d_backprop_filter",
               .label = "VALID, stride 1",
               .inputs = {uniform({1, 5, 5, 2}), uniform({3, 3, 2, 3}), uniform({1, 3, 3, 3})},
               .attrs = conv({1, 1}, "VALID")});
  c.push_back({.op = "conv2d_backprop_filter",
               .label = "SAME, stride 2",
               .inputs = {uniform({2, 5, 4, 2}), uniform({3, 2, 2, 2}), uniform({2, 3, 2, 2})},
               .attrs = conv({2, 2}, "SAME")});
  c.push_back({.op = "max_pool",
               .label = "2x2 stride 2 VALID",
               .inputs = {distinct({1, 4, 4, 2})},
               .attrs = window({2, 2}, {2, 2}, "VALID")});
  c.push_back({.op = "max_pool",
               .label = "3x3 stride 2 SAME, unknown batch",
               .inputs = {distinct({2, 5, 5, 1})},
               .attrs = window({3, 3}, {2, 2}, "SAME"),
               .unknown_dim0 = {0}});
  c.push_back({.op = "max_pool",
               .label = "overlapping 2x2 stride 1",
               .inputs = {distinct({1, 4, 4, 1})},
               .attrs = window({1, 2, 2, 1}, {1, 1, 1, 1}, "VALID")});
  c.push_back({.op = "avg_pool",
               .label = "2x2 stride 2 VALID",
               .inputs = {uniform({1, 4, 4, 2})},
               .attrs = window({2, 2}, {2, 2}, "VALID")});
  c.push_back({.op = "avg_pool",
               .label = "3x3 stride 2 SAME, unknown batch",
               .inputs = {uniform({2, 5, 5, 1})},
               .attrs = window({3, 3}, {2, 2}, "SAME"),
               .unknown_dim0 = {0}});
  c.push_back({.op = "avg_pool_grad",
               .label = "3x3 stride 2 SAME",
               .inputs = {uniform({1, 5, 5, 1}), uniform({1, 3, 3, 1})},
               .attrs = window({3, 3}, {2, 2}, "SAME")});
  c.push_back({.op = "avg_pool_grad",
               .label = "2x2 stride 2 VALID",
               .inputs = {uniform({1, 4, 4, 2}), uniform({1, 2, 2, 2})},
               .attrs = window({2, 2}, {2, 2}, "VALID")});
  return c;
}

const grad_case_registrar registrations[] = {
    grad_case_registrar(unary_cases()),  grad_case_registrar(binary_cases()),
    grad_case_registrar(reduce_cases()), grad_case_registrar(array_cases()),
    grad_case_registrar(nn_cases()),     grad_case_registrar(conv_pool_cases()),
};

// ---- the check -------------------------------------------------------------------

// Ops with a gradient that the eager check cannot run, and where they are tested.
const std::map<std::string, std::string> exempt = {
    {"stop_gradient", "its gradient is zero by definition, unlike its finite differences"},
    {"read_variable", "served by the variable actor; tests/test_gradients.cpp"},
    {"switch", "run by the runtime (dead values); tests/test_control_flow.cpp"},
    {"merge", "run by the runtime (dead values); tests/test_control_flow.cpp"},
    {"enter", "a loop's gradient is built as a whole; tests/test_while_loop.cpp"},
    {"exit", "a loop's gradient is built as a whole; tests/test_while_loop.cpp"},
    {"next_iteration", "a loop's gradient is built as a whole; tests/test_while_loop.cpp"},
};

double weighted_sum(const std::vector<tensor>& outs, const std::vector<tensor>& weights) {
  double total = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!weights[j].valid()) continue;
    visit_floating(outs[j].type(), "gradient_check", [&](auto tag) {
      using T = decltype(tag);
      const T* y = outs[j].data<T>();
      const T* w = weights[j].data<T>();
      for (int64_t k = 0; k < outs[j].num_elements(); ++k)
        total += static_cast<double>(y[k]) * static_cast<double>(w[k]);
    });
  }
  return total;
}

// Central differences of the weighted sum for every element of input i.
tensor numeric_gradient(const grad_case& gc, size_t i, const std::vector<tensor>& weights) {
  const tensor& x = gc.inputs[i];
  tensor result(dtype::float64, x.dims());
  auto at = [&](int64_t k, double delta) {
    auto inputs = gc.inputs;
    inputs[i] = x.clone();
    visit_floating(x.type(), "gradient_check", [&](auto tag) {
      using T = decltype(tag);
      T* p = inputs[i].template mutable_data<T>();
      p[k] = static_cast<T>(static_cast<double>(p[k]) + delta);
    });
    return weighted_sum(run_kernel(gc.op, inputs, gc.attrs), weights);
  };
  for (int64_t k = 0; k < x.num_elements(); ++k)
    result.mutable_data<double>()[k] = (at(k, gc.eps) - at(k, -gc.eps)) / (2 * gc.eps);
  return result;
}

// The gradients() result for each float input (invalid where there is none).
std::vector<tensor> analytic_gradients(const grad_case& gc, const std::vector<tensor>& weights) {
  graph g;
  std::vector<output> ins, xs;
  feed_list feeds;
  for (size_t i = 0; i < gc.inputs.size(); ++i) {
    const tensor& t = gc.inputs[i];
    shape dims = t.dims();
    if (std::count(gc.unknown_dim0.begin(), gc.unknown_dim0.end(), int(i)) && dims.rank() > 0)
      dims[0] = shape::unknown;
    std::string name = "x";  // not "x" + ...: GCC 12 warns falsely (-Wrestrict)
    name += std::to_string(i);
    ins.push_back(placeholder(g, t.type(), dims, name));
    feeds.emplace_back(ins.back(), t);
    if (is_differentiable_type(t.type())) xs.push_back(ins.back());
  }
  const node& n = g.add_node(gc.op, ins, gc.attrs);
  int id = n.id;
  output loss;
  for (size_t j = 0; j < weights.size(); ++j) {
    if (!weights[j].valid()) continue;
    auto term = reduce_sum(mul(output(&g, {id, int(j)}), constant(g, weights[j])));
    loss = loss.valid() ? add(loss, term) : term;
  }
  auto grads = gradients({loss}, xs);
  std::vector<output> fetches;
  for (auto& d : grads)
    if (d.valid()) fetches.push_back(d);
  session s(g);
  auto values = s.run(feeds, fetches);
  std::vector<tensor> result;
  size_t next = 0, k = 0;
  for (size_t i = 0; i < gc.inputs.size(); ++i) {
    if (!is_differentiable_type(gc.inputs[i].type())) {
      result.emplace_back();
      continue;
    }
    result.push_back(grads[k++].valid() ? values[next++] : tensor());
  }
  return result;
}

// "" when they agree, else the first element that differs.
std::string compare(const tensor& analytic, const tensor& numeric, const tensor& x, double tol) {
  if (analytic.valid() && (analytic.type() != x.type() || analytic.dims() != x.dims()))
    return "the gradient is " + tensor_spec{analytic.type(), analytic.dims()}.to_string() +
           " but the input is " + tensor_spec{x.type(), x.dims()}.to_string();
  tensor a = analytic.valid() ? run_kernel("cast", {analytic}, {{"dtype", dtype::float64}})[0]
                              : tensor::zeros(dtype::float64, x.dims());
  for (int64_t k = 0; k < x.num_elements(); ++k) {
    double got = a.data<double>()[k], want = numeric.data<double>()[k];
    if (!(std::abs(got - want) <= tol * (1 + std::abs(want)))) {
      std::ostringstream os;
      os.precision(12);
      os << "element " << k << ": analytic " << got << ", numeric " << want
         << (analytic.valid() ? "" : " (the op gives this input no gradient)");
      return os.str();
    }
  }
  return "";
}

void check_case(const grad_case& gc) {
  auto outs = run_kernel(gc.op, gc.inputs, gc.attrs);
  std::vector<tensor> weights;
  for (auto& y : outs) {
    if (!is_differentiable_type(y.type())) {
      weights.emplace_back();
      continue;
    }
    tensor w = uniform(y.dims());
    weights.push_back(y.type() == dtype::float64 ? w : to_float32(w));
  }
  auto analytic = analytic_gradients(gc, weights);
  for (size_t i = 0; i < gc.inputs.size(); ++i) {
    if (!is_differentiable_type(gc.inputs[i].type())) continue;
    auto numeric = numeric_gradient(gc, i, weights);
    auto diff = compare(analytic[i], numeric, gc.inputs[i], gc.tolerance);
    CHECK_MESSAGE(diff.empty(), "input " << i << ": " << diff);
  }
}

}  // namespace

TEST_CASE("every op with a gradient has a numeric gradient check") {
  std::set<std::string> covered;
  for (auto& c : grad_cases()) covered.insert(c.op);
  for (auto* def : op_registry::global().all()) {
    if (!def->gradient || exempt.count(def->name)) continue;
    CHECK_MESSAGE(covered.count(def->name),
                  "op '" << def->name << "' has a gradient but no case in the gradient check");
  }
}

TEST_CASE("gradients agree with finite differences") {
  for (auto& c : grad_cases()) {
    INFO("op '" << c.op << "' case: " << c.label);
    auto* def = op_registry::global().find(c.op);
    REQUIRE_MESSAGE(def, "unknown op");
    CHECK_MESSAGE(def->gradient, "the op has no gradient");
    if (!def->gradient) continue;
    try {
      check_case(c);
    } catch (const std::exception& e) {
      FAIL_CHECK("threw: " << e.what());
    }
  }
}

}  // namespace actorflow::testing
