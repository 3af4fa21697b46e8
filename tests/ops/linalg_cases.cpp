// Cases for matmul, bias_add and bias_add_grad, and checks of the blocked GEMM against a
// naive product on sizes that take its parallel path.
#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <random>

#include "devices/cpu/gemm_library.hpp"
#include "ops/linalg.hpp"
#include "ops/op_cases.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {
namespace {

const tensor a23 = make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
const tensor b32 = make<float>({3, 2}, {7, 8, 9, 10, 11, 12});
const tensor ab = make<float>({2, 2}, {58, 64, 139, 154});
// The same operands stored transposed.
const tensor a23_t = make<float>({3, 2}, {1, 4, 2, 5, 3, 6});
const tensor b32_t = make<float>({2, 3}, {7, 9, 11, 8, 10, 12});

attr_map flags(bool ta, bool tb) { return {{"transpose_a", ta}, {"transpose_b", tb}}; }

const op_case_registrar matmul_cases({
    {.op = "matmul", .label = "(2,3)x(3,2) float32", .inputs = {a23, b32}, .expected = {ab}},
    {.op = "matmul",
     .label = "no attrs means no transposes",
     .inputs = {a23, b32},
     .attrs = {},
     .expected = {ab}},
    {.op = "matmul",
     .label = "(2,3)x(3,2) float64",
     .inputs = {make<double>({2, 3}, {1, 2, 3, 4, 5, 6}),
                make<double>({3, 2}, {7, 8, 9, 10, 11, 12})},
     .attrs = flags(false, false),
     .expected = {make<double>({2, 2}, {58, 64, 139, 154})}},
    {.op = "matmul",
     .label = "(2,3)x(3,2) int32",
     .inputs = {make<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}),
                make<int32_t>({3, 2}, {7, 8, 9, 10, 11, 12})},
     .expected = {make<int32_t>({2, 2}, {58, 64, 139, 154})}},
    {.op = "matmul",
     .label = "(2,3)x(3,2) int64",
     .inputs = {make<int64_t>({2, 3}, {1, 2, 3, 4, 5, -6}),
                make<int64_t>({3, 2}, {7, 8, 9, 10, 11, 12})},
     .expected = {make<int64_t>({2, 2}, {58, 64, 7, 10})}},
    {.op = "matmul",
     .label = "transpose_a",
     .inputs = {a23_t, b32},
     .attrs = flags(true, false),
     .expected = {ab}},
    {.op = "matmul",
     .label = "transpose_b",
     .inputs = {a23, b32_t},
     .attrs = flags(false, true),
     .expected = {ab}},
    {.op = "matmul",
     .label = "transpose_a and transpose_b",
     .inputs = {a23_t, b32_t},
     .attrs = flags(true, true),
     .expected = {ab}},
    {.op = "matmul",
     .label = "(1,1)x(1,1)",
     .inputs = {make<float>({1, 1}, {3}), make<float>({1, 1}, {-4})},
     .expected = {make<float>({1, 1}, {-12})}},
    {.op = "matmul",
     .label = "row times column (1,3)x(3,1)",
     .inputs = {make<float>({1, 3}, {1, 2, 3}), make<float>({3, 1}, {4, 5, 6})},
     .expected = {make<float>({1, 1}, {32})}},
    {.op = "matmul",
     .label = "batched (2,2,2)x(2,2,2)",
     .inputs = {make<float>({2, 2, 2}, {1, 2, 3, 4, 1, 0, 0, 1}),
                make<float>({2, 2, 2}, {5, 6, 7, 8, 2, 3, 4, 5})},
     .expected = {make<float>({2, 2, 2}, {19, 22, 43, 50, 2, 3, 4, 5})}},
    {.op = "matmul",
     .label = "batched rank 4 (2,1,2,1)x(2,1,1,2)",
     .inputs = {make<float>({2, 1, 2, 1}, {1, 2, 3, 4}), make<float>({2, 1, 1, 2}, {5, 6, 7, 8})},
     .expected = {make<float>({2, 1, 2, 2}, {5, 6, 10, 12, 21, 24, 28, 32})}},
    {.op = "matmul",
     .label = "batched with transpose_b",
     .inputs = {make<float>({2, 2, 2}, {1, 2, 3, 4, 1, 0, 0, 1}),
                make<float>({2, 2, 2}, {5, 7, 6, 8, 2, 4, 3, 5})},
     .attrs = flags(false, true),
     .expected = {make<float>({2, 2, 2}, {19, 22, 43, 50, 2, 3, 4, 5})}},
    {.op = "matmul",
     .label = "batch x rank 2: b shared by every batch",
     .inputs = {make<float>({2, 2, 2}, {1, 2, 3, 4, 0, 1, 1, 0}),
                make<float>({2, 2}, {5, 6, 7, 8})},
     .expected = {make<float>({2, 2, 2}, {19, 22, 43, 50, 7, 8, 5, 6})}},
    {.op = "matmul",
     .label = "rank 2 x batch: a shared by every batch",
     .inputs = {make<float>({2, 2}, {1, 2, 3, 4}),
                make<float>({2, 2, 2}, {5, 6, 7, 8, 1, 0, 0, 1})},
     .expected = {make<float>({2, 2, 2}, {19, 22, 43, 50, 1, 2, 3, 4})}},
    {.op = "matmul",
     .label = "batch (transpose_a) x rank 2",
     .inputs = {make<float>({1, 3, 2}, {1, 4, 2, 5, 3, 6}), make<float>({3, 1}, {1, 1, 1})},
     .attrs = flags(true, false),
     .expected = {make<float>({1, 2, 1}, {6, 15})}},
    {.op = "matmul",
     .label = "zero rows (0,3)x(3,2)",
     .inputs = {tensor(dtype::float32, {0, 3}), tensor::zeros(dtype::float32, {3, 2})},
     .expected = {tensor(dtype::float32, {0, 2})}},
    {.op = "matmul",
     .label = "zero inner dim (2,0)x(0,3) gives zeros",
     .inputs = {tensor(dtype::float32, {2, 0}), tensor(dtype::float32, {0, 3})},
     .expected = {tensor::zeros(dtype::float32, {2, 3})}},
    {.op = "matmul",
     .label = "zero columns (2,3)x(3,0)",
     .inputs = {a23, tensor(dtype::float32, {3, 0})},
     .expected = {tensor(dtype::float32, {2, 0})}},
    {.op = "matmul",
     .label = "zero batch (0,2,3)x(0,3,2)",
     .inputs = {tensor(dtype::float64, {0, 2, 3}), tensor(dtype::float64, {0, 3, 2})},
     .expected = {tensor(dtype::float64, {0, 2, 2})}},
    {.op = "matmul",
     .label = "inner dims differ",
     .inputs = {tensor::zeros(dtype::float32, {2, 3}), tensor::zeros(dtype::float32, {4, 5})},
     .expect_error = "[matmul] inner dimensions differ: (2,3) x (4,5)"},
    {.op = "matmul",
     .label = "inner dims differ after transpose_a",
     .inputs = {a23, b32},
     .attrs = flags(true, false),
     .expect_error = "inner dimensions differ: (2,3) x (3,2) (transpose_a)"},
    {.op = "matmul",
     .label = "dtype mismatch",
     .inputs = {a23, make<double>({3, 2}, {7, 8, 9, 10, 11, 12})},
     .expect_error = "different dtypes: float32(2,3) x float64(3,2)"},
    {.op = "matmul",
     .label = "rank 1 operand",
     .inputs = {make<float>({3}, {1, 2, 3}), b32},
     .expect_error = "expects inputs of rank >= 2, got (3) x (3,2)"},
    {.op = "matmul",
     .label = "batch dims that do not broadcast",
     .inputs = {tensor::zeros(dtype::float32, {2, 2, 2}), tensor::zeros(dtype::float32, {3, 2, 2})},
     .expect_error = "[matmul] batch dimensions (2) and (3) do not broadcast: (2,2,2) x (3,2,2)"},
    {.op = "matmul",
     .label = "batch ranks differ and do not broadcast",
     .inputs = {tensor::zeros(dtype::float32, {2, 3, 2, 2}),
                tensor::zeros(dtype::float32, {4, 2, 2})},
     .expect_error = "batch dimensions (2,3) and (4) do not broadcast: (2,3,2,2) x (4,2,2)"},
    {.op = "matmul",
     .label = "batch dims that do not broadcast, transposed",
     .inputs = {tensor::zeros(dtype::float32, {2, 2, 3, 2}),
                tensor::zeros(dtype::float32, {3, 3, 2})},
     .attrs = flags(true, false),
     .expect_error = "batch dimensions (2,2) and (3) do not broadcast: (2,2,3,2) x (3,3,2) "
                     "(transpose_a)"},
    {.op = "matmul",
     .label = "bool operands",
     .inputs = {tensor::zeros(dtype::boolean, {2, 2}), tensor::zeros(dtype::boolean, {2, 2})},
     .expect_error = "expects float32, float64, bfloat16, int32 or int64, got bool"},
    {.op = "matmul", .label = "arity", .inputs = {a23}, .expect_error = "expects 2 inputs"},
});

