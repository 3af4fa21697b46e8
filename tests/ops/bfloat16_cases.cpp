// bfloat16 matmul and conv2d (and its backprops) against the float32 kernels on the same
// rounded operands: the sums are float32's in both, so the two differ by the final rounding
// to bfloat16 (half a bfloat16 ulp, 2^-9 relative) plus float32 sums taken in another order.
// Both GEMM paths: oneDNN's bfloat16 GEMM where built in, and the float32 fallback.
#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "devices/cpu/gemm_library.hpp"
#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

tensor cast_to(const tensor& t, dtype d) { return run_kernel("cast", {t}, {{"dtype", d}})[0]; }

// Uniform in [-2, 2), rounded to bfloat16 (so both kernels see the same operands).
tensor random_bf16(shape dims, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  tensor t(dtype::float32, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return cast_to(t, dtype::bfloat16);
}

// "" when got (bfloat16) is within rounding of want (float32): |got - want| <= 2^-8 |want| +
// 1e-5 * scale, scale the size of the terms summed (float32 sums in another order).
std::string compare_rounded(const tensor& got, const tensor& want, double scale) {
  if (got.type() != dtype::bfloat16) return std::string("dtype ") + dtype_name(got.type());
  if (got.dims() != want.dims()) return "shape " + got.dims().to_string();
  const bfloat16* g = got.data<bfloat16>();
  const float* w = want.data<float>();
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double diff = std::abs(double(to_float(g[i])) - double(w[i]));
    if (diff > std::ldexp(std::abs(double(w[i])), -8) + 1e-5 * scale) {
      std::ostringstream os;
      os << "element " << i << ": " << to_float(g[i]) << " vs " << w[i];
      return os.str();
    }
  }
  return "";
}

// The library on (where built in) and off: both bfloat16 GEMM paths.
template <class F>
void with_each_gemm_path(F f) {
  const bool was_on = cpu::gemm_library_on();
  for (bool on : {true, false}) {
    if (on && !was_on) continue;
    CAPTURE(on);
    cpu::use_gemm_library(on);
    f();
  }
  cpu::use_gemm_library(was_on);
}

// For the device runner (every device against the CPU kernel): the casts are
// exact everywhere; a device's product may sum in another order, so it is
// allowed a bfloat16 rounding (2^-8 relative).
const op_case_registrar bfloat16_device_cases([] {
  std::mt19937 rng(9);
  auto floats =
      make<float>({2, 4}, {1.0f, -0.0f, 3.0e38f, inf_f, nan_f, 1.00390625f, -2.5f, 7e-39f});
  return std::vector<op_case>{
      {.op = "cast",
       .label = "float32 -> bfloat16: rounding ties to even, NaN, infinity, overflow, denormal",
       .inputs = {floats},
       .attrs = {{"dtype", dtype::bfloat16}}},
      {.op = "cast",
       .label = "bfloat16 -> float32",
       .inputs = {random_bf16({3, 5}, rng)},
       .attrs = {{"dtype", dtype::float32}}},
      {.op = "matmul",
       .label = "bfloat16 [4,5] x [5,3]",
       .inputs = {random_bf16({4, 5}, rng), random_bf16({5, 3}, rng)},
       .device_tolerance = 1.0 / 128},
  };
});

TEST_CASE("bfloat16 matmul is the float32 product of its operands, rounded once") {
  std::mt19937 rng(5);
  struct dims3 {
    int64_t m, k, n;
  };
  // Odd sizes, one of each kind of edge, and sizes past the parallel threshold.
  const dims3 sizes[] = {{1, 1, 1},    {3, 5, 7},      {17, 33, 9},
                         {64, 64, 64}, {130, 257, 67}, {200, 300, 150}};
  with_each_gemm_path([&] {
    tbb::task_arena arena(2);
    arena.execute([&] {
      for (auto s : sizes)
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            CAPTURE(s.m);
            CAPTURE(s.k);
            CAPTURE(s.n);
            CAPTURE(ta);
            CAPTURE(tb);
            tensor a = random_bf16(ta ? shape{s.k, s.m} : shape{s.m, s.k}, rng);
            tensor b = random_bf16(tb ? shape{s.n, s.k} : shape{s.k, s.n}, rng);
            attr_map attrs{{"transpose_a", ta}, {"transpose_b", tb}};
            auto got = run_kernel("matmul", {a, b}, attrs)[0];
            auto want = run_kernel(
                "matmul", {cast_to(a, dtype::float32), cast_to(b, dtype::float32)}, attrs)[0];
            // Terms up to 4 each: sums of |terms| up to 4k.
            CHECK(compare_rounded(got, want, 4.0 * double(s.k)) == "");
          }
    });
  });
}

TEST_CASE("bfloat16 batched matmul broadcasts like float32") {
  std::mt19937 rng(6);
  tensor a = random_bf16({3, 1, 20, 30}, rng), b = random_bf16({2, 30, 10}, rng);
  with_each_gemm_path([&] {
    auto got = run_kernel("matmul", {a, b})[0];
    auto want = run_kernel("matmul", {cast_to(a, dtype::float32), cast_to(b, dtype::float32)})[0];
    CHECK(got.dims() == shape{3, 2, 20, 10});
    CHECK(compare_rounded(got, want, 120.0) == "");
  });
  // Operands of different dtypes are refused, naming both.
  CHECK_THROWS_WITH_AS(run_kernel("matmul", {a, cast_to(b, dtype::float32)}),
                       doctest::Contains("different dtypes"), error);
}

