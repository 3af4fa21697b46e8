// Cases for conv2d and its backprops: hand-computed values, then the real
// guarantee: backprops against central differences of conv2d, and the chunked,
// multi-threaded paths against a direct-loop reference on larger shapes.
#include <cmath>
#include <random>
#include <thread>

#include "devices/cpu/conv_library.hpp"
#include "devices/cpu/gemm_library.hpp"
#include "ops/conv.hpp"
#include "ops/conv_gemm.hpp"
#include "ops/conv_reference.hpp"
#include "ops/conv_winograd.hpp"
#include "ops/geometry/conv_window.hpp"
#include "ops/op_cases.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

namespace actorflow::testing {
namespace {

// 1x3x3x1 input 1..9 and a 2x2x1x1 filter [[1,2],[3,4]].
tensor x33() { return make<float>({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}); }
tensor w22() { return make<float>({2, 2, 1, 1}, {1, 2, 3, 4}); }
// 1x4x4x1 input 1..16.
tensor x44() {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = float(i + 1);
  return make<float>({1, 4, 4, 1}, v);
}
// 1x4x4x2 input 1..32 and a 2x2x2x2 filter.
tensor x442() {
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i) v[i] = float(i + 1);
  return make<float>({1, 4, 4, 2}, v);
}
tensor w2222() {
  return make<float>({2, 2, 2, 2}, {1, 0, 0, 1, -1, 2, 1, 0, 0, 1, 1, -1, 2, 0, 0, 1});
}
template <class T>
tensor filled(shape s, T v) {
  tensor t(dtype_of<T>(), s);
  std::fill(t.mutable_data<T>(), t.mutable_data<T>() + t.num_elements(), v);
  return t;
}

const op_case_registrar cases({
    // --- conv2d ---
    {.op = "conv2d",
     .label = "VALID 1x3x3x1 * 2x2",
     .inputs = {x33(), w22()},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {make<float>({1, 2, 2, 1}, {37, 47, 67, 77})}},
    {.op = "conv2d",
     .label = "SAME stride 1, even filter: extra padding on the bottom/right",
     .inputs = {x33(), w22()},
     .attrs = conv_attrs({1, 1}, "SAME"),
     .expected = {make<float>({1, 3, 3, 1}, {37, 47, 21, 67, 77, 33, 23, 26, 9})}},
    {.op = "conv2d",
     .label = "SAME stride 2 on 4x4 with 3x3 ones: pad 0 top, 1 bottom",
     .inputs = {x44(), filled<float>({3, 3, 1, 1}, 1.f)},
     .attrs = conv_attrs({2, 2}, "SAME"),
     .expected = {make<float>({1, 2, 2, 1}, {54, 45, 72, 54})}},
    {.op = "conv2d",
     .label = "TF 4-element strides [1,2,2,1]",
     .inputs = {x44(), filled<float>({3, 3, 1, 1}, 1.f)},
     .attrs = conv_attrs({1, 2, 2, 1}, "SAME"),
     .expected = {make<float>({1, 2, 2, 1}, {54, 45, 72, 54})}},
    {.op = "conv2d",
     .label = "SAME stride 2 on odd 3x3: 2x2 output",
     .inputs = {x33(), filled<float>({1, 1, 1, 2}, 1.f)},
     .attrs = conv_attrs({2, 2}, "SAME"),
     .expected = {make<float>({1, 2, 2, 2}, {1, 1, 3, 3, 7, 7, 9, 9})}},
    {.op = "conv2d",
     .label = "1x4x4x2 -> 2 channels, VALID stride 2",
     .inputs = {x442(), w2222()},
     .attrs = conv_attrs({2, 2}, "VALID"),
     .expected = {make<float>({1, 2, 2, 2}, {34, 19, 50, 35, 98, 83, 114, 99})}},
    {.op = "conv2d",
     .label = "float64, strides (1,2) VALID",
     .inputs = {make<double>({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}),
                make<double>({2, 2, 1, 1}, {1, 2, 3, 4})},
     .attrs = conv_attrs({1, 2}, "VALID"),
     .expected = {make<double>({1, 2, 1, 1}, {37, 67})}},
    {.op = "conv2d",
     .label = "1x1 pointwise filter (no im2col)",
     .inputs = {make<float>({1, 1, 2, 2}, {1, 2, 3, 4}),
                make<float>({1, 1, 2, 3}, {1, 0, 1, 0, 1, -1})},
     .attrs = conv_attrs({1, 1}, "SAME"),
     .expected = {make<float>({1, 1, 2, 3}, {1, 2, -1, 3, 4, -1})}},
    {.op = "conv2d",
     .label = "zero batch",
     .inputs = {tensor(dtype::float32, {0, 3, 3, 1}), w22()},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {tensor(dtype::float32, {0, 2, 2, 1})}},
    {.op = "conv2d",
     .label = "zero input channels gives zeros",
     .inputs = {tensor(dtype::float32, {1, 2, 2, 0}), tensor(dtype::float32, {1, 1, 0, 2})},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {make<float>({1, 2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0})}},
    {.op = "conv2d",
     .label = "channel mismatch",
     .inputs = {x442(), w22()},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "input channels differ"},
    {.op = "conv2d",
     .label = "bad padding string",
     .inputs = {x33(), w22()},
     .attrs = conv_attrs({1, 1}, "same"),
     .expect_error = "padding must be \"SAME\" or \"VALID\""},
    {.op = "conv2d",
     .label = "zero stride",
     .inputs = {x33(), w22()},
     .attrs = conv_attrs({0, 1}, "VALID"),
     .expect_error = "strides must be"},
    {.op = "conv2d",
     .label = "4-element strides with a batch stride",
     .inputs = {x33(), w22()},
     .attrs = conv_attrs({2, 1, 1, 1}, "VALID"),
     .expect_error = "strides must be"},
    {.op = "conv2d",
     .label = "3-element strides",
     .inputs = {x33(), w22()},
     .attrs = conv_attrs({1, 1, 1}, "VALID"),
     .expect_error = "strides must be"},
    {.op = "conv2d",
     .label = "filter larger than input with VALID",
     .inputs = {x33(), filled<float>({4, 2, 1, 1}, 1.f)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "filter (4,2) is larger than the input"},
    {.op = "conv2d",
     .label = "input rank 3",
     .inputs = {tensor(dtype::float32, {3, 3, 1}), w22()},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "input must be rank 4"},
    {.op = "conv2d",
     .label = "int32 input",
     .inputs = {make<int32_t>({1, 1, 1, 1}, {1}), make<int32_t>({1, 1, 1, 1}, {1})},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "expects float32, float64 or bfloat16"},
    {.op = "conv2d",
     .label = "mixed dtypes",
     .inputs = {x33(), make<double>({1, 1, 1, 1}, {1})},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "dtypes differ"},
    {.op = "conv2d",
     .label = "missing strides",
     .inputs = {x33(), w22()},
     .attrs = {{"padding", std::string("VALID")}},
     .expect_error = "missing attribute 'strides'"},

    // --- conv2d_backprop_input ---
    {.op = "conv2d_backprop_input",
     .label = "VALID one-hot out_backprop places the filter",
     .inputs = {x33(), w22(), make<float>({1, 2, 2, 1}, {1, 0, 0, 0})},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {make<float>({1, 3, 3, 1}, {1, 2, 0, 3, 4, 0, 0, 0, 0})}},
    {.op = "conv2d_backprop_input",
     .label = "VALID ones: overlapping windows add",
     .inputs = {x33(), w22(), filled<float>({1, 2, 2, 1}, 1.f)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {make<float>({1, 3, 3, 1}, {1, 3, 2, 4, 10, 6, 3, 7, 4})}},
    {.op = "conv2d_backprop_input",
     .label = "SAME stride 2, 3x3 filter on 4x4 (asymmetric padding)",
     .inputs = {filled<float>({1, 4, 4, 1}, 0.f),
                make<float>({3, 3, 1, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}),
                make<float>({1, 2, 2, 1}, {1, 2, 3, 4})},
     .attrs = conv_attrs({2, 2}, "SAME"),
     .expected = {make<float>({1, 4, 4, 1},
                              {1, 2, 5, 4, 4, 5, 14, 10, 10, 14, 36, 24, 12, 15, 34, 20})}},
    {.op = "conv2d_backprop_input",
     .label = "1x4x4x2, VALID stride 2, float64, input_like of another dtype",
     .inputs = {tensor(dtype::int32, {1, 4, 4, 2}),
                make<double>({2, 2, 2, 2}, {1, 0, 0, 1, -1, 2, 1, 0, 0, 1, 1, -1, 2, 0, 0, 1}),
                make<double>({1, 2, 2, 2}, {1, -1, 2, 0, 0, 1, -2, 1})},
     .attrs = conv_attrs({2, 2}, "VALID"),
     .expected = {make<double>({1, 4, 4, 2},
                               {1, -1, -3, 1, 2,  0, -2, 2,  -1, 2,  2, -1, 0, 2,  4,  0,
                                0, 1,  2,  0, -2, 1, 4,  -2, 1,  -1, 0, 1,  1, -3, -4, 1})}},
    {.op = "conv2d_backprop_input",
     .label = "zero batch",
     .inputs = {tensor(dtype::float32, {0, 3, 3, 1}), w22(), tensor(dtype::float32, {0, 2, 2, 1})},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {tensor(dtype::float32, {0, 3, 3, 1})}},
    {.op = "conv2d_backprop_input",
     .label = "out_backprop of the wrong shape",
     .inputs = {x33(), w22(), filled<float>({1, 3, 3, 1}, 1.f)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "does not match the conv2d output shape (1,2,2,1)"},
    {.op = "conv2d_backprop_input",
     .label = "channel mismatch",
     .inputs = {x442(), w22(), filled<float>({1, 3, 3, 1}, 1.f)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "input channels differ"},
    {.op = "conv2d_backprop_input",
     .label = "bad padding",
     .inputs = {x33(), w22(), filled<float>({1, 2, 2, 1}, 1.f)},
     .attrs = conv_attrs({1, 1}, "FULL"),
     .expect_error = "padding must be"},
    {.op = "conv2d_backprop_input",
     .label = "dtype mismatch",
     .inputs = {x33(), w22(), filled<double>({1, 2, 2, 1}, 1.0)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "dtypes differ"},

    // --- conv2d_backprop_filter ---
    {.op = "conv2d_backprop_filter",
     .label = "VALID ones: window sums",
     .inputs = {x33(), w22(), filled<float>({1, 2, 2, 1}, 1.f)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {make<float>({2, 2, 1, 1}, {12, 16, 24, 28})}},
    {.op = "conv2d_backprop_filter",
     .label = "SAME stride 2, 3x3 filter on 4x4",
     .inputs = {x44(), filled<float>({3, 3, 1, 1}, 0.f), make<float>({1, 2, 2, 1}, {1, 2, 3, 4})},
     .attrs = conv_attrs({2, 2}, "SAME"),
     .expected = {make<float>({3, 3, 1, 1}, {78, 88, 36, 118, 128, 52, 31, 34, 11})}},
    {.op = "conv2d_backprop_filter",
     .label = "1x4x4x2, VALID stride 2",
     .inputs = {x442(), w2222(), make<float>({1, 2, 2, 2}, {1, -1, 2, 0, 0, 1, -2, 1})},
     .attrs = conv_attrs({2, 2}, "VALID"),
     .expected = {make<float>({2, 2, 2, 2}, {-31, 37, -30, 38, -29, 39, -28, 40, -23, 45, -22, 46,
                                             -21, 47, -20, 48})}},
    {.op = "conv2d_backprop_filter",
     .label = "float64 pointwise",
     .inputs = {make<double>({1, 1, 2, 2}, {1, 2, 3, 4}), tensor(dtype::float64, {1, 1, 2, 1}),
                make<double>({1, 1, 2, 1}, {1, -1})},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {make<double>({1, 1, 2, 1}, {-2, -2})}},
    {.op = "conv2d_backprop_filter",
     .label = "zero batch gives zeros",
     .inputs = {tensor(dtype::float32, {0, 3, 3, 1}), w22(), tensor(dtype::float32, {0, 2, 2, 1})},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expected = {make<float>({2, 2, 1, 1}, {0, 0, 0, 0})}},
    {.op = "conv2d_backprop_filter",
     .label = "out_backprop channels differ from the filter's",
     .inputs = {x33(), w22(), filled<float>({1, 2, 2, 2}, 1.f)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "does not match the conv2d output shape"},
    {.op = "conv2d_backprop_filter",
     .label = "filter larger than input with VALID",
     .inputs = {x33(), filled<float>({2, 5, 1, 1}, 1.f), filled<float>({1, 2, 1, 1}, 1.f)},
     .attrs = conv_attrs({1, 1}, "VALID"),
     .expect_error = "is larger than the input"},
    {.op = "conv2d_backprop_filter",
     .label = "bad strides",
     .inputs = {x33(), w22(), filled<float>({1, 2, 2, 1}, 1.f)},
     .attrs = conv_attrs({1, -1}, "VALID"),
     .expect_error = "strides must be"},
});

// ---- against the CPU kernel: random inputs of each dtype a GPU kernel takes ----

// Symmetric and TF's bottom-heavy SAME padding, strides, VALID.
std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> cases;
  struct shapes {
    shape x, f;
    std::vector<int64_t> strides;
    std::string padding;
    shape y;
  };
  const std::vector<shapes> convs{
      {shape{2, 9, 9, 3}, shape{3, 3, 3, 4}, {1, 1}, "SAME", shape{2, 9, 9, 4}},
      {shape{2, 8, 8, 3}, shape{3, 3, 3, 4}, {2, 2}, "SAME", shape{2, 4, 4, 4}},
      {shape{1, 8, 7, 2}, shape{2, 2, 2, 3}, {1, 1}, "SAME", shape{1, 8, 7, 3}},
      {shape{2, 9, 9, 3}, shape{3, 3, 3, 4}, {2, 1}, "VALID", shape{2, 4, 7, 4}},
      {shape{2, 28, 28, 1}, shape{5, 5, 1, 32}, {1, 1}, "SAME", shape{2, 28, 28, 32}}};
  for (auto& c : convs) {
    const auto label = "random " + c.x.to_string() + " * " + c.f.to_string() + " " + c.padding +
                       " strides " + std::to_string(c.strides[0]) + "," +
                       std::to_string(c.strides[1]);
    auto x = rnd.uniform(dtype::float32, c.x);
    auto f = rnd.uniform(dtype::float32, c.f);
    auto dy = rnd.uniform(dtype::float32, c.y);
    auto a = conv_attrs(c.strides, c.padding);
    // cuDNN sums in another order.
    cases.push_back(
        {.op = "conv2d", .label = label, .inputs = {x, f}, .attrs = a, .device_tolerance = 1e-4});
    for (auto op : {"conv2d_backprop_input", "conv2d_backprop_filter"})
      cases.push_back(
          {.op = op, .label = label, .inputs = {x, f, dy}, .attrs = a, .device_tolerance = 1e-4});
  }
  return cases;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> c;
  c.push_back({.op = "conv2d",
               .label = "VALID, stride 1",
               .inputs = {uniform({1, 5, 5, 2}), uniform({3, 3, 2, 3})},
               .attrs = conv_attrs({1, 1}, "VALID")});
  c.push_back({.op = "conv2d",
               .label = "SAME, stride 2, unknown batch",
               .inputs = {uniform({2, 5, 4, 2}), uniform({3, 2, 2, 2})},
               .attrs = conv_attrs({2, 2}, "SAME"),
               .unknown_dim0 = {0}});
  c.push_back({.op = "conv2d",
               .label = "VALID, strides (1,2,2,1)",
               .inputs = {uniform({1, 6, 6, 1}), uniform({2, 2, 1, 2})},
               .attrs = conv_attrs({1, 2, 2, 1}, "VALID")});
  c.push_back({.op = "conv2d",
               .label = "SAME, stride 1",
               .inputs = {uniform({1, 4, 5, 3}), uniform({3, 3, 3, 2})},
               .attrs = conv_attrs({1, 1}, "SAME")});
  c.push_back({.op = "conv2d_backprop_input",
               .label = "VALID, stride 1",
               .inputs = {uniform({1, 5, 5, 2}), uniform({3, 3, 2, 3}), uniform({1, 3, 3, 3})},
               .attrs = conv_attrs({1, 1}, "VALID")});
  c.push_back({.op = "conv2d_backprop_input",
               .label = "SAME, stride 2",
               .inputs = {uniform({2, 5, 4, 2}), uniform({3, 2, 2, 2}), uniform({2, 3, 2, 2})},
               .attrs = conv_attrs({2, 2}, "SAME")});
  c.push_back({.op = "conv2d_backprop_filter",
               .label = "VALID, stride 1",
               .inputs = {uniform({1, 5, 5, 2}), uniform({3, 3, 2, 3}), uniform({1, 3, 3, 3})},
               .attrs = conv_attrs({1, 1}, "VALID")});
  c.push_back({.op = "conv2d_backprop_filter",
               .label = "SAME, stride 2",
               .inputs = {uniform({2, 5, 4, 2}), uniform({3, 2, 2, 2}), uniform({2, 3, 2, 2})},
               .attrs = conv_attrs({2, 2}, "SAME")});
  return c;
}

const grad_case_registrar gradient_registration(gradient_cases);

double dot(const tensor& a, const tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

TEST_CASE("conv2d backprops match central differences of conv2d (float64)") {
  std::mt19937 rng(1234);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    conv_cfg c{pick(1, 2), pick(1, 7), pick(1, 7), pick(1, 3), pick(1, 4),
               pick(1, 4), pick(1, 3), pick(1, 3), pick(1, 3), pick(0, 1) == 1};
    if (!c.same && (c.kh > c.h || c.kw > c.w)) continue;
    ++checked;
    INFO("n,h,w,c=" << c.n << "," << c.h << "," << c.w << "," << c.c << " filter " << c.kh << "x"
                    << c.kw << "x" << c.k << " strides " << c.sh << "," << c.sw
                    << (c.same ? " SAME" : " VALID"));
    auto attrs = attrs_of(c);
    tensor x = random_tensor<double>({c.n, c.h, c.w, c.c}, rng);
    tensor w = random_tensor<double>({c.kh, c.kw, c.c, c.k}, rng);
    tensor r = random_tensor<double>(out_shape(c), rng);  // loss = sum(conv2d(x, w) * r)
    auto loss = [&](const tensor& xx, const tensor& ww) {
      return dot(run_kernel("conv2d", {xx, ww}, attrs)[0], r);
    };
    tensor dx = run_kernel("conv2d_backprop_input", {x, w, r}, attrs)[0];
    tensor dw = run_kernel("conv2d_backprop_filter", {x, w, r}, attrs)[0];
    REQUIRE(dx.dims() == x.dims());
    REQUIRE(dw.dims() == w.dims());
    const double eps = 1e-3;
    auto numeric = [&](tensor& t, int64_t i, bool is_x) {
      double* p = t.mutable_data<double>();
      double keep = p[i];
      p[i] = keep + eps;
      double up = is_x ? loss(t, w) : loss(x, t);
      p[i] = keep - eps;
      double down = is_x ? loss(t, w) : loss(x, t);
      p[i] = keep;
      return (up - down) / (2 * eps);
    };
    tensor xp = x.clone(), wp = w.clone();
    for (int64_t i = 0; i < x.num_elements(); ++i)
      CHECK(dx.data<double>()[i] == doctest::Approx(numeric(xp, i, true)).epsilon(1e-7));
    for (int64_t i = 0; i < w.num_elements(); ++i)
      CHECK(dw.data<double>()[i] == doctest::Approx(numeric(wp, i, false)).epsilon(1e-7));
  }
  CHECK(checked >= 30);
}

TEST_CASE("conv2d chunked and multi-threaded paths match a direct-loop reference") {
  // Many images, several chunks, per-thread partial sums in backprop_filter.
  check_against_reference<float>({16, 16, 16, 8, 3, 3, 16, 1, 1, true}, 1e-4);
  check_against_reference<double>({16, 16, 16, 8, 3, 3, 16, 1, 1, true}, 1e-10);
  // One large image: chunks inside an image, col2im chunk boundaries.
  check_against_reference<float>({1, 64, 64, 16, 3, 3, 8, 1, 1, true}, 1e-4);
  check_against_reference<float>({2, 33, 31, 16, 4, 5, 8, 2, 3, true}, 1e-4);
  check_against_reference<float>({3, 40, 37, 16, 5, 3, 8, 3, 2, false}, 1e-4);
  // Pointwise (no im2col) above the parallel threshold.
  check_against_reference<float>({32, 16, 16, 32, 1, 1, 16, 1, 1, false}, 1e-4);
  // The benchmark CNN's second layer at a small batch.
  check_against_reference<float>({4, 14, 14, 32, 5, 5, 64, 1, 1, true}, 1e-4);
}

template <class T>
void check_gemm_rows(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t m : {1, 2, 5, 6, 7, 11, 12, 13, 25, 50})
    for (int64_t n : {1, 3, 8, 15, 16, 17, 24, 31, 32, 33, 47, 48, 49, 60, 64, 65, 100, 130})
      for (int64_t kn : {0, 1, 7, 40})
        for (bool transposed : {false, true})
          for (bool accumulate : {false, true}) {
            INFO(dtype_name(dtype_of<T>())
                 << " m=" << m << " n=" << n << " k=" << kn << (transposed ? " A^T" : "")
                 << (accumulate ? " +=" : ""));
            // A is m x kn, stored row-major (a_rs = kn + 1, padded) or transposed.
            const int64_t lda = (transposed ? m : kn) + 1, ldb = n + 2, ldc = n + 3;
            std::vector<T> a((transposed ? kn : m) * lda + 1), b(kn * ldb + 1), c(m * ldc);
            for (auto* v : {&a, &b, &c})
              for (auto& x : *v) x = T(u(rng));
            std::vector<T> want = c;
            const int64_t a_rs = transposed ? 1 : lda, a_ks = transposed ? lda : 1;
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double s = accumulate ? double(c[i * ldc + j]) : 0.0;
                for (int64_t k = 0; k < kn; ++k)
                  s += double(a[i * a_rs + k * a_ks]) * double(b[k * ldb + j]);
                want[i * ldc + j] = T(s);
              }
            conv_detail::gemm_rows<T>(m, n, kn, a.data(), a_rs, a_ks, b.data(), ldb, c.data(), ldc,
                                      accumulate);
            int bad = 0;
            for (size_t i = 0; i < c.size() && bad < 3; ++i)
              if (std::abs(double(c[i]) - double(want[i])) >
                  1e-4 * (1 + std::abs(double(want[i])))) {
                ++bad;
                FAIL_CHECK("element " << i / ldc << "," << i % ldc << ": " << c[i] << " vs "
                                      << want[i]);
              }
          }
}

TEST_CASE("conv gemm kernel matches a naive product for every tile remainder") {
  std::mt19937 rng(5);
  check_gemm_rows<float>(rng);
  check_gemm_rows<double>(rng);
}

TEST_CASE("conv2d builders infer shapes with an unknown batch") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 28, 28, 1}, "x");
  auto w = placeholder(g, dtype::float32, {5, 5, 1, 32}, "w");
  auto y = conv2d(x, w, {1, 1}, "SAME");
  CHECK(y.dims() == shape{-1, 28, 28, 32});
  CHECK(y.node().def->expensive);
  auto ys = conv2d(x, w, {1, 2, 3, 1}, "VALID");
  CHECK(ys.dims() == shape{-1, 12, 8, 32});
  auto dx = conv2d_backprop_input(x, w, y, {1, 1}, "SAME");
  CHECK(dx.dims() == shape{-1, 28, 28, 1});
  auto dw = conv2d_backprop_filter(x, w, y, {1, 1}, "SAME");
  CHECK(dw.dims() == shape{5, 5, 1, 32});
  auto unknown_hw = placeholder(g, dtype::float32, {-1, -1, -1, 1});
  CHECK(conv2d(unknown_hw, w, {2, 2}, "SAME").dims() == shape{-1, -1, -1, 32});
  auto w3 = placeholder(g, dtype::float32, {5, 5, 3, 32});
  CHECK(error_of([&] {
          conv2d(x, w3, {1, 1}, "SAME");
        }).find("[conv2d] input channels differ") != std::string::npos);
  CHECK(error_of([&] {
          conv2d_backprop_input(x, w, ys, {1, 1}, "SAME");
        }).find("does not match the conv2d output shape") != std::string::npos);
}

}  // namespace
// conv2d, its input gradient and its filter gradient of (x, f) with out_backprop dy.
std::vector<tensor> all_three(const tensor& x, const tensor& f, const tensor& dy,
                              const attr_map& attrs) {
  return {run_kernel("conv2d", {x, f}, attrs)[0],
          run_kernel("conv2d_backprop_input", {x, f, dy}, attrs)[0],
          run_kernel("conv2d_backprop_filter", {x, f, dy}, attrs)[0]};
}

// Filters over 1 MB (len x k floats) go to the CPU GEMM library in chunks of
// rows; the same products through the tiled kernel alone are the reference.
TEST_CASE("conv2d with a wide filter through the GEMM library matches the tiled kernel") {
  if (!cpu::gemm_library_on()) MESSAGE("no CPU GEMM library in this build: both sides are tiled");
  conv_detail::use_winograd(false);  // the 3x3 case's direct products
  random_source rnd;
  struct wide_case {
    shape input, filter;
    int64_t stride;
    const char* padding;
  };
  for (auto c : {wide_case{{3, 9, 7, 128}, {3, 3, 128, 256}, 1, "SAME"},
                 wide_case{{2, 11, 11, 96}, {5, 5, 96, 128}, 2, "VALID"},
                 wide_case{{5, 6, 6, 512}, {1, 1, 512, 640}, 1, "SAME"},
                 // 1x1 over 256 rows: one product planned for the threads;
                 // at stride 2 over the pixels it picks (7x7 -> 4x4).
                 wide_case{{16, 4, 4, 512}, {1, 1, 512, 1024}, 1, "SAME"},
                 wide_case{{8, 7, 7, 512}, {1, 1, 512, 640}, 2, "SAME"},
                 // Few rows under wide strided filters: the whole patch matrix
                 // in one product, its gradient scattered by images where
                 // windows overlap (3x3 at stride 2), by rows where not (2x2).
                 wide_case{{4, 8, 8, 512}, {3, 3, 512, 512}, 2, "SAME"},
                 wide_case{{4, 8, 8, 512}, {2, 2, 512, 256}, 2, "VALID"}}) {
    CAPTURE(c.input.to_string());
    CAPTURE(c.filter.to_string());
    attr_map attrs{{"strides", std::vector<int64_t>{c.stride, c.stride}},
                   {"padding", std::string(c.padding)}};
    tensor x = rnd.uniform(dtype::float32, c.input);
    tensor f = rnd.uniform(dtype::float32, c.filter);
    tensor y = run_kernel("conv2d", {x, f}, attrs)[0];
    tensor dy = rnd.uniform(dtype::float32, y.dims());
    auto library = all_three(x, f, dy, attrs);
    cpu::use_gemm_library(false);
    auto tiled = all_three(x, f, dy, attrs);
    cpu::use_gemm_library(true);
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(compare_tensors(library[i], tiled[i], 1e-4) == "");
    }
  }
  conv_detail::use_winograd(true);
}

