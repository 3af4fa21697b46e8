// Cases for the reductions: sum, mean, max, min, prod, l2_loss, l2_loss_rows, argmax, argmin,
// sum_to_shape_of.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/graph.hpp"
#include "ops/op_cases.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

namespace actorflow::testing {
namespace {

using ints = std::vector<int64_t>;

// 0..11 as (2,3,2): x[o,r,i] = 6o + 2r + i.
tensor iota_232() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return make<float>({2, 3, 2}, v);
}

const tensor m23 = make<float>({2, 3}, {1, 5, 3, 4, 2, 6});

const op_case_registrar cases({
    // ---- sum ----
    {.op = "sum", .label = "all axes", .inputs = {m23}, .expected = {scalar_of<float>(21)}},
    {.op = "sum",
     .label = "axis 0",
     .inputs = {m23},
     .attrs = {{"axes", ints{0}}},
     .expected = {make<float>({3}, {5, 7, 9})}},
    {.op = "sum",
     .label = "axis -1 keep_dims",
     .inputs = {m23},
     .attrs = {{"axes", ints{-1}}, {"keep_dims", true}},
     .expected = {make<float>({2, 1}, {9, 12})}},
    {.op = "sum",
     .label = "all axes keep_dims",
     .inputs = {m23},
     .attrs = {{"keep_dims", true}},
     .expected = {make<float>({1, 1}, {21})}},
    {.op = "sum",
     .label = "middle axis (K R K)",
     .inputs = {iota_232()},
     .attrs = {{"axes", ints{1}}},
     .expected = {make<float>({2, 2}, {6, 9, 24, 27})}},
    {.op = "sum",
     .label = "outer and inner axes (R K R, transposed)",
     .inputs = {iota_232()},
     .attrs = {{"axes", ints{0, 2}}},
     .expected = {make<float>({3}, {14, 22, 30})}},
    {.op = "sum",
     .label = "leading axes (R K)",
     .inputs = {iota_232()},
     .attrs = {{"axes", ints{0, 1}}},
     .expected = {make<float>({2}, {30, 36})}},
    {.op = "sum",
     .label = "size-1 axes only",
     .inputs = {make<float>({1, 3, 1}, {1, 2, 3})},
     .attrs = {{"axes", ints{0, 2}}},
     .expected = {make<float>({3}, {1, 2, 3})}},
    {.op = "sum",
     .label = "0-d",
     .inputs = {scalar_of<float>(5)},
     .expected = {scalar_of<float>(5)}},
    {.op = "sum",
     .label = "zero-size reduced dim gives 0",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .attrs = {{"axes", ints{0}}},
     .expected = {make<float>({3}, {0, 0, 0})}},
    {.op = "sum",
     .label = "zero-size kept dim",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .attrs = {{"axes", ints{1}}},
     .expected = {tensor(dtype::float32, {0})}},
    {.op = "sum",
     .label = "int32",
     .inputs = {make<int32_t>({2, 2}, {1, -2, 3, 40})},
     .attrs = {{"axes", ints{1}}},
     .expected = {make<int32_t>({2}, {-1, 43})}},
    {.op = "sum",
     .label = "int64",
     .inputs = {make<int64_t>({3}, {int64_t{1} << 40, 1, 2})},
     .expected = {scalar_of<int64_t>((int64_t{1} << 40) + 3)}},
    {.op = "sum",
     .label = "float64",
     .inputs = {make<double>({2}, {0.25, 1e10})},
     .expected = {scalar_of<double>(1e10 + 0.25)}},
    {.op = "sum",
     .label = "uint8 wraps",
     .inputs = {make<uint8_t>({2}, {200, 100})},
     .expected = {scalar_of<uint8_t>(44)}},
    {.op = "sum",
     .label = "axis out of range",
     .inputs = {m23},
     .attrs = {{"axes", ints{2}}},
     .expect_error = "axis 2 is out of range for rank 2"},
    {.op = "sum",
     .label = "duplicate axes",
     .inputs = {m23},
     .attrs = {{"axes", ints{1, -1}}},
     .expect_error = "duplicate axis -1"},
    {.op = "sum",
     .label = "bool",
     .inputs = {make<bool>({2}, {true, false})},
     .expect_error = "expects a numeric tensor"},
    {.op = "sum",
     .label = "axis on a scalar",
     .inputs = {scalar_of<float>(1)},
     .attrs = {{"axes", ints{0}}},
     .expect_error = "out of range for rank 0"},
    // ---- mean ----
    {.op = "mean",
     .label = "axis 1",
     .inputs = {m23},
     .attrs = {{"axes", ints{1}}},
     .expected = {make<float>({2}, {3, 4})}},
    {.op = "mean",
     .label = "float64 all, keep_dims",
     .inputs = {make<double>({2, 2}, {1, 2, 3, 5})},
     .attrs = {{"keep_dims", true}},
     .expected = {make<double>({1, 1}, {2.75})}},
    {.op = "mean",
     .label = "int32 truncates",
     .inputs = {make<int32_t>({3}, {1, 2, 4})},
     .expected = {scalar_of<int32_t>(2)}},
    {.op = "mean",
     .label = "uint8 over more than 255 elements",
     .inputs = {make<uint8_t>({300}, std::vector<uint8_t>(300, 0))},
     .expected = {scalar_of<uint8_t>(0)}},
    {.op = "mean",
     .label = "zero-size float gives NaN",
     .inputs = {tensor(dtype::float32, {2, 0})},
     .attrs = {{"axes", ints{1}}},
     .expected = {make<float>({2}, {nan_f, nan_f})}},
    {.op = "mean",
     .label = "zero-size int",
     .inputs = {tensor(dtype::int32, {2, 0})},
     .attrs = {{"axes", ints{1}}},
     .expect_error = "integer mean of no elements"},
    {.op = "mean",
     .label = "middle axis",
     .inputs = {iota_232()},
     .attrs = {{"axes", ints{-2}}},
     .expected = {make<float>({2, 2}, {2, 3, 8, 9})}},
    // ---- max / min ----
    {.op = "max",
     .label = "axis 0",
     .inputs = {m23},
     .attrs = {{"axes", ints{0}}},
     .expected = {make<float>({3}, {4, 5, 6})}},
    {.op = "max",
     .label = "axis 1 keep_dims",
     .inputs = {m23},
     .attrs = {{"axes", ints{1}}, {"keep_dims", true}},
     .expected = {make<float>({2, 1}, {5, 6})}},
    {.op = "max",
     .label = "NaN propagates",
     .inputs = {make<float>({2, 3}, {1, nan_f, 3, 4, 5, 6})},
     .attrs = {{"axes", ints{1}}},
     .expected = {make<float>({2}, {nan_f, 6})}},
    {.op = "max",
     .label = "NaN propagates down columns",
     .inputs = {make<float>({2, 2}, {1, nan_f, 3, 0})},
     .attrs = {{"axes", ints{0}}},
     .expected = {make<float>({2}, {3, nan_f})}},
    {.op = "max",
     .label = "int64 negatives",
     .inputs = {make<int64_t>({3}, {-5, -2, -9})},
     .expected = {scalar_of<int64_t>(-2)}},
    {.op = "max",
     .label = "uint8",
     .inputs = {make<uint8_t>({3}, {7, 255, 0})},
     .expected = {scalar_of<uint8_t>(255)}},
    {.op = "max",
     .label = "0-d",
     .inputs = {scalar_of<double>(-1)},
     .expected = {scalar_of<double>(-1)}},
    {.op = "max",
     .label = "zero-size kept dim is fine",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .attrs = {{"axes", ints{1}}},
     .expected = {tensor(dtype::float32, {0})}},
    {.op = "max",
     .label = "empty reduction",
     .inputs = {tensor(dtype::float32, {2, 0})},
     .attrs = {{"axes", ints{1}}},
     .expect_error = "cannot take the max of no elements"},
    {.op = "min",
     .label = "axis 0",
     .inputs = {m23},
     .attrs = {{"axes", ints{0}}},
     .expected = {make<float>({3}, {1, 2, 3})}},
    {.op = "min",
     .label = "all, int32",
     .inputs = {make<int32_t>({2, 2}, {3, -7, 2, 9})},
     .expected = {scalar_of<int32_t>(-7)}},
    {.op = "min",
     .label = "NaN propagates",
     .inputs = {make<double>({3}, {1, std::nan(""), -3})},
     .expected = {scalar_of<double>(std::nan(""))}},
    {.op = "min",
     .label = "R K R",
     .inputs = {iota_232()},
     .attrs = {{"axes", ints{0, 2}}},
     .expected = {make<float>({3}, {0, 2, 4})}},
    {.op = "min",
     .label = "empty reduction",
     .inputs = {tensor(dtype::int32, {0})},
     .expect_error = "cannot take the min of no elements"},
    // ---- prod ----
    {.op = "prod",
     .label = "axis 1",
     .inputs = {make<float>({2, 2}, {1, 2, 3, 4})},
     .attrs = {{"axes", ints{1}}},
     .expected = {make<float>({2}, {2, 12})}},
    {.op = "prod",
     .label = "axis 0, int64",
     .inputs = {make<int64_t>({2, 2}, {1, 2, 3, -4})},
     .attrs = {{"axes", ints{0}}},
     .expected = {make<int64_t>({2}, {3, -8})}},
    {.op = "prod",
     .label = "zero-size gives 1",
     .inputs = {tensor(dtype::int32, {3, 0})},
     .attrs = {{"axes", ints{1}}, {"keep_dims", true}},
     .expected = {make<int32_t>({3, 1}, {1, 1, 1})}},
    {.op = "prod", .label = "bool", .inputs = {make<bool>({1}, {true})}, .expect_error = "numeric"},
    // ---- l2_loss ----
    {.op = "l2_loss",
     .label = "matrix",
     .inputs = {make<float>({2, 2}, {1, -2, 3, 0.5f})},
     .expected = {scalar_of<float>(7.125f)}},
    // Each square halved before the sum, as TensorFlow's: the sum of the
    // squares would overflow float32 here (2.25 * 2^127 each, twice), the sum
    // of the halves (1.125 * 2^127) does not.
    {.op = "l2_loss",
     .label = "near float32's range: squares halved before the sum",
     .inputs = {make<float>({2}, {0x1.8p63f, -0x1.8p63f})},
     .expected = {scalar_of<float>(0x1.2p127f)}},
    {.op = "l2_loss",
     .label = "TensorFlow's {1.5e19, -1.5e19, 1e19} gives 2.75e38",
     .inputs = {make<float>({3}, {1.5e19f, -1.5e19f, 1e19f})},
     .expected = {scalar_of<float>(2.75e38f)}},
    {.op = "l2_loss",
     .label = "empty gives 0",
     .inputs = {tensor(dtype::float64, {0, 3})},
     .expected = {scalar_of<double>(0.0)}},
    {.op = "l2_loss",
     .label = "int32",
     .inputs = {make<int32_t>({1}, {2})},
     .expect_error = "float"},
    // ---- l2_loss_rows: the l2_loss of scatter_add_like(rows, indices) ----
    // Rows 0 and 2 name row 0: summed to (2,2) before squaring, then row 5's (3,4).
    {.op = "l2_loss_rows",
     .label = "repeated indices summed before squaring",
     .inputs = {make<float>({3, 2}, {1, 2, 3, 4, 1, 0}), make<int32_t>({3}, {0, 5, 0})},
     .expected = {scalar_of<float>(16.5f)}},
    {.op = "l2_loss_rows",
     .label = "indices (2,2), float64, int64",
     .inputs = {make<double>({2, 2, 1}, {1, 2, 3, 4}), make<int64_t>({2, 2}, {1, 1, 2, 3})},
     .expected = {scalar_of<double>(17.0)}},
    {.op = "l2_loss_rows",
     .label = "a scalar index names one row",
     .inputs = {make<float>({3}, {1, 2, 3}), scalar_of<int64_t>(4)},
     .expected = {scalar_of<float>(7.0f)}},
    {.op = "l2_loss_rows",
     .label = "no rows gives 0",
     .inputs = {tensor(dtype::float32, {0, 3}), tensor(dtype::int32, {0})},
     .expected = {scalar_of<float>(0.0f)}},
    {.op = "l2_loss_rows",
     .label = "int32 rows",
     .inputs = {make<int32_t>({1}, {2}), make<int32_t>({1}, {0})},
     .expect_error = "expects float rows"},
    {.op = "l2_loss_rows",
     .label = "float indices",
     .inputs = {make<float>({1}, {2}), make<float>({1}, {0})},
     .expect_error = "indices must be int32 or int64"},
    {.op = "l2_loss_rows",
     .label = "rows that do not start with the indices' dims",
     .inputs = {make<float>({3, 2}, {1, 2, 3, 4, 5, 6}), make<int32_t>({2}, {0, 1})},
     .expect_error = "do not start with the dims of indices"},
    // ---- argmax / argmin ----
    {.op = "argmax",
     .label = "axis 1",
     .inputs = {m23},
     .attrs = {{"axis", int64_t{1}}},
     .expected = {make<int64_t>({2}, {1, 2})}},
    {.op = "argmax",
     .label = "axis 0 (default)",
     .inputs = {m23},
     .expected = {make<int64_t>({3}, {1, 0, 1})}},
    {.op = "argmax",
     .label = "axis -1, ties take the first",
     .inputs = {make<int32_t>({4}, {3, 7, 7, 1})},
     .attrs = {{"axis", int64_t{-1}}},
     .expected = {scalar_of<int64_t>(1)}},
    {.op = "argmax",
     .label = "first NaN wins",
     .inputs = {make<float>({4}, {1, nan_f, 9, nan_f})},
     .expected = {scalar_of<int64_t>(1)}},
    {.op = "argmax",
     .label = "middle axis",
     .inputs = {make<double>({1, 3, 2}, {0, 9, 5, 1, 5, 2})},
     .attrs = {{"axis", int64_t{1}}},
     .expected = {make<int64_t>({1, 2}, {1, 0})}},
    {.op = "argmax",
     .label = "uint8 with size-1 axis",
     .inputs = {make<uint8_t>({2, 1}, {4, 3})},
     .attrs = {{"axis", int64_t{1}}},
     .expected = {make<int64_t>({2}, {0, 0})}},
    {.op = "argmax",
     .label = "zero-size kept dim",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .attrs = {{"axis", int64_t{1}}},
     .expected = {tensor(dtype::int64, {0})}},
    {.op = "argmax",
     .label = "empty axis",
     .inputs = {tensor(dtype::float32, {2, 0})},
     .attrs = {{"axis", int64_t{1}}},
     .expect_error = "no elements"},
    {.op = "argmax",
     .label = "0-d",
     .inputs = {scalar_of<float>(1)},
     .expect_error = "out of range for rank 0"},
    {.op = "argmax",
     .label = "bool",
     .inputs = {make<bool>({2}, {false, true})},
     .expect_error = "numeric"},
    {.op = "argmin",
     .label = "axis 1",
     .inputs = {m23},
     .attrs = {{"axis", int64_t{1}}},
     .expected = {make<int64_t>({2}, {0, 1})}},
    {.op = "argmin",
     .label = "axis 0, int64",
     .inputs = {make<int64_t>({2, 3}, {5, -1, 3, 4, 2, 3})},
     .attrs = {{"axis", int64_t{0}}},
     .expected = {make<int64_t>({3}, {1, 0, 0})}},
    {.op = "argmin",
     .label = "axis out of range",
     .inputs = {m23},
     .attrs = {{"axis", int64_t{-3}}},
     .expect_error = "axis -3 is out of range for rank 2"},
    // ---- sum_to_shape_of ----
    {.op = "sum_to_shape_of",
     .label = "drop a leading dim",
     .inputs = {m23, tensor(dtype::float32, {3})},
     .expected = {make<float>({3}, {5, 7, 9})}},
    {.op = "sum_to_shape_of",
     .label = "stretched dim kept as 1",
     .inputs = {m23, tensor(dtype::int32, {2, 1})},
     .expected = {make<float>({2, 1}, {9, 12})}},
    {.op = "sum_to_shape_of",
     .label = "to a scalar",
     .inputs = {m23, scalar_of<int64_t>(0)},
     .expected = {scalar_of<float>(21)}},
    {.op = "sum_to_shape_of",
     .label = "same shape",
     .inputs = {make<int32_t>({2}, {4, 5}), make<int32_t>({2}, {0, 0})},
     .expected = {make<int32_t>({2}, {4, 5})}},
    {.op = "sum_to_shape_of",
     .label = "(1,3) from (2,3)",
     .inputs = {m23, tensor(dtype::float32, {1, 3})},
     .expected = {make<float>({1, 3}, {5, 7, 9})}},
    {.op = "sum_to_shape_of",
     .label = "zero-size stretched dim",
     .inputs = {tensor(dtype::float32, {0, 2}), tensor(dtype::float32, {1, 2})},
     .expected = {make<float>({1, 2}, {0, 0})}},
    {.op = "sum_to_shape_of",
     .label = "not a broadcast",
     .inputs = {m23, tensor(dtype::float32, {2})},
     .expect_error = "cannot sum (2,3) to (2)"},
    {.op = "sum_to_shape_of",
     .label = "like has higher rank",
     .inputs = {make<float>({3}, {1, 2, 3}), tensor(dtype::float32, {1, 3})},
     .expect_error = "cannot sum (3) to (1,3)"},
});

// ---- against the CPU kernel: random inputs of each dtype a GPU kernel takes ----

attr_map axes_attrs(ints axes, bool keep_dims = false) {
  return {{"axes", std::move(axes)}, {"keep_dims", keep_dims}};
}

// Trailing, leading, middle and scattered axes, keep_dims, long rows and
// columns (split into parts on a GPU), empty inputs.
std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> cases;
  const std::vector<std::pair<shape, ints>> reductions{
      {shape{4, 5, 6}, {}},   {shape{4, 5, 6}, {2}},    {shape{4, 5, 6}, {0}},
      {shape{4, 5, 6}, {1}},  {shape{4, 5, 6}, {0, 2}}, {shape{3, 20000}, {1}},
      {shape{20000, 3}, {0}}, {shape{300, 700}, {0}},   {shape{0, 4}, {1}}};
  for (std::string op : {"sum", "mean", "max", "min", "prod"})
    for (dtype t : nums)
      for (auto& [dims, axes] : reductions) {
        if (op == "prod" && dims.num_elements() > 1000) continue;  // overflows
        const double lo = op == "prod" ? 0.9 : (t == dtype::uint8 ? 0 : -100);
        const double hi = op == "prod" ? 1.1 : 100;
        // A long sum of mixed signs cancels: its rounding, which grows with
        // the square root of the terms in another order (a GPU's partial
        // sums), is relative to the terms' magnitude, not to the small result.
        int64_t terms = 1;
        for (int k = 0; k < dims.rank(); ++k)
          if (axes.empty() || std::find(axes.begin(), axes.end(), int64_t(k)) != axes.end())
            terms *= dims.dim(k);
        const bool summed = op == "sum" || op == "mean";
        cases.push_back(
            {.op = op,
             .label =
                 label_of("random " + dims.to_string() + " axes " + std::to_string(axes.size()), t),
             .inputs = {rnd.uniform(t, dims, lo, hi)},
             .attrs = axes_attrs(axes),
             .device_tolerance = summed ? default_tolerance(t) * std::sqrt(double(terms)) : 0});
      }
  for (dtype t : floats) {
    cases.push_back({.op = "sum",
                     .label = label_of("random keep_dims", t),
                     .inputs = {rnd.uniform(t, shape{4, 5, 6})},
                     .attrs = axes_attrs({-1}, true)});
    cases.push_back({.op = "sum",
                     .label = label_of("sum over an empty dim", t),
                     .inputs = {rnd.uniform(t, shape{4, 0})},
                     .attrs = axes_attrs({1})});
    cases.push_back({.op = "mean",
                     .label = label_of("mean over an empty dim is NaN", t),
                     .inputs = {rnd.uniform(t, shape{4, 0})},
                     .attrs = axes_attrs({1})});
    cases.push_back({.op = "max",
                     .label = label_of("NaN wins", t),
                     .inputs = {with_value_every(rnd.uniform(t, shape{8, 9}), 10, nan_f)},
                     .attrs = axes_attrs({1})});
  }
  for (auto op : {"argmax", "argmin"})
    for (dtype t : nums)
      for (int64_t axis : {0, 1, -1})
        cases.push_back(
            {.op = op,
             .label = label_of("random (7,9,5) axis " + std::to_string(axis) + ", ties", t),
             .inputs = {rnd.uniform(t, shape{7, 9, 5}, 0, 5)},
             .attrs = {{"axis", axis}}});
  for (dtype t : nums)
    cases.push_back(
        {.op = "sum_to_shape_of",
         .label = label_of("random (4,3,5) to (3,1)", t),
         .inputs = {rnd.uniform(t, shape{4, 3, 5}, 0, 20), rnd.uniform(t, shape{3, 1})}});
  return cases;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

attr_map axes(ints a, bool keep_dims = false) {
  return {{"axes", std::move(a)}, {"keep_dims", keep_dims}};
}

std::vector<grad_case> gradient_cases() {
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

const grad_case_registrar gradient_registration(gradient_cases);

// Reference reduction in double over `axes` (sorted, distinct) of a dense tensor.
std::vector<double> naive_reduce(const std::vector<float>& x, const std::vector<int64_t>& dims,
                                 const std::vector<bool>& red, const std::string& kind) {
  size_t n = dims.size();
  std::vector<int64_t> out_dims;
  for (size_t k = 0; k < n; ++k)
    if (!red[k]) out_dims.push_back(dims[k]);
  int64_t out_n = 1;
  for (auto d : out_dims) out_n *= d;
  double init = kind == "sum" ? 0 : kind == "max" ? -INFINITY : INFINITY;
  std::vector<double> out(static_cast<size_t>(out_n), init);
  std::vector<int64_t> idx(n, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t k = 0; k < n; ++k)
      if (!red[k]) o = o * dims[k] + idx[k];
    double& a = out[static_cast<size_t>(o)];
    double v = x[i];
    a = kind == "sum" ? a + v : kind == "max" ? std::max(a, v) : std::min(a, v);
    for (size_t k = n; k-- > 0;)
      if (++idx[k] < dims[k])
        break;
      else
        idx[k] = 0;
  }
  return out;
}

TEST_CASE("reductions match a naive reference on large inputs, every path") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  struct shape_case {
    std::vector<int64_t> dims;
    std::vector<int64_t> axes;
  };
  std::vector<shape_case> shapes = {
      {{3, 200000}, {1}},                         // few long rows: blocked partials
      {{500, 300}, {1}},                          // many rows
      {{200000, 3}, {0}},                         // long columns, narrow: blocked partials
      {{300, 2000}, {0}},                         // columns wider than one accumulator slice
      {{40, 50, 60}, {1}},                        // K R K
      {{40, 50, 60}, {0, 2}},                     // R K R: transposed first
      {{70, 2, 3, 80}, {0, 3}}, {{1 << 17}, {}},  // all, long
  };
  for (auto& sc : shapes) {
    int64_t n = 1;
    for (auto d : sc.dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = dist(rng);
    tensor x = make<float>(shape(sc.dims), v);
    std::vector<bool> red(sc.dims.size(), sc.axes.empty());
    for (auto a : sc.axes) red[static_cast<size_t>(a)] = true;
    for (std::string kind : {"sum", "max", "min"}) {
      INFO("shape " << shape(sc.dims).to_string() << " " << kind);
      auto expected = naive_reduce(v, sc.dims, red, kind);
      auto out = run_kernel(kind, {x}, {{"axes", sc.axes}})[0];
      REQUIRE(out.num_elements() == static_cast<int64_t>(expected.size()));
      auto p = out.data<float>();
      double worst = 0;
      for (size_t i = 0; i < expected.size(); ++i)
        worst = std::max(worst, std::abs(p[i] - expected[i]) / (1 + std::abs(expected[i])));
      CHECK(worst < (kind == "sum" ? 1e-3 : 0.0) + 1e-7);
      // Same shape, same bits: the block split depends on the shape alone.
      auto again = run_kernel(kind, {x}, {{"axes", sc.axes}})[0];
      CHECK(again.equals(out));
    }
  }
}

TEST_CASE("l2_loss of a large tensor matches a double-precision sum, the same bits every time") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int64_t n = 1'000'003;  // many blocks, the last one short
  std::vector<float> v(static_cast<size_t>(n));
  double expected = 0;
  for (auto& e : v) {
    e = dist(rng);
    expected += double(e) * double(e);
  }
  tensor x = make<float>(shape{n}, v);
  auto out = run_kernel("l2_loss", {x}, {})[0];
  CHECK(std::abs(out.data<float>()[0] - expected / 2) / (expected / 2) < 1e-5);
  CHECK(run_kernel("l2_loss", {x}, {})[0].equals(out));
}

