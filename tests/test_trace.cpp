// Step timelines (actors/trace/step_trace.hpp), their Chrome trace JSON
// (actors/trace/chrome_trace.hpp) and the per-op statistics (actors/trace/op_profile.hpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "actors/session.hpp"
#include "actors/trace/chrome_trace.hpp"
#include "actors/trace/op_profile.hpp"
#include "apps/lib/step_observer.hpp"
#include "cluster_fixture.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;

namespace {

// x (fed) -> matmul (large enough for the device's pool) -> relu -> sum,
// and a variable updated in the same step.
struct traced_model {
  graph g;
  output x, product, activation, total, counted;
  variable counter;
  traced_model() {
    x = placeholder(g, dtype::float32, {128, 256}, "x");
    auto w = constant(g, tensor::from_vector<float>(std::vector<float>(256 * 64, 0.01f), {256, 64}),
                      "w");
    product = matmul(x, w, false, false, "product");
    activation = relu(product, "activation");
    total = reduce_sum(activation, {}, false, "total");
    counter = make_variable(scalar(g, 0.0f), "counter");
    counted = assign_add(counter, scalar(g, 1.0f), "count");
  }
  tensor batch() const {
    return tensor::from_vector<float>(std::vector<float>(128 * 256, 1.0f), {128, 256});
  }
};

const node_trace* find_node(const run_metadata& md, const std::string& name) {
  for (auto& t : md.nodes)
    if (t.node == name) return &t;
  return nullptr;
}

std::map<std::string, int> count_by_node(const run_metadata& md) {
  std::map<std::string, int> n;
  for (auto& t : md.nodes) ++n[t.node];
  return n;
}

}  // namespace

TEST_CASE("a traced step records each node's kernel, thread, times and output bytes") {
  traced_model m;
  session s(m.g);
  s.run({m.counter.initializer()});
  run_metadata md;
  auto out = s.run(run_options{.trace = true}, {{m.x, m.batch()}}, {m.total, m.counted}, {}, &md);
  CHECK(out[0].item<float>() == doctest::Approx(128 * 64 * 2.56f).epsilon(1e-4));
  CHECK(md.start_ns > 0);
  CHECK(md.end_ns >= md.start_ns);
  for (auto& t : md.nodes) {
    INFO(t.node);
    CHECK(t.ready_ns <= t.start_ns);
    CHECK(t.start_ns <= t.end_ns);
    CHECK(t.start_ns >= md.start_ns);
    CHECK(t.end_ns <= md.end_ns);
    CHECK(t.device == "/cpu:0");
  }
  auto* product = find_node(md, "product");
  REQUIRE(product != nullptr);
  CHECK(product->op == "matmul");
  CHECK(product->kind == trace_kind::kernel);
  CHECK(product->on_pool);  // 128x256x64: handed to the device's threads
  CHECK(product->thread != 0);
  CHECK(product->output_bytes == 128 * 64 * 4);
  CHECK(product->inputs == std::vector<std::string>{"x", "w"});
  auto* act = find_node(md, "activation");
  REQUIRE(act != nullptr);
  CHECK(act->inputs == std::vector<std::string>{"product"});
  CHECK(act->start_ns >= product->end_ns);  // it waited for the product's value
  auto* total = find_node(md, "total");
  REQUIRE(total != nullptr);
  CHECK(total->output_bytes == 4);
  // The update ran in the variable's actor: a request from the node's view.
  auto* count = find_node(md, "count");
  REQUIRE(count != nullptr);
  CHECK(count->kind == trace_kind::resource);
  CHECK(count->op == "assign_add");
  CHECK(count->output_bytes == 4);
  // Each node ran once, and nothing stays registered.
  for (auto& [name, n] : count_by_node(md)) CHECK_MESSAGE(n == 1, name);
  CHECK(traced_steps_in_flight() == 0);
}

TEST_CASE("an untraced step records nothing, and traced steps in flight stay apart") {
  traced_model m;
  session s(m.g);
  s.run({m.counter.initializer()});
  run_metadata plain;
  s.run(run_options{}, {{m.x, m.batch()}}, {m.total}, {}, &plain);
  CHECK(plain.nodes.empty());
  // Untraced steps in flight beside a traced one leave no record in it.
  std::vector<std::future<std::vector<tensor>>> others;
  for (int i = 0; i < 8; ++i) others.push_back(s.run_async({{m.x, m.batch()}}, {m.total}));
  run_metadata md;
  s.run(run_options{.trace = true}, {{m.x, m.batch()}}, {m.total}, {}, &md);
  for (auto& f : others) f.get();
  CHECK(find_node(md, "product") != nullptr);
  for (auto& [name, n] : count_by_node(md)) CHECK_MESSAGE(n == 1, name);
  CHECK(traced_steps_in_flight() == 0);
}