TEST_CASE("bfloat16 add and sum_to_shape_of are the float32 kernels' results, rounded once") {
  std::mt19937 rng(9);
  // add broadcasting, as the gradient driver's sums and a user's graph use it.
  tensor a = random_bf16({4, 1, 37}, rng), b = random_bf16({3, 37}, rng);
  auto sum = run_kernel("add", {a, b})[0];
  auto sum32 = run_kernel("add", {cast_to(a, dtype::float32), cast_to(b, dtype::float32)})[0];
  CHECK(sum.dims() == shape{4, 3, 37});
  CHECK(compare_rounded(sum, sum32, 4.0) == "");
  // sum_to_shape_of: the sum over broadcast batch dims of matmul's gradient,
  // large enough to run in blocks on the pool; `like` gives only its shape.
  tensor x = random_bf16({6, 50, 40, 30}, rng);
  tensor like = tensor::zeros(dtype::bfloat16, {1, 40, 30});
  auto to = run_kernel("sum_to_shape_of", {x, like})[0];
  auto to32 = run_kernel("sum_to_shape_of", {cast_to(x, dtype::float32), like})[0];
  CHECK(to.dims() == shape{1, 40, 30});
  CHECK(compare_rounded(to, to32, 2.0 * 300) == "");
}

// The ops the gradients of matmul and conv2d (and of their gradients) build
// besides those two: each takes bfloat16 and moves its elements exactly.
TEST_CASE("the other ops on matmul's and conv2d's bfloat16 gradient paths take bfloat16") {
  std::mt19937 rng(10);
  tensor x = random_bf16({2, 1, 3}, rng);
  tensor wide = tensor::zeros(dtype::bfloat16, {2, 4, 3});
  auto spread = run_kernel("broadcast_like", {x, wide})[0];
  auto spread32 = run_kernel("broadcast_like", {cast_to(x, dtype::float32), wide})[0];
  CHECK(compare_rounded(spread, spread32, 1.0) == "");
  auto flat = run_kernel("reshape", {x}, {{"shape", std::vector<int64_t>{3, 2}}})[0];
  CHECK(flat.dims() == shape{3, 2});
  CHECK(std::memcmp(flat.raw_data(), x.raw_data(), x.size_bytes()) == 0);
  auto swapped = run_kernel("transpose", {x}, {{"perm", std::vector<int64_t>{2, 1, 0}}})[0];
  auto swapped32 = run_kernel("transpose", {cast_to(x, dtype::float32)},
                              {{"perm", std::vector<int64_t>{2, 1, 0}}})[0];
  CHECK(compare_rounded(swapped, swapped32, 1.0) == "");
  for (const char* op : {"zeros_like", "ones_like", "identity"}) {
    CAPTURE(op);
    auto out = run_kernel(op, {x})[0];
    CHECK(out.type() == dtype::bfloat16);
    CHECK(out.dims() == x.dims());
  }
}

TEST_CASE("bfloat16 conv2d and its backprops are the float32 kernels' results, rounded once") {
  std::mt19937 rng(8);
  struct conv_case {
    shape x, f;
    std::vector<int64_t> strides;
    std::string padding;
  };
  const conv_case cases[] = {{{2, 9, 9, 3}, {3, 3, 3, 4}, {1, 1}, "SAME"},
                             {{1, 11, 7, 5}, {2, 3, 5, 6}, {2, 2}, "VALID"},
                             {{4, 16, 16, 8}, {5, 5, 8, 16}, {1, 1}, "SAME"},
                             // Large enough for oneDNN's bfloat16 primitives (conv_library.hpp):
                             // channels that do not fill its blocks, uneven SAME padding, a
                             // smaller last slice of images, one input channel.
                             {{5, 17, 19, 20}, {3, 3, 20, 33}, {1, 1}, "SAME"},
                             {{3, 23, 21, 48}, {4, 5, 48, 40}, {2, 3}, "SAME"},
                             {{7, 28, 28, 1}, {5, 5, 1, 32}, {1, 1}, "SAME"}};
  for (auto& c : cases) {
    CAPTURE(c.x.to_string());
    attr_map attrs{{"strides", c.strides}, {"padding", c.padding}};
    tensor x = random_bf16(c.x, rng), f = random_bf16(c.f, rng);
    const tensor x32 = cast_to(x, dtype::float32), f32 = cast_to(f, dtype::float32);
    const double terms = 4.0 * double(c.f[0] * c.f[1] * c.f[2]);
    auto y = run_kernel("conv2d", {x, f}, attrs)[0];
    auto y32 = run_kernel("conv2d", {x32, f32}, attrs)[0];
    CHECK(compare_rounded(y, y32, terms) == "");

    tensor dy = random_bf16(y.dims(), rng);
    const tensor dy32 = cast_to(dy, dtype::float32);
    auto dx = run_kernel("conv2d_backprop_input", {x, f, dy}, attrs)[0];
    auto dx32 = run_kernel("conv2d_backprop_input", {x32, f32, dy32}, attrs)[0];
    CHECK(compare_rounded(dx, dx32, 4.0 * double(c.f[0] * c.f[1] * c.f[3])) == "");
    auto df = run_kernel("conv2d_backprop_filter", {x, f, dy}, attrs)[0];
    auto df32 = run_kernel("conv2d_backprop_filter", {x32, f32, dy32}, attrs)[0];
    CHECK(compare_rounded(df, df32, 4.0 * double(y.num_elements() / c.f[3])) == "");
  }
}

}  // namespace
}  // namespace actorflow::testing
