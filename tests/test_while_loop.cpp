// While loops in the runtime: frames and iterations as message tags, loop
// invariants, parallel iterations, nesting with conds and loops, errors,
// state freed after every step, and many steps in flight.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "actors/run/executable.hpp"
#include "actors/run/node_plan.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/queue.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;

namespace {

tensor i64(int64_t v) { return tensor::scalar<int64_t>(v); }
tensor f64(double v) { return tensor::scalar<double>(v); }

// Loop state is freed by the nodes as their last messages arrive, which may
// be just after the step's answer: wait a moment for it.
bool no_loop_state_left() {
  for (int i = 0; i < 200 && loop_states_held() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (loop_states_held() != 0) MESSAGE("loop states held: " << loop_states_held());
  return loop_states_held() == 0;
}

// sum of 0..n-1, counted by a loop: (i, total)
struct counting_loop {
  graph g;
  output n = placeholder(g, dtype::int64, {}, "n");
  std::vector<output> outs;
  explicit counting_loop(while_options o = {}) {
    auto zero = scalar<int64_t>(g, 0);
    outs = while_loop([&](const std::vector<output>& v) { return less(v[0], n); },
                      [&](const std::vector<output>& v) {
                        return std::vector<output>{v[0] + scalar<int64_t>(g, 1), v[1] + v[0]};
                      },
                      {zero, zero}, o);
  }
};

}  // namespace

TEST_CASE("a while loop counts") {
  counting_loop l;
  session s(l.g);
  for (int64_t n : {0, 1, 7, 100}) {
    auto r = s.run({{l.n, i64(n)}}, l.outs);
    CHECK(r[0].item<int64_t>() == n);
    CHECK(r[1].item<int64_t>() == n * (n - 1) / 2);
  }
  CHECK(no_loop_state_left());
}

TEST_CASE("an exit says how many iterations ran") {
  counting_loop l;
  auto count = output(&l.g, {l.outs[0].ref().node, 1});
  session s(l.g);
  CHECK(s.run({{l.n, i64(13)}}, {count})[0].item<int64_t>() == 13);
}

TEST_CASE("a loop invariant from outside serves every iteration") {
  graph g;
  auto x = placeholder(g, dtype::float64, {}, "x");
  auto w = placeholder(g, dtype::float64, {}, "w");
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 5)); },
                 [&](const std::vector<output>& v) {
                   return std::vector<output>{v[0] + scalar<int64_t>(g, 1), v[1] * w};
                 },
                 {scalar<int64_t>(g, 0), x});
  session s(g);
  CHECK(s.run({{x, f64(3)}, {w, f64(2)}}, {outs[1]})[0].item<double>() == 96.0);
  CHECK(no_loop_state_left());
}

TEST_CASE("a body that uses only invariants still runs once per iteration") {
  graph g;
  auto w = placeholder(g, dtype::float64, {}, "w");
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 4)); },
                 [&](const std::vector<output>& v) {
                   return std::vector<output>{v[0] + scalar<int64_t>(g, 1), w * 2.0};
                 },
                 {scalar<int64_t>(g, 0), scalar<double>(g, 0)});
  session s(g);
  CHECK(s.run({{w, f64(5)}}, {outs[1]})[0].item<double>() == 10.0);
  CHECK(no_loop_state_left());
}

TEST_CASE("nested loops and a cond inside a loop") {
  graph g;
  auto n = placeholder(g, dtype::int64, {}, "n");
  auto one = scalar<int64_t>(g, 1);
  // for i < n: for j < i: total += j if j even else 10*j
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], n); },
                 [&](const std::vector<output>& v) {
                   auto i = v[0];
                   auto inner = while_loop(
                       [&](const std::vector<output>& w) { return less(w[0], i); },
                       [&](const std::vector<output>& w) {
                         auto j = w[0];
                         auto even = equal(j - (j / scalar<int64_t>(g, 2)) * scalar<int64_t>(g, 2),
                                           scalar<int64_t>(g, 0));
                         auto term = cond(
                             even, [&] { return j; }, [&] { return j * scalar<int64_t>(g, 10); });
                         return std::vector<output>{j + one, w[1] + term};
                       },
                       {scalar<int64_t>(g, 0), v[1]}, {.name = "inner"});
                   return std::vector<output>{i + one, inner[1]};
                 },
                 {scalar<int64_t>(g, 0), scalar<int64_t>(g, 0)}, {.name = "outer"});
  session s(g);
  for (int64_t nn : {0, 1, 2, 6}) {
    int64_t want = 0;
    for (int64_t i = 0; i < nn; ++i)
      for (int64_t j = 0; j < i; ++j) want += j % 2 == 0 ? j : 10 * j;
    CHECK(s.run({{n, i64(nn)}}, {outs[1]})[0].item<int64_t>() == want);
  }
  CHECK(no_loop_state_left());
}

