// The conditional accumulator (ops/accumulator.hpp) and its actor: what
// synchronous training with backup workers needs of it.
#include <doctest/doctest.h>

#include <chrono>
#include <future>

#include "actors/session.hpp"
#include "ops/accumulator.hpp"
#include "ops/array.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/state.hpp"
#include "schema/graph_io.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::future_error;
using namespace std::chrono_literals;

namespace {

// An accumulator of gradients of shape (2) and the ops that the tests run on it.
struct accumulator_graph {
  graph g;
  output acc, grad, local_step, num_required, new_step, take, count;
  operation apply, set_step;
  explicit accumulator_graph(dtype type = dtype::float32) {
    acc = conditional_accumulator(g, type, shape{2}, "acc");
    grad = placeholder(g, type, {-1}, "grad");  // any length: checked when it arrives
    local_step = placeholder(g, dtype::int64, {}, "local_step");
    num_required = placeholder(g, dtype::int32, {}, "num_required");
    new_step = placeholder(g, dtype::int64, {}, "new_step");
    apply = accumulator_apply_gradient(acc, local_step, grad, "apply");
    take = accumulator_take_gradient(acc, num_required, "take");
    set_step = accumulator_set_global_step(acc, new_step, "set_step");
    count = accumulator_num_accumulated(acc, "count");
  }
  void apply_in(session& s, int64_t step, std::vector<float> g) {
    s.run({{local_step, tensor::scalar<int64_t>(step)}, {grad, tensor::from_vector<float>(g)}}, {},
          {apply});
  }
  std::future<std::vector<tensor>> take_async(session& s, int32_t n) {
    return s.run_async({{num_required, tensor::scalar<int32_t>(n)}}, {take});
  }
  std::vector<float> take_in(session& s, int32_t n) {
    return s.run({{num_required, tensor::scalar<int32_t>(n)}}, {take})[0].to_vector<float>();
  }
  void set_step_in(session& s, int64_t step) {
    s.run({{new_step, tensor::scalar<int64_t>(step)}}, {}, {set_step});
  }
  int32_t count_in(session& s) { return s.eval(count).item<int32_t>(); }
};

}  // namespace

TEST_CASE("an accumulator averages the gradients applied and counts them") {
  accumulator_graph t;
  CHECK(t.take.type() == dtype::float32);
  CHECK(t.take.dims() == shape{2});
  session s(t.g);
  CHECK(t.count_in(s) == 0);
  t.apply_in(s, 0, {1, 10});
  t.apply_in(s, 0, {2, 20});
  t.apply_in(s, 0, {6, 60});
  CHECK(t.count_in(s) == 3);
  CHECK(t.take_in(s, 3) == std::vector<float>{3, 30});
  CHECK(t.count_in(s) == 0);  // the take resets the sum and the count
  t.apply_in(s, 1, {4, 4});
  CHECK(t.take_in(s, 1) == std::vector<float>{4, 4});
}

TEST_CASE("a take increments the global step, so gradients of older steps are dropped") {
  accumulator_graph t;
  session s(t.g);
  t.apply_in(s, 0, {1, 1});
  CHECK(t.take_in(s, 1) == std::vector<float>{1, 1});  // global step 0 -> 1
  t.apply_in(s, 0, {100, 100});                        // stale: dropped, no error
  CHECK(t.count_in(s) == 0);
  t.apply_in(s, 1, {2, 2});
  t.apply_in(s, 5, {4, 4});  // a worker ahead of the chief still counts
  CHECK(t.count_in(s) == 2);
  CHECK(t.take_in(s, 2) == std::vector<float>{3, 3});  // global step 1 -> 2
  t.apply_in(s, 1, {100, 100});
  CHECK(t.count_in(s) == 0);
}

