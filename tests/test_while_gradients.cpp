// Gradients through while loops (a backward loop over saved forward values)
// against float64 central finite differences: loops of 0, 1 and 7
// iterations, a count that depends on the data, nested loops, a cond in a
// loop; and no saved value left behind once a step ends.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "actors/run/node_plan.hpp"
#include "core/gradients.hpp"
#include "numeric_gradient.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/functional.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/tensor_array.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::check_close;
using actorflow::testing::numeric_gradient;
using actorflow::testing::values_of;

namespace {

bool no_loop_state_left() {
  for (int i = 0; i < 200 && loop_states_held() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (loop_states_held() != 0) MESSAGE("loop states held: " << loop_states_held());
  return loop_states_held() == 0;
}

tensor f64s(std::vector<double> v, shape dims) { return tensor::from_vector<double>(v, dims); }

// Checks d loss / d each of `xs` (fed with `values`) against finite
// differences. The step runs twice first, with the same result: a resource or
// a bound constant that the first run changes shows in the second.
void check_gradients(graph& g, const output& loss, const std::vector<output>& xs,
                     const std::vector<tensor>& values, feed_list rest) {
  auto grads = gradients({loss}, xs);
  session s(g);
  feed_list feeds = rest;
  for (size_t i = 0; i < xs.size(); ++i) feeds.push_back({xs[i], values[i]});
  auto first = s.run(feeds, grads);
  auto got = s.run(feeds, grads);
  for (size_t i = 0; i < xs.size(); ++i) CHECK(got[i].equals(first[i]));
  for (size_t i = 0; i < xs.size(); ++i) {
    feed_list others = rest;
    for (size_t j = 0; j < xs.size(); ++j)
      if (j != i) others.push_back({xs[j], values[j]});
    INFO("x " << i << " ('" << xs[i].name() << "')");
    check_close(values_of(got[i]),
                numeric_gradient(s, loss, xs[i], values_of(values[i]), others, values[i].dims()),
                1e-5);
  }
}

}  // namespace

TEST_CASE("the gradient of a loop of 0, 1 and 7 iterations") {
  graph g;
  auto n = placeholder(g, dtype::int64, {}, "n");
  auto x0 = placeholder(g, dtype::float64, {1, 3}, "x0");
  auto w = placeholder(g, dtype::float64, {3, 3}, "w");
  auto b = placeholder(g, dtype::float64, {3}, "b");
  auto outs = while_loop([&](const std::vector<output>& v) { return less(v[0], n); },
                         [&](const std::vector<output>& v) {
                           auto x = tanh(matmul(v[1], w) + b) * 0.9 + v[1] * 0.1;
                           return std::vector<output>{v[0] + scalar<int64_t>(g, 1), x};
                         },
                         {scalar<int64_t>(g, 0), x0});
  auto loss = reduce_sum(square(outs[1]) * x0);
  std::vector<tensor> values{f64s({0.3, -0.2, 0.5}, {1, 3}),
                             f64s({0.5, -0.3, 0.2, 0.1, 0.4, -0.6, 0.7, 0.2, -0.1}, {3, 3}),
                             f64s({0.1, -0.2, 0.05}, {3})};
  for (int64_t iterations : {0, 1, 7}) {
    INFO("iterations: " << iterations);
    check_gradients(g, loss, {x0, w, b}, values, {{n, tensor::scalar<int64_t>(iterations)}});
  }
  CHECK(no_loop_state_left());
}

TEST_CASE("the gradient of a loop whose iteration count depends on the data") {
  graph g;
  auto x0 = placeholder(g, dtype::float64, {2}, "x0");
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(reduce_sum(v[0]), scalar<double>(g, 10)); },
      [&](const std::vector<output>& v) { return std::vector<output>{v[0] * v[0] * 0.5 + v[0]}; },
      {x0});
  auto loss = reduce_sum(outs[0] * outs[0]);
  for (auto start : {std::vector<double>{0.5, 0.7}, std::vector<double>{2.0, 3.0},
                     std::vector<double>{11.0, 1.0}})
    check_gradients(g, loss, {x0}, {f64s(start, {2})}, {});
  CHECK(no_loop_state_left());
}

