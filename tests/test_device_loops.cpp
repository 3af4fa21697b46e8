// Control flow on an accelerator (the stand-in here; the GPU runs the same
// runtime code): a loop's body and a cond's branches launch on the device and
// the values they pass between iterations stay in its memory. What decides
// the loop (its int32 counter and predicate) runs in host memory, as
// TensorFlow keeps a GPU's int32 tensors: nothing waits for the device's
// stream to know whether to go on. Every result is the CPU's.
// And the LSTM language model, whose recurrence is such a loop, trained on
// the stand-in to the CPU's losses.
#include <doctest/doctest.h>

#include "actors/run/node_plan.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "device_training.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/tensor_array.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::cpu_only;
using actorflow::testing::entry_of;
using actorflow::testing::error_of;
using actorflow::testing::random_source;
using actorflow::testing::settled_bytes_in_use;
using actorflow::testing::stand_in_of;
using actorflow::testing::with_stand_in;

namespace {

constexpr int64_t width = 8;

bool no_loop_state_left() {
  for (int i = 0; i < 200 && loop_states_held() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return loop_states_held() == 0;
}

// y = tanh(y @ w) n times, from x; then its sum, and (with `grads`) the
// gradients of the sum with respect to x and w. `device` empty: no hint.
struct matmul_loop {
  graph g;
  output x, w, n, total, y;
  std::vector<output> grads;

  matmul_loop(const std::string& device, bool with_grads) {
    std::optional<graph::scope_guard> scope;
    if (!device.empty()) scope.emplace(g.device_scope(device));
    x = placeholder(g, dtype::float32, shape{width, width}, "x");
    w = placeholder(g, dtype::float32, shape{width, width}, "w");
    n = placeholder(g, dtype::int32, shape{}, "n");
    auto outs = while_loop(
        [&](const std::vector<output>& v) { return less(v[0], n); },
        [&](const std::vector<output>& v) {
          return std::vector<output>{v[0] + scalar<int32_t>(g, 1), tanh(matmul(v[1], w))};
        },
        {scalar<int32_t>(g, 0), x}, {.name = "recur"});
    y = outs[1];
    total = reduce_sum(y);
    if (with_grads) grads = gradients({total}, {x, w});
  }

  feed_list feeds(int32_t iterations) const {
    random_source rnd;
    return {{x, rnd.uniform(dtype::float32, shape{width, width}, -1, 1)},
            {w, rnd.uniform(dtype::float32, shape{width, width}, -1, 1)},
            {n, tensor::scalar<int32_t>(iterations)}};
  }
};

// Every node of the log whose name starts with `prefix` ran on `device`.
void check_all_on(const session& s, const std::string& prefix, const std::string& device) {
  int seen = 0;
  for (auto& e : s.placement_log())
    if (e.node.compare(0, prefix.size(), prefix) == 0) {
      INFO(e.node << " (" << e.op << "): " << e.reason);
      CHECK(e.device == device);
      ++seen;
    }
  CHECK(seen > 0);
}

}  // namespace

TEST_CASE("a loop's body runs on the stand-in; only its result comes back") {
  auto rt = with_stand_in();
  auto& accel = stand_in_of(*rt);
  for (int32_t iterations : {0, 1, 9}) {
    INFO(iterations << " iterations");
    matmul_loop on_cpu("", false), on_device("/stand_in:0", false);
    session cpu(on_cpu.g, cpu_only()), device(on_device.g, rt);
    auto want = cpu.run(on_cpu.feeds(iterations), {on_cpu.total})[0];
    device.run(on_device.feeds(iterations), {on_device.total});  // constants copied in once
    auto before = accel.stats();
    auto got = device.run(on_device.feeds(iterations), {on_device.total})[0];
    auto after = accel.stats();
    CHECK(got.equals(want));
    check_all_on(device, "recur/", "/stand_in:0");
    // The sum: no loop value, no predicate (computed in host memory).
    CHECK(after.bytes_copied_out - before.bytes_copied_out == 4);
    CHECK(after.launches - before.launches == 2 * iterations + 1);  // matmul, tanh; the sum
  }
  CHECK(no_loop_state_left());
  CHECK(settled_bytes_in_use(accel) == 0);
}

TEST_CASE("gradients through a loop on the stand-in keep its saved values in device memory") {
  auto rt = with_stand_in();
  auto& accel = stand_in_of(*rt);
  matmul_loop on_cpu("", true), on_device("/stand_in:0", true);
  session cpu(on_cpu.g, cpu_only()), device(on_device.g, rt);
  auto want = cpu.run(on_cpu.feeds(6), on_cpu.grads);
  device.run(on_device.feeds(6), on_device.grads);
  auto before = accel.stats();
  auto got = device.run(on_device.feeds(6), on_device.grads);
  auto after = accel.stats();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i].equals(want[i]));
  // The two gradients: no saved forward value, no gradient of an iteration,
  // and no predicate or iteration index (those are computed in host memory).
  CHECK(after.bytes_copied_out - before.bytes_copied_out == 2 * width * width * 4);
  CHECK(no_loop_state_left());
}