const op_case_registrar bias_cases({
    {.op = "bias_add",
     .label = "(2,3)+(3) float32",
     .inputs = {a23, make<float>({3}, {10, 20, 30})},
     .expected = {make<float>({2, 3}, {11, 22, 33, 14, 25, 36})}},
    {.op = "bias_add",
     .label = "float64",
     .inputs = {make<double>({2, 2}, {1, 2, 3, 4}), make<double>({2}, {-1, 0.5})},
     .expected = {make<double>({2, 2}, {0, 2.5, 2, 4.5})}},
    {.op = "bias_add",
     .label = "int32",
     .inputs = {make<int32_t>({2, 2}, {1, 2, 3, 4}), make<int32_t>({2}, {-1, 5})},
     .expected = {make<int32_t>({2, 2}, {0, 7, 2, 9})}},
    {.op = "bias_add",
     .label = "int64 rank 3",
     .inputs = {make<int64_t>({2, 1, 2}, {1, 2, 3, 4}), make<int64_t>({2}, {100, 200})},
     .expected = {make<int64_t>({2, 1, 2}, {101, 202, 103, 204})}},
    {.op = "bias_add",
     .label = "rank 1",
     .inputs = {make<float>({3}, {1, 2, 3}), make<float>({3}, {1, 1, 1})},
     .expected = {make<float>({3}, {2, 3, 4})}},
    {.op = "bias_add",
     .label = "size-1 last dim",
     .inputs = {make<float>({3, 1}, {1, 2, 3}), make<float>({1}, {0.5f})},
     .expected = {make<float>({3, 1}, {1.5f, 2.5f, 3.5f})}},
    {.op = "bias_add",
     .label = "zero rows (0,3)+(3)",
     .inputs = {tensor(dtype::float32, {0, 3}), make<float>({3}, {1, 2, 3})},
     .expected = {tensor(dtype::float32, {0, 3})}},
    {.op = "bias_add",
     .label = "zero columns (2,0)+(0)",
     .inputs = {tensor(dtype::float32, {2, 0}), tensor(dtype::float32, {0})},
     .expected = {tensor(dtype::float32, {2, 0})}},
    {.op = "bias_add",
     .label = "bias length differs",
     .inputs = {a23, make<float>({4}, {1, 2, 3, 4})},
     .expect_error = "bias (4) does not match the last dimension of value (2,3)"},
    {.op = "bias_add",
     .label = "bias of rank 2",
     .inputs = {a23, make<float>({1, 3}, {1, 2, 3})},
     .expect_error = "bias must be 1-D, got (1,3)"},
    {.op = "bias_add",
     .label = "scalar value",
     .inputs = {scalar_of<float>(1), make<float>({1}, {1})},
     .expect_error = "value must have rank >= 1"},
    {.op = "bias_add",
     .label = "dtype mismatch",
     .inputs = {a23, make<double>({3}, {1, 2, 3})},
     .expect_error = "different dtypes"},
    {.op = "bias_add",
     .label = "bool",
     .inputs = {tensor::zeros(dtype::boolean, {2}), tensor::zeros(dtype::boolean, {2})},
     .expect_error = "bool is not a numeric type"},
    {.op = "bias_add_grad",
     .label = "(2,3) float32",
     .inputs = {a23},
     .expected = {make<float>({3}, {5, 7, 9})}},
    {.op = "bias_add_grad",
     .label = "rank 3 float64",
     .inputs = {make<double>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
     .expected = {make<double>({2}, {16, 20})}},
    {.op = "bias_add_grad",
     .label = "int32",
     .inputs = {make<int32_t>({3, 1}, {1, -2, 7})},
     .expected = {make<int32_t>({1}, {6})}},
    {.op = "bias_add_grad",
     .label = "int64 rank 1 is itself",
     .inputs = {make<int64_t>({2}, {4, 5})},
     .expected = {make<int64_t>({2}, {4, 5})}},
    {.op = "bias_add_grad",
     .label = "zero rows gives zeros",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .expected = {tensor::zeros(dtype::float32, {3})}},
    {.op = "bias_add_grad",
     .label = "zero columns",
     .inputs = {tensor(dtype::float32, {4, 0})},
     .expected = {tensor(dtype::float32, {0})}},
    {.op = "bias_add_grad",
     .label = "scalar",
     .inputs = {scalar_of<float>(1)},
     .expect_error = "dy must have rank >= 1"},
    {.op = "bias_add_grad",
     .label = "bool",
     .inputs = {tensor::zeros(dtype::boolean, {2})},
     .expect_error = "bool is not a numeric type"},
});

// ---- broadcast batch dims (TensorFlow's BatchMatMulV2) -------------------------------------

// The broadcast product by definition, in double: output matrix (i...) multiplies the
// matrices of a and b at (i...) right-aligned, a size-1 or missing dim repeating its one.
template <class T>
tensor naive_matmul(const tensor& a, const tensor& b, bool ta, bool tb) {
  const int ra = a.rank() - 2, rb = b.rank() - 2, r = std::max(ra, rb);
  auto batch_dim = [&](const tensor& x, int rx, int d) {
    return d < r - rx ? 1 : x.dims()[d - (r - rx)];
  };
  std::vector<int64_t> dims;
  for (int d = 0; d < r; ++d) {
    const int64_t da = batch_dim(a, ra, d);
    dims.push_back(da == 1 ? batch_dim(b, rb, d) : da);
  }
  const int64_t m = a.dims().dim(ta ? -1 : -2), k = a.dims().dim(ta ? -2 : -1);
  const int64_t n = b.dims().dim(tb ? -2 : -1);
  dims.push_back(m);
  dims.push_back(n);
  tensor out(dtype_of<T>(), shape(dims));
  const int64_t count = out.num_elements() / std::max<int64_t>(1, m * n);
  for (int64_t i = 0; m * n > 0 && i < count; ++i) {
    int64_t ia = 0, ib = 0, rest = i, sa = 1, sb = 1;  // the matrix of a and of b
    for (int d = r - 1; d >= 0; --d) {
      const int64_t at = rest % dims[size_t(d)];
      rest /= dims[size_t(d)];
      const int64_t da = batch_dim(a, ra, d), db = batch_dim(b, rb, d);
      ia += (da == 1 ? 0 : at) * sa;
      ib += (db == 1 ? 0 : at) * sb;
      sa *= da;
      sb *= db;
    }
    const T* pa = a.data<T>() + ia * m * k;
    const T* pb = b.data<T>() + ib * k * n;
    for (int64_t row = 0; row < m; ++row)
      for (int64_t col = 0; col < n; ++col) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += double(ta ? pa[p * m + row] : pa[row * k + p]) *
                 double(tb ? pb[col * k + p] : pb[p * n + col]);
        out.mutable_data<T>()[(i * m + row) * n + col] = T(sum);
      }
  }
  return out;
}