TEST_CASE("the gradient of nested loops") {
  graph g;
  auto x0 = placeholder(g, dtype::float64, {2}, "x0");
  auto w = placeholder(g, dtype::float64, {2}, "w");
  auto one = scalar<int64_t>(g, 1);
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 3)); },
                 [&](const std::vector<output>& v) {
                   auto i = v[0];
                   auto inner = while_loop(
                       [&](const std::vector<output>& u) { return less(u[0], i + one); },
                       [&](const std::vector<output>& u) {
                         return std::vector<output>{u[0] + one, tanh(u[1] * w + v[1] * 0.1)};
                       },
                       {scalar<int64_t>(g, 0), v[1]}, {.name = "inner"});
                   return std::vector<output>{i + one, inner[1] * 1.1};
                 },
                 {scalar<int64_t>(g, 0), x0}, {.name = "outer"});
  auto loss = reduce_sum(outs[1] * scalar<double>(g, 2.0) + square(outs[1]));
  check_gradients(g, loss, {x0, w}, {f64s({0.3, -0.4}, {2}), f64s({0.8, -1.1}, {2})}, {});
  CHECK(no_loop_state_left());
}

TEST_CASE("an invariant's matmul gradients: one product after the backward loop, in nested loops") {
  // w is used by two matmuls of the inner loop (one with transpose_b): its
  // gradient is gathered per iteration and multiplied once after each backward
  // inner loop, not accumulated per iteration.
  graph g;
  auto x0 = placeholder(g, dtype::float64, {2, 3}, "x0");
  auto w = placeholder(g, dtype::float64, {3, 3}, "w");
  auto one = scalar<int64_t>(g, 1);
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 2)); },
                 [&](const std::vector<output>& v) {
                   auto i = v[0];
                   auto inner = while_loop(
                       [&](const std::vector<output>& u) { return less(u[0], i + one); },
                       [&](const std::vector<output>& u) {
                         auto y = tanh(matmul(u[1], w) * 0.5 + matmul(u[1], w, false, true) * 0.3);
                         return std::vector<output>{u[0] + one, y};
                       },
                       {scalar<int64_t>(g, 0), v[1]}, {.name = "inner"});
                   return std::vector<output>{i + one, inner[1] * 1.1};
                 },
                 {scalar<int64_t>(g, 0), x0}, {.name = "outer"});
  auto loss = reduce_sum(square(outs[1]) + outs[1]);
  check_gradients(g, loss, {x0, w},
                  {f64s({0.3, -0.4, 0.2, 0.1, 0.5, -0.3}, {2, 3}),
                   f64s({0.8, -0.6, 0.1, 0.2, 0.4, -0.5, -0.3, 0.7, 0.6}, {3, 3})},
                  {});
  int gathered = 0;
  for (auto& n : g.nodes()) gathered += n.name.find("/grad_lhs") != std::string::npos;
  CHECK(gathered > 0);
  CHECK(no_loop_state_left());
}

TEST_CASE("an invariant's matmul inside a cond inside a loop: summed per iteration, as before") {
  graph g;
  auto x0 = placeholder(g, dtype::float64, {1, 2}, "x0");
  auto w = placeholder(g, dtype::float64, {2, 2}, "w");
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 5)); },
                 [&](const std::vector<output>& v) {
                   auto x = v[1];
                   auto y = cond(
                       greater(reduce_sum(x), scalar<double>(g, 0)),
                       [&] { return tanh(matmul(x, w)); }, [&] { return x * 0.5 + 0.3; });
                   return std::vector<output>{v[0] + scalar<int64_t>(g, 1), y};
                 },
                 {scalar<int64_t>(g, 0), x0});
  auto loss = reduce_sum(square(outs[1]));
  auto wv = f64s({0.9, -0.7, 0.4, -0.8}, {2, 2});
  // Both branches taken over the five iterations, from either start.
  for (auto start : {std::vector<double>{0.3, 0.4}, std::vector<double>{-0.6, 0.1}})
    check_gradients(g, loss, {x0, w}, {f64s(start, {1, 2}), wv}, {});
  // w reaches the matmul through the cond's switch, so it is not gathered for
  // one product (iterations that took the other branch have no operand).
  int gathered = 0;
  for (auto& n : g.nodes()) gathered += n.name.find("/grad_lhs") != std::string::npos;
  CHECK(gathered == 0);
  CHECK(no_loop_state_left());
}

