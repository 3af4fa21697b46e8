// The bfloat16 dtype (core/bfloat16.hpp): conversion bits against TensorFlow's,
// the vectorized and scalar conversions against each other, cast to and from
// every dtype, printing, checkpoints and graph files, and the clear error of
// ops without a bfloat16 kernel.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "actors/checkpoint.hpp"
#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/conv.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/pool.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "schema/graph_io.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;
using actorflow::testing::temp_dir;
namespace fs = std::filesystem;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// float32 bits -> bfloat16 bits from TensorFlow 2.21 (tf.bitcast(tf.cast(x, tf.bfloat16),
// tf.uint16)). The same check over 4034 floats (these, 2000 random bit patterns, 1000 normal
// draws and 1000 exact ties) matched bit for bit; these are its edge cases.
struct tf_case {
  uint32_t in;
  uint16_t out;
};
const tf_case tf_cases[] = {
    {0x00000000u, 0x0000},
    {0x80000000u, 0x8000},  // +-0
    {0x3f800000u, 0x3f80},
    {0xbf800000u, 0xbf80},  // +-1
    {0x7f800000u, 0x7f80},
    {0xff800000u, 0xff80},  // +-inf
    {0x7fc00000u, 0x7fc0},
    {0xffc00000u, 0x7fc0},  // NaN: the sign is dropped
    {0x7f800001u, 0x7fc0},
    {0xff800001u, 0x7fc0},  // signalling NaNs become quiet
    {0x7fbfffffu, 0x7fc0},
    {0x7fc00001u, 0x7fc0},
    {0xffffffffu, 0x7fc0},
    {0x7f7fffffu, 0x7f80},
    {0xff7fffffu, 0xff80},  // max finite rounds to inf
    {0x7f7f7fffu, 0x7f7f},
    {0x7f7f8000u, 0x7f80},  // just below / at the tie to inf
    {0x7f7f0000u, 0x7f7f},  // bfloat16's max finite, exact
    {0x00800000u, 0x0080},  // smallest normal
    {0x007fffffu, 0x0080},  // largest denormal rounds up to a normal
    {0x00000001u, 0x0000},
    {0x80000001u, 0x8000},  // smallest denormals round to +-0
    {0x000116c2u, 0x0001},  // a denormal kept (no flush to zero)
    {0x00008000u, 0x0000},
    {0x00018000u, 0x0002},  // denormal ties to even
    {0x00007fffu, 0x0000},
    {0x3f808000u, 0x3f80},
    {0x3f818000u, 0x3f82},  // ties to even, down and
                            // up
    {0x3f808001u, 0x3f81},
    {0x3f808008u, 0x3f81},  // just above a tie rounds up
};

TEST_CASE("float32 -> bfloat16 gives TensorFlow's bits; bfloat16 -> float32 is exact") {
  std::vector<float> in;
  for (auto c : tf_cases) {
    CAPTURE(c.in);
    CHECK(to_bfloat16(from_bits(c.in)).bits == c.out);
    CHECK(bits_of(to_float(bfloat16{c.out})) == uint32_t{c.out} << 16);
    in.push_back(from_bits(c.in));
  }
  // Enough copies that the vector path (32 a step) converts every case in every lane.
  std::vector<float> many;
  for (int r = 0; r < 40; ++r) many.insert(many.end(), in.begin() + r % 7, in.end());
  std::vector<bfloat16> out(many.size());
  float_to_bfloat16(many.data(), out.data(), static_cast<int64_t>(many.size()));
  for (size_t i = 0; i < many.size(); ++i) {
    CAPTURE(bits_of(many[i]));
    CHECK(out[i].bits == to_bfloat16(many[i]).bits);
  }
  MESSAGE("hardware conversion (AVX512_BF16): " << bfloat16_hardware_conversion());
}

// Random bit patterns (every class: NaNs, denormals, infinities) and ordinary values.
std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 3 == 0 ? from_bits(rng()) : normal(rng);
  return v;
}

