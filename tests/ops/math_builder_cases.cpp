// Math ops beyond the case table: graph-time shape inference on partial shapes,
// the builder operators, and large inputs (parallel and strided broadcast paths)
// checked against a naive reference.
#include <cmath>
#include <functional>

#include "core/graph.hpp"
#include "ops/math.hpp"
#include "ops/op_cases.hpp"
#include "ops/state.hpp"

// The graph appends the node's name and inputs to the op's message.
#define CHECK_THROWS_CONTAINS(expr, text, type) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), type)

namespace actorflow::testing {
namespace {

// Element of t at output index idx under NumPy broadcasting (t's dims align right).
template <class T>
T broadcast_at(const tensor& t, const std::vector<int64_t>& idx) {
  int64_t off = 0, stride = 1;
  for (int i = t.rank() - 1; i >= 0; --i) {
    int64_t d = t.dims()[i];
    int64_t ix = d == 1 ? 0 : idx[idx.size() - static_cast<size_t>(t.rank() - i)];
    off += ix * stride;
    stride *= d;
  }
  return t.data<T>()[off];
}

// The reference: decomposes every output index by division (slow and obvious).
template <class T, class R>
tensor naive_broadcast(const std::vector<tensor>& in, const shape& out_shape,
                       const std::function<R(const std::vector<T>&)>& f) {
  tensor out(dtype_of<R>(), out_shape);
  std::vector<int64_t> idx(static_cast<size_t>(out_shape.rank()));
  std::vector<T> args(in.size());
  for (int64_t flat = 0; flat < out.num_elements(); ++flat) {
    int64_t rem = flat;
    for (int d = out_shape.rank() - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = rem % out_shape[d];
      rem /= out_shape[d];
    }
    for (size_t k = 0; k < in.size(); ++k) args[k] = broadcast_at<T>(in[k], idx);
    out.mutable_data<R>()[flat] = f(args);
  }
  return out;
}

template <class T>
tensor pattern(shape dims, int mod, double scale, double offset) {
  tensor t(dtype_of<T>(), std::move(dims));
  T* p = t.mutable_data<T>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if constexpr (std::is_same_v<T, bool>)
      p[i] = (i % mod) % 2 == 0;
    else
      p[i] = static_cast<T>(static_cast<double>(i % mod) * scale + offset);
  }
  return t;
}

struct shape_pair {
  shape a, b, out;
};

const std::vector<shape_pair> large_pairs = {
    {{300, 257, 3}, {257, 1}, {300, 257, 3}},          // many short runs, odometer across tasks
    {{1000, 100}, {100}, {1000, 100}},                 // row vector broadcast
    {{100000}, {}, {100000}},                          // scalar fast path, split flat
    {{50000, 1}, {1, 3}, {50000, 3}},                  // outer product pattern
    {{2, 1, 70000}, {3, 1}, {2, 3, 70000}},            // runs longer than the grain
    {{200000}, {200000}, {200000}},                    // same shape, split flat
    {{7, 1, 1, 9000}, {1, 5, 1, 1}, {7, 5, 1, 9000}},  // size-1 output dim dropped
    {{0, 5000}, {5000}, {0, 5000}},                    // zero-size
};

TEST_CASE("math: partial shapes broadcast at graph build time") {
  graph g;
  auto p = [&](dtype t, shape s) { return placeholder(g, t, std::move(s)); };
  const auto f32 = dtype::float32;
  auto a = p(f32, {-1, 3});
  CHECK(add(a, p(f32, {1, 3})).dims() == shape{-1, 3});
  CHECK(mul(p(f32, {2, 1}), p(f32, {-1})).dims() == shape{2, -1});
  auto unknown = p(f32, {-1});
  CHECK((p(f32, {1}) + unknown).dims() == shape{-1});
  CHECK((unknown + p(f32, {5})).dims() == shape{5});
  CHECK((p(f32, {5}) - unknown).dims() == shape{5});
  CHECK((unknown * unknown).dims() == shape{-1});
  CHECK(add(p(f32, {-1, 1, 4}), p(f32, {3, 1})).dims() == shape{-1, 3, 4});
  CHECK(add(p(f32, {}), p(f32, {2, -1})).dims() == shape{2, -1});
  CHECK_THROWS_CONTAINS(add(p(f32, {2, 3}), p(f32, {2, 5})),
                        "[add] shapes (2,3) and (2,5) cannot broadcast", error);
  CHECK_THROWS_CONTAINS(sub(p(f32, {-1, 3}), p(f32, {4})),
                        "[sub] shapes (?,3) and (4) cannot broadcast", error);
  CHECK_THROWS_CONTAINS(add(a, p(dtype::int32, {3})), "[add] dtypes differ: float32 and int32",
                        error);

  auto cmp = less(a, p(f32, {3}));
  CHECK(cmp.type() == dtype::boolean);
  CHECK(cmp.dims() == shape{-1, 3});
  auto cond = p(dtype::boolean, {-1, 1});
  auto sel = select(cond, p(dtype::int64, {5}), p(dtype::int64, {}));
  CHECK(sel.type() == dtype::int64);
  CHECK(sel.dims() == shape{-1, 5});
  CHECK_THROWS_CONTAINS(select(p(dtype::boolean, {-1, 2}), a, a),
                        "[select] shapes (?,2), (?,3) and (?,3) cannot broadcast", error);
  CHECK_THROWS_CONTAINS(logical_and(a, a), "[logical_and] expects bool, got float32", error);

  auto c = cast(a, dtype::int64);
  CHECK(c.type() == dtype::int64);
  CHECK(c.dims() == shape{-1, 3});
  CHECK(exp(a).dims() == shape{-1, 3});
  CHECK_THROWS_CONTAINS(exp(p(dtype::int32, {2})), "[exp] expects float32 or float64, got int32",
                        error);

  // The helpers merge partial shapes and do not broadcast.
  CHECK(relu_grad(a, p(f32, {2, -1})).dims() == shape{2, 3});
  CHECK_THROWS_CONTAINS(sigmoid_grad(a, p(f32, {2, 4})),
                        "[sigmoid_grad] shapes (?,3) and (2,4) differ", error);
}

TEST_CASE("math: operators and scalar constants take the operand's dtype") {
  graph g;
  auto x = placeholder(g, dtype::int32, {2}, "x");
  auto const_value = [&](const output& o, int input) {
    auto& src = g.at(o.node().inputs[static_cast<size_t>(input)].node);
    REQUIRE(src.op == "constant");
    return std::get<tensor>(src.attrs.at("value"));
  };
  auto y = x + 1.0;
  CHECK(y.node().op == "add");
  CHECK(y.type() == dtype::int32);
  CHECK(const_value(y, 1).type() == dtype::int32);
  CHECK(const_value(y, 1).item<int32_t>() == 1);
  auto z = 2.0 * x;
  CHECK(z.node().op == "mul");
  CHECK(const_value(z, 0).item<int32_t>() == 2);
  CHECK(z.node().inputs[1] == x.ref());
  CHECK((x - 3.0).node().op == "sub");
  CHECK(const_value(1.0 / x, 0).item<int32_t>() == 1);
  CHECK((1.0 / x).node().op == "div");
  CHECK((5.0 - x).node().op == "sub");
  CHECK((x / 2.0).node().op == "div");
  CHECK((x * 4.0).node().op == "mul");
  CHECK((3.0 + x).node().op == "add");
  CHECK((-x).node().op == "neg");
  CHECK((x + x).node().op == "add");
  CHECK((x - x).node().op == "sub");
  CHECK((x * x).node().op == "mul");
  CHECK((x / x).node().op == "div");

  auto d = placeholder(g, dtype::float64, {3});
  auto h = d * 0.25;
  CHECK(const_value(h, 1).type() == dtype::float64);
  CHECK(const_value(h, 1).item<double>() == 0.25);
  auto u = placeholder(g, dtype::uint8, {});
  CHECK(const_value(u + 2.0, 1).item<uint8_t>() == 2);

  auto flag = placeholder(g, dtype::boolean, {1});
  CHECK(std::get<tensor>(scalar_like(flag, 2.0).node().attrs.at("value")).item<bool>() == true);
  CHECK_THROWS_CONTAINS(flag + 1.0, "[add] expects a numeric dtype, got bool", error);

  // Builders name nodes as asked.
  CHECK(add(x, x, "sum").name() == "sum");
  CHECK(cast(x, dtype::float32, "as_float").node().attrs.count("dtype") == 1);
}

TEST_CASE("math: large broadcasting add/sub/div match a naive reference") {
  for (auto& pr : large_pairs) {
    INFO("shapes " << pr.a.to_string() << " and " << pr.b.to_string());
    auto a = pattern<float>(pr.a, 97, 0.5, -3.0);
    auto b = pattern<float>(pr.b, 13, 1.0, -6.0);
    auto out = run_kernel("add", {a, b});
    REQUIRE(out.size() == 1);
    auto want = naive_broadcast<float, float>(
        {a, b}, pr.out, [](const std::vector<float>& v) { return v[0] + v[1]; });
    CHECK(compare_tensors(out[0], want, 0) == "");
    // Swapped operands exercise the other broadcast side.
    auto out_ba = run_kernel("sub", {b, a});
    auto want_ba = naive_broadcast<float, float>(
        {b, a}, pr.out, [](const std::vector<float>& v) { return v[0] - v[1]; });
    CHECK(compare_tensors(out_ba[0], want_ba, 0) == "");

    auto ia = pattern<int32_t>(pr.a, 101, 7, -350);
    auto ib = pattern<int32_t>(pr.b, 11, 1, 1);  // 1..11, never zero
    auto q = run_kernel("div", {ia, ib});
    auto want_q = naive_broadcast<int32_t, int32_t>(
        {ia, ib}, pr.out, [](const std::vector<int32_t>& v) { return v[0] / v[1]; });
    CHECK(compare_tensors(q[0], want_q, 0) == "");
  }
}

TEST_CASE("math: large comparisons, pow and select match a naive reference") {
  for (auto& pr : large_pairs) {
    INFO("shapes " << pr.a.to_string() << " and " << pr.b.to_string());
    auto a = pattern<double>(pr.a, 29, 0.25, 0.5);
    auto b = pattern<double>(pr.b, 7, 0.5, -1.0);
    auto ge = run_kernel("greater_equal", {a, b});
    auto want_ge = naive_broadcast<double, bool>(
        {a, b}, pr.out, [](const std::vector<double>& v) { return v[0] >= v[1]; });
    CHECK(compare_tensors(ge[0], want_ge, 0) == "");

    auto pw = run_kernel("pow", {a, b});
    auto want_pw = naive_broadcast<double, double>(
        {a, b}, pr.out, [](const std::vector<double>& v) { return std::pow(v[0], v[1]); });
    CHECK(compare_tensors(pw[0], want_pw, 1e-12) == "");

    // cond broadcasts against both values: (a's shape) x (b's shape) x (a 1-D row).
    auto cond = pattern<bool>(pr.b, 5, 1, 0);
    auto row = pattern<double>({pr.out.rank() ? pr.out.dim(-1) : 1}, 3, 100, 0);
    auto sel = run_kernel("select", {cond, a, row});
    // Values as double so one reference type serves; the condition is 0/1.
    auto cond_d = run_kernel("cast", {cond}, {{"dtype", dtype::float64}})[0];
    auto want_sel = naive_broadcast<double, double>(
        {cond_d, a, row}, pr.out,
        [](const std::vector<double>& v) { return v[0] != 0 ? v[1] : v[2]; });
    CHECK(compare_tensors(sel[0], want_sel, 0) == "");
  }
}

TEST_CASE("math: large unary kernels agree with the C library") {
  const int64_t n = 300001;  // odd, above the grain, so segments have ragged ends
  tensor x(dtype::float32, {n});
  for (int64_t i = 0; i < n; ++i)
    x.mutable_data<float>()[i] = static_cast<float>(i - n / 2) * 2e-4f;
  auto check = [&](const char* op, double (*ref)(double), double tol) {
    INFO("op " << op);
    auto y = run_kernel(op, {x})[0];
    tensor want(dtype::float32, {n});
    for (int64_t i = 0; i < n; ++i)
      want.mutable_data<float>()[i] = static_cast<float>(ref(x.data<float>()[i]));
    CHECK(compare_tensors(y, want, tol) == "");
  };
  check(
      "exp", [](double v) { return std::exp(v); }, 2e-6);
  check(
      "tanh", [](double v) { return std::tanh(v); }, 2e-6);
  check(
      "sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }, 2e-6);
  check(
      "neg", [](double v) { return -v; }, 0);
  check(
      "relu", [](double v) { return v < 0 ? 0.0 : v; }, 0);

  auto as_int = run_kernel("cast", {x}, {{"dtype", dtype::int32}})[0];
  CHECK(as_int.data<int32_t>()[0] == static_cast<int32_t>(x.data<float>()[0]));
  CHECK(as_int.data<int32_t>()[n - 1] == static_cast<int32_t>(x.data<float>()[n - 1]));
}

TEST_CASE("math: cast between every pair of dtypes") {
  // [0, 1] in any dtype (bfloat16's 1 is not its bits 1).
  auto zero_one = [](dtype type) {
    tensor t(type, {2});
    visit_storage_type(type, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, bfloat16>) {
        t.mutable_data<T>()[0] = to_bfloat16(0.0f);
        t.mutable_data<T>()[1] = to_bfloat16(1.0f);
      } else {
        t.mutable_data<T>()[0] = T(0);
        t.mutable_data<T>()[1] = T(1);
      }
    });
    return t;
  };
  for (int from = 0; from <= static_cast<int>(last_dtype); ++from) {
    for (int to = 0; to <= static_cast<int>(last_dtype); ++to) {
      auto f = static_cast<dtype>(from);
      auto t = static_cast<dtype>(to);
      INFO(dtype_name(f) << " -> " << dtype_name(t));
      auto out = run_kernel("cast", {zero_one(f)}, {{"dtype", t}})[0];
      CHECK(compare_tensors(out, zero_one(t), 0) == "");
    }
  }
}

}  // namespace
}  // namespace actorflow::testing
