// Cases for the unary math ops, logical_not, cast and the derivative helpers.
// Binary ops are in math_binary_cases.cpp, graph-level checks in math_builder_cases.cpp.
#include <cstdint>
#include <limits>

#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

const char* const want_float = "expects float32 or float64, got ";
const char* const want_signed = "expects float32, float64, int32 or int64, got ";

const op_case_registrar unary_cases({
    // neg
    {.op = "neg",
     .label = "float32 (2,2)",
     .inputs = {make<float>({2, 2}, {1.f, -2.f, 0.f, 3.5f})},
     .expected = {make<float>({2, 2}, {-1.f, 2.f, -0.f, -3.5f})}},
    {.op = "neg",
     .label = "int32 wraps at the minimum",
     .inputs = {make<int32_t>({3}, {5, -7, i32_min})},
     .expected = {make<int32_t>({3}, {-5, 7, i32_min})}},
    {.op = "neg",
     .label = "0-d int64",
     .inputs = {scalar_of<int64_t>(9)},
     .expected = {scalar_of<int64_t>(-9)}},
    {.op = "neg",
     .label = "zero-size float64",
     .inputs = {tensor(dtype::float64, {0, 3})},
     .expected = {tensor(dtype::float64, {0, 3})}},
    {.op = "neg",
     .label = "uint8 rejected",
     .inputs = {make<uint8_t>({1}, {1})},
     .expect_error = "[neg] expects float32, float64, int32 or int64, got uint8"},
    // abs
    {.op = "abs",
     .label = "float32",
     .inputs = {make<float>({3}, {-1.5f, 2.f, -0.f})},
     .expected = {make<float>({3}, {1.5f, 2.f, 0.f})}},
    {.op = "abs",
     .label = "int64",
     .inputs = {make<int64_t>({3}, {-3, 4, 0})},
     .expected = {make<int64_t>({3}, {3, 4, 0})}},
    {.op = "abs",
     .label = "0-d int32",
     .inputs = {scalar_of<int32_t>(-7)},
     .expected = {scalar_of<int32_t>(7)}},
    {.op = "abs",
     .label = "bool rejected",
     .inputs = {make<bool>({1}, {true})},
     .expect_error = std::string(want_signed) + "bool"},
    // exp
    {.op = "exp",
     .label = "float32",
     .inputs = {make<float>({4}, {0.f, 1.f, -1.f, 2.f})},
     .expected = {make<float>({4}, {1.f, 2.7182818f, 0.36787944f, 7.3890561f})}},
    {.op = "exp",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(0.5)},
     .expected = {scalar_of<double>(1.6487212707001282)},
     .tolerance = 1e-12},
    {.op = "exp",
     .label = "zero-size",
     .inputs = {tensor(dtype::float32, {2, 0})},
     .expected = {tensor(dtype::float32, {2, 0})}},
    {.op = "exp",
     .label = "int32 rejected",
     .inputs = {make<int32_t>({1}, {1})},
     .expect_error = std::string(want_float) + "int32"},
    // log
    {.op = "log",
     .label = "float32, log 0 = -inf",
     .inputs = {make<float>({4}, {1.f, 2.7182818f, 0.5f, 0.f})},
     .expected = {make<float>({4}, {0.f, 1.f, -0.69314718f, -inf_f})}},
    {.op = "log",
     .label = "float64 size-1",
     .inputs = {make<double>({1}, {10.0})},
     .expected = {make<double>({1}, {2.302585092994046})},
     .tolerance = 1e-12},
    {.op = "log",
     .label = "int64 rejected",
     .inputs = {make<int64_t>({1}, {1})},
     .expect_error = std::string(want_float) + "int64"},
    // sqrt
    {.op = "sqrt",
     .label = "float32, negative gives NaN",
     .inputs = {make<float>({5}, {0.f, 4.f, 2.25f, 2.f, -1.f})},
     .expected = {make<float>({5}, {0.f, 2.f, 1.5f, 1.41421356f, nan_f})}},
    {.op = "sqrt",
     .label = "float64 (1,1)",
     .inputs = {make<double>({1, 1}, {9.0})},
     .expected = {make<double>({1, 1}, {3.0})}},
    {.op = "sqrt",
     .label = "int32 rejected",
     .inputs = {make<int32_t>({1}, {4})},
     .expect_error = std::string(want_float) + "int32"},
    // rsqrt
    {.op = "rsqrt",
     .label = "float32",
     .inputs = {make<float>({3}, {4.f, 0.25f, 2.f})},
     .expected = {make<float>({3}, {0.5f, 2.f, 0.70710678f})}},
    {.op = "rsqrt",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(16.0)},
     .expected = {scalar_of<double>(0.25)}},
    {.op = "rsqrt",
     .label = "uint8 rejected",
     .inputs = {make<uint8_t>({1}, {4})},
     .expect_error = std::string(want_float) + "uint8"},
    // square
    {.op = "square",
     .label = "float32",
     .inputs = {make<float>({2}, {-3.f, 0.5f})},
     .expected = {make<float>({2}, {9.f, 0.25f})}},
    {.op = "square",
     .label = "int32 wraps",
     .inputs = {make<int32_t>({2}, {-4, 46341})},
     .expected = {make<int32_t>({2}, {16, -2147479015})}},
    {.op = "square",
     .label = "0-d int64",
     .inputs = {scalar_of<int64_t>(-5)},
     .expected = {scalar_of<int64_t>(25)}},
    {.op = "square",
     .label = "uint8 rejected",
     .inputs = {make<uint8_t>({1}, {4})},
     .expect_error = std::string(want_signed) + "uint8"},
    // sign
    {.op = "sign",
     .label = "float32 with NaN",
     .inputs = {make<float>({4}, {-2.5f, 0.f, 3.f, nan_f})},
     .expected = {make<float>({4}, {-1.f, 0.f, 1.f, nan_f})}},
    {.op = "sign",
     .label = "int32",
     .inputs = {make<int32_t>({3}, {-7, 0, 9})},
     .expected = {make<int32_t>({3}, {-1, 0, 1})}},
    {.op = "sign",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(-0.001)},
     .expected = {scalar_of<double>(-1.0)}},
    {.op = "sign",
     .label = "bool rejected",
     .inputs = {make<bool>({1}, {true})},
     .expect_error = std::string(want_signed) + "bool"},
    // reciprocal
    {.op = "reciprocal",
     .label = "float32, 1/0 = inf",
     .inputs = {make<float>({3}, {2.f, -0.5f, 0.f})},
     .expected = {make<float>({3}, {0.5f, -2.f, inf_f})}},
    {.op = "reciprocal",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(4.0)},
     .expected = {scalar_of<double>(0.25)}},
    {.op = "reciprocal",
     .label = "int32 rejected",
     .inputs = {make<int32_t>({1}, {2})},
     .expect_error = std::string(want_float) + "int32"},
    // relu
    {.op = "relu",
     .label = "float32 (1,3)",
     .inputs = {make<float>({1, 3}, {-1.f, 0.f, 2.5f})},
     .expected = {make<float>({1, 3}, {0.f, 0.f, 2.5f})}},
    {.op = "relu",
     .label = "int32",
     .inputs = {make<int32_t>({2}, {-5, 5})},
     .expected = {make<int32_t>({2}, {0, 5})}},
    {.op = "relu",
     .label = "int64",
     .inputs = {make<int64_t>({2}, {-1, 3})},
     .expected = {make<int64_t>({2}, {0, 3})}},
    {.op = "relu",
     .label = "uint8 unchanged",
     .inputs = {make<uint8_t>({2}, {0, 200})},
     .expected = {make<uint8_t>({2}, {0, 200})}},
    {.op = "relu",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(-3.0)},
     .expected = {scalar_of<double>(0.0)}},
    {.op = "relu",
     .label = "bool rejected",
     .inputs = {make<bool>({1}, {true})},
     .expect_error = "[relu] expects a numeric dtype, got bool"},
    // sigmoid
    {.op = "sigmoid",
     .label = "float32",
     .inputs = {make<float>({4}, {0.f, 2.f, -2.f, 20.f})},
     .expected = {make<float>({4}, {0.5f, 0.88079708f, 0.11920292f, 1.f})}},
    {.op = "sigmoid",
     .label = "float64",
     .inputs = {make<double>({1}, {1.0})},
     .expected = {make<double>({1}, {0.7310585786300049})},
     .tolerance = 1e-12},
    {.op = "sigmoid",
     .label = "int32 rejected",
     .inputs = {make<int32_t>({1}, {0})},
     .expect_error = std::string(want_float) + "int32"},
    // tanh
    {.op = "tanh",
     .label = "float32",
     .inputs = {make<float>({4}, {0.f, 0.5f, -1.f, 10.f})},
     .expected = {make<float>({4}, {0.f, 0.46211716f, -0.76159416f, 1.f})}},
    {.op = "tanh",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(2.0)},
     .expected = {scalar_of<double>(0.9640275800758169)},
     .tolerance = 1e-12},
    {.op = "tanh",
     .label = "bool rejected",
     .inputs = {make<bool>({1}, {false})},
     .expect_error = std::string(want_float) + "bool"},
    // logical_not
    {.op = "logical_not",
     .label = "bool (2)",
     .inputs = {make<bool>({2}, {true, false})},
     .expected = {make<bool>({2}, {false, true})}},
    {.op = "logical_not",
     .label = "0-d",
     .inputs = {scalar_of<bool>(false)},
     .expected = {scalar_of<bool>(true)}},
    {.op = "logical_not",
     .label = "float32 rejected",
     .inputs = {make<float>({1}, {1.f})},
     .expect_error = "[logical_not] expects bool, got float32"},
    {.op = "logical_not", .label = "arity", .expect_error = "expects 1 inputs, got 0"},
});