// Float32 convolutions large enough for oneDNN's primitives
// (devices/cpu/conv_library.hpp) against actorflow's own im2col + GEMM on the
// same operands: a smaller last slice of images, channel counts that do not
// fill oneDNN's blocks of 16 (padded filter layouts), strides, VALID and
// uneven SAME padding, windows that do not overlap, one input channel, a
// filter gradient split by channels. (1x1 filters are always our own.)
TEST_CASE("conv2d through oneDNN's primitives matches our own kernels") {
  if (!cpu::conv_library_on()) {
    MESSAGE("no oneDNN in this build: every convolution is our own");
    return;
  }
  // The rules measured with AVX-512 take these cases to the library on any CPU;
  // Winograd off, or it would take the 3x3 ones.
  cpu::set_conv_rules(cpu::conv_rules::avx512);
  conv_detail::use_winograd(false);
  random_source rnd;
  struct library_case {
    shape input, filter;
    int64_t sh, sw;
    const char* padding;
    bool library_input;  // the input gradient by the library too (conv_library_chosen)
  };
  for (auto c :
       {library_case{{5, 13, 15, 20}, {3, 3, 20, 33}, 1, 1, "SAME", true},
        // Strides reach the library under 16 channels only (as AlexNet's first layer).
        library_case{{6, 23, 21, 12}, {4, 5, 12, 40}, 2, 3, "SAME", false},
        library_case{{5, 30, 30, 8}, {5, 5, 8, 64}, 3, 3, "VALID", false},
        // Windows that do not overlap.
        library_case{{10, 24, 24, 8}, {4, 4, 8, 100}, 4, 4, "VALID", false},
        library_case{{7, 28, 28, 1}, {5, 5, 1, 32}, 1, 1, "SAME", false},  // one channel
        library_case{{2, 13, 13, 192}, {3, 3, 192, 384}, 1, 1, "SAME", true},
        library_case{{2, 20, 20, 32}, {3, 3, 32, 64}, 1, 1, "SAME", false},  // 20x20 outputs
        // Filters over 8 MiB: the forward and filter gradient split by output
        // channels, not images (parts of 272 and 248, or 256, on two threads);
        // the input gradient by images.
        library_case{{3, 6, 7, 512}, {3, 3, 512, 520}, 1, 1, "SAME", true},
        library_case{{2, 7, 5, 520}, {3, 3, 520, 512}, 1, 1, "SAME", true}}) {
    CAPTURE(c.input.to_string());
    CAPTURE(c.filter.to_string());
    attr_map attrs{{"strides", std::vector<int64_t>{c.sh, c.sw}},
                   {"padding", std::string(c.padding)}};
    tensor x = rnd.uniform(dtype::float32, c.input);
    tensor f = rnd.uniform(dtype::float32, c.filter);
    tensor y = run_kernel("conv2d", {x, f}, attrs)[0];
    tensor dy = rnd.uniform(dtype::float32, y.dims());
    auto g = conv_detail::make_geometry(c.input, c.filter[0], c.filter[1], attrs, "strides",
                                        "conv2d", "filter");
    const cpu::conv_problem problem{g.n,  g.h,  g.w,  g.c,  c.filter[3], g.kh,      g.kw,
                                    g.sh, g.sw, g.oh, g.ow, g.pad_top,   g.pad_left};
    CHECK(cpu::conv_library_chosen(cpu::conv_pass::forward, problem));
    CHECK(cpu::conv_library_chosen(cpu::conv_pass::backprop_filter, problem));
    CHECK(cpu::conv_library_chosen(cpu::conv_pass::backprop_input, problem) == c.library_input);
    auto library = all_three(x, f, dy, attrs);
    cpu::use_conv_library(false);
    auto own = all_three(x, f, dy, attrs);
    cpu::use_conv_library(true);
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(compare_tensors(library[i], own[i], 1e-4) == "");
    }
  }
  cpu::set_conv_rules(cpu::conv_rules::this_cpu);
  conv_detail::use_winograd(true);
}

