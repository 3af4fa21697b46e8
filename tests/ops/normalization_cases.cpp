// Cases for fused_batch_norm, layer_norm and their gradients: hand-computed
// values, every error the kernels raise, the gradients against central
// differences, and the parallel paths against a direct float64 loop.
//
// Hand-computed batch norm: x rows {1, 2} and {3, 6} (two channels), so the
// channels hold {1, 3} (mean 2, variance 1, unbiased 2) and {2, 6} (mean 4,
// variance 4, unbiased 8). With scale (1, 2), offset (0, 1) and epsilon 0:
// y = {(1-2)/1, (2-4)/2*2+1} = {-1, -1} and {1, 3}.
#include <cmath>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/math.hpp"
#include "ops/normalization.hpp"
#include "ops/op_cases.hpp"
#include "ops/reduce.hpp"

namespace actorflow::testing {
namespace {

attr_map bn_attrs(bool training, double epsilon = 0, double avg_factor = 1) {
  return {{"epsilon", epsilon}, {"is_training", training}, {"exponential_avg_factor", avg_factor}};
}

const tensor x22 = make<float>({2, 1, 1, 2}, {1, 2, 3, 6});
const tensor scale2 = make<float>({2}, {1, 2});
const tensor offset2 = make<float>({2}, {0, 1});
const tensor empty_f = tensor(dtype::float32, {0});

// The 3-value example of the gradients: x {0, 1, 2} (mean 1, variance 2/3),
// s = 1 / sqrt(2/3), dy {1, 0, 0}: training dx = s * {1/6, -1/3, 1/6}.
const double s3 = std::sqrt(1.5);

const op_case_registrar cases({
    // --- fused_batch_norm ---
    {.op = "fused_batch_norm",
     .label = "training: the batch's statistics, unbiased variance out",
     .inputs = {x22, scale2, offset2, empty_f, empty_f},
     .attrs = bn_attrs(true),
     .expected = {make<float>({2, 1, 1, 2}, {-1, -1, 1, 3}), make<float>({2}, {2, 4}),
                  make<float>({2}, {2, 8}), make<float>({2}, {2, 4}), make<float>({2}, {1, 0.5f})}},
    {.op = "fused_batch_norm",
     .label = "training with exponential_avg_factor 0.25",
     .inputs = {x22, scale2, offset2, make<float>({2}, {0, 0}), make<float>({2}, {1, 1})},
     .attrs = bn_attrs(true, 0, 0.25),
     .expected = {make<float>({2, 1, 1, 2}, {-1, -1, 1, 3}), make<float>({2}, {0.5f, 1}),
                  make<float>({2}, {1.25f, 2.75f}), make<float>({2}, {2, 4}),
                  make<float>({2}, {1, 0.5f})}},
    {.op = "fused_batch_norm",
     .label = "inference: the given mean and variance",
     .inputs = {x22, scale2, offset2, make<float>({2}, {1, 2}), make<float>({2}, {4, 1})},
     .attrs = bn_attrs(false),
     .expected = {make<float>({2, 1, 1, 2}, {0, 1, 1, 9}), make<float>({2}, {1, 2}),
                  make<float>({2}, {4, 1}), make<float>({2}, {1, 2}), make<float>({2}, {0.5f, 1})}},
    {.op = "fused_batch_norm",
     .label = "rank 2 [N, C], float64, epsilon 1e-3",
     .inputs = {make<double>({2, 1}, {1, 3}), make<double>({1}, {1}), make<double>({1}, {0}),
                tensor(dtype::float64, {0}), tensor(dtype::float64, {0})},
     .attrs = bn_attrs(true, 1e-3),
     .expected = {make<double>({2, 1}, {-1 / std::sqrt(1.001), 1 / std::sqrt(1.001)}),
                  make<double>({1}, {2}), make<double>({1}, {2}), make<double>({1}, {2}),
                  make<double>({1}, {1 / std::sqrt(1.001)})},
     .tolerance = 1e-12},
    {.op = "fused_batch_norm",
     .label = "a large mean against a small spread keeps its variance",
     .inputs = {make<float>({4, 1}, {10000, 10001, 10002, 10003}), make<float>({1}, {1}),
                make<float>({1}, {0}), empty_f, empty_f},
     .attrs = bn_attrs(true),
     .expected = {make<float>({4, 1}, {-1.3416408f, -0.4472136f, 0.4472136f, 1.3416408f}),
                  make<float>({1}, {10001.5f}), make<float>({1}, {1.6666666f}),
                  make<float>({1}, {10001.5f}), make<float>({1}, {0.8944272f})},
     .tolerance = 1e-5},
    {.op = "fused_batch_norm",
     .label = "zero channels",
     .inputs = {tensor(dtype::float32, {2, 0}), empty_f, empty_f, empty_f, empty_f},
     .attrs = bn_attrs(true),
     .expected = {tensor(dtype::float32, {2, 0}), empty_f, empty_f, empty_f, empty_f}},
    {.op = "fused_batch_norm",
     .label = "training over a batch of one",
     .inputs = {make<float>({1, 2}, {1, 2}), scale2, offset2, empty_f, empty_f},
     .attrs = bn_attrs(true),
     .expect_error = "more than one value per channel"},
    {.op = "fused_batch_norm",
     .label = "scale of the wrong channel count",
     .inputs = {x22, make<float>({3}, {1, 1, 1}), offset2, empty_f, empty_f},
     .attrs = bn_attrs(true),
     .expect_error = "scale has shape (3) but x has 2 channels"},
    {.op = "fused_batch_norm",
     .label = "inference without a variance",
     .inputs = {x22, scale2, offset2, make<float>({2}, {1, 2}), empty_f},
     .attrs = bn_attrs(false),
     .expect_error = "variance has shape (0) but x has 2 channels"},
    {.op = "fused_batch_norm",
     .label = "inference with a negative variance",
     .inputs = {x22, scale2, offset2, make<float>({2}, {1, 2}), make<float>({2}, {4, -1})},
     .attrs = bn_attrs(false),
     .expect_error = "variance[1] is -1"},
    {.op = "fused_batch_norm",
     .label = "inference with a NaN variance",
     .inputs = {x22, scale2, offset2, make<float>({2}, {1, 2}), make<float>({2}, {nan_f, 1})},
     .attrs = bn_attrs(false),
     .expect_error = "variance[0] is nan"},
    {.op = "fused_batch_norm",
     .label = "offset of another dtype",
     .inputs = {x22, scale2, make<double>({2}, {0, 1}), empty_f, empty_f},
     .attrs = bn_attrs(true),
     .expect_error = "offset is float64(2) but x is float32(2,1,1,2)"},
    {.op = "fused_batch_norm",
     .label = "rank-1 x",
     .inputs = {make<float>({2}, {1, 2}), make<float>({2}, {1, 1}), offset2, empty_f, empty_f},
     .attrs = bn_attrs(true),
     .expect_error = "x must have rank >= 2"},
    {.op = "fused_batch_norm",
     .label = "integer x",
     .inputs = {make<int32_t>({2, 1}, {1, 2}), make<int32_t>({1}, {1}), make<int32_t>({1}, {0}),
                tensor(dtype::int32, {0}), tensor(dtype::int32, {0})},
     .attrs = bn_attrs(true),
     .expect_error = "x must be float32 or float64, got int32"},
    {.op = "fused_batch_norm",
     .label = "a negative epsilon",
     .inputs = {x22, scale2, offset2, empty_f, empty_f},
     .attrs = bn_attrs(true, -1),
     .expect_error = "epsilon must be finite and >= 0"},
    // --- fused_batch_norm_grad ---
    {.op = "fused_batch_norm_grad",
     .label = "training, the 3-value example",
     .inputs = {make<double>({3, 1}, {1, 0, 0}), make<double>({3, 1}, {0, 1, 2}),
                make<double>({1}, {1}), make<double>({1}, {1}), make<double>({1}, {s3})},
     .attrs = {{"is_training", true}},
     .expected = {make<double>({3, 1}, {s3 / 6, -s3 / 3, s3 / 6}), make<double>({1}, {-s3}),
                  make<double>({1}, {1})},
     .tolerance = 1e-12},
    {.op = "fused_batch_norm_grad",
     .label = "inference: dx = dy * scale * inv_std",
     .inputs = {make<double>({3, 1}, {1, 0, 0}), make<double>({3, 1}, {0, 1, 2}),
                make<double>({1}, {2}), make<double>({1}, {1}), make<double>({1}, {s3})},
     .attrs = {{"is_training", false}},
     .expected = {make<double>({3, 1}, {2 * s3, 0, 0}), make<double>({1}, {-s3}),
                  make<double>({1}, {1})},
     .tolerance = 1e-12},
    {.op = "fused_batch_norm_grad",
     .label = "dy of another shape",
     .inputs = {make<float>({2, 1}, {1, 0}), make<float>({3, 1}, {0, 1, 2}), make<float>({1}, {1}),
                make<float>({1}, {1}), make<float>({1}, {1})},
     .attrs = {{"is_training", true}},
     .expect_error = "dy (2,1) and x (3,1) differ in shape"},
    // --- layer_norm ---
    {.op = "layer_norm",
     .label = "rows over the last axis",
     .inputs = {make<float>({2, 3}, {1, 2, 3, 0, 4, 8}), make<float>({3}, {1, 1, 2}),
                make<float>({3}, {0, 1, 0})},
     .attrs = {{"epsilon", 0.0}},
     .expected = {make<float>({2, 3}, {-1.2247449f, 1, 2.4494898f, -1.2247449f, 1, 2.4494898f}),
                  make<float>({2}, {2, 4}), make<float>({2}, {1.2247449f, 0.30618622f})},
     .tolerance = 1e-6},
    {.op = "layer_norm",
     .label = "begin_norm_axis 1 over (2, 1): the rows are the batch",
     .inputs = {make<double>({2, 2, 1}, {1, 3, 2, 6}), make<double>({2, 1}, {1, 2}),
                make<double>({2, 1}, {0, 1})},
     .attrs = {{"epsilon", 0.0}, {"begin_norm_axis", int64_t{1}}},
     .expected = {make<double>({2, 2, 1}, {-1, 3, -1, 3}), make<double>({2}, {2, 4}),
                  make<double>({2}, {1, 0.5})},
     .tolerance = 1e-12},
    {.op = "layer_norm",
     .label = "a constant row gives offset (epsilon 1e-3)",
     .inputs = {make<float>({1, 2}, {5, 5}), make<float>({2}, {3, 3}), make<float>({2}, {7, -7})},
     .expected = {make<float>({1, 2}, {7, -7}), make<float>({1}, {5}),
                  make<float>({1}, {31.622776f})},
     .tolerance = 1e-5},
    {.op = "layer_norm",
     .label = "scale of the wrong shape",
     .inputs = {make<float>({2, 3}, {1, 2, 3, 0, 4, 8}), make<float>({2}, {1, 1}),
                make<float>({3}, {0, 1, 0})},
     .expect_error = "scale has shape (2) but x (2,3) is normalized over axes of shape (3)"},
    {.op = "layer_norm",
     .label = "begin_norm_axis out of range",
     .inputs = {make<float>({2, 3}, {1, 2, 3, 0, 4, 8}), make<float>({3}, {1, 1, 1}),
                make<float>({3}, {0, 1, 0})},
     .attrs = {{"begin_norm_axis", int64_t{2}}},
     .expect_error = "begin_norm_axis 2 is out of range for x (2,3)"},
    // --- layer_norm_grad ---
    {.op = "layer_norm_grad",
     .label = "the 3-value example along a row",
     .inputs = {make<double>({1, 3}, {1, 0, 0}), make<double>({1, 3}, {0, 1, 2}),
                make<double>({3}, {1, 1, 1}), make<double>({1}, {1}), make<double>({1}, {s3})},
     .expected = {make<double>({1, 3}, {s3 / 6, -s3 / 3, s3 / 6}), make<double>({3}, {-s3, 0, 0}),
                  make<double>({3}, {1, 0, 0})},
     .tolerance = 1e-12},
    {.op = "layer_norm_grad",
     .label = "mean of the wrong shape",
     .inputs = {make<double>({1, 3}, {1, 0, 0}), make<double>({1, 3}, {0, 1, 2}),
                make<double>({3}, {1, 1, 1}), make<double>({2}, {1, 1}), make<double>({1}, {s3})},
     .expect_error = "mean has shape (2) but x's rows are (1)"},
});

// Random cases every device runs against the CPU kernel, large enough for
// the parallel paths.
std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> c;
  for (dtype t : floats) {
    auto x = rnd.uniform(t, shape{8, 9, 9, 16}, -3, 5);
    auto per_c = [&](double lo, double hi) { return rnd.uniform(t, shape{16}, lo, hi); };
    c.push_back({.op = "fused_batch_norm",
                 .label = label_of("training (8,9,9,16)", t),
                 .inputs = {x, per_c(0.5, 2), per_c(-1, 1), tensor(t, {0}), tensor(t, {0})},
                 .attrs = bn_attrs(true, 1e-3)});
    c.push_back({.op = "fused_batch_norm",
                 .label = label_of("inference (8,9,9,16)", t),
                 .inputs = {x, per_c(0.5, 2), per_c(-1, 1), per_c(-1, 1), per_c(0.1, 3)},
                 .attrs = bn_attrs(false, 1e-3)});
    c.push_back({.op = "layer_norm",
                 .label = label_of("(300, 257)", t),
                 .inputs = {rnd.uniform(t, shape{300, 257}, -3, 5),
                            rnd.uniform(t, shape{257}, 0.5, 2), rnd.uniform(t, shape{257})}});
  }
  return c;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> c;
  auto empty = tensor(dtype::float64, {0});
  c.push_back({.op = "fused_batch_norm",
               .label = "training NHWC (3,2,2,3)",
               .inputs = {uniform({3, 2, 2, 3}, -2, 2), positive({3}), uniform({3}), empty, empty},
               .attrs = bn_attrs(true, 1e-3),
               .outputs = {0},
               .constant_inputs = {3, 4},
               .tolerance = 1e-5});
  c.push_back({.op = "fused_batch_norm",
               .label = "training [N, C], unknown batch",
               .inputs = {uniform({5, 2}, -2, 2), positive({2}), uniform({2}), empty, empty},
               .attrs = bn_attrs(true, 1e-3),
               .unknown_dim0 = {0},
               .outputs = {0},
               .constant_inputs = {3, 4},
               .tolerance = 1e-5});
  c.push_back({.op = "fused_batch_norm",
               .label = "inference",
               .inputs = {uniform({2, 2, 1, 3}, -2, 2), positive({3}), uniform({3}), uniform({3}),
                          positive({3})},
               .attrs = bn_attrs(false, 1e-3),
               .outputs = {0},
               .constant_inputs = {3, 4}});
  c.push_back({.op = "layer_norm",
               .label = "(3,4) over the last axis",
               .inputs = {uniform({3, 4}, -2, 2), positive({4}), uniform({4})},
               .outputs = {0},
               .tolerance = 1e-5});
  c.push_back({.op = "layer_norm",
               .label = "(2,3,2) from axis 1, unknown batch",
               .inputs = {uniform({2, 3, 2}, -2, 2), positive({3, 2}), uniform({3, 2})},
               .attrs = {{"begin_norm_axis", int64_t{1}}},
               .unknown_dim0 = {0},
               .outputs = {0},
               .tolerance = 1e-5});
  return c;
}

const grad_case_registrar gradient_registration(gradient_cases);

// TensorFlow 2.21's numbers (normalization_tf.py): tf.compat.v1.nn.fused_batch_norm
// and Keras's LayerNormalization, epsilon 1e-3, loss = sum(y * dy).
const std::vector<float> tf_x{0.5, -1.0, 2.0, 1.5, 0.25, -0.75, -0.5, 0.5, 1.0, 3.0, -2.0, 0.0};
const std::vector<float> tf_dy{1.0, -0.5, 0.25, 0.0, 2.0, -1.0, 0.5, 0.5, -0.25, 1.0, 0.0, -2.0};

struct tf_expected {
  std::vector<float> y, mean, variance, dx, dscale, doffset;
};

const tf_expected tf_training{
    {-0.6248356103897095, -0.4173720180988312, -1.0863070487976074, 0.5349013805389404,
     0.20369087159633636, 1.565758466720581, -1.7845726013183594, 0.3279034495353699,
     -0.12191951274871826, 2.2745068073272705, -0.9142223000526428, 0.8424679636955261},
    {1.125, -0.5625, 0.5625},
    {2.2291667461395264, 1.3489583730697632, 1.4322917461395264},
    {0.48229217529296875, -0.3694066107273102, -0.09812195599079132, -0.753270149230957,
     0.508594274520874, -0.5498412847518921, -0.021751027554273605, -0.3095061182975769,
     -0.21854770183563232, 0.2927289307117462, 0.17031842470169067, 0.8665108680725098},
    {0.3382566273212433, 2.360038995742798, 2.5917913913726807},
    {2.5, 2.0, -3.0}};

const tf_expected tf_inference{
    {0.5106208920478821, -0.7028011083602905, -0.831088125705719, 1.8793569803237915,
     -0.004466220736503601, 1.1129696369171143, -0.8581152558326721, 0.13520078361034393,
     -0.12415805459022522, 3.9324610233306885, -1.2614691257476807, 0.5827720165252686},
    {0.2, -0.1, 0.4},
    {1.2, 0.8, 2.0},
    {1.3687361478805542, -0.2793339788913727, -0.17673252522945404, 0.0, 1.1173359155654907,
     0.7069301009178162, 0.6843680739402771, 0.2793339788913727, 0.17673252522945404,
     1.3687361478805542, 0.0, 1.4138602018356323},
    {2.5093495845794678, 1.620137095451355, 1.555246114730835},
    {2.5, 2.0, -3.0}};

const tf_expected tf_layer_norm{
    {0.10000002384185791, -0.8121683597564697, -0.9243367910385132, 2.0001296997070312,
     -0.2452412098646164, 1.4762707948684692, -1.9018869400024414, -0.06654089689254761,
     -0.7676730155944824, 2.04642653465271, -0.7677077054977417, 0.4622022211551666},
    {},
    {},
    {0.9522619247436523, -0.47613096237182617, -0.47613096237182617, -0.14308393001556396,
     0.32044553756713867, -0.1773616075515747, 0.05841934680938721, -0.1718348115682602,
     0.11341547966003418, -0.17919522523880005, -0.26898497343063354, 0.448180228471756},
    {0.6303219795227051, 0.5646626949310303, 1.5398411750793457},
    {2.5, 2.0, -3.0}};

void check_close(const tensor& got, const std::vector<float>& want, const char* what) {
  INFO(what);
  auto v = got.to_vector<float>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

// Runs the op's y, statistics and gradients for x (dims), scale, offset.
void check_against_tf(const tf_expected& want, shape dims, bool layer, bool training) {
  graph g;
  auto x = placeholder(g, dtype::float32, dims, "x");
  auto scale = placeholder(g, dtype::float32, {3}, "scale");
  auto offset = placeholder(g, dtype::float32, {3}, "offset");
  std::vector<output> fetches;
  output y;
  if (layer) {
    y = layer_norm(x, scale, offset).y;
  } else {
    auto mean = constant(g, make<float>({3}, {0.2f, -0.1f, 0.4f}));
    auto variance = constant(g, make<float>({3}, {1.2f, 0.8f, 2.0f}));
    batch_norm_options o;
    o.is_training = training;
    auto bn = fused_batch_norm(x, scale, offset, mean, variance, o);
    y = bn.y;
    fetches = {bn.batch_mean, bn.batch_variance};
  }
  auto loss = reduce_sum(mul(y, constant(g, make<float>(dims, tf_dy))));
  auto grads = gradients({loss}, {x, scale, offset});
  fetches.insert(fetches.begin(), y);
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  session s(g);
  auto values = s.run({{x, make<float>(dims, tf_x)},
                       {scale, make<float>({3}, {1.5f, 0.5f, -1.0f})},
                       {offset, make<float>({3}, {0.1f, -0.2f, 0.3f})}},
                      fetches);
  size_t k = 0;
  check_close(values[k++], want.y, "y");
  if (!layer) {
    check_close(values[k++], want.mean, "batch_mean");
    check_close(values[k++], want.variance, "batch_variance");
  }
  check_close(values[k++], want.dx, "dx");
  check_close(values[k++], want.dscale, "dscale");
  check_close(values[k++], want.doffset, "doffset");
}

TEST_CASE("fused_batch_norm and layer_norm agree with TensorFlow 2.21") {
  SUBCASE("batch norm, training") { check_against_tf(tf_training, {2, 2, 1, 3}, false, true); }
  SUBCASE("batch norm, inference") { check_against_tf(tf_inference, {2, 2, 1, 3}, false, false); }
  SUBCASE("layer norm") { check_against_tf(tf_layer_norm, {4, 3}, true, false); }
}

// A direct float64 loop: the batch norm of x [rows, c] in training mode.
std::vector<double> reference_batch_norm(const std::vector<float>& x, int64_t rows, int64_t c,
                                         double epsilon) {
  std::vector<double> y(x.size());
  for (int64_t j = 0; j < c; ++j) {
    double mean = 0, var = 0;
    for (int64_t r = 0; r < rows; ++r) mean += x[size_t(r * c + j)];
    mean /= double(rows);
    for (int64_t r = 0; r < rows; ++r) var += std::pow(x[size_t(r * c + j)] - mean, 2);
    var /= double(rows);
    for (int64_t r = 0; r < rows; ++r)
      y[size_t(r * c + j)] = (x[size_t(r * c + j)] - mean) / std::sqrt(var + epsilon);
  }
  return y;
}

TEST_CASE("fused_batch_norm over many rows (parallel sums) matches a float64 loop") {
  const int64_t rows = 16 * 28 * 28, c = 24;
  std::vector<float> x(size_t(rows * c));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7919 % 1009)) * 0.01f + 50.f;
  auto ones = tensor::from_vector<float>(std::vector<float>(size_t(c), 1.f), shape{c});
  auto zeros = tensor::from_vector<float>(std::vector<float>(size_t(c), 0.f), shape{c});
  auto outs = run_kernel("fused_batch_norm",
                         {make<float>({rows, c}, x), ones, zeros, tensor(dtype::float32, {0}),
                          tensor(dtype::float32, {0})},
                         bn_attrs(true, 1e-3));
  auto y = outs[0].to_vector<float>();
  auto expect = reference_batch_norm(x, rows, c, 1e-3);
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - expect[i]));
  CHECK(worst < 2e-5);
}

TEST_CASE("batch_norm_layer: training uses the batch, updates the moving averages as Keras") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 1, 1, 2}, "x");
  auto params = make_batch_norm_layer(g, 2, "bn", 0.9, 0.0);
  auto y = batch_norm_layer(x, params, true, "bn_train");
  CHECK(g.collection(update_ops_collection).size() == 2);
  batch_norm_layer(x, params, false, "bn_eval");
  CHECK(g.collection(update_ops_collection).size() == 2);  // inference adds no updates
  CHECK(y.dims() == shape{-1, 1, 1, 2});
  CHECK(params.trainable().size() == 2);
  CHECK(params.all().size() == 4);
}

}  // namespace
}  // namespace actorflow::testing