std::vector<op_case> broadcast_cases() {
  random_source rnd;
  struct product {
    shape a, b;
    bool ta = false, tb = false;
  };
  // Small whole numbers: every sum is exact, so the naive product is the answer.
  const std::vector<product> products{
      {{1, 3, 4}, {2, 4, 5}},
      {{2, 3, 4}, {1, 4, 5}},
      {{3, 4}, {2, 4, 5}},
      {{1, 1, 3, 4}, {4, 5}},
      {{2, 1, 3, 4}, {5, 4, 6}},
      {{5, 1, 1, 2, 3}, {4, 1, 3, 2}},
      {{2, 1, 3, 2, 3}, {1, 4, 1, 3, 2}},
      {{2, 1, 4, 3}, {5, 4, 6}, true},
      {{2, 1, 3, 4}, {5, 6, 4}, false, true},
      {{2, 1, 4, 3}, {5, 6, 4}, true, true},
      {{1, 4, 3}, {2, 4, 5}, true},
      {{0, 3, 4}, {1, 4, 5}},
      {{2, 1, 3, 4}, {0, 4, 5}},
      // Past the serial threshold: batches and blocks run in parallel.
      {{3, 1, 48, 100}, {2, 100, 96}},
      {{3, 1, 48, 100}, {2, 96, 100}, false, true}};
  std::vector<op_case> cases;
  auto add = [&](const product& p, dtype t) {
    visit_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, uint8_t>) {
        tensor a = rnd.uniform(t, p.a, -3, 3), b = rnd.uniform(t, p.b, -3, 3);
        if constexpr (std::is_floating_point_v<T>) {  // whole numbers
          for (int64_t i = 0; i < a.num_elements(); ++i)
            a.mutable_data<T>()[i] = std::round(a.data<T>()[i]);
          for (int64_t i = 0; i < b.num_elements(); ++i)
            b.mutable_data<T>()[i] = std::round(b.data<T>()[i]);
        }
        cases.push_back(
            {.op = "matmul",
             .label = label_of("broadcast " + p.a.to_string() + " x " + p.b.to_string() +
                                   (p.ta ? " ta" : "") + (p.tb ? " tb" : ""),
                               t),
             .inputs = {a, b},
             .attrs = flags(p.ta, p.tb),
             .expected = {naive_matmul<T>(a, b, p.ta, p.tb)},
             .tolerance = 0});
      }
    });
  };
  for (auto& p : products)
    for (dtype t : floats) add(p, t);
  add(products[0], dtype::int32);
  add(products[4], dtype::int64);
  return cases;
}