const op_case_registrar cast_cases({
    {.op = "cast",
     .label = "float32 -> int32 truncates and saturates, NaN -> 0",
     .inputs = {make<float>({5}, {1.7f, -1.7f, 3e10f, nan_f, -3e10f})},
     .attrs = {{"dtype", dtype::int32}},
     .expected = {make<int32_t>({5}, {1, -1, i32_max, 0, i32_min})}},
    {.op = "cast",
     .label = "int32 -> float32",
     .inputs = {make<int32_t>({2}, {-3, 7})},
     .attrs = {{"dtype", dtype::float32}},
     .expected = {make<float>({2}, {-3.f, 7.f})}},
    {.op = "cast",
     .label = "float32 -> bool",
     .inputs = {make<float>({3}, {0.f, -0.5f, 2.f})},
     .attrs = {{"dtype", dtype::boolean}},
     .expected = {make<bool>({3}, {false, true, true})}},
    {.op = "cast",
     .label = "bool -> float64",
     .inputs = {make<bool>({2}, {true, false})},
     .attrs = {{"dtype", dtype::float64}},
     .expected = {make<double>({2}, {1.0, 0.0})}},
    {.op = "cast",
     .label = "bool -> int64 (0-d)",
     .inputs = {scalar_of<bool>(true)},
     .attrs = {{"dtype", dtype::int64}},
     .expected = {scalar_of<int64_t>(1)}},
    {.op = "cast",
     .label = "int64 -> uint8 wraps",
     .inputs = {make<int64_t>({2}, {300, -1})},
     .attrs = {{"dtype", dtype::uint8}},
     .expected = {make<uint8_t>({2}, {44, 255})}},
    {.op = "cast",
     .label = "float64 -> uint8 saturates",
     .inputs = {make<double>({3}, {-5.0, 300.5, 7.9})},
     .attrs = {{"dtype", dtype::uint8}},
     .expected = {make<uint8_t>({3}, {0, 255, 7})}},
    {.op = "cast",
     .label = "float64 -> float32",
     .inputs = {make<double>({1}, {0.1})},
     .attrs = {{"dtype", dtype::float32}},
     .expected = {make<float>({1}, {0.1f})}},
    {.op = "cast",
     .label = "uint8 -> int32",
     .inputs = {make<uint8_t>({2}, {255, 0})},
     .attrs = {{"dtype", dtype::int32}},
     .expected = {make<int32_t>({2}, {255, 0})}},
    {.op = "cast",
     .label = "int64 -> bool",
     .inputs = {make<int64_t>({3}, {0, -4, 1})},
     .attrs = {{"dtype", dtype::boolean}},
     .expected = {make<bool>({3}, {false, true, true})}},
    {.op = "cast",
     .label = "same dtype passes through",
     .inputs = {make<int32_t>({2}, {4, -4})},
     .attrs = {{"dtype", dtype::int32}},
     .expected = {make<int32_t>({2}, {4, -4})}},
    {.op = "cast",
     .label = "zero-size",
     .inputs = {tensor(dtype::float32, {0, 2})},
     .attrs = {{"dtype", dtype::int64}},
     .expected = {tensor(dtype::int64, {0, 2})}},
    {.op = "cast",
     .label = "missing dtype attribute",
     .inputs = {make<float>({1}, {1.f})},
     .expect_error = "[cast] missing attribute 'dtype'"},
    {.op = "cast",
     .label = "dtype attribute of the wrong kind",
     .inputs = {make<float>({1}, {1.f})},
     .attrs = {{"dtype", int64_t{3}}},
     .expect_error = "[cast] attribute 'dtype' has kind int"},
});