TEST_CASE("l2_loss_rows equals l2_loss of the scattered rows; the kernel checks the dims itself") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::uniform_int_distribution<int64_t> row(0, 19);
  std::vector<float> v(300 * 7);
  for (auto& e : v) e = dist(rng);
  std::vector<int64_t> idx(300);
  for (auto& i : idx) i = row(rng);  // many repeats
  tensor rows = make<float>({300, 7}, v), indices = make<int64_t>({300}, idx);
  auto dense = run_kernel("scatter_add_like", {rows, indices, tensor(dtype::float32, {20, 7})},
                          {{"axis", int64_t{0}}})[0];
  float want = run_kernel("l2_loss", {dense}, {})[0].item<float>();
  float got = run_kernel("l2_loss_rows", {rows, indices}, {})[0].item<float>();
  CHECK(std::abs(got - want) <= 1e-5f * want);
  CHECK(
      error_of([&] {
        run_kernel_only("l2_loss_rows", {rows, make<int64_t>({299}, std::vector<int64_t>(299, 0))});
      }).find("rows (300,7) do not start with the dims of indices (299)") != std::string::npos);
}

TEST_CASE("argmax and argmin on large inputs") {
  std::vector<float> v(100 * 3000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 10007);
  tensor x = make<float>({100, 3000}, v);
  for (int axis : {0, 1}) {
    auto amax = run_kernel("argmax", {x}, {{"axis", int64_t{axis}}})[0];
    auto amin = run_kernel("argmin", {x}, {{"axis", int64_t{axis}}})[0];
    int64_t outer = axis == 0 ? 3000 : 100, len = axis == 0 ? 100 : 3000;
    for (int64_t o = 0; o < outer; ++o) {
      int64_t bi = 0, si = 0;
      auto at = [&](int64_t r) {
        return axis == 0 ? v[size_t(r * 3000 + o)] : v[size_t(o * 3000 + r)];
      };
      for (int64_t r = 1; r < len; ++r) {
        if (at(r) > at(bi)) bi = r;
        if (at(r) < at(si)) si = r;
      }
      REQUIRE(amax.data<int64_t>()[o] == bi);
      REQUIRE(amin.data<int64_t>()[o] == si);
    }
  }
}