const op_case_registrar broadcast_registration(broadcast_cases);

// ---- against the CPU kernel: random inputs of each dtype a GPU kernel takes ----

std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> cases;
  for (dtype t : nums) {
    for (auto dims : {shape{64, 10}, shape{2, 3, 4}})
      cases.push_back({.op = "bias_add_grad",
                       .label = label_of("random " + dims.to_string(), t),
                       .inputs = {rnd.uniform(t, dims, 0, 20)}});
    cases.push_back(
        {.op = "bias_add",
         .label = label_of("random (8,10) + (10)", t),
         .inputs = {rnd.uniform(t, shape{8, 10}, 0, 20), rnd.uniform(t, shape{10}, 0, 20)}});
  }
  // Every transpose flag, batched on either side or both.
  struct product {
    shape a, b;
    bool ta, tb;
  };
  const std::vector<product> products{{shape{5, 7}, shape{7, 3}, false, false},
                                      {shape{7, 5}, shape{7, 3}, true, false},
                                      {shape{5, 7}, shape{3, 7}, false, true},
                                      {shape{7, 5}, shape{3, 7}, true, true},
                                      {shape{2, 5, 7}, shape{7, 3}, false, false},
                                      {shape{2, 7, 5}, shape{7, 3}, true, false},
                                      {shape{5, 7}, shape{2, 7, 3}, false, false},
                                      {shape{2, 5, 7}, shape{2, 3, 7}, false, true},
                                      {shape{64, 784}, shape{784, 512}, false, false},
                                      {shape{5, 0}, shape{0, 3}, false, false},
                                      // Broadcast batch dims: one strided run or several.
                                      {shape{1, 5, 7}, shape{2, 7, 3}, false, false},
                                      {shape{2, 5, 7}, shape{1, 7, 3}, false, false},
                                      {shape{2, 1, 5, 7}, shape{3, 7, 3}, false, false},
                                      {shape{2, 1, 7, 5}, shape{3, 3, 7}, true, true},
                                      {shape{3, 1, 5, 7}, shape{1, 4, 3, 7}, false, true},
                                      {shape{2, 1, 3, 7, 5}, shape{1, 4, 1, 7, 3}, true, false}};
  for (dtype t : floats)
    for (auto& p : products)
      cases.push_back({.op = "matmul",
                       .label = label_of("random " + p.a.to_string() + " x " + p.b.to_string() +
                                             (p.ta ? " ta" : "") + (p.tb ? " tb" : ""),
                                         t),
                       .inputs = {rnd.uniform(t, p.a), rnd.uniform(t, p.b)},
                       .attrs = flags(p.ta, p.tb),
                       // Sums of 784 products in another order (cuBLAS).
                       .device_tolerance = t == dtype::float32 ? 1e-4 : 0});
  return cases;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