TEST_CASE("a loop inside an untaken cond branch does not run") {
  graph g;
  auto pred = placeholder(g, dtype::boolean, {}, "pred");
  auto v = make_variable(scalar<int64_t>(g, 0), "v");
  auto r = cond(
      pred,
      [&] {
        return while_loop(
            [&](const std::vector<output>& x) { return less(x[0], scalar<int64_t>(g, 3)); },
            [&](const std::vector<output>& x) {
              return std::vector<output>{assign_add(v, scalar<int64_t>(g, 1)) *
                                             scalar<int64_t>(g, 0) +
                                         x[0] + scalar<int64_t>(g, 1)};
            },
            {scalar<int64_t>(g, 0)})[0];
      },
      [&] { return scalar<int64_t>(g, -1); });
  session s(g);
  s.run({global_variables_initializer(g)});
  CHECK(s.run({{pred, tensor::scalar<bool>(false)}}, {r})[0].item<int64_t>() == -1);
  CHECK(s.eval(v).item<int64_t>() == 0);
  CHECK(s.run({{pred, tensor::scalar<bool>(true)}}, {r})[0].item<int64_t>() == 3);
  CHECK(s.eval(v).item<int64_t>() == 3);
  CHECK(no_loop_state_left());
}

TEST_CASE("max_iterations turns a runaway loop into an error naming it") {
  counting_loop l({.max_iterations = 50, .name = "runaway"});
  session s(l.g);
  CHECK(s.run({{l.n, i64(50)}}, l.outs)[0].item<int64_t>() == 50);
  auto e = error_of([&] { s.run({{l.n, i64(1000000)}}, l.outs); });
  CHECK(e.find("runaway") != std::string::npos);
  CHECK(e.find("max_iterations=50") != std::string::npos);
  CHECK(s.run({{l.n, i64(3)}}, l.outs)[0].item<int64_t>() == 3);  // still usable
  CHECK(no_loop_state_left());
}

TEST_CASE("a failing body fails its step, frees its frames, and the session goes on") {
  graph g;
  auto n = placeholder(g, dtype::int64, {}, "n");
  auto x = placeholder(g, dtype::float32, {2, 2}, "x");
  auto bad = placeholder(g, dtype::float32, {-1, -1}, "bad");
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], n); },
                 [&](const std::vector<output>& v) {
                   return std::vector<output>{v[0] + scalar<int64_t>(g, 1), matmul(v[1], bad)};
                 },
                 {scalar<int64_t>(g, 0), x}, {.shape_invariants = {shape{}, shape{2, -1}}});
  session s(g);
  auto eye = tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  auto wrong = tensor::from_vector<float>({1, 2, 3}, {3, 1});
  auto e = error_of([&] { s.run({{n, i64(1000000)}, {x, eye}, {bad, wrong}}, outs); });
  INFO(e);
  CHECK(e.find("matmul") != std::string::npos);
  CHECK(s.run({{n, i64(4)}, {x, eye}, {bad, eye}}, {outs[0]})[0].item<int64_t>() == 4);
  CHECK(no_loop_state_left());
}

TEST_CASE("variables are read and updated inside a loop") {
  graph g;
  auto v = make_variable(scalar<double>(g, 1), "v");
  auto outs =
      while_loop([&](const std::vector<output>& x) { return less(x[0], scalar<int64_t>(g, 5)); },
                 [&](const std::vector<output>& x) {
                   auto updated = assign_add(v, scalar<double>(g, 1));
                   return std::vector<output>{x[0] + scalar<int64_t>(g, 1), x[1] + updated};
                 },
                 {scalar<int64_t>(g, 0), scalar<double>(g, 0)});
  session s(g);
  s.run({global_variables_initializer(g)});
  CHECK(s.eval(outs[1]).item<double>() == 2 + 3 + 4 + 5 + 6);
  CHECK(s.eval(v).item<double>() == 6);
}

TEST_CASE("build-time errors name the loop") {
  graph g;
  auto x = placeholder(g, dtype::float32, {2}, "x");
  auto i0 = scalar<int64_t>(g, 0);
  auto cond_fn = [&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 3)); };
  auto e = error_of([&] {
    while_loop([&](const std::vector<output>& v) { return v[0]; },
               [&](const std::vector<output>& v) { return v; }, {i0}, {.name = "badpred"});
  });
  CHECK(e.find("badpred") != std::string::npos);
  CHECK(e.find("scalar bool") != std::string::npos);
  e = error_of([&] {
    while_loop(cond_fn, [&](const std::vector<output>& v) { return std::vector<output>{v[0]}; },
               {i0, x}, {.name = "count"});
  });
  CHECK(e.find("'count': the body returns 1 values for 2") != std::string::npos);
  e = error_of([&] {
    while_loop(cond_fn,
               [&](const std::vector<output>& v) {
                 return std::vector<output>{v[0] + scalar<int64_t>(g, 1), concat({v[1], v[1]}, 0)};
               },
               {i0, x}, {.name = "grow"});
  });
  CHECK(e.find("'grow': loop variable 1") != std::string::npos);
  CHECK(e.find("shape invariant") != std::string::npos);
  // With an invariant that lets dim 0 change, it builds and runs.
  auto grown = while_loop(
      cond_fn,
      [&](const std::vector<output>& v) {
        return std::vector<output>{v[0] + scalar<int64_t>(g, 1), concat({v[1], v[1]}, 0)};
      },
      {i0, x}, {.shape_invariants = {shape{}, shape{-1}}, .name = "grow_ok"});
  session s(g);
  auto r = s.run({{x, tensor::from_vector<float>({1, 2}, {2})}}, {grown[1]});
  CHECK(r[0].dims() == shape{16});
}