// TensorFlow's ConditionalAccumulator sets a smaller step too (checked
// against TensorFlow 2.21: set 10, apply at 5 dropped; set 3, apply at 5 counts).
TEST_CASE("set_global_step sets the global step, lowering it too, as TensorFlow's") {
  accumulator_graph t;
  session s(t.g);
  t.set_step_in(s, 10);
  t.apply_in(s, 9, {1, 1});  // stale
  CHECK(t.count_in(s) == 0);
  t.apply_in(s, 10, {5, 7});
  CHECK(t.count_in(s) == 1);
  CHECK(t.take_in(s, 1) == std::vector<float>{5, 7});  // global step 10 -> 11
  t.apply_in(s, 10, {1, 1});                           // stale now
  CHECK(t.count_in(s) == 0);
  t.set_step_in(s, 3);       // a chief restarted from an older checkpoint
  t.apply_in(s, 2, {1, 1});  // older than that: stale
  CHECK(t.count_in(s) == 0);
  t.apply_in(s, 9, {2, 4});  // counts again
  CHECK(t.count_in(s) == 1);
  CHECK(t.take_in(s, 1) == std::vector<float>{2, 4});  // global step 3 -> 4
}

TEST_CASE("a take waits until enough gradients arrive; waiting takes are served in order") {
  accumulator_graph t;
  session s(t.g);
  t.apply_in(s, 0, {1, 1});
  auto first = t.take_async(s, 2);
  CHECK(first.wait_for(100ms) == std::future_status::timeout);
  auto second = t.take_async(s, 1);  // could be served now, but waits its turn
  CHECK(second.wait_for(50ms) == std::future_status::timeout);
  CHECK(t.count_in(s) == 1);  // the accumulator still answers meanwhile
  t.apply_in(s, 0, {3, 5});
  REQUIRE(first.wait_for(10s) == std::future_status::ready);
  CHECK(first.get()[0].to_vector<float>() == std::vector<float>{2, 3});
  CHECK(second.wait_for(50ms) == std::future_status::timeout);
  t.apply_in(s, 0, {9, 9});  // stale now: the first take made the global step 1
  CHECK(second.wait_for(50ms) == std::future_status::timeout);
  t.apply_in(s, 1, {8, 6});
  REQUIRE(second.wait_for(10s) == std::future_status::ready);
  CHECK(second.get()[0].to_vector<float>() == std::vector<float>{8, 6});
}

TEST_CASE("a failing step cancels its waiting take, which then takes nothing") {
  accumulator_graph t;
  auto a = placeholder(t.g, dtype::float32, {-1}, "a");
  auto b = placeholder(t.g, dtype::float32, {-1}, "b");
  auto bad = add(a, b, "bad");  // fails at run time for lengths 2 and 3
  session s(t.g);
  for (int round = 0; round < 10; ++round) {
    auto failed = s.run_async({{t.num_required, tensor::scalar<int32_t>(1)},
                               {a, tensor::from_vector<float>({1, 2})},
                               {b, tensor::from_vector<float>({1, 2, 3})}},
                              {t.take, bad});
    REQUIRE(failed.wait_for(10s) == std::future_status::ready);
    CHECK(contains(future_error(failed), "node 'bad' (add)"));
    // The gradient goes to the next take, not to the cancelled one.
    t.apply_in(s, round, {float(round), 1});
    auto next = t.take_async(s, 1);
    REQUIRE(next.wait_for(10s) == std::future_status::ready);
    CHECK(next.get()[0].to_vector<float>() == std::vector<float>{float(round), 1});
  }
}

