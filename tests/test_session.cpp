// The actor runtime: sessions, feeds and fetches, variables, errors, concurrency.
#include <doctest/doctest.h>

#include <thread>

#include "actors/caf_ext/scheduler.hpp"
#include "actors/run/cancelled_steps.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/math.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;

namespace {

tensor floats(std::vector<float> v, shape dims) { return tensor::from_vector<float>(v, dims); }

}  // namespace

TEST_CASE("feeds, fetches and folded constants") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 2}, "x");
  auto y = x * 2.0 + scalar(g, 1.0f);
  session s(g);
  auto out = s.run({{x, floats({1, 2, 3, 4}, {2, 2})}}, {y, x});
  REQUIRE(out.size() == 2);
  CHECK(out[0].to_vector<float>() == std::vector<float>{3, 5, 7, 9});
  CHECK(out[1].dims() == shape{2, 2});
  // The same signature reuses the compiled executable.
  s.run({{x, floats({0, 0}, {1, 2})}}, {y, x});
  CHECK(s.num_executables() == 1);
  // A fetched constant and the same output fetched twice.
  auto c = scalar(g, 7.0f, "seven");
  auto both = s.run({}, {c, c});
  CHECK(both[0].item<float>() == 7.0f);
  CHECK(both[1].item<float>() == 7.0f);
}

TEST_CASE("variables: initialize, read, assign_add, control dependencies") {
  graph g;
  auto v = make_variable(scalar(g, 10.0f), "v");
  auto inc = assign_add(v, scalar(g, 1.0f));
  auto init = global_variables_initializer(g);
  session s(g);
  CHECK(error_of([&] { s.eval(v); }).find("variable 'v' is read before it was initialized") !=
        std::string::npos);
  s.run({init});
  CHECK(s.eval(v).item<float>() == 10.0f);
  CHECK(s.eval(inc).item<float>() == 11.0f);
  CHECK(s.eval(inc).item<float>() == 12.0f);
  // A read ordered after an update sees the update.
  operation inc_op(&g, inc.ref().node);
  output after;
  {
    auto deps = g.control_dependencies({inc_op});
    after = v.read("after");
  }
  CHECK(s.eval(after).item<float>() == 13.0f);
  // A tensor read earlier keeps its value: updates copy on write.
  auto before = s.eval(v);
  s.eval(inc);
  CHECK(before.item<float>() == 13.0f);
  CHECK(s.eval(v).item<float>() == 14.0f);
  // A wrong-shape assign fails at build time.
  CHECK_THROWS_AS(assign(v, constant(g, floats({1, 2}, {2}))), error);
}

TEST_CASE("is_variable_initialized and global_variables_initialized never fail a read") {
  graph g;
  auto a = make_variable(scalar(g, 1.0f), "a");
  auto b = make_variable(constant(g, floats({1, 2}, {2})), "b");
  auto own = make_variable(g, dtype::int64, shape{}, "own");  // no initializer: left out
  auto ready = global_variables_initialized(g);
  auto a_set = is_variable_initialized(a);
  auto own_set = is_variable_initialized(own);
  session s(g);
  CHECK_FALSE(s.eval(ready).item<bool>());
  CHECK_FALSE(s.eval(a_set).item<bool>());
  s.run({a.initializer()});  // one of the two set: not ready yet
  CHECK(s.eval(a_set).item<bool>());
  CHECK_FALSE(s.eval(ready).item<bool>());
  s.run({b.initializer()});
  CHECK(s.eval(ready).item<bool>());
  CHECK_FALSE(s.eval(own_set).item<bool>());
  s.run({operation(&g, assign(own, scalar(g, int64_t{3})).ref().node)});
  CHECK(s.eval(own_set).item<bool>());
  // With no initializers at all the graph is ready at once.
  graph empty;
  make_variable(empty, dtype::float32, shape{}, "x");
  auto none = global_variables_initialized(empty);
  session e(empty);
  CHECK(e.eval(none).item<bool>());
}