TEST_CASE("cast float32 <-> bfloat16 at sizes 1..4099: vector and scalar paths agree") {
  auto all = random_floats(4099, 11);
  for (int64_t n = 1; n <= 4099; ++n) {
    CAPTURE(n);
    std::vector<float> x(all.begin(), all.begin() + n);
    auto t = tensor::from_vector<float>(x);
    auto b = run_kernel("cast", {t}, {{"dtype", dtype::bfloat16}})[0];
    REQUIRE(b.type() == dtype::bfloat16);
    const bfloat16* pb = b.data<bfloat16>();
    bool same = true;
    for (int64_t i = 0; i < n && same; ++i) same = pb[i].bits == to_bfloat16(x[size_t(i)]).bits;
    CHECK(same);
    // Back to float32: exact, so it is the rounded value.
    auto f = run_kernel("cast", {b}, {{"dtype", dtype::float32}})[0];
    const float* pf = f.data<float>();
    for (int64_t i = 0; i < n && same; ++i) same = bits_of(pf[i]) == uint32_t{pb[i].bits} << 16;
    CHECK(same);
  }
  // A large one, split across threads.
  auto big = random_floats(300001, 12);
  auto b = run_kernel("cast", {tensor::from_vector<float>(big)}, {{"dtype", dtype::bfloat16}})[0];
  int64_t wrong = 0;
  for (size_t i = 0; i < big.size(); ++i)
    wrong += b.data<bfloat16>()[i].bits != to_bfloat16(big[i]).bits;
  CHECK(wrong == 0);
}