using ints = std::vector<int64_t>;

std::vector<grad_case> gradient_cases() {
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
  // Broadcast batch dims: the gradient of a shared matrix sums over its sharers.
  struct product {
    shape a, b;
    bool ta = false, tb = false;
  };
  for (auto& p : std::vector<product>{{{1, 2, 3}, {2, 3, 2}},
                                      {{2, 2, 3}, {1, 3, 2}},
                                      {{2, 1, 2, 3}, {3, 3, 2}},
                                      {{3, 1, 2, 3}, {1, 2, 3, 2}},
                                      {{2, 1, 3, 2}, {3, 2, 3}, true, true},
                                      {{1, 3, 2}, {2, 3, 2}, true, false},
                                      {{2, 2, 3}, {1, 2, 3}, false, true}})
    c.push_back({.op = "matmul",
                 .label = "broadcast " + p.a.to_string() + " x " + p.b.to_string() +
                          (p.ta ? " ta" : "") + (p.tb ? " tb" : ""),
                 .inputs = {uniform(p.a), uniform(p.b)},
                 .attrs = {{"transpose_a", p.ta}, {"transpose_b", p.tb}}});
  // A batch dim unknown when the gradient is built and 1 when it runs.
  c.push_back({.op = "matmul",
               .label = "broadcast, unknown batch dim of a that is 1",
               .inputs = {uniform({1, 2, 3}), uniform({2, 3, 2})},
               .unknown_dim0 = {0}});
  c.push_back({.op = "matmul",
               .label = "broadcast, unknown batch dim of b that is 1",
               .inputs = {uniform({2, 2, 3}), uniform({1, 3, 2})},
               .unknown_dim0 = {1}});
  c.push_back({.op = "matmul",
               .label = "unknown batch rows",
               .inputs = {uniform({4, 3}), uniform({3, 2})},
               .unknown_dim0 = {0}});
  c.push_back({.op = "bias_add", .label = "(2,3)", .inputs = {uniform({2, 3}), uniform({3})}});
  c.push_back({.op = "bias_add",
               .label = "rank 4, unknown dim 0",
               .inputs = {uniform({2, 2, 2, 3}), uniform({3})},
               .unknown_dim0 = {0}});
  return c;
}

