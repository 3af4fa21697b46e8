// Cases for random_uniform, random_normal and truncated_normal: statistics on 100k samples,
// bounds, and reproducibility (same seeds and invocation, same numbers; next invocation, new
// numbers; any thread split, same numbers).
#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <limits>

#include "ops/op_cases.hpp"
#include "ops/random.hpp"

namespace actorflow::testing {
namespace {

struct sample_stats {
  double min = 0, max = 0, mean = 0, stddev = 0;
  bool finite = true;
};

sample_stats stats_of(const tensor& t) {
  sample_stats s;
  visit_floating(t.type(), "test", [&](auto tag) {
    using T = decltype(tag);
    auto v = t.to_vector<T>();
    s.min = s.max = double(v.at(0));
    double sum = 0, sum2 = 0;
    for (T x : v) {
      s.finite = s.finite && std::isfinite(x);
      s.min = std::min(s.min, double(x));
      s.max = std::max(s.max, double(x));
      sum += double(x);
    }
    s.mean = sum / double(v.size());
    for (T x : v) sum2 += (double(x) - s.mean) * (double(x) - s.mean);
    s.stddev = std::sqrt(sum2 / double(v.size()));
  });
  return s;
}

const std::vector<int64_t> big = {250, 400};  // 100k samples

attr_map uniform_attrs(dtype type, double lo, double hi, int64_t seed = 1, int64_t seed2 = 2) {
  return {{"shape", big}, {"dtype", type}, {"minval", lo},
          {"maxval", hi}, {"seed", seed},  {"seed2", seed2}};
}
attr_map normal_attrs(dtype type, double mean, double stddev, int64_t seed = 3) {
  return {{"shape", big}, {"dtype", type}, {"mean", mean}, {"stddev", stddev}, {"seed", seed}};
}

// Uniform on [lo, hi): mean (lo + hi) / 2, stddev (hi - lo) / sqrt(12). The standard error of
// the mean on 100k samples is stddev / 316, so the tolerances are over 10 standard errors.
std::function<void(const std::vector<tensor>&)> check_uniform(dtype type, double lo, double hi) {
  return [=](const std::vector<tensor>& outs) {
    REQUIRE(outs.size() == 1);
    CHECK(outs[0].type() == type);
    CHECK(outs[0].dims() == shape(big));
    auto s = stats_of(outs[0]);
    const double width = hi - lo;
    CHECK(s.min >= lo);
    CHECK(s.max < hi);
    CHECK(s.min < lo + 0.001 * width);  // the range is covered
    CHECK(s.max > hi - 0.001 * width);
    CHECK(std::abs(s.mean - (lo + hi) / 2) < 0.01 * width);
    CHECK(std::abs(s.stddev - width / std::sqrt(12.0)) < 0.01 * width);
  };
}

std::function<void(const std::vector<tensor>&)> check_normal(dtype type, double mean,
                                                             double stddev) {
  return [=](const std::vector<tensor>& outs) {
    REQUIRE(outs.size() == 1);
    CHECK(outs[0].type() == type);
    auto s = stats_of(outs[0]);
    CHECK(s.finite);
    CHECK(std::abs(s.mean - mean) < 0.02 * stddev);
    CHECK(std::abs(s.stddev - stddev) < 0.02 * stddev);
    // 100k normal samples reach beyond 3 stddev on both sides (P(miss) ~ 1e-59).
    CHECK(s.min < mean - 3 * stddev);
    CHECK(s.max > mean + 3 * stddev);
  };
}

// N(0, 1) cut at +-2 has stddev sqrt(1 - 4 phi(2) / (Phi(2) - Phi(-2))) = 0.87962.
std::function<void(const std::vector<tensor>&)> check_truncated(dtype type, double mean,
                                                                double stddev) {
  return [=](const std::vector<tensor>& outs) {
    REQUIRE(outs.size() == 1);
    CHECK(outs[0].type() == type);
    auto s = stats_of(outs[0]);
    CHECK(s.min >= mean - 2 * stddev);
    CHECK(s.max <= mean + 2 * stddev);
    CHECK(s.min < mean - 1.99 * stddev);  // the tails up to the bound are there
    CHECK(s.max > mean + 1.99 * stddev);
    CHECK(std::abs(s.mean - mean) < 0.02 * stddev);
    CHECK(std::abs(s.stddev - 0.87962 * stddev) < 0.02 * stddev);
  };
}

// A constant tensor: every element equal to v.
std::function<void(const std::vector<tensor>&)> check_all_equal(double v) {
  return [=](const std::vector<tensor>& outs) {
    REQUIRE(outs.size() == 1);
    auto s = stats_of(outs[0]);
    CHECK(s.min == v);
    CHECK(s.max == v);
  };
}

const op_case_registrar random_cases({
    {.op = "random_uniform",
     .label = "float32 [0, 1)",
     .attrs = uniform_attrs(dtype::float32, 0, 1),
     .check = check_uniform(dtype::float32, 0, 1)},
    {.op = "random_uniform",
     .label = "float64 [-2, 3)",
     .attrs = uniform_attrs(dtype::float64, -2, 3),
     .check = check_uniform(dtype::float64, -2, 3)},
    {.op = "random_uniform",
     .label = "defaults: float32 [0, 1), seeds 0",
     .attrs = {{"shape", big}},
     .check = check_uniform(dtype::float32, 0, 1)},
    {.op = "random_uniform",
     .label = "int attrs for minval and maxval",
     .attrs = {{"shape", big}, {"minval", int64_t{-1}}, {"maxval", int64_t{1}}},
     .check = check_uniform(dtype::float32, -1, 1)},
    {.op = "random_uniform",
     .label = "minval == maxval",
     .attrs = {{"shape", std::vector<int64_t>{10}}, {"minval", 2.5}, {"maxval", 2.5}},
     .check = check_all_equal(2.5)},
    {.op = "random_uniform",
     .label = "0-d scalar",
     .attrs = {{"shape", std::vector<int64_t>{}}, {"seed", int64_t{5}}},
     .check =
         [](const std::vector<tensor>& outs) {
           REQUIRE(outs[0].dims() == shape{});
           float v = outs[0].item<float>();
           CHECK(v >= 0);
           CHECK(v < 1);
         }},
    {.op = "random_uniform",
     .label = "zero-size",
     .attrs = {{"shape", std::vector<int64_t>{0, 5}}},
     .expected = {tensor(dtype::float32, {0, 5})}},
    {.op = "random_uniform",
     .label = "maxval < minval",
     .attrs = {{"shape", big}, {"minval", 1.0}, {"maxval", 0.0}},
     .expect_error = "needs finite minval <= maxval"},
    {.op = "random_uniform",
     .label = "int32 dtype",
     .attrs = {{"shape", big}, {"dtype", dtype::int32}},
     .expect_error = "expects dtype float32 or float64, got int32"},
    {.op = "random_uniform",
     .label = "unknown dim in shape",
     .attrs = {{"shape", std::vector<int64_t>{-1, 3}}},
     .expect_error = "shape (?,3) must be fully defined"},
    {.op = "random_uniform", .label = "missing shape", .expect_error = "missing attribute 'shape'"},
    {.op = "random_normal",
     .label = "float32 N(0, 1)",
     .attrs = normal_attrs(dtype::float32, 0, 1),
     .check = check_normal(dtype::float32, 0, 1)},
    {.op = "random_normal",
     .label = "float64 N(5, 0.5)",
     .attrs = normal_attrs(dtype::float64, 5, 0.5),
     .check = check_normal(dtype::float64, 5, 0.5)},
    {.op = "random_normal",
     .label = "odd element count (blocks cut short)",
     .attrs = {{"shape", std::vector<int64_t>{3, 33333}}, {"mean", -1.0}, {"stddev", 2.0}},
     .check = check_normal(dtype::float32, -1, 2)},
    {.op = "random_normal",
     .label = "stddev 0",
     .attrs = {{"shape", std::vector<int64_t>{7}}, {"mean", 3.0}, {"stddev", 0.0}},
     .check = check_all_equal(3)},
    {.op = "random_normal",
     .label = "zero-size",
     .attrs = {{"shape", std::vector<int64_t>{4, 0}}, {"dtype", dtype::float64}},
     .expected = {tensor(dtype::float64, {4, 0})}},
    {.op = "random_normal",
     .label = "negative stddev",
     .attrs = {{"shape", big}, {"stddev", -1.0}},
     .expect_error = "stddev >= 0"},
    {.op = "random_normal",
     .label = "bool dtype",
     .attrs = {{"shape", big}, {"dtype", dtype::boolean}},
     .expect_error = "expects dtype float32 or float64, got bool"},
    {.op = "truncated_normal",
     .label = "float32 N(0, 1) cut at 2",
     .attrs = normal_attrs(dtype::float32, 0, 1),
     .check = check_truncated(dtype::float32, 0, 1)},
    {.op = "truncated_normal",
     .label = "float64 N(-1, 3) cut at 2 stddev",
     .attrs = normal_attrs(dtype::float64, -1, 3),
     .check = check_truncated(dtype::float64, -1, 3)},
    {.op = "truncated_normal",
     .label = "zero-size",
     .attrs = {{"shape", std::vector<int64_t>{0}}},
     .expected = {tensor(dtype::float32, {0})}},
    {.op = "truncated_normal",
     .label = "infinite mean",
     .attrs = {{"shape", big}, {"mean", std::numeric_limits<double>::infinity()}},
     .expect_error = "needs a finite mean"},
});

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  using w4 = std::array<uint32_t, 4>;
  CHECK(philox4x32({0, 0, 0, 0}, {0, 0}) == w4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        w4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        w4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("random ops depend only on seeds, invocation and element index") {
  for (const char* op : {"random_uniform", "random_normal", "truncated_normal"}) {
    for (dtype type : {dtype::float32, dtype::float64}) {
      INFO(op << " " << dtype_name(type));
      attr_map attrs = {{"shape", std::vector<int64_t>{300, 301}},
                        {"dtype", type},
                        {"seed", int64_t{42}},
                        {"seed2", int64_t{7}}};
      auto first = run_kernel(op, {}, attrs, 5)[0];
      CHECK(run_kernel(op, {}, attrs, 5)[0].equals(first));  // same run, same numbers
      auto next = run_kernel(op, {}, attrs, 6)[0];
      CHECK_FALSE(next.equals(first));  // the next run draws new numbers
      auto other_seed = attrs;
      other_seed["seed"] = int64_t{43};
      CHECK_FALSE(run_kernel(op, {}, other_seed, 5)[0].equals(first));
      auto other_seed2 = attrs;
      other_seed2["seed2"] = int64_t{8};
      CHECK_FALSE(run_kernel(op, {}, other_seed2, 5)[0].equals(first));

      // The same numbers whatever the thread split.
      tensor serial, parallel;
      tbb::task_arena(1).execute([&] { serial = run_kernel(op, {}, attrs, 5)[0]; });
      tbb::task_arena(2).execute([&] { parallel = run_kernel(op, {}, attrs, 5)[0]; });
      CHECK(serial.equals(first));
      CHECK(parallel.equals(first));

      // A smaller tensor is a prefix of a larger one: element i depends on i alone.
      auto prefix = attrs;
      prefix["shape"] = std::vector<int64_t>{1001};
      auto small = run_kernel(op, {}, prefix, 5)[0];
      visit_floating(type, "test", [&](auto tag) {
        using T = decltype(tag);
        auto a = small.to_vector<T>();
        auto b = first.to_vector<T>();
        CHECK(std::equal(a.begin(), a.end(), b.begin()));
      });
    }
  }
}

TEST_CASE("random builders record their attributes and are stateful") {
  graph g;
  auto u = random_uniform(g, {2, 3}, dtype::float64, -1, 1, 9, 10, "u");
  CHECK(u.dims() == shape{2, 3});
  CHECK(u.type() == dtype::float64);
  CHECK(u.node().def->stateful);
  CHECK(get_attr<double>(u.node().attrs, "minval", "test") == -1);
  CHECK(get_attr<int64_t>(u.node().attrs, "seed2", "test") == 10);
  auto n = random_normal(g, {5});
  CHECK(n.node().name == "random_normal");
  CHECK(n.node().def->stateful);
  auto t = truncated_normal(g, {4, 4}, dtype::float32, 0, 0.1, 1);
  CHECK(t.node().def->stateful);
  CHECK(get_attr<double>(t.node().attrs, "stddev", "test") == 0.1);
  auto out = run_kernel("truncated_normal", {}, t.node().attrs)[0];
  auto s = stats_of(out);
  CHECK(s.max <= 0.2f);
  CHECK(s.min >= -0.2f);
  CHECK_THROWS_AS(random_uniform(g, {-1}), error);
  CHECK_THROWS_AS(random_normal(g, {2}, dtype::int64), error);
}

}  // namespace
}  // namespace actorflow::testing