TEST_CASE("the gradient of a cond inside a loop") {
  graph g;
  auto x0 = placeholder(g, dtype::float64, {2}, "x0");
  auto w = placeholder(g, dtype::float64, {2}, "w");
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 6)); },
                 [&](const std::vector<output>& v) {
                   auto x = v[1];
                   auto y = cond(
                       greater(reduce_sum(x), scalar<double>(g, 0)), [&] { return x * w; },
                       [&] { return x - w * 0.5; });
                   return std::vector<output>{v[0] + scalar<int64_t>(g, 1), y};
                 },
                 {scalar<int64_t>(g, 0), x0});
  auto loss = reduce_sum(square(outs[1]));
  check_gradients(g, loss, {x0, w}, {f64s({0.3, 0.4}, {2}), f64s({0.9, -0.7}, {2})}, {});
  CHECK(no_loop_state_left());
}

// Inside a loop, the branch taken changes from one iteration to the next;
// w is read by one branch only, v by the other, c (a constant) by one too.
TEST_CASE("the gradient of a cond inside a loop, each input read by one branch only") {
  graph g;
  auto x0 = placeholder(g, dtype::float64, {2}, "x0");
  auto w = placeholder(g, dtype::float64, {2}, "w");
  auto v = placeholder(g, dtype::float64, {2}, "v");
  auto c = constant(g, f64s({0.5, -1.5}, {2}));
  auto outs =
      while_loop([&](const std::vector<output>& it) { return less(it[0], scalar<int64_t>(g, 5)); },
                 [&](const std::vector<output>& it) {
                   auto x = it[1];
                   auto odd = less(it[2], scalar<double>(g, 0));  // the sign flips every iteration
                   auto y = cond(
                       odd, [&] { return tanh(x * w); }, [&] { return x * 0.5 + v * c; });
                   return std::vector<output>{it[0] + scalar<int64_t>(g, 1), y, -it[2]};
                 },
                 {scalar<int64_t>(g, 0), x0, scalar<double>(g, 1)});
  auto loss = reduce_sum(square(outs[1]));
  check_gradients(g, loss, {x0, w, v},
                  {f64s({0.3, 0.4}, {2}), f64s({0.9, -0.7}, {2}), f64s({0.2, 0.6}, {2})}, {});
  CHECK(no_loop_state_left());
}

TEST_CASE("the gradient of a constant that a loop body reads") {
  graph g;
  auto x0 = placeholder(g, dtype::float64, {2}, "x0");
  auto c = constant(g, f64s({0.5, -1.5}, {2}));
  auto outs =
      while_loop([&](const std::vector<output>& it) { return less(it[0], scalar<int64_t>(g, 3)); },
                 [&](const std::vector<output>& it) {
                   return std::vector<output>{it[0] + scalar<int64_t>(g, 1), it[1] * c};
                 },
                 {scalar<int64_t>(g, 0), x0});
  auto grads = gradients({reduce_sum(outs[1])}, {x0, c});
  REQUIRE(grads[1].valid());
  session s(g);
  for (int run = 0; run < 2; ++run) {
    auto got = s.run({{x0, f64s({2, 3}, {2})}}, grads);
    // x0 c^3: d/dx0 = c^3, d/dc = 3 x0 c^2.
    check_close(values_of(got[0]), {0.125, -3.375});
    check_close(values_of(got[1]), {3 * 2 * 0.25, 3 * 3 * 2.25});
  }
  CHECK(no_loop_state_left());
}