TEST_CASE("session errors name what was wrong and leave the session usable") {
  graph g;
  auto a = placeholder(g, dtype::float32, {-1}, "a");
  auto b = placeholder(g, dtype::float32, {-1}, "b");
  auto sum = add(a, b, "sum");
  session s(g);
  auto two = floats({1, 2}, {2});
  auto three = floats({1, 2, 3}, {3});

  CHECK(error_of([&] {
          s.run({{a, two}}, {sum});
        }) == "[session] placeholder 'b' must be fed: a fetch or target depends on it");
  CHECK(error_of([&] {
          s.run({{a, two}, {b, floats({1, 2}, {1, 2})}}, {sum});
        }) == "[session] feed for 'b' is float32(1,2), but the placeholder is float32(?)");
  CHECK(error_of([&] {
          s.run({{a, two}, {b, tensor::from_vector<double>({1, 2})}}, {sum});
        }) == "[session] feed for 'b' is float64(2), but the placeholder is float32(?)");
  CHECK(error_of([&] {
          s.run({{sum, two}}, {sum});
        }).find("only placeholders can be fed") != std::string::npos);
  CHECK(error_of([&] { s.run_by_name({}, {"nope"}); }) == "[graph] no node named 'nope'");
  graph other;
  auto stranger = placeholder(other, dtype::float32, {}, "stranger");
  CHECK(error_of([&] { s.eval(stranger); }).find("belongs to another graph") != std::string::npos);

  // A kernel that fails at run time: shapes that only meet at run time.
  auto err = error_of([&] { s.run({{a, two}, {b, three}}, {sum}); });
  CHECK(err.find("node 'sum' (add)") != std::string::npos);
  CHECK(err.find("(2)") != std::string::npos);
  // The session still works, for the same signature and others.
  CHECK(s.run({{a, two}, {b, two}}, {sum})[0].to_vector<float>() == std::vector<float>{2, 4});
  CHECK(s.run_by_name({{"a", two}}, {"a"})[0].to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("an error in one branch reaches every fetch and target") {
  graph g;
  auto a = placeholder(g, dtype::float32, {-1}, "a");
  auto b = placeholder(g, dtype::float32, {-1}, "b");
  auto bad = add(a, b, "bad");
  auto good = a * 3.0;
  auto v = make_variable(constant(g, floats({0, 0}, {2})), "counter");
  auto bump = assign_add(v, bad);
  session s(g);
  s.run({v.initializer()});
  for (int i = 0; i < 50; ++i)
    CHECK_THROWS_AS(s.run({{a, floats({1, 2}, {2})}, {b, floats({1, 2, 3}, {3})}}, {good, bad},
                          {operation(&g, bump.ref().node)}),
                    error);
  CHECK(s.eval(v).to_vector<float>() == std::vector<float>{0, 0});  // failed steps updated nothing
  s.run({{a, floats({1, 2}, {2})}, {b, floats({1, 1}, {2})}}, {good, bad},
        {operation(&g, bump.ref().node)});
  CHECK(s.eval(v).to_vector<float>() == std::vector<float>{2, 3});
}

TEST_CASE("device hints") {
  graph g;
  output on_cpu, on_gpu;
  {
    auto d = g.device_scope("/cpu:0");
    on_cpu = scalar(g, 1.0f) + 1.0;
  }
  {
    auto d = g.device_scope("/gpu:0");
    on_gpu = scalar(g, 1.0f) + 1.0;
  }
  session s(g);
  CHECK(s.eval(on_cpu).item<float>() == 2.0f);
  CHECK(error_of([&] { s.eval(on_gpu); }).find("asks for device '/gpu:0'") != std::string::npos);
}

TEST_CASE("8 threads x 1000 steps of assign_add give the exact total") {
  graph g;
  auto v = make_variable(constant(g, tensor::from_vector<int64_t>({0, 0, 0, 0})), "total");
  auto inc = assign_add(v, constant(g, tensor::from_vector<int64_t>({1, 2, 3, 4})));
  session s(g);
  s.run({v.initializer()});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) s.eval(inc);
    });
  for (auto& t : threads) t.join();
  CHECK(s.eval(v).to_vector<int64_t>() == std::vector<int64_t>{8000, 16000, 24000, 32000});
}

TEST_CASE("many steps in flight with run_async") {
  graph g;
  auto x = placeholder(g, dtype::float32, {}, "x");
  output y = x;
  for (int i = 0; i < 100; ++i) y = y + 1.0;
  session s(g);
  std::vector<std::future<std::vector<tensor>>> steps;
  for (int i = 0; i < 64; ++i)
    steps.push_back(s.run_async({{x, tensor::scalar<float>(float(i))}}, {y}));
  for (int i = 0; i < 64; ++i) CHECK(steps[size_t(i)].get()[0].item<float>() == float(i + 100));
}