const op_case_registrar derivative_helper_cases({
    // relu_grad(dy, x)
    {.op = "relu_grad",
     .label = "float32",
     .inputs = {make<float>({4}, {1.f, 2.f, 3.f, 4.f}), make<float>({4}, {-1.f, 0.f, 0.5f, 2.f})},
     .expected = {make<float>({4}, {0.f, 0.f, 3.f, 4.f})}},
    {.op = "relu_grad",
     .label = "int32 (2,1)",
     .inputs = {make<int32_t>({2, 1}, {5, 6}), make<int32_t>({2, 1}, {1, -1})},
     .expected = {make<int32_t>({2, 1}, {5, 0})}},
    {.op = "relu_grad",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(2.5), scalar_of<double>(1.0)},
     .expected = {scalar_of<double>(2.5)}},
    {.op = "relu_grad",
     .label = "zero-size",
     .inputs = {tensor(dtype::float32, {0}), tensor(dtype::float32, {0})},
     .expected = {tensor(dtype::float32, {0})}},
    {.op = "relu_grad",
     .label = "shapes differ (no broadcasting)",
     .inputs = {make<float>({2}, {1.f, 2.f}), make<float>({1}, {1.f})},
     .expect_error = "[relu_grad] shapes (2) and (1) differ"},
    {.op = "relu_grad",
     .label = "dtypes differ",
     .inputs = {make<float>({1}, {1.f}), make<int32_t>({1}, {1})},
     .expect_error = "[relu_grad] dtypes differ: float32 and int32"},
    // sigmoid_grad(y, dy)
    {.op = "sigmoid_grad",
     .label = "float32",
     .inputs = {make<float>({2}, {0.5f, 0.25f}), make<float>({2}, {1.f, 2.f})},
     .expected = {make<float>({2}, {0.25f, 0.375f})}},
    {.op = "sigmoid_grad",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(0.1), scalar_of<double>(3.0)},
     .expected = {scalar_of<double>(0.27)},
     .tolerance = 1e-12},
    {.op = "sigmoid_grad",
     .label = "int32 rejected",
     .inputs = {make<int32_t>({1}, {1}), make<int32_t>({1}, {1})},
     .expect_error = std::string("[sigmoid_grad] ") + want_float + "int32"},
    // tanh_grad(y, dy)
    {.op = "tanh_grad",
     .label = "float32",
     .inputs = {make<float>({3}, {0.5f, -1.f, 0.f}), make<float>({3}, {2.f, 3.f, 1.f})},
     .expected = {make<float>({3}, {1.5f, 0.f, 1.f})}},
    {.op = "tanh_grad",
     .label = "float64 (1,2)",
     .inputs = {make<double>({1, 2}, {0.2, 0.9}), make<double>({1, 2}, {1.0, -2.0})},
     .expected = {make<double>({1, 2}, {0.96, -0.38})},
     .tolerance = 1e-12},
    {.op = "tanh_grad",
     .label = "shapes differ",
     .inputs = {make<float>({2, 1}, {1.f, 2.f}), make<float>({1, 2}, {1.f, 2.f})},
     .expect_error = "[tanh_grad] shapes (2,1) and (1,2) differ"},
    // sqrt_grad(y, dy)
    {.op = "sqrt_grad",
     .label = "float32",
     .inputs = {make<float>({2}, {2.f, 0.5f}), make<float>({2}, {1.f, 3.f})},
     .expected = {make<float>({2}, {0.25f, 3.f})}},
    {.op = "sqrt_grad",
     .label = "zero-size float64",
     .inputs = {tensor(dtype::float64, {3, 0}), tensor(dtype::float64, {3, 0})},
     .expected = {tensor(dtype::float64, {3, 0})}},
    {.op = "sqrt_grad",
     .label = "dtypes differ",
     .inputs = {make<float>({1}, {1.f}), make<double>({1}, {1.0})},
     .expect_error = "[sqrt_grad] dtypes differ: float32 and float64"},
    // rsqrt_grad(y, dy)
    {.op = "rsqrt_grad",
     .label = "float32",
     .inputs = {make<float>({2}, {2.f, 0.5f}), make<float>({2}, {1.f, 4.f})},
     .expected = {make<float>({2}, {-4.f, -0.25f})}},
    {.op = "rsqrt_grad",
     .label = "0-d float64",
     .inputs = {scalar_of<double>(3.0), scalar_of<double>(2.0)},
     .expected = {scalar_of<double>(-27.0)}},
    {.op = "rsqrt_grad",
     .label = "int64 rejected",
     .inputs = {make<int64_t>({1}, {1}), make<int64_t>({1}, {1})},
     .expect_error = std::string("[rsqrt_grad] ") + want_float + "int64"},
    // reciprocal_grad(y, dy)
    {.op = "reciprocal_grad",
     .label = "float32",
     .inputs = {make<float>({2}, {2.f, -0.5f}), make<float>({2}, {1.f, 4.f})},
     .expected = {make<float>({2}, {-4.f, -1.f})}},
    {.op = "reciprocal_grad",
     .label = "float64 size-1",
     .inputs = {make<double>({1}, {0.1}), make<double>({1}, {-2.0})},
     .expected = {make<double>({1}, {0.02})},
     .tolerance = 1e-12},
    {.op = "reciprocal_grad",
     .label = "arity",
     .inputs = {make<float>({1}, {1.f})},
     .expect_error = "[reciprocal_grad] expects 2 inputs, got 1"},
});