TEST_CASE("reduction builders infer shapes with unknown dims") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 3, 4}, "x");
  CHECK(reduce_sum(x, {1}).dims() == shape{-1, 4});
  CHECK(reduce_mean(x, {-1}, true).dims() == shape{-1, 3, 1});
  CHECK(reduce_max(x).dims() == shape{});
  CHECK(reduce_min(x, {0}).dims() == shape{3, 4});
  CHECK(reduce_prod(x, {0, 2}, true).dims() == shape{1, 3, 1});
  auto am = argmax(x, 2);
  CHECK(am.type() == dtype::int64);
  CHECK(am.dims() == shape{-1, 3});
  CHECK(argmin(x, -1).dims() == shape{-1, 3});
  auto b = placeholder(g, dtype::float32, {-1}, "b");
  auto s = sum_to_shape_of(x, b);
  CHECK(s.dims() == shape{-1});
  CHECK(reduce_sum_to(x, b).type() == dtype::float32);
  CHECK_THROWS_WITH_AS(reduce_sum(x, {3}), doctest::Contains("[sum] axis 3 is out of range"),
                       error);
  auto bad = placeholder(g, dtype::float32, {5}, "bad");
  CHECK_THROWS_WITH_AS(sum_to_shape_of(x, bad), doctest::Contains("cannot sum (?,3,4) to (5)"),
                       error);
}

TEST_CASE("sum_to_shape_of checks shapes again at run time") {
  // At build time (?,3) vs (2,?) passed; at run time (4,3) vs (2,3) does not broadcast.
  CHECK_THROWS_WITH_AS(run_kernel_only("sum_to_shape_of", {tensor::zeros(dtype::float32, {4, 3}),
                                                           tensor::zeros(dtype::float32, {2, 3})}),
                       doctest::Contains("[sum_to_shape_of] cannot sum (4,3) to (2,3)"), error);
  auto out = run_kernel_only("sum_to_shape_of",
                             {make<float>({2, 2}, {1, 2, 3, 4}), tensor(dtype::float32, {2, 1})});
  CHECK(compare_tensors(out[0], make<float>({2, 1}, {3, 7}), 0).empty());
}

}  // namespace
}  // namespace actorflow::testing