const grad_case_registrar gradient_registration(gradient_cases);

// Compares gemm with a naive product for every transpose combination.
template <class T>
void check_gemm(int64_t m, int64_t n, int64_t k, double tol) {
  std::mt19937 rng(uint32_t(m * 131 + n * 7 + k));
  std::uniform_int_distribution<int> dist(-3, 3);
  std::vector<T> a(size_t(m * k)), b(size_t(k * n));
  for (auto& v : a) v = T(dist(rng));
  for (auto& v : b) v = T(dist(rng));
  for (int flags = 0; flags < 4; ++flags) {
    const bool ta = flags & 1, tb = flags & 2;
    std::vector<T> c(size_t(m * n), T(-1));
    gemm(a.data(), b.data(), c.data(), m, n, k, ta, tb);
    // op(a) is [m, k]: a is stored [m, k], or [k, m] when transposed; likewise b.
    auto op_a = [&](int64_t i, int64_t p) {
      return double(ta ? a[size_t(p * m + i)] : a[size_t(i * k + p)]);
    };
    auto op_b = [&](int64_t p, int64_t j) {
      return double(tb ? b[size_t(j * k + p)] : b[size_t(p * n + j)]);
    };
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += op_a(i, p) * op_b(p, j);
        worst = std::max(worst, std::abs(sum - double(c[size_t(i * n + j)])));
      }
    INFO(m << "x" << n << "x" << k << " transpose_a=" << ta << " transpose_b=" << tb);
    CHECK(worst <= tol);
  }
}