TEST_CASE("a failed step still returns the timeline of what ran") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1}, "x");
  auto doubled = mul(x, scalar(g, 2.0f), "doubled");
  auto bad = reshape(doubled, {3}, "bad");
  session s(g);
  run_metadata md;
  auto e = error_of([&] {
    s.run(run_options{.trace = true}, {{x, tensor::from_vector<float>({1, 2, 3, 4}, {4})}}, {bad},
          {}, &md);
  });
  CHECK(e.find("node 'bad'") != std::string::npos);
  CHECK(find_node(md, "doubled") != nullptr);
  CHECK(find_node(md, "bad") != nullptr);  // it ran, and failed
  CHECK(traced_steps_in_flight() == 0);
}

TEST_CASE("a loop's nodes are recorded per iteration with their frame") {
  graph g;
  auto i0 = scalar(g, 0);
  auto out = while_loop([&](const std::vector<output>& v) { return less(v[0], scalar(g, 5)); },
                        [&](const std::vector<output>& v) {
                          return std::vector<output>{add(v[0], scalar(g, 1), "step_up")};
                        },
                        {i0});
  session s(g);
  run_metadata md;
  CHECK(s.run(run_options{.trace = true}, {}, {out[0]}, {}, &md)[0].item<int32_t>() == 5);
  std::set<uint64_t> iterations;
  for (auto& t : md.nodes)
    if (t.op == "add") {
      CHECK(t.frame != 0);
      iterations.insert(t.iteration);
    }
  CHECK(iterations == std::set<uint64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("a node on an accelerator is recorded as a launch on its device") {
  auto rt = std::make_shared<runtime>(
      runtime_options{.compute_threads = 1, .gpus = 0, .stand_in_devices = 1});
  graph g;
  auto x = placeholder(g, dtype::float32, {4}, "x");
  output y;
  {
    auto d = g.device_scope("/stand_in:0");
    y = neg(x, "negated");
  }
  session s(g, rt);
  run_metadata md;
  s.run(run_options{.trace = true}, {{x, tensor::from_vector<float>({1, 2, 3, 4}, {4})}}, {y}, {},
        &md);
  auto* t = find_node(md, "negated");
  REQUIRE(t != nullptr);
  CHECK(t->kind == trace_kind::device);
  CHECK(t->device == "/stand_in:0");
  CHECK(t->output_bytes == 16);
  CHECK(t->start_ns <= t->end_ns);
}

TEST_CASE("the Chrome trace JSON has a track per thread, slices and flow arrows") {
  traced_model m;
  session s(m.g);
  s.run({m.counter.initializer()});
  run_metadata md;
  s.run(run_options{.trace = true}, {{m.x, m.batch()}}, {m.total, m.counted}, {}, &md);
  auto doc = nlohmann::json::parse(chrome_trace_json(md));
  REQUIRE(doc.contains("traceEvents"));
  std::set<std::string> slices, thread_names;
  std::map<uint64_t, int> flow_ends;  // id -> how many of s and f
  int async_begins = 0, async_ends = 0;
  for (auto& e : doc["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "X") {
      slices.insert(e["name"].get<std::string>());
      CHECK(e["dur"].get<double>() >= 0);
      CHECK(e["ts"].get<double>() >= 0);
    } else if (ph == "M" && e["name"] == "thread_name") {
      thread_names.insert(e["args"]["name"].get<std::string>());
    } else if (ph == "s" || ph == "f") {
      ++flow_ends[e["id"].get<uint64_t>()];
    } else if (ph == "b") {
      ++async_begins;
    } else if (ph == "e") {
      ++async_ends;
    }
  }
  CHECK(slices.count("product") == 1);
  CHECK(slices.count("activation") == 1);
  CHECK(async_begins == async_ends);
  CHECK(async_begins >= 1);  // the variable's update
  bool pool = false, worker = false;
  for (auto& n : thread_names) {
    pool |= n.find("/cpu:0 pool (TBB)") != std::string::npos;
    worker |= n.find("actors (CAF worker)") != std::string::npos;
  }
  CHECK(pool);
  CHECK(worker);
  REQUIRE(!flow_ends.empty());  // product -> activation -> total at least
  for (auto& [id, n] : flow_ends) CHECK(n == 2);
  CHECK(flow_ends.size() >= 2);

  // Written atomically; a path it cannot write names the file.
  auto dir = std::filesystem::temp_directory_path() / "actorflow_trace_test";
  std::filesystem::create_directories(dir);
  write_chrome_trace((dir / "step.json").string(), md);
  std::ifstream in(dir / "step.json");
  CHECK(nlohmann::json::parse(in)["traceEvents"].size() == doc["traceEvents"].size());
  std::ofstream(dir / "file") << "x";
  auto e = error_of([&] { write_chrome_trace((dir / "file" / "step.json").string(), md); });
  CHECK(e.find("file/step.json") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the op profile sums kernel time by op over steps") {
  traced_model m;
  session s(m.g);
  s.run({m.counter.initializer()});
  op_profile profile;
  for (int i = 0; i < 3; ++i) {
    run_metadata md;
    s.run(run_options{.trace = true}, {{m.x, m.batch()}}, {m.total, m.counted}, {}, &md);
    profile.add(md);
  }
  CHECK(profile.steps() == 3);
  auto rows = profile.top(100);
  std::map<std::string, op_profile::op_row> by_op;
  for (auto& r : rows) by_op[r.op] = r;
  REQUIRE(by_op.count("matmul") == 1);
  CHECK(by_op["matmul"].calls == 3);
  CHECK(by_op["matmul"].total_ms > 0);
  CHECK(by_op["matmul"].mean_us == doctest::Approx(1000 * by_op["matmul"].total_ms / 3));
  CHECK(by_op["assign_add"].calls == 3);
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].total_ms >= rows[i].total_ms);
  CHECK(profile.runtime_share() >= 0);
  CHECK(profile.runtime_share() <= 1);
  auto text = profile.table(5);
  CHECK(text.find("matmul") != std::string::npos);
  CHECK(text.find("3 steps") != std::string::npos);
  CHECK(profile.top(2).size() == 2);
}

TEST_CASE("actorflow-train's observer: a timeline it cannot write is a warning, the step goes on") {
  traced_model m;
  session s(m.g);
  s.run({m.counter.initializer()});
  auto dir = std::filesystem::temp_directory_path() / "actorflow_observer_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  apps::step_observer bad({.out = (dir / "file" / "out").string(), .trace_steps = {1, 2}});
  auto first = bad.run(s, 1, {{m.x, m.batch()}}, {m.total}, {});
  CHECK(first[0].item<float>() > 0);  // the step ran; its timeline had nowhere to go
  CHECK(bad.written().empty());
  apps::step_observer good({.out = (dir / "out").string(), .trace_steps = {2, 7}, .profile = true});
  for (int64_t n = 1; n <= 3; ++n) good.run(s, n, {{m.x, m.batch()}}, {m.total}, {});
  REQUIRE(good.written().size() == 1);
  CHECK(std::filesystem::exists(dir / "out" / "trace-2.json"));
  CHECK(good.profile().steps() == 3);
  std::ostringstream said;
  good.finish(3, said);
  CHECK(said.str().find("--trace-steps 7: the run ended at step 3") != std::string::npos);
  CHECK(said.str().find("profile of 3 steps") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a step across processes merges each task's records on the client's clock") {
  testing::test_cluster c;
  auto ps = c.start("ps", 0);
  graph g;
  auto x = placeholder(g, dtype::float32, {64, 64}, "x");
  output remote;
  {
    auto on_ps = g.device_scope("/job:ps/task:0");
    remote = matmul(x, x, false, false, "remote_product");
  }
  auto local = neg(remote, "local_neg");
  session s(g, c.connect());
  auto ones = tensor::from_vector<float>(std::vector<float>(64 * 64, 1.0f), {64, 64});
  s.run({{x, ones}}, {local});  // compiled and connected: the traced step is a plain one
  run_metadata md;
  auto out = s.run(run_options{.trace = true}, {{x, ones}}, {local}, {}, &md);
  CHECK(out[0].data<float>()[0] == -64.0f);
  const std::string ps_task = "/job:ps/task:0";
  REQUIRE(md.clock_offset_ns.count(ps_task) == 1);
  // One machine's monotonic clock: the true offset is 0, and the estimate's
  // error is at most half the round trip (long on a loaded machine).
  const int64_t offset = md.clock_offset_ns[ps_task];
  CHECK(std::abs(offset) < 1'000'000'000);
  auto* product = find_node(md, "remote_product");
  REQUIRE(product != nullptr);
  CHECK(product->task == ps_task);
  CHECK(product->output_bytes == 64 * 64 * 4);
  // The estimate moved the task's times by `offset` from where they were.
  const int64_t slack = std::abs(offset) + 1'000'000;
  CHECK(product->start_ns >= md.start_ns - slack);
  CHECK(product->end_ns <= md.end_ns + slack);
  // The product's value leaves the ps task by a send and arrives by a recv.
  const node_trace *send = nullptr, *recv = nullptr;
  for (auto& t : md.nodes) {
    if (t.kind == trace_kind::send && t.task == ps_task) send = &t;
    if (t.kind == trace_kind::recv && t.peer_task == ps_task) recv = &t;
  }
  REQUIRE(send != nullptr);
  REQUIRE(recv != nullptr);
  CHECK(send->output_bytes == 64 * 64 * 4);
  CHECK(recv->output_bytes == 64 * 64 * 4);
  CHECK(send->peer_task == "/job:worker/task:0");
  CHECK(recv->inputs == std::vector<std::string>{send->node});
  CHECK(find_node(md, "local_neg") != nullptr);
  // In the timeline: a process per task and an arrow from the send to the recv.
  auto doc = nlohmann::json::parse(chrome_trace_json(md));
  std::set<std::string> processes;
  std::map<uint64_t, std::set<int>> flow_pids;
  for (auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name")
      processes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "s" || e["ph"] == "f")
      flow_pids[e["id"].get<uint64_t>()].insert(e["pid"].get<int>());
  }
  CHECK(processes.count(ps_task) == 1);
  bool crosses = false;
  for (auto& [id, pids] : flow_pids) crosses |= pids.size() == 2;
  CHECK(crosses);
}
