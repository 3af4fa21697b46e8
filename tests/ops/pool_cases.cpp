// Cases for max_pool, avg_pool and their gradients: hand-computed values, the
// gradients against central differences, and the multi-threaded paths against
// a direct-loop reference.
#include <algorithm>
#include <cmath>
#include <random>

#include "ops/op_cases.hpp"
#include "ops/pool.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {
namespace {

attr_map pool_attrs(std::vector<int64_t> ksize, std::vector<int64_t> strides, std::string padding) {
  return {{"ksize", std::move(ksize)},
          {"strides", std::move(strides)},
          {"padding", std::move(padding)}};
}

tensor x33() { return make<float>({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}); }
// 1x4x4x2 with ties and negatives.
tensor x442() {
  return make<float>({1, 4, 4, 2}, {3, -1, 0, 5, 2,  2, 7, -4, 1, 6, 1, 1, 8, 0, -2, 3,
                                    4, 9,  5, 5, -6, 2, 0, 0,  1, 1, 2, 3, 3, 7, -1, 8});
}
tensor ones(shape s) {
  tensor t(dtype::float32, s);
  std::fill(t.mutable_data<float>(), t.mutable_data<float>() + t.num_elements(), 1.f);
  return t;
}
tensor iota(shape s, float start = 1) {
  tensor t(dtype::float32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = start + float(i);
  return t;
}

const op_case_registrar cases({
    // --- max_pool ---
    {.op = "max_pool",
     .label = "SAME 2x2 stride 2 on odd 3x3",
     .inputs = {x33()},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {make<float>({1, 2, 2, 1}, {5, 6, 8, 9})}},
    {.op = "max_pool",
     .label = "VALID 2x2 stride 2, two channels, TF 4-element attrs",
     .inputs = {x442()},
     .attrs = pool_attrs({1, 2, 2, 1}, {1, 2, 2, 1}, "VALID"),
     .expected = {make<float>({1, 2, 2, 2}, {3, 6, 8, 3, 5, 9, 3, 8})}},
    {.op = "max_pool",
     .label = "SAME 3x3 stride 1 (windows clipped at every border)",
     .inputs = {x442()},
     .attrs = pool_attrs({3, 3}, {1, 1}, "SAME"),
     .expected = {make<float>({1, 4, 4, 2}, {3, 6, 8, 6, 8, 5, 8, 3, 5, 9, 8, 9, 8, 5, 8, 3,
                                             5, 9, 8, 9, 8, 8, 8, 8, 5, 9, 5, 9, 5, 8, 3, 8})}},
    {.op = "max_pool",
     .label = "VALID 1x3 window, strides (1,2)",
     .inputs = {x442()},
     .attrs = pool_attrs({1, 3}, {1, 2}, "VALID"),
     .expected = {make<float>({1, 4, 1, 2}, {3, 5, 8, 6, 5, 9, 3, 7})}},
    {.op = "max_pool",
     .label = "SAME with a window larger than the input",
     .inputs = {make<float>({1, 2, 2, 1}, {1, 4, 3, 2})},
     .attrs = pool_attrs({5, 5}, {1, 1}, "SAME"),
     .expected = {make<float>({1, 2, 2, 1}, {4, 4, 4, 4})}},
    {.op = "max_pool",
     .label = "float64 with -inf",
     .inputs = {make<double>({1, 1, 2, 1}, {-INFINITY, -INFINITY})},
     .attrs = pool_attrs({1, 2}, {1, 1}, "VALID"),
     .expected = {make<double>({1, 1, 1, 1}, {-INFINITY})}},
    {.op = "max_pool",
     .label = "zero batch",
     .inputs = {tensor(dtype::float32, {0, 4, 4, 2})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {tensor(dtype::float32, {0, 2, 2, 2})}},
    {.op = "max_pool",
     .label = "window larger than input with VALID",
     .inputs = {x33()},
     .attrs = pool_attrs({4, 1}, {1, 1}, "VALID"),
     .expect_error = "ksize (4,1) is larger than the input (1,3,3,1)"},
    {.op = "max_pool",
     .label = "bad padding",
     .inputs = {x33()},
     .attrs = pool_attrs({2, 2}, {2, 2}, "valid"),
     .expect_error = "padding must be"},
    {.op = "max_pool",
     .label = "pooling over the batch is not supported",
     .inputs = {x33()},
     .attrs = pool_attrs({2, 2, 2, 1}, {2, 2}, "VALID"),
     .expect_error = "ksize must be"},
    {.op = "max_pool",
     .label = "zero stride",
     .inputs = {x33()},
     .attrs = pool_attrs({2, 2}, {1, 0}, "VALID"),
     .expect_error = "strides must be"},
    {.op = "max_pool",
     .label = "rank 3",
     .inputs = {tensor(dtype::float32, {3, 3, 1})},
     .attrs = pool_attrs({2, 2}, {1, 1}, "VALID"),
     .expect_error = "input must be rank 4"},
    {.op = "max_pool",
     .label = "int64 input",
     .inputs = {make<int64_t>({1, 1, 1, 1}, {1})},
     .attrs = pool_attrs({1, 1}, {1, 1}, "VALID"),
     .expect_error = "must be float32 or float64"},

    // --- avg_pool ---
    {.op = "avg_pool",
     .label = "SAME divides by the count of valid elements",
     .inputs = {x33()},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {make<float>({1, 2, 2, 1}, {3, 4.5f, 7.5f, 9})}},
    {.op = "avg_pool",
     .label = "VALID 2x2 stride 2, two channels",
     .inputs = {x442()},
     .attrs = pool_attrs({2, 2}, {2, 2}, "VALID"),
     .expected = {make<float>({1, 2, 2, 2}, {1.25f, 2.75f, 3.75f, 0.25f, 3, 4.5f, -1, 4.25f})}},
    {.op = "avg_pool",
     .label = "SAME 3x3 stride 1, float64",
     .inputs = {make<double>({1, 2, 3, 1}, {1, 2, 3, 4, 5, 6})},
     .attrs = pool_attrs({3, 3}, {1, 1}, "SAME"),
     .expected = {make<double>({1, 2, 3, 1}, {3, 3.5, 4, 3, 3.5, 4})}},
    {.op = "avg_pool",
     .label = "SAME with a window larger than the input",
     .inputs = {make<float>({1, 2, 2, 1}, {1, 4, 3, 2})},
     .attrs = pool_attrs({5, 5}, {1, 1}, "SAME"),
     .expected = {make<float>({1, 2, 2, 1}, {2.5f, 2.5f, 2.5f, 2.5f})}},
    {.op = "avg_pool",
     .label = "zero channels",
     .inputs = {tensor(dtype::float32, {1, 3, 3, 0})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {tensor(dtype::float32, {1, 2, 2, 0})}},
    {.op = "avg_pool",
     .label = "window larger than input with VALID",
     .inputs = {x33()},
     .attrs = pool_attrs({1, 5}, {1, 1}, "VALID"),
     .expect_error = "is larger than the input"},
    {.op = "avg_pool",
     .label = "missing ksize",
     .inputs = {x33()},
     .attrs = {{"strides", std::vector<int64_t>{1, 1}}, {"padding", std::string("SAME")}},
     .expect_error = "missing attribute 'ksize'"},

    // --- max_pool_grad ---
    {.op = "max_pool_grad",
     .label = "SAME 2x2 stride 2 on 3x3",
     .inputs = {x33(), make<float>({1, 2, 2, 1}, {5, 6, 8, 9}),
                make<float>({1, 2, 2, 1}, {1, 2, 3, 4})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {make<float>({1, 3, 3, 1}, {0, 0, 0, 0, 1, 2, 0, 3, 4})}},
    {.op = "max_pool_grad",
     .label = "ties go to the first maximum; overlapping windows add",
     .inputs = {make<float>({1, 3, 4, 1}, {1, 5, 5, 2, 5, 0, 3, 5, 4, 4, 1, 1}),
                make<float>({1, 2, 3, 1}, {5, 5, 5, 5, 4, 5}), iota({1, 2, 3, 1})},
     .attrs = pool_attrs({2, 2}, {1, 1}, "VALID"),
     .expected = {make<float>({1, 3, 4, 1}, {0, 3, 3, 0, 4, 0, 0, 6, 0, 5, 0, 0})}},
    {.op = "max_pool_grad",
     .label = "all equal: everything to the window's first element",
     .inputs = {ones({1, 2, 2, 1}), ones({1, 1, 1, 1}), make<float>({1, 1, 1, 1}, {7})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "VALID"),
     .expected = {make<float>({1, 2, 2, 1}, {7, 0, 0, 0})}},
    {.op = "max_pool_grad",
     .label = "VALID 2x2 stride 2, two channels, float64",
     .inputs = {make<double>({1, 4, 4, 2}, {3, -1, 0, 5, 2,  2, 7, -4, 1, 6, 1, 1, 8, 0, -2, 3,
                                            4, 9,  5, 5, -6, 2, 0, 0,  1, 1, 2, 3, 3, 7, -1, 8}),
                tensor(dtype::float64, {1, 2, 2, 2}),
                make<double>({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "VALID"),
     .expected = {make<double>({1, 4, 4, 2}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 3, 0, 0, 4,
                                              0, 6, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 8})}},
    {.op = "max_pool_grad",
     .label = "SAME with a window larger than the input",
     .inputs = {make<float>({1, 2, 2, 1}, {1, 4, 3, 2}), ones({1, 2, 2, 1}), ones({1, 2, 2, 1})},
     .attrs = pool_attrs({5, 5}, {1, 1}, "SAME"),
     .expected = {make<float>({1, 2, 2, 1}, {0, 4, 0, 0})}},
    {.op = "max_pool_grad",
     .label = "zero batch",
     .inputs = {tensor(dtype::float32, {0, 3, 3, 1}), tensor(dtype::float32, {0, 2, 2, 1}),
                tensor(dtype::float32, {0, 2, 2, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {tensor(dtype::float32, {0, 3, 3, 1})}},
    {.op = "max_pool_grad",
     .label = "grad of the wrong shape",
     .inputs = {x33(), ones({1, 2, 2, 1}), ones({1, 3, 3, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expect_error = "grad shape (1,3,3,1) does not match the pooled output shape (1,2,2,1)"},
    {.op = "max_pool_grad",
     .label = "orig_output of the wrong shape",
     .inputs = {x33(), ones({1, 2, 2, 2}), ones({1, 2, 2, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expect_error = "orig_output shape"},
    {.op = "max_pool_grad",
     .label = "dtype mismatch",
     .inputs = {x33(), ones({1, 2, 2, 1}), tensor(dtype::float64, {1, 2, 2, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expect_error = "dtypes differ"},

    // --- max_pool_relu_grad: max_pool_grad where the maximum is above zero ---
    {.op = "max_pool_relu_grad",
     .label = "VALID 2x2 stride 2, two channels: maxima at or below zero get nothing",
     .inputs = {make<float>({1, 4, 4, 2},
                            {-3, -1, 0, 5,  -2, -2, -7, -4, 1, 6, 1, 1,  -8, 0, -2, 3,
                             4,  -9, 5, -5, -6, 2,  0,  0,  1, 0, 2, -3, 3,  7, -1, 8}),
                tensor(dtype::float32, {1, 2, 2, 2}), iota({1, 2, 2, 2})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "VALID"),
     .expected = {make<float>({1, 4, 4, 2}, {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 4,
                                             0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 8})}},
    {.op = "max_pool_relu_grad",
     .label = "overlapping windows add where the maximum is positive, float64",
     .inputs = {make<double>({1, 1, 4, 1}, {2, -1, 0, 3}), tensor(dtype::float64, {1, 1, 3, 1}),
                make<double>({1, 1, 3, 1}, {1, 2, 4})},
     .attrs = pool_attrs({1, 2}, {1, 1}, "VALID"),
     .expected = {make<double>({1, 1, 4, 1}, {1, 0, 0, 4})}},
    {.op = "max_pool_relu_grad",
     .label = "SAME 2x2 stride 3: positions no window covers are zero",
     .inputs = {make<float>({1, 1, 5, 1}, {1, 2, 9, 4, 5}), tensor(dtype::float32, {1, 1, 2, 1}),
                make<float>({1, 1, 2, 1}, {7, 8})},
     .attrs = pool_attrs({1, 2}, {1, 3}, "SAME"),
     .expected = {make<float>({1, 1, 5, 1}, {0, 7, 0, 0, 8})}},
    {.op = "max_pool_relu_grad",
     .label = "grad of the wrong shape",
     .inputs = {x33(), ones({1, 2, 2, 1}), ones({1, 3, 3, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expect_error = "grad shape (1,3,3,1) does not match the pooled output shape (1,2,2,1)"},

    // --- avg_pool_grad ---
    {.op = "avg_pool_grad",
     .label = "SAME on 3x3: shares by valid count",
     .inputs = {x33(), ones({1, 2, 2, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {make<float>({1, 3, 3, 1}, {.25f, .25f, .5f, .25f, .25f, .5f, .5f, .5f, 1})}},
    {.op = "avg_pool_grad",
     .label = "VALID 2x2 stride 2, two channels, input_like of another dtype",
     .inputs = {tensor(dtype::int32, {1, 4, 4, 2}), iota({1, 2, 2, 2})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "VALID"),
     .expected = {make<float>({1, 4, 4, 2}, {.25f,  .5f,  .25f,  .5f,  .75f,  1, .75f,  1,
                                             .25f,  .5f,  .25f,  .5f,  .75f,  1, .75f,  1,
                                             1.25f, 1.5f, 1.25f, 1.5f, 1.75f, 2, 1.75f, 2,
                                             1.25f, 1.5f, 1.25f, 1.5f, 1.75f, 2, 1.75f, 2})}},
    {.op = "avg_pool_grad",
     .label = "overlapping windows add, float64",
     .inputs = {tensor(dtype::float64, {1, 1, 3, 1}), make<double>({1, 1, 2, 1}, {2, 4})},
     .attrs = pool_attrs({1, 2}, {1, 1}, "VALID"),
     .expected = {make<double>({1, 1, 3, 1}, {1, 3, 2})}},
    {.op = "avg_pool_grad",
     .label = "zero batch",
     .inputs = {tensor(dtype::float32, {0, 3, 3, 1}), tensor(dtype::float32, {0, 2, 2, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expected = {tensor(dtype::float32, {0, 3, 3, 1})}},
    {.op = "avg_pool_grad",
     .label = "grad of the wrong shape",
     .inputs = {x33(), ones({1, 3, 3, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expect_error = "does not match the pooled output shape"},
    {.op = "avg_pool_grad",
     .label = "int32 grad",
     .inputs = {x33(), tensor(dtype::int32, {1, 2, 2, 1})},
     .attrs = pool_attrs({2, 2}, {2, 2}, "SAME"),
     .expect_error = "grad must be float32 or float64"},
});

// ---- against the CPU kernel: random inputs of each dtype a GPU kernel takes ----

// Odd SAME padding (bottom / right), VALID, overlapping windows.
std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> cases;
  struct window {
    shape x;
    std::vector<int64_t> ksize, strides;
    std::string padding;
  };
  const std::vector<window> pools{{shape{2, 7, 7, 3}, {2, 2}, {2, 2}, "SAME"},
                                  {shape{2, 7, 7, 3}, {2, 2}, {2, 2}, "VALID"},
                                  {shape{1, 6, 5, 2}, {3, 3}, {1, 1}, "SAME"},
                                  {shape{1, 6, 5, 2}, {3, 2}, {2, 1}, "SAME"}};
  for (dtype t : floats)
    for (auto& p : pools) {
      const auto label =
          label_of("random " + p.x.to_string() + " ksize " + std::to_string(p.ksize[0]) + "," +
                       std::to_string(p.ksize[1]) + " " + p.padding,
                   t);
      auto a = pool_attrs(p.ksize, p.strides, p.padding);
      auto x = rnd.uniform(t, p.x);
      auto y = run_kernel("max_pool", {x}, a)[0];
      auto dy = rnd.uniform(t, y.dims());
      cases.push_back({.op = "max_pool", .label = label, .inputs = {x}, .attrs = a});
      cases.push_back({.op = "avg_pool", .label = label, .inputs = {x}, .attrs = a});
      cases.push_back({.op = "max_pool_grad", .label = label, .inputs = {x, y, dy}, .attrs = a});
      cases.push_back({.op = "avg_pool_grad", .label = label, .inputs = {x, dy}, .attrs = a});
    }
  return cases;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> c;
  c.push_back({.op = "max_pool",
               .label = "2x2 stride 2 VALID",
               .inputs = {distinct({1, 4, 4, 2})},
               .attrs = pool_attrs({2, 2}, {2, 2}, "VALID")});
  c.push_back({.op = "max_pool",
               .label = "3x3 stride 2 SAME, unknown batch",
               .inputs = {distinct({2, 5, 5, 1})},
               .attrs = pool_attrs({3, 3}, {2, 2}, "SAME"),
               .unknown_dim0 = {0}});
  c.push_back({.op = "max_pool",
               .label = "overlapping 2x2 stride 1",
               .inputs = {distinct({1, 4, 4, 1})},
               .attrs = pool_attrs({1, 2, 2, 1}, {1, 1, 1, 1}, "VALID")});
  c.push_back({.op = "avg_pool",
               .label = "2x2 stride 2 VALID",
               .inputs = {uniform({1, 4, 4, 2})},
               .attrs = pool_attrs({2, 2}, {2, 2}, "VALID")});
  c.push_back({.op = "avg_pool",
               .label = "3x3 stride 2 SAME, unknown batch",
               .inputs = {uniform({2, 5, 5, 1})},
               .attrs = pool_attrs({3, 3}, {2, 2}, "SAME"),
               .unknown_dim0 = {0}});
  c.push_back({.op = "avg_pool_grad",
               .label = "3x3 stride 2 SAME",
               .inputs = {uniform({1, 5, 5, 1}), uniform({1, 3, 3, 1})},
               .attrs = pool_attrs({3, 3}, {2, 2}, "SAME")});
  c.push_back({.op = "avg_pool_grad",
               .label = "2x2 stride 2 VALID",
               .inputs = {uniform({1, 4, 4, 2}), uniform({1, 2, 2, 2})},
               .attrs = pool_attrs({2, 2}, {2, 2}, "VALID")});
  return c;
}

const grad_case_registrar gradient_registration(gradient_cases);

// --- references for the extra test cases ---

struct pool_cfg {
  int64_t n, h, w, c, kh, kw, sh, sw;
  bool same;
};

struct window {
  int64_t hs, he, ws, we;
};

// Output size and the window of output (oy, ox), written out independently of ops/.
void ref_axis(int64_t in, int64_t k, int64_t s, bool same, int64_t& out, int64_t& pad) {
  if (same) {
    out = (in + s - 1) / s;
    pad = std::max<int64_t>((out - 1) * s + k - in, 0) / 2;
  } else {
    out = (in - k) / s + 1;
    pad = 0;
  }
}

template <class F>
void for_each_window(const pool_cfg& c, F&& f) {
  int64_t oh, ow, pt, pl;
  ref_axis(c.h, c.kh, c.sh, c.same, oh, pt);
  ref_axis(c.w, c.kw, c.sw, c.same, ow, pl);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t hs = oy * c.sh - pt, ws = ox * c.sw - pl;
        window w{std::max<int64_t>(hs, 0), std::min(hs + c.kh, c.h), std::max<int64_t>(ws, 0),
                 std::min(ws + c.kw, c.w)};
        f(n, (n * oh + oy) * ow + ox, w);
      }
}

shape pooled_shape(const pool_cfg& c) {
  int64_t oh, ow, p;
  ref_axis(c.h, c.kh, c.sh, c.same, oh, p);
  ref_axis(c.w, c.kw, c.sw, c.same, ow, p);
  return {c.n, oh, ow, c.c};
}

attr_map attrs_of(const pool_cfg& c) {
  return pool_attrs({c.kh, c.kw}, {c.sh, c.sw}, c.same ? "SAME" : "VALID");
}

// Distinct values (a shuffled ramp), so that max_pool's argmax is unique and a
// small perturbation never changes it.
template <class T>
tensor distinct_tensor(shape s, std::mt19937& rng) {
  tensor t(dtype_of<T>(), s);
  std::vector<int64_t> idx(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t(i);
  std::shuffle(idx.begin(), idx.end(), rng);
  for (size_t i = 0; i < idx.size(); ++i) t.mutable_data<T>()[i] = T(0.01 * double(idx[i]) - 1);
  return t;
}

double dot(const tensor& a, const tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

TEST_CASE("pool gradients match central differences (float64)") {
  std::mt19937 rng(4321);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    pool_cfg c{pick(1, 2), pick(1, 6), pick(1, 6), pick(1, 3),     pick(1, 3),
               pick(1, 3), pick(1, 3), pick(1, 3), pick(0, 1) == 1};
    if (!c.same && (c.kh > c.h || c.kw > c.w)) continue;
    ++checked;
    INFO("n,h,w,c=" << c.n << "," << c.h << "," << c.w << "," << c.c << " ksize " << c.kh << "x"
                    << c.kw << " strides " << c.sh << "," << c.sw << (c.same ? " SAME" : " VALID"));
    auto attrs = attrs_of(c);
    tensor x = distinct_tensor<double>({c.n, c.h, c.w, c.c}, rng);
    tensor r = distinct_tensor<double>(pooled_shape(c), rng);
    for (const char* op : {"max_pool", "avg_pool"}) {
      INFO(op);
      bool is_max = std::string(op) == "max_pool";
      tensor y = run_kernel(op, {x}, attrs)[0];
      tensor dx = is_max ? run_kernel("max_pool_grad", {x, y, r}, attrs)[0]
                         : run_kernel("avg_pool_grad", {x, r}, attrs)[0];
      REQUIRE(dx.dims() == x.dims());
      tensor xp = x.clone();
      const double eps = 1e-4;  // below half the 0.01 gap between distinct values
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        double* p = xp.mutable_data<double>();
        double keep = p[i];
        p[i] = keep + eps;
        double up = dot(run_kernel(op, {xp}, attrs)[0], r);
        p[i] = keep - eps;
        double down = dot(run_kernel(op, {xp}, attrs)[0], r);
        p[i] = keep;
        CHECK(dx.data<double>()[i] == doctest::Approx((up - down) / (2 * eps)).epsilon(1e-7));
      }
    }
  }
  CHECK(checked >= 30);
}

TEST_CASE("pooling multi-threaded paths match a direct-loop reference") {
  // Windows that tile the image, overlap, or leave positions out (VALID's
  // last row and column, a stride past the window); channels past one block.
  for (pool_cfg c :
       {pool_cfg{64, 28, 28, 32, 2, 2, 2, 2, true}, pool_cfg{16, 29, 27, 16, 3, 3, 2, 2, true},
        pool_cfg{8, 30, 30, 64, 3, 2, 1, 2, false}, pool_cfg{16, 29, 27, 80, 2, 2, 2, 2, false},
        pool_cfg{8, 17, 16, 24, 2, 3, 3, 3, true}}) {
    INFO("n,h,w,c=" << c.n << "," << c.h << "," << c.w << "," << c.c);
    std::mt19937 rng(7);
    auto attrs = attrs_of(c);
    tensor x = distinct_tensor<float>({c.n, c.h, c.w, c.c}, rng);
    tensor dy = distinct_tensor<float>(pooled_shape(c), rng);
    const int64_t ch = c.c;
    std::vector<float> ymax(dy.num_elements()), yavg(dy.num_elements());
    std::vector<double> dmax(x.num_elements()), dmax_relu(x.num_elements()), davg(x.num_elements());
    const float *xp = x.data<float>(), *dyp = dy.data<float>();
    for_each_window(c, [&](int64_t n, int64_t o, const window& w) {
      double count = double((w.he - w.hs) * (w.we - w.ws));
      for (int64_t j = 0; j < ch; ++j) {
        float best = -INFINITY;
        int64_t at = -1;
        double sum = 0;
        for (int64_t ih = w.hs; ih < w.he; ++ih)
          for (int64_t iw = w.ws; iw < w.we; ++iw) {
            int64_t i = ((n * c.h + ih) * c.w + iw) * ch + j;
            sum += xp[i];
            if (xp[i] > best) best = xp[i], at = i;
            davg[i] += dyp[o * ch + j] / count;
          }
        ymax[o * ch + j] = best;
        yavg[o * ch + j] = float(sum / count);
        dmax[at] += dyp[o * ch + j];
        if (best > 0) dmax_relu[at] += dyp[o * ch + j];
      }
    });
    tensor y = run_kernel("max_pool", {x}, attrs)[0];
    CHECK(compare_tensors(y, make<float>(pooled_shape(c), ymax), 0) == "");
    CHECK(compare_tensors(run_kernel("avg_pool", {x}, attrs)[0], make<float>(pooled_shape(c), yavg),
                          1e-5) == "");
    auto to_float = [](const std::vector<double>& v) {
      return std::vector<float>(v.begin(), v.end());
    };
    CHECK(compare_tensors(run_kernel("max_pool_grad", {x, y, dy}, attrs)[0],
                          make<float>(x.dims(), to_float(dmax)), 1e-5) == "");
    CHECK(compare_tensors(run_kernel("max_pool_relu_grad", {x, y, dy}, attrs)[0],
                          make<float>(x.dims(), to_float(dmax_relu)), 1e-5) == "");
    CHECK(compare_tensors(run_kernel("avg_pool_grad", {x, dy}, attrs)[0],
                          make<float>(x.dims(), to_float(davg)), 1e-5) == "");
  }
}

TEST_CASE("pool builders infer shapes with an unknown batch") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 28, 28, 32}, "x");
  auto y = max_pool(x, {2, 2}, {2, 2}, "SAME");
  CHECK(y.dims() == shape{-1, 14, 14, 32});
  CHECK(avg_pool(x, {3, 3}, {2, 2}, "VALID").dims() == shape{-1, 13, 13, 32});
  CHECK(max_pool_grad(x, y, y, {2, 2}, {2, 2}, "SAME").dims() == shape{-1, 28, 28, 32});
  CHECK(avg_pool_grad(x, y, {2, 2}, {2, 2}, "SAME").dims() == shape{-1, 28, 28, 32});
  bool threw = false;
  try {
    max_pool_grad(x, y, x, {2, 2}, {2, 2}, "SAME");
  } catch (const error& e) {
    threw = std::string(e.what()).find("[max_pool_grad] grad shape") != std::string::npos;
  }
  CHECK(threw);
}

}  // namespace
}  // namespace actorflow::testing