TEST_CASE("gemm matches a naive product on blocked and parallel paths") {
  // Small integer values keep float sums exact.
  for (int threads : {1, 2}) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      check_gemm<float>(127, 513, 65, 0);  // column blocks, ragged edges
      check_gemm<float>(300, 70, 90, 0);   // row blocks (taller than wide)
      check_gemm<double>(64, 200, 100, 0);
      check_gemm<int32_t>(96, 160, 80, 0);
      check_gemm<int64_t>(9, 7, 5, 0);  // below the parallel threshold
      // Small float products (the unpacked kernel): 6-row tiles and the rows
      // left over, 64-column tiles and every width of the last vector.
      check_gemm<float>(64, 64, 64, 0);
      for (int64_t n = 1; n <= 81; n += 5) check_gemm<float>(13, n, 9, 0);
      check_gemm<float>(1, 130, 40, 0);
      check_gemm<float>(95, 96, 96, 0);
    });
  }
}

TEST_CASE("gemm pads operands read with rows 2 KB apart, to the same products") {
  // Leading dimensions of 512 and 1024 floats: b not transposed (n), a
  // transposed (m). Padded always, never, and where this CPU's oneDNN reads
  // operands in place (devices/cpu/gemm_library.cpp).
  for (auto padding :
       {cpu::row_padding::always, cpu::row_padding::never, cpu::row_padding::automatic}) {
    CAPTURE(int(padding));
    cpu::set_row_padding(padding);
    for (int threads : {1, 2}) {
      tbb::task_arena arena(threads);
      arena.execute([&] {
        check_gemm<float>(64, 512, 96, 0);
        check_gemm<float>(40, 1024, 33, 0);
        check_gemm<float>(512, 48, 70, 0);
      });
    }
  }
  cpu::set_row_padding(cpu::row_padding::automatic);
}

TEST_CASE("batched matmul on the parallel path matches per-batch products") {
  // 3 x 48x96x100 multiply-adds: above the serial threshold, so batches and blocks run in parallel.
  const int64_t batch = 3, m = 48, k = 100, n = 96;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(-2, 2);
  std::vector<float> a(size_t(batch * m * k)), b(size_t(batch * k * n)), shared(size_t(k * n));
  for (auto& v : a) v = float(dist(rng));
  for (auto& v : b) v = float(dist(rng));
  for (auto& v : shared) v = float(dist(rng));
  auto ta = make<float>({batch, m, k}, a);
  tbb::task_arena arena(2);
  arena.execute([&] {
    auto out = run_kernel("matmul", {ta, make<float>({batch, k, n}, b)})[0];
    auto folded = run_kernel("matmul", {ta, make<float>({k, n}, shared)})[0];
    REQUIRE(out.dims() == shape{batch, m, n});
    REQUIRE(folded.dims() == shape{batch, m, n});
    for (int64_t i = 0; i < batch; ++i) {
      std::vector<float> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
      std::vector<float> bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
      auto one = run_kernel("matmul", {make<float>({m, k}, ai), make<float>({k, n}, bi)})[0];
      auto one_shared =
          run_kernel("matmul", {make<float>({m, k}, ai), make<float>({k, n}, shared)})[0];
      auto slice = [&](const tensor& t) {
        auto v = t.to_vector<float>();
        return make<float>({m, n},
                           std::vector<float>(v.begin() + i * m * n, v.begin() + (i + 1) * m * n));
      };
      CHECK(compare_tensors(slice(out), one, 0) == "");
      CHECK(compare_tensors(slice(folded), one_shared, 0) == "");
    }
  });
}