TEST_CASE("cast between bfloat16 and every other dtype goes through float32") {
  auto bf = [](std::vector<float> v) {
    std::vector<bfloat16> b;
    for (float f : v) b.push_back(to_bfloat16(f));
    return tensor::from_vector<bfloat16>(b);
  };
  auto cast_to = [](const tensor& t, dtype d) {
    return run_kernel("cast", {t}, {{"dtype", d}})[0];
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  auto x = bf({1.5f, -2.75f, 3e38f, -inf, nan, 0.0f, 255.0f, 1e10f});

  CHECK(cast_to(x, dtype::int32).to_vector<int32_t>() ==
        std::vector<int32_t>{1, -2, INT32_MAX, INT32_MIN, 0, 0, 255, INT32_MAX});  // saturating
  CHECK(cast_to(x, dtype::uint8).to_vector<uint8_t>() ==
        std::vector<uint8_t>{1, 0, 255, 0, 0, 0, 255, 255});
  auto as_bool = cast_to(x, dtype::boolean);
  CHECK(std::vector<bool>(as_bool.data<bool>(), as_bool.data<bool>() + 8) ==
        std::vector<bool>{true, true, true, true, true, false, true, true});
  auto d = cast_to(x, dtype::float64).to_vector<double>();
  CHECK(d[1] == -2.75);
  CHECK(d[2] == double(to_float(to_bfloat16(3e38f))));
  CHECK(std::isnan(d[4]));

  // Into bfloat16: integers round to 8 significant bits, to nearest even.
  auto from_int = cast_to(tensor::from_vector<int64_t>({257, 259, -1000001, int64_t{1} << 40}),
                          dtype::bfloat16);
  CHECK(cast_to(from_int, dtype::float32).to_vector<float>() ==
        std::vector<float>{256.0f, 260.0f, -999424.0f, 1099511627776.0f});
  auto from_double = cast_to(tensor::from_vector<double>({1e300, 0.1, -1e-300}), dtype::bfloat16);
  CHECK(from_double.data<bfloat16>()[0].bits == 0x7f80);
  CHECK(from_double.data<bfloat16>()[1].bits == to_bfloat16(0.1f).bits);
  CHECK(from_double.data<bfloat16>()[2].bits == 0x8000);
  // Through float32, as TensorFlow 2.21 does: 1 + 2^-8 + 2^-30 becomes the tie 1 + 2^-8 in
  // float32, which rounds to even (1), not up as a direct rounding of the double would.
  auto twice = cast_to(tensor::from_vector<double>({1.0 + 0x1p-8 + 0x1p-30}), dtype::bfloat16);
  CHECK(twice.data<bfloat16>()[0].bits == 0x3f80);
  auto from_bool = cast_to(tensor::from_vector<bool>({true, false}), dtype::bfloat16);
  CHECK(from_bool.data<bfloat16>()[0].bits == 0x3f80);
  CHECK(from_bool.data<bfloat16>()[1].bits == 0x0000);
}

TEST_CASE("bfloat16 tensors print their values") {
  auto t = tensor::from_vector<bfloat16>(
      {to_bfloat16(1.0f), to_bfloat16(0.1f), to_bfloat16(-3.0e38f),
       to_bfloat16(-std::numeric_limits<float>::infinity()), to_bfloat16(std::nanf(""))},
      {5});
  CHECK(t.to_string() == "tensor<bfloat16 (5)> [1, 0.100098, -3.00406e+38, -inf, nan]");
  CHECK(dtype_name(dtype::bfloat16) == std::string("bfloat16"));
  CHECK(parse_dtype("bfloat16") == dtype::bfloat16);
  CHECK(dtype_size(dtype::bfloat16) == 2);
  CHECK(is_floating(dtype::bfloat16));
  CHECK(is_valid_dtype(static_cast<int>(dtype::bfloat16)));
  CHECK_FALSE(is_valid_dtype(static_cast<int>(dtype::bfloat16) + 1));
  // The numbering is on disk: the older dtypes keep theirs.
  CHECK(static_cast<int>(dtype::boolean) == 5);
  CHECK(static_cast<int>(dtype::bfloat16) == 6);
}

TEST_CASE("ops without a bfloat16 kernel say so") {
  auto t = tensor::from_vector<bfloat16>({to_bfloat16(1.0f), to_bfloat16(2.0f)});
  CHECK(error_of([&] {
          run_kernel("sub", {t, t});
        }) == "[sub] has no bfloat16 kernel (cast to float32 around it)");
  CHECK(error_of([&] { run_kernel("exp", {t}); }) ==
        "[exp] has no bfloat16 kernel (cast to float32 around it)");
  CHECK(error_of([&] { run_kernel("sum", {t}); }).find("has no bfloat16 kernel") !=
        std::string::npos);
  graph g;
  auto p = placeholder(g, dtype::bfloat16, {2}, "p");
  // At build time already, naming the node.
  CHECK(error_of([&] { sub(p, p); }) ==
        "[sub] has no bfloat16 kernel (cast to float32 around it) (node 'sub', inputs: "
        "bfloat16(2), bfloat16(2))");
  // Ops whose float checks would take bfloat16 refuse it at build time too.
  auto images = placeholder(g, dtype::bfloat16, {1, 4, 4, 1}, "images");
  CHECK(error_of([&] {
          max_pool(images, {2, 2}, {2, 2}, "VALID");
        }).starts_with("[max_pool] has no bfloat16 kernel"));
  CHECK(error_of([&] { softmax(p); }).starts_with("[softmax] has no bfloat16 kernel"));
  CHECK(error_of([&] {
          random_uniform(g, {2}, dtype::bfloat16);
        }).starts_with("[random_uniform] has no bfloat16 kernel"));
  auto cond = placeholder(g, dtype::boolean, {2}, "cond");
  CHECK(error_of([&] { select(cond, p, p); }).starts_with("[select] has no bfloat16 kernel"));
  // Ops that only move elements take it: pad fills with the value rounded to bfloat16.
  auto padded =
      run_kernel("pad", {t}, {{"paddings", std::vector<int64_t>{1, 0}}, {"value", 0.1}})[0];
  CHECK(padded.dims() == shape{3});
  CHECK(padded.data<bfloat16>()[0].bits == to_bfloat16(0.1f).bits);
  CHECK(padded.data<bfloat16>()[2].bits == t.data<bfloat16>()[1].bits);
  // scalar_like (gradients build it) makes a bfloat16 constant as cast would.
  auto tenth = scalar_like(p, 0.1, "tenth");
  CHECK(tenth.spec().type == dtype::bfloat16);
  CHECK(std::get<tensor>(g.find("tenth")->attrs.at("value")).item<bfloat16>().bits ==
        to_bfloat16(0.1f).bits);
  // zeros_like and fill work: the gradient driver makes zeros for unused outputs.
  auto z = run_kernel("zeros_like", {t})[0];
  CHECK(z.data<bfloat16>()[1].bits == 0);
  auto ones = run_kernel("ones_like", {t})[0];
  CHECK(ones.data<bfloat16>()[0].bits == 0x3f80);
}

TEST_CASE("the gradient of a cast to bfloat16 is a cast back") {
  graph g;
  auto x = placeholder(g, dtype::float32, {3}, "x");
  auto rounded = cast(cast(x, dtype::bfloat16), dtype::float32);
  auto grads = gradients({reduce_sum(mul(rounded, x))}, {x});
  session s(g);
  // d/dx (round(x) * x) = round(x) + round(x * 1): the rounding's derivative is taken as 1, and
  // the gradient through the casts is itself rounded to bfloat16 on its way back.
  auto out = s.run({{x, tensor::from_vector<float>({1.0f, 1.00390625f, -3.0f})}}, {grads[0]})[0];
  auto v = out.to_vector<float>();
  CHECK(v[0] == 2.0f);
  CHECK(v[1] == 2.0f);  // 1 + 2^-8 is a tie: it rounds to 1 in bfloat16, in both terms
  CHECK(v[2] == -6.0f);
}

TEST_CASE("matmul's gradients flow through casts to bfloat16 and back") {
  // y = cast(cast(x) x cast(w)) as mixed precision builds it; d sum(y) / dx = 1 x w^T and
  // d sum(y) / dw = x^T x 1, each from bfloat16 operands, so within bfloat16 rounding.
  graph g;
  auto x = placeholder(g, dtype::float32, {4, 5}, "x");
  auto w = placeholder(g, dtype::float32, {5, 3}, "w");
  auto y = cast(matmul(cast(x, dtype::bfloat16), cast(w, dtype::bfloat16)), dtype::float32);
  auto grads = gradients({reduce_sum(y)}, {x, w});
  std::vector<float> xv(20), wv(15);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1f * float(i) - 0.7f;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.3f - 0.05f * float(i);
  session s(g);
  auto out = s.run(
      {{x, tensor::from_vector<float>(xv, {4, 5})}, {w, tensor::from_vector<float>(wv, {5, 3})}},
      {grads[0], grads[1]});
  REQUIRE(out[0].type() == dtype::float32);
  REQUIRE(out[1].type() == dtype::float32);
  auto round = [](float v) { return to_float(to_bfloat16(v)); };
  auto near = [](float got, float want) {
    return std::abs(got - want) <= std::ldexp(std::abs(want), -8) + 1e-6f;
  };
  for (int i = 0; i < 4; ++i)
    for (int p = 0; p < 5; ++p) {
      float want = 0;
      for (int j = 0; j < 3; ++j) want += round(wv[size_t(p * 3 + j)]);
      CHECK(near(out[0].data<float>()[i * 5 + p], want));
    }
  for (int p = 0; p < 5; ++p)
    for (int j = 0; j < 3; ++j) {
      float want = 0;
      for (int i = 0; i < 4; ++i) want += round(xv[size_t(i * 5 + p)]);
      CHECK(near(out[1].data<float>()[p * 3 + j], want));
    }
}

tensor bf16_values(std::vector<float> v, shape dims) {
  std::vector<bfloat16> b;
  for (float f : v) b.push_back(to_bfloat16(f));
  return tensor::from_vector<bfloat16>(b, std::move(dims));
}

// The gradients of float32 inputs through a model computed in `compute`:
// the inputs cast to it, its outputs cast back to float32.
using model_fn = std::function<output(graph&, const std::vector<output>& in, dtype compute)>;

std::vector<tensor> gradients_in(dtype compute, const model_fn& model,
                                 const std::vector<tensor>& values) {
  graph g;
  std::vector<output> xs;
  feed_list feeds;
  for (size_t i = 0; i < values.size(); ++i) {
    std::string name = "x";
    name += std::to_string(i);
    xs.push_back(placeholder(g, dtype::float32, values[i].dims(), name));
    feeds.push_back({xs.back(), values[i]});
  }
  auto grads = gradients({model(g, xs, compute)}, xs);
  session s(g);
  auto first = s.run(feeds, grads);
  auto again = s.run(feeds, grads);  // a second run gives the same
  for (size_t i = 0; i < first.size(); ++i) CHECK(again[i].equals(first[i]));
  return first;
}

// Float32 values already rounded to bfloat16, so both models see the same operands.
tensor rounded_values(shape dims, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(dims.num_elements()));
  for (auto& x : v) x = to_float(to_bfloat16(dist(rng)));
  return tensor::from_vector<float>(v, dims);
}