TEST_CASE("a loop's value fetched or read on the CPU comes as a host copy") {
  auto rt = with_stand_in();
  matmul_loop on_cpu("", false), on_device("/stand_in:0", false);
  output on_host;
  {
    auto scope = on_device.g.device_scope("/cpu:0");
    on_host = on_device.y * 2.0f;
  }
  session cpu(on_cpu.g, cpu_only()), device(on_device.g, rt);
  auto want = cpu.run(on_cpu.feeds(5), {on_cpu.y, on_cpu.total});
  device.run(on_device.feeds(5), {on_device.y, on_device.total, on_host});
  auto before = stand_in_of(*rt).stats();
  auto got = device.run(on_device.feeds(5), {on_device.y, on_device.total, on_host});
  // The exit copies y out once for the fetch and the CPU's node; the loop
  // itself copies nothing out.
  CHECK(stand_in_of(*rt).stats().bytes_copied_out - before.bytes_copied_out ==
        width * width * 4 + 4);
  CHECK(got[0].equals(want[0]));
  CHECK(got[1].equals(want[1]));
  CHECK(got[2].equals(run_kernel("mul", {want[0], tensor::scalar<float>(2)})[0]));
  CHECK(entry_of(device, on_host.name()).device == "/cpu:0");
  CHECK(no_loop_state_left());
}

TEST_CASE("a cond's branches run on the stand-in") {
  auto rt = with_stand_in();
  auto build = [](graph& g, const std::string& device) {
    std::optional<graph::scope_guard> scope;
    if (!device.empty()) scope.emplace(g.device_scope(device));
    auto x = placeholder(g, dtype::float32, shape{width, width}, "x");
    auto p = placeholder(g, dtype::boolean, shape{}, "p");
    auto y = cond(
        p, [&] { return tanh(matmul(x, x)); }, [&] { return x * 3.0f; }, "branch");
    return std::vector<output>{x, p, reduce_sum(y), gradients({reduce_sum(y)}, {x})[0]};
  };
  graph gc, gd;
  auto c = build(gc, ""), d = build(gd, "/stand_in:0");
  session cpu(gc, cpu_only()), device(gd, rt);
  random_source rnd;
  auto x = rnd.uniform(dtype::float32, shape{width, width}, -1, 1);
  for (bool p : {true, false}) {
    INFO("predicate " << p);
    auto want = cpu.run({{c[0], x}, {c[1], tensor::scalar<bool>(p)}}, {c[2], c[3]});
    auto got = device.run({{d[0], x}, {d[1], tensor::scalar<bool>(p)}}, {d[2], d[3]});
    CHECK(got[0].equals(want[0]));
    CHECK(got[1].equals(want[1]));
  }
  check_all_on(device, "branch/", "/stand_in:0");
}

TEST_CASE("a kernel that fails in a loop on the stand-in fails only its step") {
  auto rt = with_stand_in();
  graph g;
  auto scope = g.device_scope("/stand_in:0");
  auto n = placeholder(g, dtype::int32, shape{}, "n");
  auto array = make_tensor_array(g, dtype::float32, 4, shape{width}, false, "rows");
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], n); },
      [&](const std::vector<output>& v) {
        auto a = array.with(v[1], v[2])
                     .write(v[0], fill(g, shape{width}, 1.0) * cast(v[0], dtype::float32));
        return std::vector<output>{v[0] + scalar<int32_t>(g, 1), a.data, a.written};
      },
      {scalar<int32_t>(g, 0), array.data, array.written}, {.name = "fill_rows"});
  auto total = reduce_sum(array.with(outs[1], outs[2]).stack());
  session s(g, rt);
  CHECK(s.run({{n, tensor::scalar<int32_t>(4)}}, {total})[0].item<float>() == 6.0f * width);
  auto e = error_of([&] { s.run({{n, tensor::scalar<int32_t>(5)}}, {total}); });
  CHECK(e.find("fill_rows") != std::string::npos);
  CHECK(e.find("rows") != std::string::npos);
  CHECK(s.run({{n, tensor::scalar<int32_t>(3)}}, {total})[0].item<float>() == 3.0f * width);
  CHECK(no_loop_state_left());
}

TEST_CASE("the LSTM language model trains on the stand-in to the CPU's losses") {
  auto rt = with_stand_in();
  for (bool full : {false, true}) {
    INFO(std::string(full ? "full" : "sampled") << " softmax");
    auto want = testing::lm_losses(cpu_only(), "", full);
    std::vector<placement_entry> log;
    auto got = testing::lm_losses(rt, "/stand_in:0", full, &log);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i)
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
    CHECK(want.back() < want.front());
    // Every node of the model on the stand-in, the variables and their
    // slots included (the initializer's no_op, made here, has no hint).
    for (auto& e : log) {
      INFO(e.node << " (" << e.op << "): " << e.reason);
      CHECK((e.device == "/stand_in:0" || e.node == "init"));
    }
    CHECK(no_loop_state_left());
    CHECK(settled_bytes_in_use(stand_in_of(*rt)) == 0);  // the session took its memory along
  }
}

TEST_CASE("indices a device kernel checks on the host reach it in host memory") {
  auto rt = with_stand_in();
  graph g;
  auto scope = g.device_scope("/stand_in:0");
  auto table = placeholder(g, dtype::float32, shape{6, width}, "table");
  auto scores = placeholder(g, dtype::float32, shape{4, 6}, "scores");
  // argmax runs on the device (float input); gather takes its indices on the host.
  auto rows = gather(table, argmax(scores, 1), 0, "rows");
  session s(g, rt);
  random_source rnd;
  auto t = rnd.uniform(dtype::float32, shape{6, width});
  auto sc = rnd.uniform(dtype::float32, shape{4, 6});
  auto before = stand_in_of(*rt).stats();
  auto got = s.run({{table, t}, {scores, sc}}, {rows})[0];
  auto want = run_kernel("gather", {t, run_kernel("argmax", {sc}, {{"axis", int64_t{1}}})[0]});
  CHECK(got.equals(want[0]));
  CHECK(entry_of(s, "rows").device == "/stand_in:0");
  // The four int64 indices come out for the gather; then its rows for the fetch.
  CHECK(stand_in_of(*rt).stats().bytes_copied_out - before.bytes_copied_out ==
        4 * 8 + 4 * width * 4);
}
