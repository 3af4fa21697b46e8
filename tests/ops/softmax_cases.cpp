// Cases for softmax, log_softmax and the cross-entropy ops.
//
// Hand-computed values for logits (1, 2, 3): exp(x - 3) = (e^-2, e^-1, 1), sum 1.5032147,
// softmax (0.0900306, 0.2447285, 0.6652410), log_softmax (-2.4076060, -1.4076060, -0.4076060).
#include <cmath>

#include "ops/op_cases.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {
namespace {

constexpr double s0 = 0.09003057317038046, s1 = 0.24472847105479767, s2 = 0.6652409557748219;
constexpr double l0 = -2.4076059644443806, l1 = -1.4076059644443806, l2 = -0.4076059644443804;
constexpr double third = 1.0 / 3.0, log3 = 1.0986122886681098;

// logits [[1, 2, 3], [1, 1, 1]]
const tensor logits_f = make<float>({2, 3}, {1, 2, 3, 1, 1, 1});
const tensor logits_d = make<double>({2, 3}, {1, 2, 3, 1, 1, 1});
// Logits whose exp overflows without the max subtracted (and underflows after).
const tensor huge_f = make<float>({2, 3}, {10000, 0, -10000, 1e4f, 1e4f, -1e4f});

const op_case_registrar softmax_cases({
    {.op = "softmax",
     .label = "1-D float32",
     .inputs = {make<float>({3}, {1, 2, 3})},
     .expected = {make<float>({3}, {float(s0), float(s1), float(s2)})},
     .tolerance = 1e-6},
    {.op = "softmax",
     .label = "2-D float64, rows independent",
     .inputs = {logits_d},
     .expected = {make<double>({2, 3}, {s0, s1, s2, third, third, third})},
     .tolerance = 1e-12},
    {.op = "softmax",
     .label = "shift invariant: (1001, 1002, 1003)",
     .inputs = {make<float>({3}, {1001, 1002, 1003})},
     .expected = {make<float>({3}, {float(s0), float(s1), float(s2)})},
     .tolerance = 1e-6},
    {.op = "softmax",
     .label = "huge logits stay finite",
     .inputs = {huge_f},
     .expected = {make<float>({2, 3}, {1, 0, 0, 0.5f, 0.5f, 0})}},
    {.op = "softmax",
     .label = "size-1 last dim",
     .inputs = {make<float>({2, 1}, {-7, 40})},
     .expected = {make<float>({2, 1}, {1, 1})}},
    {.op = "softmax",
     .label = "rank 3",
     .inputs = {make<double>({2, 1, 2}, {0, 0, 0, std::log(3.0)})},
     .expected = {make<double>({2, 1, 2}, {0.5, 0.5, 0.25, 0.75})},
     .tolerance = 1e-12},
    {.op = "softmax",
     .label = "zero rows",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .expected = {tensor(dtype::float32, {0, 3})}},
    {.op = "softmax",
     .label = "zero classes",
     .inputs = {tensor(dtype::float32, {2, 0})},
     .expected = {tensor(dtype::float32, {2, 0})}},
    {.op = "softmax",
     .label = "scalar",
     .inputs = {scalar_of<float>(1)},
     .expect_error = "expects logits of rank >= 1"},
    {.op = "softmax",
     .label = "int32",
     .inputs = {make<int32_t>({2}, {1, 2})},
     .expect_error = "expects float32 or float64 logits, got int32"},
    {.op = "log_softmax",
     .label = "1-D float32",
     .inputs = {make<float>({3}, {1, 2, 3})},
     .expected = {make<float>({3}, {float(l0), float(l1), float(l2)})},
     .tolerance = 1e-6},
    {.op = "log_softmax",
     .label = "2-D float64",
     .inputs = {logits_d},
     .expected = {make<double>({2, 3}, {l0, l1, l2, -log3, -log3, -log3})},
     .tolerance = 1e-12},
    {.op = "log_softmax",
     .label = "huge logits stay finite",
     .inputs = {huge_f},
     .expected = {make<float>({2, 3}, {0, -10000, -20000, -float(std::log(2.0)),
                                       -float(std::log(2.0)), -20000 - float(std::log(2.0))})}},
    {.op = "log_softmax",
     .label = "size-1 last dim",
     .inputs = {make<double>({1, 1}, {123})},
     .expected = {make<double>({1, 1}, {0})}},
    {.op = "log_softmax",
     .label = "zero rows",
     .inputs = {tensor(dtype::float64, {0, 4})},
     .expected = {tensor(dtype::float64, {0, 4})}},
    {.op = "log_softmax",
     .label = "scalar",
     .inputs = {scalar_of<double>(1)},
     .expect_error = "expects logits of rank >= 1"},
    {.op = "log_softmax",
     .label = "bool",
     .inputs = {tensor::zeros(dtype::boolean, {2})},
     .expect_error = "expects float32 or float64 logits, got bool"},
});

// labels [[0, 0, 1], [0.5, 0.5, 0]]: loss (-log s2, log 3), backprop = softmax - labels.
const op_case_registrar xent_cases({
    {.op = "softmax_cross_entropy_with_logits",
     .label = "float32",
     .inputs = {logits_f, make<float>({2, 3}, {0, 0, 1, 0.5f, 0.5f, 0})},
     .expected = {make<float>({2}, {float(-l2), float(log3)}),
                  make<float>({2, 3}, {float(s0), float(s1), float(s2 - 1), float(third - 0.5),
                                       float(third - 0.5), float(third)})},
     .tolerance = 1e-6},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "float64",
     .inputs = {logits_d, make<double>({2, 3}, {0, 0, 1, 0.5, 0.5, 0})},
     .expected = {make<double>({2}, {-l2, log3}),
                  make<double>({2, 3}, {s0, s1, s2 - 1, third - 0.5, third - 0.5, third})},
     .tolerance = 1e-12},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "huge logits: no inf or nan",
     .inputs = {huge_f, make<float>({2, 3}, {0, 0, 1, 1, 0, 0})},
     .expected = {make<float>({2}, {20000, float(std::log(2.0))}),
                  make<float>({2, 3}, {1, 0, -1, -0.5f, 0.5f, 0})}},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "one class",
     .inputs = {make<float>({2, 1}, {5, -5}), make<float>({2, 1}, {1, 1})},
     .expected = {make<float>({2}, {0, 0}), make<float>({2, 1}, {0, 0})}},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "zero batch",
     .inputs = {tensor(dtype::float32, {0, 3}), tensor(dtype::float32, {0, 3})},
     .expected = {tensor(dtype::float32, {0}), tensor(dtype::float32, {0, 3})}},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "zero classes",
     .inputs = {tensor(dtype::float32, {2, 0}), tensor(dtype::float32, {2, 0})},
     .expected = {tensor::zeros(dtype::float32, {2}), tensor(dtype::float32, {2, 0})}},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "shapes differ",
     .inputs = {logits_f, tensor::zeros(dtype::float32, {2, 4})},
     .expect_error = "logits (2,3) and labels (2,4) differ in shape"},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "dtypes differ",
     .inputs = {logits_f, tensor::zeros(dtype::float64, {2, 3})},
     .expect_error = "have different dtypes"},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "rank 1",
     .inputs = {make<float>({3}, {1, 2, 3}), make<float>({3}, {0, 0, 1})},
     .expect_error = "expects logits and labels of rank 2"},
    {.op = "softmax_cross_entropy_with_logits",
     .label = "int logits",
     .inputs = {tensor::zeros(dtype::int32, {2, 3}), tensor::zeros(dtype::int32, {2, 3})},
     .expect_error = "expects float32 or float64 logits, got int32"},
});