// Each bfloat16 gradient within a few bfloat16 roundings (2^-6) of the
// tensor's largest float32 gradient.
void check_near_float32(const model_fn& model, const std::vector<tensor>& values) {
  auto got = gradients_in(dtype::bfloat16, model, values);
  auto want = gradients_in(dtype::float32, model, values);
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i].dims() == want[i].dims());
    auto g = got[i].to_vector<float>(), w = want[i].to_vector<float>();
    float scale = 0;
    for (float x : w) scale = std::max(scale, std::abs(x));
    for (size_t k = 0; k < g.size(); ++k)
      CHECK_MESSAGE(std::abs(g[k] - w[k]) <= std::ldexp(scale, -6),
                    "element " << k << ": " << g[k] << " vs " << w[k]);
  }
}

// loss = sum(y * r): r (fixed, not all ones) makes each gradient element differ.
output weighted_sum(graph& g, output y, dtype compute) {
  auto y32 = compute == dtype::float32 ? y : cast(y, dtype::float32);
  std::vector<float> r(static_cast<size_t>(y32.dims().num_elements()));
  for (size_t i = 0; i < r.size(); ++i) r[i] = 0.25f * float(i % 7) - 0.5f;
  return reduce_sum(mul(y32, constant(g, tensor::from_vector<float>(r, y32.dims()))));
}