TEST_CASE("a value inside a loop cannot be fetched or used outside it") {
  graph g;
  output inside;
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 3)); },
                 [&](const std::vector<output>& v) {
                   inside = v[0] + scalar<int64_t>(g, 1);
                   return std::vector<output>{inside};
                 },
                 {scalar<int64_t>(g, 0)}, {.name = "hidden"});
  CHECK(error_of([&] { inside* scalar<int64_t>(g, 2); }).find("hidden") != std::string::npos);
  session s(g);
  CHECK(error_of([&] { s.eval(inside); }).find("inside loop 'hidden'") != std::string::npos);
}

TEST_CASE("steps in flight from several threads run loops of different lengths over a variable") {
  graph g;
  auto n = placeholder(g, dtype::int64, {}, "n");
  auto counter = make_variable(scalar<int64_t>(g, 0), "counter");
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], n); },
                 [&](const std::vector<output>& v) {
                   auto bumped = assign_add(counter, scalar<int64_t>(g, 1));
                   return std::vector<output>{v[0] + scalar<int64_t>(g, 1),
                                              v[1] + v[0] + bumped * scalar<int64_t>(g, 0)};
                 },
                 {scalar<int64_t>(g, 0), scalar<int64_t>(g, 0)}, {.parallel_iterations = 4});
  session s(g);
  s.run({global_variables_initializer(g)});
  std::atomic<int64_t> wrong{0}, total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::pair<int64_t, std::future<std::vector<tensor>>>> runs;
      for (int k = 0; k < 40; ++k) {
        int64_t len = (t * 7 + k * 5) % 23;
        total += len;
        runs.emplace_back(len, s.run_async({{n, tensor::scalar<int64_t>(len)}}, {outs[1]}));
      }
      for (auto& [len, r] : runs)
        if (r.get()[0].item<int64_t>() != len * (len - 1) / 2) ++wrong;
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(s.eval(counter).item<int64_t>() == total.load());
  CHECK(no_loop_state_left());
}

TEST_CASE("a loop dequeues from a queue") {
  graph g;
  auto q = fifo_queue(g, {dtype::float32}, {shape{}}, 16, "q");
  auto item = placeholder(g, dtype::float32, {}, "item");
  auto enqueue = queue_enqueue(q, {item});
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], scalar<int64_t>(g, 5)); },
      [&](const std::vector<output>& v) {
        return std::vector<output>{v[0] + scalar<int64_t>(g, 1), v[1] + queue_dequeue(q)[0]};
      },
      {scalar<int64_t>(g, 0), scalar<float>(g, 0)});
  session s(g);
  for (int i = 1; i <= 10; ++i) s.run({{item, tensor::scalar<float>(float(i))}}, {}, {enqueue});
  CHECK(s.eval(outs[1]).item<float>() == 15.0f);  // 1..5, in order
  CHECK(s.eval(outs[1]).item<float>() == 40.0f);  // 6..10
  CHECK(no_loop_state_left());
}

TEST_CASE("parallel_iterations bounds how far a variable runs ahead, 1 included") {
  for (int64_t p : {1, 2, 10}) {
    counting_loop l({.parallel_iterations = p});
    session s(l.g);
    auto r = s.run({{l.n, i64(300)}}, l.outs);
    CHECK(r[0].item<int64_t>() == 300);
    CHECK(r[1].item<int64_t>() == 300 * 299 / 2);
  }
  CHECK(no_loop_state_left());
}

TEST_CASE("a loop's nodes run in one actor; a long loop takes turns with other steps") {
  counting_loop l;
  // Actors of their own: the placeholder, the exit, and the two enters of
  // constants (the coordinator starts them); the rest of the frame (the
  // invariant's enter, merges, predicate, switches, body) shares one.
  run_signature sig{{l.n.ref()}, {l.outs[1].ref()}, {}};
  auto rt = runtime::shared();  // outlives the executable's actors
  {
    executable ex(l.g, sig, *rt, [](const node&, const local_device&) { return resource_ref(); });
    CHECK(ex.num_actors() == 5);
  }

  // The long loop's values between its nodes are calls within one actor:
  // it still yields every few hundred, so that short steps of the same
  // actor go through while it runs.
  session s(l.g);
  auto long_run = s.run_async({{l.n, i64(3000000)}}, {l.outs[1]});
  for (int k = 0; k < 20; ++k)
    CHECK(s.run({{l.n, i64(k)}}, {l.outs[1]})[0].item<int64_t>() == k * (k - 1) / 2);
  CHECK(long_run.wait_for(std::chrono::seconds(0)) != std::future_status::ready);
  CHECK(long_run.get()[0].item<int64_t>() == int64_t(3000000) * 2999999 / 2);
  CHECK(no_loop_state_left());
}