TEST_CASE("gradients of another shape or dtype are errors naming the accumulator and both") {
  accumulator_graph t;
  // At build time.
  auto wide = placeholder(t.g, dtype::float32, {3}, "wide");
  auto ints = placeholder(t.g, dtype::int32, {2}, "ints");
  CHECK(contains(error_of([&] { accumulator_apply_gradient(t.acc, t.local_step, wide); }),
                 "[accumulator_apply_gradient] accumulator 'acc': gradient is float32(3), the "
                 "accumulator holds float32(2)"));
  CHECK(contains(error_of([&] { accumulator_apply_gradient(t.acc, t.local_step, ints); }),
                 "gradient is int32(2), the accumulator holds float32(2)"));
  CHECK(contains(error_of([&] { accumulator_apply_gradient(t.acc, t.num_required, t.grad); }),
                 "local_step must be a int64 scalar, got int32()"));
  CHECK(contains(error_of([&] { accumulator_take_gradient(t.grad, t.num_required); }),
                 "'grad' is a placeholder, not a conditional accumulator"));
  CHECK(contains(error_of([&] { conditional_accumulator(t.g, dtype::int32, shape{2}); }),
                 "float32 or float64 gradients, got int32"));
  // At run time, for shapes the graph left open; the step fails, the accumulator goes on.
  session s(t.g);
  auto what = error_of([&] { t.apply_in(s, 0, {1, 2, 3}); });
  CHECK(contains(what,
                 "node 'apply' (accumulator_apply_gradient): [accumulator 'acc'] gradient is "
                 "float32(3), the accumulator holds float32(2)"));
  CHECK(t.count_in(s) == 0);
  t.apply_in(s, 0, {1, 2});
  CHECK(t.count_in(s) == 1);
  // Fetching the accumulator itself says what to do instead.
  CHECK(contains(error_of([&] { s.eval(t.acc); }), "is an accumulator reference, not a value"));
}

TEST_CASE("a partly known shape is fixed by the first gradient after each take") {
  graph g;
  auto acc = conditional_accumulator(g, dtype::float32, shape{-1}, "acc");
  auto grad = placeholder(g, dtype::float32, {-1}, "grad");
  auto step = placeholder(g, dtype::int64, {}, "step");
  auto apply = accumulator_apply_gradient(acc, step, grad, "apply");
  auto take = accumulator_take_gradient(acc, constant(g, tensor::scalar<int32_t>(2)), "take");
  session s(g);
  auto apply_in = [&](int64_t k, std::vector<float> v) {
    s.run({{step, tensor::scalar<int64_t>(k)}, {grad, tensor::from_vector<float>(v)}}, {}, {apply});
  };
  apply_in(0, {1, 2, 3});
  CHECK(contains(error_of([&] {
                   apply_in(0, {1, 2});
                 }),
                 "gradient is float32(2), the gradients accumulated since the last take are "
                 "float32(3)"));
  apply_in(0, {3, 4, 5});
  CHECK(s.eval(take).to_vector<float>() == std::vector<float>{2, 3, 4});
  apply_in(1, {1, 1});  // a new step: any length again
  apply_in(1, {3, 3});
  CHECK(s.eval(take).to_vector<float>() == std::vector<float>{2, 2});
}

TEST_CASE("num_required below 1 is an error, and the accumulator goes on") {
  accumulator_graph t;
  session s(t.g);
  t.apply_in(s, 0, {1, 1});
  for (int32_t n : {0, -3}) {
    auto what = error_of([&] { t.take_in(s, n); });
    CHECK(contains(what,
                   "node 'take' (accumulator_take_gradient): [accumulator 'acc'] "
                   "num_required must be at least 1, got " +
                       std::to_string(n)));
  }
  CHECK(t.take_in(s, 1) == std::vector<float>{1, 1});
}

TEST_CASE("a session with a take waiting on its accumulator shuts down without hanging") {
  accumulator_graph t;
  std::future<std::vector<tensor>> waiting;
  auto done = std::async(std::launch::async, [&] {
    session s(t.g);
    t.apply_in(s, 0, {1, 1});
    waiting = t.take_async(s, 3);
    return waiting.wait_for(50ms) == std::future_status::timeout;
  });
  REQUIRE(done.wait_for(20s) == std::future_status::ready);
  CHECK(done.get());
  REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
  CHECK(contains(future_error(waiting),
                 "node 'take' (accumulator_take_gradient): accumulator 'acc' was shut down while "
                 "a take waited for 3 gradients (1 accumulated)"));
}