TEST_CASE("bias_add_grad sums large inputs the same way on any thread count") {
  const int64_t rows = 5000, cols = 33;
  std::vector<float> dy(size_t(rows * cols));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(i % 7) * 0.25f - 0.5f;
  auto input = make<float>({rows, cols}, dy);
  std::vector<double> expected(size_t(cols), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) expected[size_t(c)] += dy[size_t(r * cols + c)];
  tensor one, two;
  tbb::task_arena(1).execute([&] { one = run_kernel("bias_add_grad", {input})[0]; });
  tbb::task_arena(2).execute([&] { two = run_kernel("bias_add_grad", {input})[0]; });
  CHECK(one.equals(two));
  auto got = two.to_vector<float>();
  for (int64_t c = 0; c < cols; ++c) CHECK(got[size_t(c)] == doctest::Approx(expected[size_t(c)]));
}

TEST_CASE("matmul builder infers shapes, propagates unknown dims and validates") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 784});
  auto w = placeholder(g, dtype::float32, {784, 512});
  auto y = matmul(x, w);
  CHECK(y.dims() == shape{-1, 512});
  CHECK(y.node().def->expensive);
  auto yt = matmul(w, x, true, true, "yt");
  CHECK(yt.dims() == shape{512, -1});
  CHECK(yt.node().name == "yt");
  auto batched = placeholder(g, dtype::float32, {-1, 3, 4});
  auto other = placeholder(g, dtype::float32, {5, -1, 6});
  CHECK(matmul(batched, other).dims() == shape{5, 3, 6});
  // Batch dims broadcast: size 1 or missing against any, ? against 1 stays ?.
  auto a134 = placeholder(g, dtype::float32, {1, 3, 4});
  CHECK(matmul(a134, placeholder(g, dtype::float32, {2, 4, 5})).dims() == shape{2, 3, 5});
  CHECK(matmul(placeholder(g, dtype::float32, {3, 4}), placeholder(g, dtype::float32, {2, 4, 5}))
            .dims() == shape{2, 3, 5});
  CHECK(matmul(placeholder(g, dtype::float32, {2, 1, 3, 4}),
               placeholder(g, dtype::float32, {5, 4, 6}))
            .dims() == shape{2, 5, 3, 6});
  CHECK(matmul(a134, placeholder(g, dtype::float32, {-1, 4, 5})).dims() == shape{-1, 3, 5});
  CHECK(matmul(placeholder(g, dtype::float32, {-1, 1, 3, 4}),
               placeholder(g, dtype::float32, {7, 4, 5}))
            .dims() == shape{-1, 7, 3, 5});
  CHECK_THROWS_WITH_AS(
      matmul(placeholder(g, dtype::float32, {2, 3, 4}), placeholder(g, dtype::float32, {3, 4, 5})),
      doctest::Contains("batch dimensions (2) and (3) do not broadcast: (2,3,4) x (3,4,5)"), error);
  auto unknown_inner = placeholder(g, dtype::float32, {2, -1});
  CHECK(matmul(unknown_inner, w).dims() == shape{2, 512});
  CHECK_THROWS_WITH_AS(matmul(w, w),
                       doctest::Contains("inner dimensions differ: (784,512) x (784,512)"), error);
  auto bias = placeholder(g, dtype::float32, {512});
  CHECK(bias_add(y, bias).dims() == shape{-1, 512});
  CHECK(bias_add(placeholder(g, dtype::float32, {2, -1}), bias).dims() == shape{2, 512});
  CHECK(bias_add_grad(y).dims() == shape{512});
  CHECK_THROWS_AS(bias_add(y, placeholder(g, dtype::float32, {3})), error);
}

}  // namespace
}  // namespace actorflow::testing