TEST_CASE("a node keeps its folded constants across failed steps and pool runs") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, -1}, "x");
  auto y = add(x, constant(g, floats({10, 20}, {2})), "y");
  session s(g);
  auto big = floats(std::vector<float>(1 << 16, 1.0f), {1 << 15, 2});  // runs on the pool
  for (int round = 0; round < 3; ++round) {
    CHECK(s.eval(y, {{x, floats({1, 2}, {1, 2})}}).to_vector<float>() ==
          std::vector<float>{11, 22});
    CHECK_THROWS_AS(s.eval(y, {{x, floats({1, 2, 3}, {1, 3})}}), error);
    auto out = s.eval(y, {{x, big}});
    CHECK(out.data<float>()[0] == 11.0f);
    CHECK(out.data<float>()[(1 << 16) - 1] == 21.0f);
  }
}

TEST_CASE("large kernels run on the device pool") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1}, "x");
  auto y = (x + 1.0) * 2.0;
  session s(g);
  std::vector<float> big(1 << 20, 1.0f);
  auto out = s.eval(y, {{x, tensor::from_vector<float>(big)}});
  CHECK(out.num_elements() == 1 << 20);
  CHECK(out.data<float>()[12345] == 4.0f);
}

TEST_CASE("sessions and runtimes shut down cleanly and can be made again") {
  for (int round = 0; round < 3; ++round) {
    auto rt =
        std::make_shared<runtime>(runtime_options{.scheduler_threads = 1, .compute_threads = 1});
    graph g;
    auto v = make_variable(scalar(g, 1.0f), "v");
    session s(g, rt);
    s.run({v.initializer()});
    auto pending = s.run_async({}, {v.value() * 2.0});
    CHECK(pending.get()[0].item<float>() == 2.0f);
  }
}

TEST_CASE("the runtime schedules its actors with actorflow's scheduler") {
  // CAF's own loop pays a dynamic_cast per actor resume; ours does not.
  auto rt =
      std::make_shared<runtime>(runtime_options{.scheduler_threads = 2, .compute_threads = 1});
  CHECK(runs_actorflow_scheduler(rt->system()));
  caf::actor_system_config plain;
  caf::actor_system caf_default(plain);
  CHECK_FALSE(runs_actorflow_scheduler(caf_default));
}

TEST_CASE("fed inputs that meet in one node wake no worker") {
  // Through the scheduler's round robin, a node's first input handed it to
  // another worker, woken for it; a cond's steps then ended with both
  // workers napping, and the next start waited out a nap (see
  // mark_gathering_links in actors/executable.cpp). Only a step's start,
  // from this thread, goes to the round robin now.
  auto rt =
      std::make_shared<runtime>(runtime_options{.scheduler_threads = 2, .compute_threads = 1});
  graph g;
  auto p = placeholder(g, dtype::boolean, {}, "p");
  auto x = placeholder(g, dtype::float32, {}, "x");
  auto y = placeholder(g, dtype::float32, {}, "y");
  auto sum = x + y;
  auto chosen = cond(
      p, [&] { return x * y; }, [&] { return x - y; });
  session s(g, rt);
  auto step = [&](int i) {
    auto out = s.run({{p, tensor::scalar<bool>(i % 2 == 0)},
                      {x, tensor::scalar<float>(float(i))},
                      {y, tensor::scalar<float>(2)}},
                     {sum, chosen});
    CHECK(out[0].item<float>() == float(i) + 2);
    CHECK(out[1].item<float>() == (i % 2 == 0 ? float(i) * 2 : float(i) - 2));
  };
  step(0);  // compiles (spawning goes round robin)
  const uint64_t before = jobs_placed_round_robin(rt->system());
  constexpr int steps = 50;
  for (int i = 1; i <= steps; ++i) step(i);
  CHECK(jobs_placed_round_robin(rt->system()) - before <= steps);
}