TEST_CASE("a float64 accumulator averages in float64") {
  accumulator_graph t(dtype::float64);
  CHECK(t.take.type() == dtype::float64);
  session s(t.g);
  for (double v : {0.1, 0.2, 0.4}) {
    s.run({{t.local_step, tensor::scalar<int64_t>(0)},
           {t.grad, tensor::from_vector<double>({v, 1e-300})}},
          {}, {t.apply});
  }
  auto avg = s.run({{t.num_required, tensor::scalar<int32_t>(3)}}, {t.take})[0];
  REQUIRE(avg.type() == dtype::float64);
  CHECK(avg.to_vector<double>()[0] == doctest::Approx((0.1 + 0.2 + 0.4) / 3).epsilon(1e-15));
  CHECK(avg.to_vector<double>()[1] == doctest::Approx(1e-300));  // below float32's range
  CHECK(avg.to_vector<double>()[1] > 0);
}

TEST_CASE("an accumulator graph survives saving and loading") {
  accumulator_graph t;
  auto loaded = deserialize_graph(serialize_graph(t.g), "accumulator graph");
  session s(*loaded);
  s.run_by_name(
      {{"local_step", tensor::scalar<int64_t>(0)}, {"grad", tensor::from_vector<float>({2, 4})}},
      {}, {"apply"});
  CHECK(s.run_by_name({}, {"count"})[0].item<int32_t>() == 1);
  auto avg = s.run_by_name({{"num_required", tensor::scalar<int32_t>(1)}}, {"take"})[0];
  CHECK(avg.to_vector<float>() == std::vector<float>{2, 4});
}

namespace {

// A sparse accumulator for a (6, 3) variable beside a dense one of the same
// shape, fed the same gradients: rows, and rows scattered into (6, 3).
struct sparse_graph {
  graph g;
  output acc, dense, rows, indices, local_step, num_required, count, dense_take;
  accumulated_rows take;
  operation apply, dense_apply;
  explicit sparse_graph(dtype index_type = dtype::int64) {
    acc = sparse_conditional_accumulator(g, dtype::float32, shape{6, 3}, "acc");
    dense = conditional_accumulator(g, dtype::float32, shape{6, 3}, "dense");
    rows = placeholder(g, dtype::float32, {-1, 3}, "rows");
    indices = placeholder(g, index_type, {-1}, "indices");
    local_step = placeholder(g, dtype::int64, {}, "local_step");
    num_required = placeholder(g, dtype::int32, {}, "num_required");
    apply = sparse_accumulator_apply_gradient(acc, local_step, rows, indices, "apply");
    auto like = constant(g, tensor::zeros(dtype::float32, shape{6, 3}), "like");
    dense_apply = accumulator_apply_gradient(dense, local_step,
                                             scatter_add_like(rows, indices, like), "dense_apply");
    take = sparse_accumulator_take_gradient(acc, num_required, "take");
    dense_take = accumulator_take_gradient(dense, num_required, "dense_take");
    count = accumulator_num_accumulated(acc, "count");
  }
  template <class I>
  feed_list gradient(int64_t step, std::vector<float> r, std::vector<I> i) const {
    auto n = static_cast<int64_t>(i.size());
    return {{local_step, tensor::scalar<int64_t>(step)},
            {rows, tensor::from_vector(r, shape{static_cast<int64_t>(r.size()) / 3, 3})},
            {indices, tensor::from_vector(i, shape{n})}};
  }
  int32_t count_in(session& s) const { return s.eval(count).item<int32_t>(); }
};

// Rows whose sums round differently in another order.
std::vector<float> rows_of(int n, float seed) {
  std::vector<float> v;
  for (int k = 0; k < 3 * n; ++k)
    v.push_back(seed * 0.1f + 0.37f * float(k) + 1e-7f * float(k * k));
  return v;
}

}  // namespace