// Kernels of one shape share its primitives: two threads run all three passes
// at once, several times, and get what one thread gets alone.
TEST_CASE("oneDNN's convolution primitives run on several threads at once") {
  if (!cpu::conv_library_on()) {
    MESSAGE("no oneDNN in this build");
    return;
  }
  random_source rnd;
  attr_map attrs{{"strides", std::vector<int64_t>{1, 1}}, {"padding", std::string("SAME")}};
  tensor x = rnd.uniform(dtype::float32, {6, 14, 14, 32});
  tensor f = rnd.uniform(dtype::float32, {3, 3, 32, 48});
  tensor dy = rnd.uniform(dtype::float32, {6, 14, 14, 48});
  const auto alone = all_three(x, f, dy, attrs);
  std::vector<std::vector<tensor>> got(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) got[size_t(t)] = all_three(x, f, dy, attrs);
    });
  for (auto& t : threads) t.join();
  for (const auto& run : got)
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      // The filter gradient adds the threads' partial sums in the order they finish.
      CHECK(compare_tensors(run[i], alone[i], 1e-5) == "");
    }
}

// Where our own kernels are faster: the input gradient of few channels or large
// outputs, a 3x3 filter over 3 channels, 1x1 filters at stride 1, problems too
// small to repay a primitive.
TEST_CASE("conv2d keeps its own kernels where oneDNN's primitives are slower") {
  if (!cpu::conv_library_on()) return;
  using cpu::conv_pass;
  auto problem = [](int64_t n, int64_t hw, int64_t c, int64_t k, int64_t kernel) {
    return cpu::conv_problem{n, hw, hw, c, k, kernel, kernel, 1, 1, hw, hw, kernel / 2, kernel / 2};
  };
  cpu::set_conv_rules(cpu::conv_rules::avx512);
  const auto vgg_first = problem(16, 224, 3, 64, 3);
  CHECK_FALSE(cpu::conv_library_chosen(conv_pass::forward, vgg_first));
  CHECK_FALSE(cpu::conv_library_chosen(conv_pass::backprop_filter, vgg_first));
  const auto vgg_third = problem(16, 56, 128, 256, 3);
  CHECK(cpu::conv_library_chosen(conv_pass::forward, vgg_third));
  CHECK_FALSE(cpu::conv_library_chosen(conv_pass::backprop_input, vgg_third));
  // Strides over 16 channels and more: ResNet-50's and Inception-v3's
  // downsampling 3x3 layers.
  auto strided = problem(16, 30, 128, 128, 3);
  strided.sh = strided.sw = 2, strided.oh = strided.ow = 14, strided.pad_top = 0,
  strided.pad_left = 0;
  for (auto pass : {conv_pass::forward, conv_pass::backprop_input, conv_pass::backprop_filter})
    CHECK_FALSE(cpu::conv_library_chosen(pass, strided));
  const auto overfeat_fifth = problem(16, 12, 1024, 1024, 3);
  for (auto pass : {conv_pass::forward, conv_pass::backprop_input, conv_pass::backprop_filter})
    CHECK(cpu::conv_library_chosen(pass, overfeat_fifth));
  const auto pointwise = problem(16, 14, 480, 192, 1);
  for (auto pass : {conv_pass::forward, conv_pass::backprop_input, conv_pass::backprop_filter})
    CHECK_FALSE(cpu::conv_library_chosen(pass, pointwise));
  const auto tiny = problem(1, 8, 16, 16, 3);
  CHECK_FALSE(cpu::conv_library_chosen(conv_pass::forward, tiny));
  const auto resnet_first = problem(16, 28, 64, 64, 3);
  CHECK_FALSE(cpu::conv_library_chosen(conv_pass::backprop_input, resnet_first));
  const auto cnn_first = problem(128, 28, 1, 32, 5);
  CHECK(cpu::conv_library_chosen(conv_pass::backprop_filter, cnn_first));

  // Without AVX-512 the library takes every input gradient over 16 channels,
  // and filter gradients up to 128 channels, but no pass of 4x4 outputs.
  cpu::set_conv_rules(cpu::conv_rules::avx2);
  CHECK(cpu::conv_library_chosen(conv_pass::backprop_input, resnet_first));
  CHECK(cpu::conv_library_chosen(conv_pass::backprop_input, vgg_third));
  CHECK(cpu::conv_library_chosen(conv_pass::backprop_filter, resnet_first));
  CHECK_FALSE(cpu::conv_library_chosen(conv_pass::backprop_filter, cnn_first));
  CHECK(cpu::conv_library_chosen(conv_pass::forward, cnn_first));
  CHECK_FALSE(cpu::conv_library_chosen(conv_pass::backprop_filter, problem(16, 28, 256, 512, 3)));
  CHECK(cpu::conv_library_chosen(conv_pass::backprop_filter, problem(16, 7, 128, 128, 3)));
  for (auto pass : {conv_pass::forward, conv_pass::backprop_input, conv_pass::backprop_filter}) {
    CHECK_FALSE(cpu::conv_library_chosen(pass, strided));
    CHECK_FALSE(cpu::conv_library_chosen(pass, pointwise));
    CHECK_FALSE(cpu::conv_library_chosen(pass, problem(16, 4, 512, 512, 3)));
  }
  cpu::set_conv_rules(cpu::conv_rules::this_cpu);
}

TEST_CASE("turning the GEMM library off turns oneDNN's convolutions off too") {
  const bool was_on = cpu::conv_library_on();
  cpu::use_gemm_library(false);
  CHECK_FALSE(cpu::conv_library_on());
  cpu::use_gemm_library(true);
  CHECK(cpu::conv_library_on() == was_on);
}

}  // namespace actorflow::testing