// labels (2, 0): loss (-log s2, log 3); backprop is softmax with 1 taken off the label.
const op_case_registrar sparse_xent_cases({
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "float32 logits, int32 labels",
     .inputs = {logits_f, make<int32_t>({2}, {2, 0})},
     .expected = {make<float>({2}, {float(-l2), float(log3)}),
                  make<float>({2, 3}, {float(s0), float(s1), float(s2 - 1), float(third - 1),
                                       float(third), float(third)})},
     .tolerance = 1e-6},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "float64 logits, int64 labels",
     .inputs = {logits_d, make<int64_t>({2}, {0, 1})},
     .expected = {make<double>({2}, {-l0, log3}),
                  make<double>({2, 3}, {s0 - 1, s1, s2, third, third - 1, third})},
     .tolerance = 1e-12},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "huge logits: no inf or nan",
     .inputs = {huge_f, make<int32_t>({2}, {2, 1})},
     .expected = {make<float>({2}, {20000, float(std::log(2.0))}),
                  make<float>({2, 3}, {1, 0, -1, 0.5f, -0.5f, 0})}},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "one class",
     .inputs = {make<float>({1, 1}, {3}), make<int64_t>({1}, {0})},
     .expected = {make<float>({1}, {0}), make<float>({1, 1}, {0})}},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "zero batch",
     .inputs = {tensor(dtype::float32, {0, 3}), tensor(dtype::int32, {0})},
     .expected = {tensor(dtype::float32, {0}), tensor(dtype::float32, {0, 3})}},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "label past the last class",
     .inputs = {logits_f, make<int32_t>({2}, {0, 3})},
     .expect_error = "label 3 at row 1 is out of range for 3 classes"},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "negative label",
     .inputs = {logits_f, make<int64_t>({2}, {-1, 0})},
     .expect_error = "label -1 at row 0 is out of range for 3 classes"},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "zero classes: every label is out of range",
     .inputs = {tensor(dtype::float32, {1, 0}), make<int32_t>({1}, {0})},
     .expect_error = "out of range for 0 classes"},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "float labels",
     .inputs = {logits_f, make<float>({2}, {0, 1})},
     .expect_error = "expects int32 or int64 labels, got float32"},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "batch sizes differ",
     .inputs = {logits_f, make<int32_t>({3}, {0, 1, 2})},
     .expect_error = "differ in batch size"},
    {.op = "sparse_softmax_cross_entropy_with_logits",
     .label = "labels of rank 2",
     .inputs = {logits_f, make<int32_t>({2, 1}, {0, 1})},
     .expect_error = "expects logits [batch, classes] and labels [batch]"},
});