TEST_CASE("a long chain runs in segments on every worker while steps queue in it") {
  // 600 links: one segment per worker, each at least 128 links long.
  for (int workers : {1, 2, 3}) {
    CAPTURE(workers);
    auto rt = std::make_shared<runtime>(runtime_options{workers, 1});
    graph g;
    auto x = placeholder(g, dtype::float32, {-1}, "x");
    output y = reshape(x, {1});  // fails on any other size
    for (int i = 0; i < 600; ++i) y = y + 1.0;
    session s(g, rt);
    // One step at a time: no hand-over (each would cost a wake-up).
    for (int i = 0; i < 5; ++i)
      CHECK(s.eval(y, {{x, floats({float(i)}, {1})}}).to_vector<float>()[0] == float(i + 600));
    CHECK(hand_overs_between_workers(rt->system()) == 0);
    // 200 steps in flight, every fourth one failing at its first node
    // (a [2] feed for a reshape to [1]): errors and values pass the same way.
    std::vector<std::future<std::vector<tensor>>> steps;
    for (int i = 0; i < 200; ++i)
      steps.push_back(
          s.run_async({{x, i % 4 == 3 ? floats({0, 0}, {2}) : floats({float(i)}, {1})}}, {y}));
    for (int i = 0; i < 200; ++i) {
      if (i % 4 == 3) {
        CHECK_THROWS_AS(steps[size_t(i)].get(), error);
        continue;
      }
      CHECK(steps[size_t(i)].get()[0].to_vector<float>()[0] == float(i + 600));
    }
    if (workers == 1)
      CHECK(hand_overs_between_workers(rt->system()) == 0);
    else
      CHECK(hand_overs_between_workers(rt->system()) > 0);
    // Steps still in flight when the session goes: it must not hang.
    for (int i = 0; i < 64; ++i) (void)s.run_async({{x, floats({1}, {1})}}, {y});
  }
}

TEST_CASE("the records of cancelled and aborted steps stay bounded") {
  aborted_steps aborted;
  const uint64_t total = aborted_steps::capacity + 100;
  for (uint64_t step = 1; step <= total; ++step) aborted.add(step);
  aborted.add(total);  // twice: counted once
  CHECK(aborted.size() == aborted_steps::capacity);
  CHECK(aborted.contains(total));
  CHECK(aborted.contains(101));
  CHECK_FALSE(aborted.contains(100));  // the oldest were forgotten
  CHECK_FALSE(aborted.contains(total + 1));

  cancelled_steps cancelled;
  for (uint64_t step = 1; step <= 2000; ++step) cancelled.add(step_key{7, step}, "why");
  REQUIRE(cancelled.find(step_key{7, 2000}) != nullptr);
  CHECK(*cancelled.find(step_key{7, 2000}) == "why");
  CHECK(cancelled.find(step_key{7, 1}) == nullptr);
  CHECK(cancelled.find(step_key{8, 2000}) == nullptr);  // another executable
  CHECK(cancelled.find(step_key{0, 2000}) == nullptr);  // no executable: never cancelled
}

TEST_CASE("runtime options are validated") {
  CHECK_THROWS_WITH_AS(
      runtime(runtime_options{.scheduler_threads = 1, .compute_threads = 1, .idle_naps = -1}),
      "[runtime] idle_naps must be >= 0", error);
  auto rt = std::make_shared<runtime>(
      runtime_options{.scheduler_threads = 2, .compute_threads = 2, .idle_naps = 0});
  graph g;
  session s(g, rt);
  CHECK(s.eval(scalar(g, 2.0f) * 3.0).item<float>() == 6.0f);
}

TEST_CASE("element-wise kernels write over an input only when nothing else holds it") {
  graph g;
  auto x = placeholder(g, dtype::float32, {64, 64}, "x");
  auto v = make_variable(fill(g, {64, 64}, 2.0), "v");
  auto y = tanh(x * 3.0);    // x * 3 is held by nothing but tanh: tanh may write over it
  auto z = y + 1.0;          // y is fetched too: z must not write over it
  auto w = v.value() * 5.0;  // the variable's value is the variable's: never written over
  session s(g);
  s.run({global_variables_initializer(g)});
  tensor fed = tensor::zeros(dtype::float32, {64, 64});
  for (int64_t i = 0; i < fed.num_elements(); ++i)
    fed.mutable_data<float>()[i] = 0.01f * float(i % 97);
  tensor before = fed.clone();
  for (int round = 0; round < 3; ++round) {
    auto got = s.run({{x, fed}}, {y, z, w});
    for (int64_t i = 0; i < fed.num_elements(); ++i) {
      float want_y = std::tanh(before.data<float>()[i] * 3.0f);
      REQUIRE(fed.data<float>()[i] == before.data<float>()[i]);  // the caller's feed is intact
      REQUIRE(got[0].data<float>()[i] == doctest::Approx(want_y));
      REQUIRE(got[1].data<float>()[i] == doctest::Approx(want_y + 1.0f));
      REQUIRE(got[2].data<float>()[i] == 10.0f);
    }
    CHECK(s.eval(v.value()).data<float>()[0] == 2.0f);  // the variable is intact
  }
}