// ---- against the CPU kernel: random inputs of each dtype a GPU kernel takes ----

std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> cases;
  auto unary = [&](const std::string& op, const std::vector<dtype>& types, double lo, double hi) {
    for (dtype t : types) {
      cases.push_back({.op = op,
                       .label = label_of("random (3,257)", t),
                       .inputs = {rnd.uniform(t, shape{3, 257}, lo, hi)}});
      cases.push_back({.op = op,
                       .label = label_of("random scalar", t),
                       .inputs = {rnd.uniform(t, {}, lo, hi)}});
    }
  };
  for (auto op : {"exp", "sigmoid", "tanh"}) unary(op, floats, -5, 5);
  for (auto op : {"log", "sqrt", "rsqrt"}) unary(op, floats, 0.01, 10);
  unary("reciprocal", floats, 0.1, 4);
  for (auto op : {"neg", "abs", "square", "sign"}) unary(op, signed_nums, -100, 100);
  unary("relu", nums, -100, 100);
  unary("logical_not", {dtype::boolean}, 0, 1);
  for (dtype t : floats)
    cases.push_back({.op = "relu",
                     .label = label_of("NaN passes", t),
                     .inputs = {with_value_every(rnd.uniform(t, shape{64}), 7, nan_f)}});

  // cast: saturation, NaN -> 0, to and from bool.
  auto big = with_value_every(rnd.uniform(dtype::float32, shape{200}, -1e10, 1e10), 9, nan_f);
  for (dtype to : {dtype::int32, dtype::int64, dtype::uint8, dtype::boolean, dtype::float64})
    cases.push_back({.op = "cast",
                     .label = std::string("random float32 -> ") + dtype_name(to),
                     .inputs = {big},
                     .attrs = {{"dtype", to}}});
  for (dtype from : {dtype::int64, dtype::boolean, dtype::uint8, dtype::float64})
    cases.push_back({.op = "cast",
                     .label = std::string("random ") + dtype_name(from) + " -> float32",
                     .inputs = {rnd.uniform(from, shape{100}, -300, 300)},
                     .attrs = {{"dtype", dtype::float32}}});
  cases.push_back({.op = "cast",
                   .label = "random int32 -> uint8 wraps",
                   .inputs = {rnd.uniform(dtype::int32, shape{100}, -1000, 1000)},
                   .attrs = {{"dtype", dtype::uint8}}});

  // Derivative helpers: same-shape pairs.
  for (dtype t : nums)
    cases.push_back(
        {.op = "relu_grad",
         .label = label_of("random (dy, x)", t),
         .inputs = {rnd.uniform(t, shape{5, 40}, 0, 50), rnd.uniform(t, shape{5, 40}, -50, 50)}});
  for (auto op : {"sigmoid_grad", "tanh_grad", "sqrt_grad", "rsqrt_grad", "reciprocal_grad"})
    for (dtype t : floats)
      cases.push_back(
          {.op = op,
           .label = label_of("random (y, dy)", t),
           .inputs = {rnd.uniform(t, shape{5, 40}, 0.1, 1), rnd.uniform(t, shape{5, 40})}});
  return cases;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> cases;
  for (const char* op : {"neg", "exp", "square", "sigmoid", "tanh"}) {
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

const grad_case_registrar gradient_registration(gradient_cases);

}  // namespace
}  // namespace actorflow::testing