output in_type(output x, dtype compute) { return compute == dtype::float32 ? x : cast(x, compute); }

TEST_CASE("bfloat16 gradients on matmul's and conv2d's paths match float32's within rounding") {
  std::mt19937 rng(11);
  SUBCASE("matmul with broadcast batch dims: (1,3,4) x (2,4,5)") {
    check_near_float32(
        [](graph& g, const std::vector<output>& in, dtype t) {
          return weighted_sum(g, matmul(in_type(in[0], t), in_type(in[1], t)), t);
        },
        {rounded_values({1, 3, 4}, rng), rounded_values({2, 4, 5}, rng)});
  }
  SUBCASE("matmul with transposes and broadcast batch dims: (2,1,4,3)^T x (3,5,4)^T") {
    check_near_float32(
        [](graph& g, const std::vector<output>& in, dtype t) {
          return weighted_sum(g, matmul(in_type(in[0], t), in_type(in[1], t), true, true), t);
        },
        {rounded_values({2, 1, 4, 3}, rng), rounded_values({3, 5, 4}, rng)});
  }
  SUBCASE("one bfloat16 weight read by two matmuls: its gradients summed") {
    check_near_float32(
        [](graph& g, const std::vector<output>& in, dtype t) {
          auto w = in_type(in[2], t);
          auto y = add(matmul(in_type(in[0], t), w), matmul(in_type(in[1], t), w));
          return weighted_sum(g, y, t);
        },
        {rounded_values({6, 8}, rng), rounded_values({6, 8}, rng), rounded_values({8, 3}, rng)});
  }
  SUBCASE("one bfloat16 filter read by two conv2d") {
    check_near_float32(
        [](graph& g, const std::vector<output>& in, dtype t) {
          auto f = in_type(in[2], t);
          auto a = conv2d(in_type(in[0], t), f, {1, 1}, "SAME");
          auto b = conv2d(in_type(in[1], t), f, {2, 2}, "VALID");
          return add(weighted_sum(g, a, t), weighted_sum(g, b, t));
        },
        {rounded_values({2, 7, 7, 3}, rng), rounded_values({1, 9, 9, 3}, rng),
         rounded_values({3, 3, 3, 4}, rng)});
  }
}

TEST_CASE("a bfloat16 variable saves to a checkpoint and restores exactly") {
  temp_dir dir;
  auto value = bf16_values({0.1f, -2.5f, 1e-40f, 3e38f, -0.0f, 7.0f}, {2, 3});
  auto build = [&](graph& g, tensor init) {
    auto v = make_variable(constant(g, init), "w");
    return std::pair{v, global_variables_initializer(g)};
  };
  graph g1;
  auto [v1, init1] = build(g1, value);
  session s1(g1);
  s1.run({init1});
  save_checkpoint(s1, dir.file("ckpt"), 7);

  graph g2;
  auto [v2, init2] = build(g2, tensor::zeros(dtype::bfloat16, {2, 3}));
  session s2(g2);
  s2.run({init2});
  CHECK_FALSE(s2.eval(v2).equals(value));
  CHECK(restore_checkpoint(s2, dir.file("ckpt")) == 7);
  auto back = s2.eval(v2);
  CHECK(back.type() == dtype::bfloat16);
  CHECK(back.equals(value));
}

TEST_CASE("a graph file keeps bfloat16 placeholders and constants") {
  temp_dir dir;
  graph g;
  auto p = placeholder(g, dtype::bfloat16, {3}, "p");
  auto c = constant(g, bf16_values({1.0f, 0.1f, -4.0f}, {3}), "c");
  mul(cast(p, dtype::float32), cast(c, dtype::float32), "out");
  save_graph(g, dir.file("g.afg"));
  auto loaded = load_graph(dir.file("g.afg"));
  CHECK(loaded->output_by_name("p").spec().type == dtype::bfloat16);
  CHECK(std::get<tensor>(loaded->find("c")->attrs.at("value"))
            .equals(bf16_values({1.0f, 0.1f, -4.0f}, {3})));
  session s(*loaded);
  auto out = s.run({{loaded->output_by_name("p"), bf16_values({2.0f, 3.0f, 0.5f}, {3})}},
                   {loaded->output_by_name("out")})[0];
  CHECK(out.to_vector<float>() ==
        std::vector<float>{2.0f, 3.0f * to_float(to_bfloat16(0.1f)), -2.0f});
}

}  // namespace