TEST_CASE("a sparse accumulator averages gradient rows exactly as the dense one") {
  sparse_graph t;
  session s(t.g);
  // Repeated rows within a gradient and across them; rows 1 and 4 never named.
  std::vector<std::vector<int64_t>> ids = {{5, 0, 5, 2}, {3, 3, 3}, {0, 2, 5}};
  for (size_t k = 0; k < ids.size(); ++k)
    s.run(t.gradient(0, rows_of(static_cast<int>(ids[k].size()), float(k) + 0.3f), ids[k]), {},
          {t.apply, t.dense_apply});
  CHECK(t.count_in(s) == 3);
  auto out = s.run({{t.num_required, tensor::scalar<int32_t>(3)}},
                   {t.take.rows, t.take.indices, t.dense_take});
  CHECK(out[1].to_vector<int64_t>() == std::vector<int64_t>{0, 2, 3, 5});  // ascending, unique
  REQUIRE(out[0].dims() == shape{4, 3});
  // Scattered back, the rows are the dense average bit for bit, zeros elsewhere.
  std::vector<float> scattered(18, 0.0f);
  auto idx = out[1].to_vector<int64_t>();
  auto rows = out[0].to_vector<float>();
  for (size_t k = 0; k < idx.size(); ++k)
    for (size_t j = 0; j < 3; ++j) scattered[static_cast<size_t>(idx[k]) * 3 + j] = rows[k * 3 + j];
  CHECK(scattered == out[2].to_vector<float>());
  // The take started step 1: a gradient of step 0 is dropped, one of step 1 counts.
  CHECK(t.count_in(s) == 0);
  s.run(t.gradient<int64_t>(0, {1, 2, 3}, {4}), {}, {t.apply});
  CHECK(t.count_in(s) == 0);
  s.run(t.gradient<int64_t>(1, {1, 2, 3}, {4}), {}, {t.apply});
  auto next = s.run({{t.num_required, tensor::scalar<int32_t>(1)}}, {t.take.rows, t.take.indices});
  CHECK(next[0].to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(next[1].to_vector<int64_t>() == std::vector<int64_t>{4});
}

TEST_CASE("a sparse take waits for enough gradients; an empty gradient counts") {
  sparse_graph t(dtype::int32);
  session s(t.g);
  auto waiting =
      s.run_async({{t.num_required, tensor::scalar<int32_t>(2)}}, {t.take.rows, t.take.indices});
  s.run(t.gradient<int32_t>(0, {}, {}), {}, {t.apply});  // a batch without rows
  CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
  s.run(t.gradient<int32_t>(0, {2, 4, 6}, {1}), {}, {t.apply});
  REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
  auto out = waiting.get();
  CHECK(out[0].to_vector<float>() == std::vector<float>{1, 2, 3});  // divided by 2 gradients
  CHECK(out[1].to_vector<int64_t>() == std::vector<int64_t>{1});
}

TEST_CASE("sparse accumulators refuse dense gradients, bad rows and bad indices, naming them") {
  sparse_graph t;
  // At build time: the other kind's ops, rows of the wrong width, float indices, unknown shapes.
  auto grad = placeholder(t.g, dtype::float32, {6, 3}, "grad");
  CHECK(contains(error_of([&] { accumulator_apply_gradient(t.acc, t.local_step, grad); }),
                 "accumulator 'acc' holds row gradients: use the sparse_accumulator_ ops on it"));
  CHECK(contains(error_of([&] { accumulator_take_gradient(t.acc, t.num_required); }),
                 "the accumulator holds row gradients"));
  CHECK(contains(error_of([&] {
                   sparse_accumulator_apply_gradient(t.dense, t.local_step, t.rows, t.indices);
                 }),
                 "accumulator 'dense' holds dense gradients: use the accumulator_ ops on it"));
  auto wide = placeholder(t.g, dtype::float32, {-1, 4}, "wide");
  CHECK(contains(
      error_of([&] { sparse_accumulator_apply_gradient(t.acc, t.local_step, wide, t.indices); }),
      "rows: gradient is float32(?,4), the accumulator holds float32(?,3)"));
  auto float_ids = placeholder(t.g, dtype::float32, {-1}, "float_ids");
  CHECK(contains(
      error_of([&] { sparse_accumulator_apply_gradient(t.acc, t.local_step, t.rows, float_ids); }),
      "indices must be int32 or int64"));
  CHECK(contains(error_of([&] {
                   sparse_conditional_accumulator(t.g, dtype::float32, shape{-1, 3});
                 }),
                 "a sparse accumulator needs the variable's full shape, of rank >= 1; got (?,3)"));
  CHECK(contains(error_of([&] { sparse_conditional_accumulator(t.g, dtype::float32, shape{}); }),
                 "of rank >= 1; got ()"));
  // At run time: the step fails naming the node, and nothing is accumulated.
  session s(t.g);
  auto what = error_of([&] {
    s.run(t.gradient<int64_t>(0, rows_of(2, 1), {1, 2, 3}), {}, {t.apply});
  });
  CHECK(contains(what,
                 "node 'apply' (sparse_accumulator_apply_gradient): [accumulator 'acc'] "
                 "gradient rows are float32(2,3) for indices (3), the accumulator holds "
                 "rows of float32(6,3)"));
  what = error_of([&] { s.run(t.gradient<int64_t>(0, rows_of(2, 1), {1, 6}), {}, {t.apply}); });
  CHECK(contains(what,
                 "[accumulator 'acc'] index 6 (at position 1) is out of range for axis 0 of "
                 "size 6 in the accumulator's rows"));
  what = error_of([&] { s.run(t.gradient<int64_t>(0, rows_of(1, 1), {-1}), {}, {t.apply}); });
  CHECK(contains(what, "index -1 (at position 0) is out of range"));
  // A dense apply whose node claims a dense accumulator (as a forged file
  // could) passes the shape check but not the accumulator's actor.
  auto forged =
      make_op("accumulator_apply_gradient", {t.acc, t.local_step, grad},
              {{"dtype", dtype::float32}, {"shape", std::vector<int64_t>{6, 3}}}, "forged");
  feed_list forged_feeds{{t.local_step, tensor::scalar<int64_t>(0)},
                         {grad, tensor::zeros(dtype::float32, {6, 3})}};
  // (Fetching the op, which has no outputs, is an error too, not a crash.)
  CHECK(contains(error_of([&] { s.run(forged_feeds, {forged}); }),
                 "fetch: node 'forged' (accumulator_apply_gradient) has no output 0; run it as a "
                 "target"));
  what = error_of([&] { s.run(forged_feeds, {}, {operation(&t.g, forged.ref().node)}); });
  CHECK(contains(what,
                 "node 'forged' (accumulator_apply_gradient): is not an op of sparse "
                 "accumulator 'acc'"));
  CHECK(t.count_in(s) == 0);
  s.run(t.gradient<int64_t>(0, {1, 1, 1}, {2}), {}, {t.apply});
  CHECK(t.count_in(s) == 1);
}

TEST_CASE("a sparse accumulator graph survives saving and loading") {
  sparse_graph t;
  auto loaded = deserialize_graph(serialize_graph(t.g), "sparse accumulator graph");
  session s(*loaded);
  s.run_by_name({{"local_step", tensor::scalar<int64_t>(0)},
                 {"rows", tensor::from_vector<float>({2, 4, 6, 1, 1, 1}, shape{2, 3})},
                 {"indices", tensor::from_vector<int64_t>({3, 3}, shape{2})}},
                {}, {"apply"});
  auto out = s.run_by_name({{"num_required", tensor::scalar<int32_t>(1)}}, {"take:0", "take:1"});
  CHECK(out[0].to_vector<float>() == std::vector<float>{3, 5, 7});
  CHECK(out[1].to_vector<int64_t>() == std::vector<int64_t>{3});
}