TEST_CASE("steps in flight each get their own saved values") {
  graph g;
  auto n = placeholder(g, dtype::int64, {}, "n");
  auto x0 = placeholder(g, dtype::float64, {}, "x0");
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], n); },
      [&](const std::vector<output>& v) {
        return std::vector<output>{v[0] + scalar<int64_t>(g, 1), v[1] * v[1] * 0.5 + 0.5};
      },
      {scalar<int64_t>(g, 0), x0});
  auto grad = gradients({outs[1]}, {x0})[0];
  session s(g);
  std::vector<std::future<std::vector<tensor>>> runs;
  for (int64_t k = 0; k < 40; ++k)
    runs.push_back(s.run_async(
        {{n, tensor::scalar<int64_t>(k % 9)}, {x0, tensor::scalar<double>(0.1 * double(k % 7))}},
        {grad}));
  for (int64_t k = 0; k < 40; ++k) {
    double x = 0.1 * double(k % 7), d = 1;
    for (int64_t i = 0; i < k % 9; ++i) {
      d *= x;
      x = x * x * 0.5 + 0.5;
    }
    CHECK(runs[size_t(k)].get()[0].item<double>() == doctest::Approx(d).epsilon(1e-12));
  }
  CHECK(no_loop_state_left());
}

TEST_CASE("the gradient of a loop over tensor arrays (read each step, write each step, stack)") {
  graph g;
  auto x = placeholder(g, dtype::float64, {4, 3}, "x");
  auto w = placeholder(g, dtype::float64, {3}, "w");
  auto inputs = unstack_to_tensor_array(x, "inputs");
  auto results = make_tensor_array(g, dtype::float64, 4, shape{3}, false, "results");
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], scalar<int32_t>(g, 4)); },
      [&](const std::vector<output>& v) {
        auto t = v[0];
        auto h = tanh(inputs.read(t) * w + v[1]);
        auto written = results.with(v[2], v[3]).write(t, h);
        return std::vector<output>{t + scalar<int32_t>(g, 1), h, written.data, written.written};
      },
      {scalar<int32_t>(g, 0), zeros_like(w), results.data, results.written});
  auto stacked = results.with(outs[2], outs[3]).stack();
  auto loss = reduce_sum(square(stacked) * scalar<double>(g, 0.5)) + reduce_sum(outs[1]);
  check_gradients(g, loss, {x, w},
                  {f64s({0.1, 0.2, -0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 0.2, 0.1, -0.4}, {4, 3}),
                   f64s({0.5, -0.7, 1.1}, {3})},
                  {});
  CHECK(no_loop_state_left());
}

// A dynamic array made empty grows in the loop; every run starts from the
// same empty array (a write moves its input out, and an empty constant has
// no buffer to tell it from what is left).
TEST_CASE("a dynamic array of initial size 0, filled in a loop, the same in every run") {
  for (int64_t initial : {int64_t{0}, int64_t{1}}) {
    CAPTURE(initial);
    graph g;
    auto x = placeholder(g, dtype::float64, {3}, "x");
    auto n = placeholder(g, dtype::int32, {}, "n");
    auto results = make_tensor_array(g, dtype::float64, initial, shape{3}, true, "dyn0");
    auto outs = while_loop(
        [&](const std::vector<output>& v) { return less(v[0], n); },
        [&](const std::vector<output>& v) {
          auto t = v[0];
          auto h = tanh(v[1] * x);
          auto written = results.with(v[2], v[3]).write(t, h);
          return std::vector<output>{t + scalar<int32_t>(g, 1), h, written.data, written.written};
        },
        {scalar<int32_t>(g, 0), x, results.data, results.written},
        {.shape_invariants = {shape{}, shape{3}, shape{-1, 3}, shape{-1}}});
    auto stacked = results.with(outs[2], outs[3]).stack();
    session s(g);
    feed_list feeds{{x, f64s({0.5, -0.25, 1.0}, {3})}, {n, tensor::scalar<int32_t>(4)}};
    auto once = s.run(feeds, {stacked})[0];
    CHECK(once.dims() == shape{4, 3});
    for (int run = 0; run < 3; ++run) CHECK(s.run(feeds, {stacked})[0].equals(once));
    // No iterations: the initial size's rows, never written, are zeros.
    auto none = s.run({feeds[0], {n, tensor::scalar<int32_t>(0)}}, {stacked})[0];
    CHECK(none.dims() == shape{initial, 3});
    CHECK(values_of(none) == std::vector<double>(size_t(3 * initial), 0.0));
    auto loss = reduce_sum(square(stacked));
    check_gradients(g, loss, {x}, {f64s({0.5, -0.25, 1.0}, {3})},
                    {{n, tensor::scalar<int32_t>(4)}});
  }
  CHECK(no_loop_state_left());
}