// ---- against the CPU kernel: random inputs of each dtype a GPU kernel takes ----

std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> cases;
  for (dtype t : floats) {
    for (auto op : {"softmax", "log_softmax"})
      for (auto dims : {shape{7, 10}, shape{2, 3, 1000}})
        cases.push_back({.op = op,
                         .label = label_of("random " + dims.to_string(), t),
                         .inputs = {rnd.uniform(t, dims, -20, 20)}});
    for (int64_t rows : {9, 3}) {
      const int64_t cols = rows == 9 ? 10 : 100;
      cases.push_back({.op = "softmax_cross_entropy_with_logits",
                       .label = label_of("random " + shape{rows, cols}.to_string(), t),
                       .inputs = {rnd.uniform(t, shape{rows, cols}, -20, 20),
                                  rnd.distribution(t, rows, cols)}});
    }
    for (dtype l : {dtype::int32, dtype::int64})
      cases.push_back(
          {.op = "sparse_softmax_cross_entropy_with_logits",
           .label = label_of(std::string("random (33,10), labels ") + dtype_name(l), t),
           .inputs = {rnd.uniform(t, shape{33, 10}, -20, 20), rnd.uniform(l, shape{33}, 0, 9)}});
  }
  return cases;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> c;
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

const grad_case_registrar gradient_registration(gradient_cases);

TEST_CASE("softmax over many rows (parallel path) sums to one per row") {
  const int64_t rows = 3000, cols = 37;
  std::vector<float> x(size_t(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7919 % 101) - 50) * 0.3f;
  auto y = run_kernel("softmax", {make<float>({rows, cols}, x)})[0].to_vector<float>();
  auto ly = run_kernel("log_softmax", {make<float>({rows, cols}, x)})[0].to_vector<float>();
  for (int64_t r = 0; r < rows; r += 97) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      sum += y[size_t(r * cols + c)];
      CHECK(std::log(y[size_t(r * cols + c)]) ==
            doctest::Approx(ly[size_t(r * cols + c)]).epsilon(1e-4));
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("cross-entropy builders return loss and backprop with inferred shapes") {
  graph g;
  auto logits = placeholder(g, dtype::float32, {-1, 10});
  auto labels = placeholder(g, dtype::float32, {-1, 10});
  auto xent = softmax_cross_entropy_with_logits(logits, labels, "xent");
  CHECK(xent.loss.dims() == shape{-1});
  CHECK(xent.backprop.dims() == shape{-1, 10});
  CHECK(xent.backprop.name() == "xent:1");
  auto ids = placeholder(g, dtype::int64, {32});
  auto sparse = sparse_softmax_cross_entropy_with_logits(logits, ids);
  CHECK(sparse.loss.dims() == shape{32});
  CHECK(sparse.backprop.dims() == shape{32, 10});
  CHECK(softmax(logits).dims() == shape{-1, 10});
  CHECK(log_softmax(logits).type() == dtype::float32);
  CHECK_THROWS_WITH_AS(sparse_softmax_cross_entropy_with_logits(logits, labels),
                       doctest::Contains("int32 or int64 labels"), error);
}

}  // namespace
}  // namespace actorflow::testing