TEST_CASE("map_fn and scan: one loop over the rows, their values and gradients") {
  graph g;
  auto x = placeholder(g, dtype::float64, {4, 3}, "x");
  auto w = placeholder(g, dtype::float64, {3, 2}, "w");
  auto init = placeholder(g, dtype::float64, {3}, "init");
  auto mapped = map_fn(
      [&](output row) {
        return reshape(tanh(matmul(reshape(row, {1, 3}), w)), {2});
      },
      x, {.result = tensor_spec{dtype::float64, shape{2}}});
  auto scanned = scan([&](output acc, output row) { return acc * 0.5 + row; }, x, init);
  REQUIRE(mapped.dims() == shape{4, 2});
  REQUIRE(scanned.dims() == shape{4, 3});
  std::vector<double> xv{0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9, -1.0, 1.1, 1.2};
  std::vector<double> wv{0.5, -0.3, 0.2, 0.8, -0.7, 0.1};
  feed_list feeds{{x, f64s(xv, {4, 3})}, {w, f64s(wv, {3, 2})}, {init, f64s({1, 2, 3}, {3})}};
  session s(g);
  auto got = s.run(feeds, {mapped, scanned});
  auto m = values_of(got[0]), c = values_of(got[1]);
  std::vector<double> acc{1, 2, 3};
  for (int r = 0; r < 4; ++r) {
    for (int j = 0; j < 2; ++j) {
      double dot = 0;
      for (int k = 0; k < 3; ++k) dot += xv[size_t(r * 3 + k)] * wv[size_t(k * 2 + j)];
      CHECK(m[size_t(r * 2 + j)] == doctest::Approx(std::tanh(dot)));
    }
    for (int k = 0; k < 3; ++k) {
      acc[size_t(k)] = acc[size_t(k)] * 0.5 + xv[size_t(r * 3 + k)];
      CHECK(c[size_t(r * 3 + k)] == doctest::Approx(acc[size_t(k)]));
    }
  }
  auto loss = reduce_sum(mapped * mapped) + reduce_sum(scanned * scanned);
  check_gradients(g, loss, {x, w, init}, {f64s(xv, {4, 3}), f64s(wv, {3, 2}), f64s({1, 2, 3}, {3})},
                  {});
  CHECK(no_loop_state_left());
}

TEST_CASE("map_fn over no rows, and fn results that do not fit, fail at build time") {
  graph g;
  auto none = placeholder(g, dtype::float32, {0, 3}, "none");
  auto doubled = map_fn([](output row) { return row * 2.0; }, none);
  session s(g);
  CHECK(s.run({{none, tensor(dtype::float32, {0, 3})}}, {doubled})[0].dims() == shape{0, 3});
  auto x = placeholder(g, dtype::float32, {4, 3}, "x");
  auto bad = [&] { map_fn([](output row) { return reshape(row, {3, 1}); }, x); };
  CHECK_THROWS_WITH(bad(), doctest::Contains("[map] fn returns float32(3,1)"));
  auto unknown = placeholder(g, dtype::float32, {-1, 3}, "unknown");
  CHECK_THROWS_WITH(map_fn([](output row) { return row; }, unknown),
                    doctest::Contains("elems must have a known first dim"));
}
