// Placement, partitioning and execution across processes: real
// actorflow-node processes on 127.0.0.1, each started and reaped by the test.
#include <doctest/doctest.h>

#include <caf/io/all.hpp>
#include <filesystem>
#include <optional>
#include <thread>

#include "actors/caf_ext/network_backend.hpp"
#include "actors/checkpoint.hpp"
#include "actors/cluster/cluster.hpp"
#include "actors/cluster/distributed_executable.hpp"
#include "actors/compile/partition.hpp"
#include "actors/session.hpp"
#include "cluster_fixture.hpp"
#include "core/device_name.hpp"
#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/embedding.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/queue.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "ops/sync_replicas.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/test_certificates.hpp"

using namespace actorflow;
using actorflow::testing::child_process;
using actorflow::testing::code_of_failure;
using actorflow::testing::error_of;
using actorflow::testing::free_port;
using actorflow::testing::make_test_certificates;
using actorflow::testing::send_garbage;
using actorflow::testing::temp_dir;
using actorflow::testing::test_cluster;
using actorflow::testing::test_tls_files;
using namespace std::chrono_literals;

namespace {

// ---- a small model, placed over three tasks or on one -------------------------

struct small_model {
  output x, labels, loss, logits;
  operation init, train;
};

// Variables on the PS, the hidden layer on worker 1, the rest on the client.
small_model build_model(graph& g, bool placed) {
  auto on = [&](const char* device) { return g.device_scope(placed ? device : ""); };
  small_model m;
  m.x = placeholder(g, dtype::float32, {-1, 4}, "x");
  m.labels = placeholder(g, dtype::float32, {-1, 3}, "labels");
  variable w1, b1, w2;
  {
    auto ps = on("/job:ps/task:0");
    w1 = make_variable(glorot_uniform(g, {4, 8}, 1), "w1");
    b1 = make_variable(fill(g, {8}, 0.1), "b1");
    w2 = make_variable(glorot_uniform(g, {8, 3}, 2), "w2");
  }
  output hidden;
  {
    auto worker1 = on("/job:worker/task:1");
    hidden = relu(bias_add(matmul(m.x, w1), b1));
  }
  m.logits = matmul(hidden, w2);
  m.loss = reduce_mean(softmax_cross_entropy_with_logits(m.logits, m.labels).loss);
  m.train = sgd(0.5).minimize(m.loss);
  m.init = global_variables_initializer(g);
  return m;
}

feed_list batch_for(const small_model& m, int step) {
  std::vector<float> xs, ys;
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) xs.push_back(std::sin(0.3f * static_cast<float>(i * 4 + j + step)));
    for (int c = 0; c < 3; ++c) ys.push_back((i + step) % 3 == c ? 1.0f : 0.0f);
  }
  return {{m.x, tensor::from_vector(xs, shape{6, 4})},
          {m.labels, tensor::from_vector(ys, shape{6, 3})}};
}

// Losses of `steps` training steps (each fetched with its update).
std::vector<float> train_losses(session& s, const small_model& m, int steps) {
  s.run({m.init});
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i)
    losses.push_back(*s.run(batch_for(m, i), {m.loss}, {m.train}).at(0).data<float>());
  return losses;
}

// What `run` returns given a session over two real ps task processes.
template <class Run>
auto on_two_ps_tasks(graph& g, Run run) {
  test_cluster c;
  auto ps0 = c.start("ps", 0);
  auto ps1 = c.start("ps", 1);
  session s(g, c.connect());
  return run(s);
}

}  // namespace

// ---- device names and placement, in one process ---------------------------------

TEST_CASE("device names parse, print and merge in TensorFlow's form") {
  auto d = device_name::parse("/job:ps/replica:0/task:2/device:CPU:0");
  CHECK(d.job == "ps");
  CHECK(d.task == 2);
  CHECK(d.type == "cpu");
  CHECK(d.to_string() == "/job:ps/replica:0/task:2/cpu:0");
  CHECK(d.task_name("/job:worker/task:0") == "/job:ps/task:2");
  CHECK(device_name::parse("/cpu:0").task_name("/job:worker/task:3") == "/job:worker/task:3");
  CHECK(device_name::parse("/job:ps").task_name("") == "/job:ps/task:0");
  auto merged = device_name::parse("/cpu:0").merged_onto(device_name::parse("/job:worker/task:1"));
  CHECK(merged.to_string() == "/job:worker/task:1/cpu:0");
  // Another job drops the outer task index.
  CHECK(device_name::parse("/job:ps")
            .merged_onto(device_name::parse("/job:worker/task:1"))
            .to_string() == "/job:ps");
  for (auto bad : {"job:ps", "/job:", "/task:x", "/job:ps/task:-1", "/tpu:0", "/job:ps//cpu:0",
                   "/device:CPU"}) {
    auto e = error_of([&] { device_name::parse(bad); });
    CHECK_MESSAGE(e.find("[device] '" + std::string(bad) + "'") == 0, e);
  }
}

TEST_CASE("device scopes nest and replica_device_setter spreads variables over the ps tasks") {
  graph g;
  {
    auto outer = g.device_scope("/job:worker/task:1");
    auto inner = g.device_scope("/cpu:0");
    CHECK(scalar(g, 1.0f).node().device == "/job:worker/task:1/cpu:0");
  }
  CHECK(error_of([&] { g.device_scope("nonsense"); }).find("[device]") == 0);
  {
    auto setter = g.device_function_scope(replica_device_setter(2, "/job:worker/task:0"));
    auto a = make_variable(g, dtype::float32, {3}, "a");
    auto b = make_variable(g, dtype::float32, {3}, "b");
    auto c = make_variable(g, dtype::float32, {3}, "c");
    CHECK(a.value().node().device == "/job:ps/task:0");
    CHECK(b.value().node().device == "/job:ps/task:1");
    CHECK(c.value().node().device == "/job:ps/task:0");
    CHECK(neg(a).node().device == "/job:worker/task:0");
  }
  {
    auto setter = g.device_function_scope(replica_device_setter(2, "", ps_strategy::by_size));
    auto big = make_variable(g, dtype::float32, {1000}, "big");
    auto small1 = make_variable(g, dtype::float32, {10}, "small1");
    auto small2 = make_variable(g, dtype::float32, {10}, "small2");
    CHECK(big.value().node().device == "/job:ps/task:0");
    CHECK(small1.value().node().device == "/job:ps/task:1");
    CHECK(small2.value().node().device == "/job:ps/task:1");
  }
}

TEST_CASE("partitioning cuts edges into send/recv pairs, colocates updates and copies constants") {
  graph g;
  auto m = build_model(g, true);
  run_signature sig;
  sig.feeds = {m.x.ref(), m.labels.ref()};
  sig.fetches = {m.loss.ref()};
  sig.targets = {m.train.id()};
  auto tasks = place(g, sig, "/job:worker/task:0");
  for (auto& n : g.nodes()) {
    if (tasks[static_cast<size_t>(n.id)].empty()) continue;
    if (n.def->acts_on_resource()) {  // updates sit with their variable
      CHECK(tasks[static_cast<size_t>(n.id)] == tasks[static_cast<size_t>(n.inputs[0].node)]);
    }
    if (n.op == "variable" && n.name != "global_step")
      CHECK(tasks[static_cast<size_t>(n.id)] == "/job:ps/task:0");
  }
  auto parts = partition_graph(g, sig, "/job:worker/task:0");
  REQUIRE(parts.parts.size() == 3);
  CHECK(parts.parts[0].task == "/job:worker/task:0");
  CHECK(parts.parts[1].task == "/job:ps/task:0");
  CHECK(parts.parts[2].task == "/job:worker/task:1");
  CHECK(parts.parts[0].fetches == std::vector<std::string>{m.loss.name()});
  // Each cut edge has its send in one partition and its recv in another.
  for (auto& cut : parts.cuts) {
    CHECK(cut.send_task != cut.recv_task);
    const partition* from = nullptr;
    const partition* to = nullptr;
    for (auto& p : parts.parts) {
      if (p.task == cut.send_task) from = &p;
      if (p.task == cut.recv_task) to = &p;
    }
    REQUIRE(from);
    REQUIRE(to);
    CHECK(from->g->find(cut.send_name)->op == "send");
    CHECK(to->g->find(cut.recv_name)->op == "recv");
    CHECK(std::count(from->targets.begin(), from->targets.end(), cut.send_name) == 1);
  }
  // x goes to worker 1 once, though it has one consumer there; w1 and b1 too.
  CHECK(parts.parts[2].g->find("_recv/x/0/from/job_worker/task_0"));
  // No partition receives a constant: each gets its own copy.
  for (auto& p : parts.parts)
    for (auto& n : p.g->nodes())
      if (n.op == "recv") {
        auto peer = get_attr<std::string>(n.attrs, "peer", "recv");
        CHECK(peer.find("constant") == std::string::npos);
      }
  // Every partition graph survives the trip through Cap'n Proto bytes.
  for (auto& p : parts.parts) CHECK_NOTHROW(p.signature());
}

TEST_CASE("a grouping target waits for remote updates through their partitions, not a send") {
  graph g;
  variable v;
  {
    auto on_ps = g.device_scope("/job:ps/task:0");
    v = make_variable(scalar(g, 1.0f), "v");
  }
  auto update = assign_add(v, mul(v.value(), scalar(g, 2.0f)), "update");
  auto train = group(g, {operation(&g, update.ref().node)}, "train");
  run_signature sig;
  sig.targets = {train.id()};
  auto parts = partition_graph(g, sig, "/job:worker/task:0");
  REQUIRE(parts.parts.size() == 2);
  for (auto& cut : parts.cuts) CHECK(cut.send_name.find("control") == std::string::npos);
  auto& ps_targets = parts.parts[1].targets;
  CHECK(std::count(ps_targets.begin(), ps_targets.end(), "update") == 1);
  CHECK(parts.parts[0].g->find("train")->control_inputs.empty());
  // A no_op that is also waited for by another node keeps its control edge.
  graph g2;
  variable w;
  {
    auto on_ps = g2.device_scope("/job:ps/task:0");
    w = make_variable(scalar(g2, 1.0f), "w");
  }
  auto bump = assign_add(w, scalar(g2, 1.0f), "bump");
  auto grouped = group(g2, {operation(&g2, bump.ref().node)}, "grouped");
  output last;
  {
    auto deps = g2.control_dependencies({grouped});
    last = identity(scalar(g2, 3.0f), "last");
  }
  run_signature sig2;
  sig2.fetches = {last.ref()};
  sig2.targets = {grouped.id()};
  auto parts2 = partition_graph(g2, sig2, "/job:worker/task:0");
  int control_cuts = 0;
  for (auto& cut : parts2.cuts) control_cuts += cut.send_name.find("control") != std::string::npos;
  CHECK(control_cuts == 1);
}

TEST_CASE("a graph placed on other tasks needs a cluster; a GPU device is refused clearly") {
  graph g;
  auto m = build_model(g, true);
  session s(g);
  auto e = error_of([&] { s.run({m.init}); });
  CHECK_MESSAGE(
      e.find("is placed on /job:ps/task:0, but this session has no cluster") != std::string::npos,
      e);
  graph g2;
  output y;
  {
    auto gpu = g2.device_scope("/job:localhost/task:0/gpu:0");
    y = neg(scalar(g2, 1.0f));
  }
  session s2(g2);
  e = error_of([&] { s2.eval(y); });
  // The task that runs the node judges its device (actors/compile/placement.hpp).
  CHECK_MESSAGE(e.find("asks for device '/job:localhost/task:0/gpu:0'") != std::string::npos, e);
  CHECK_MESSAGE(e.find("(no GPU: ") != std::string::npos, e);
}

TEST_CASE("cluster descriptions from flags and from TF_CONFIG-style JSON") {
  auto spec = cluster_spec::from_hosts("127.0.0.1:2222", "h1:1,h2:2");
  CHECK(spec.num_tasks("worker") == 2);
  CHECK(spec.address("/job:worker/task:1").to_string() == "h2:2");
  CHECK(error_of([&] { spec.address("/job:chief/task:0"); }).find("no job 'chief'") !=
        std::string::npos);
  CHECK(error_of([&] { spec.address("/job:worker/task:2"); }).find("has 2 tasks") !=
        std::string::npos);
  std::string job;
  int index = -1;
  auto json = cluster_spec::from_json(
      R"({"cluster": {"ps": ["a:1"], "worker": ["b:2", "c:3"]}, "task": {"type": "worker", "index": 1}})",
      &job, &index);
  CHECK(job == "worker");
  CHECK(index == 1);
  CHECK(json.address("/job:ps/task:0").to_string() == "a:1");
  CHECK(error_of([] {
          cluster_spec::from_json("{\"cluster\": ", nullptr, nullptr);
        }).find("malformed cluster description") != std::string::npos);
  CHECK(error_of([] {
          cluster_spec::from_json(
              R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": -3}})");
        }) ==
        "[cluster] the task index in the cluster description must be a whole number, 0 or "
        "more, not -3");
  CHECK(error_of([] { cluster_spec::from_hosts("127.0.0.1:99999", ""); }).find("port") !=
        std::string::npos);
  CHECK(error_of([] { cluster_spec::from_hosts("nohost", ""); }).find("not host:port") !=
        std::string::npos);
}

// ---- across processes -------------------------------------------------------------

TEST_CASE("a tensor crosses the wire as a header and its bytes; a forged header is refused") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto original = tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f}, shape{2, 3});
  auto wire = [&](tensor t) {
    std::vector<char> bytes;
    caf::binary_serializer sink{sys, bytes};
    REQUIRE(!sink(t));
    return bytes;
  };
  auto load = [&](const std::vector<char>& bytes, tensor& out) {
    caf::binary_deserializer source{sys, bytes};
    auto err = source(out);
    return err ? sys.render(err) : std::string();
  };
  auto bytes = wire(original);
  // Header (bool, dtype, 2 dims, byte count) plus the 24 data bytes, nothing more.
  CHECK(bytes.size() < 24 + 40);
  tensor back;
  CHECK(load(bytes, back).empty());
  CHECK(back.to_string() == original.to_string());
  tensor none;
  CHECK(load(wire(tensor()), none).empty());
  CHECK(!none.valid());

  // The byte count is the 8 bytes just before the data, in network byte order.
  auto forged = bytes;
  auto claim = [&](uint64_t count) {
    for (int i = 0; i < 8; ++i)
      forged[forged.size() - 24 - 8 + static_cast<size_t>(i)] =
          static_cast<char>(count >> (56 - 8 * i));
  };
  claim(uint64_t{1} << 40);
  CHECK(load(forged, back).find("claims 1099511627776 bytes, more than the message holds") !=
        std::string::npos);
  claim(20);
  CHECK(load(forged, back).find("does not match the 20 bytes") != std::string::npos);
  auto truncated = std::vector<char>(bytes.begin(), bytes.end() - 5);
  CHECK(!load(truncated, back).empty());
  auto bad_dtype = bytes;
  bad_dtype[1] = 99;
  CHECK(load(bad_dtype, back).find("unknown dtype 99") != std::string::npos);
  CHECK(back.to_string() == original.to_string());  // a failed load leaves the target alone

  // bfloat16 crosses as two bytes an element, bit for bit.
  auto half = run_kernel("cast", {original}, {{"dtype", dtype::bfloat16}})[0];
  auto half_bytes = wire(half);
  CHECK(half_bytes.size() == bytes.size() - 12);
  tensor half_back;
  CHECK(load(half_bytes, half_back).empty());
  CHECK(half_back.type() == dtype::bfloat16);
  CHECK(half_back.equals(half));
}

TEST_CASE("a graph split over three processes gives exactly the single-process result") {
  test_cluster c;
  auto ps = c.start("ps", 0);
  auto worker1 = c.start("worker", 1);

  graph local_graph;
  auto local_model = build_model(local_graph, false);
  session local(local_graph);
  auto expected = train_losses(local, local_model, 8);

  graph g;
  auto m = build_model(g, true);
  session s(g, c.connect());
  auto losses = train_losses(s, m, 8);
  CHECK(losses == expected);  // bit for bit
  CHECK(losses.back() < losses.front());
  // Fetching a value computed on another task, and concurrent steps.
  std::vector<std::future<std::vector<tensor>>> futures;
  for (int i = 0; i < 8; ++i) futures.push_back(s.run_async(batch_for(m, i), {m.logits}));
  for (auto& f : futures) CHECK(f.get().at(0).dims() == shape{6, 3});
}

namespace {

// An embedding of 30 rows split in 3 shards over the two ps tasks (round
// robin), looked up by the client and trained with SGD.
struct embedding_model {
  output ids, loss;
  operation init, train;
  sync_replicas_ops sync;  // with `synchronous`: two replicas, in place of train
};

embedding_model build_embedding_model(graph& g, bool placed, bool synchronous = false) {
  std::optional<graph::scope_guard> setter;
  if (placed)
    setter.emplace(g.device_function_scope(replica_device_setter(2, "/job:worker/task:0")));
  embedding_model m;
  m.ids = placeholder(g, dtype::int64, {-1, 2}, "ids");
  auto table = make_partitioned_variable(
      g, shape{30, 4}, 3,
      [](graph& gr, shape dims, int k) { return glorot_uniform(gr, dims, 11 + k); }, "emb");
  auto w = make_variable(glorot_uniform(g, {4, 1}, 5), "w");
  auto rows = reduce_sum(embedding_lookup(table, m.ids), {1});  // (batch, 4)
  m.loss = reduce_mean(square(sub(matmul(rows, w), scalar(g, 0.5f))));
  sgd opt(0.3);
  if (synchronous)
    m.sync = sync_replicas(opt, m.loss, 2, 2, placed ? "/job:worker/task:0" : "");
  else
    m.train = opt.minimize(m.loss);
  m.init = global_variables_initializer(g);
  return m;
}

tensor embedding_ids(int step) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 8; ++i) ids.push_back((7 * i + 3 * step) % 30);
  return tensor::from_vector(ids, shape{4, 2});
}

// Synchronous steps: both replicas apply their gradients, the chief averages.
std::vector<float> sync_embedding_losses(session& s, const embedding_model& m) {
  s.run({m.init});
  s.run({m.sync.local_step_init});
  std::vector<float> losses;
  for (int step = 0; step < 5; ++step) {
    auto a = s.run_async({{m.ids, embedding_ids(step)}}, {m.loss}, {m.sync.worker_train});
    auto b = s.run_async({{m.ids, embedding_ids(step + 7)}}, {m.loss}, {m.sync.worker_train});
    s.run({m.sync.chief_update});
    losses.push_back(a.get().at(0).item<float>());
    losses.push_back(b.get().at(0).item<float>());
  }
  return losses;
}

std::vector<float> embedding_losses(session& s, const embedding_model& m) {
  s.run({m.init});
  std::vector<float> losses;
  for (int step = 0; step < 6; ++step)
    losses.push_back(
        s.run({{m.ids, embedding_ids(step)}}, {m.loss}, {m.train}).at(0).item<float>());
  return losses;
}

}  // namespace

TEST_CASE("an embedding split by rows over two ps tasks trains exactly as in one process") {
  graph local_graph;
  auto local_model = build_embedding_model(local_graph, false);
  session local(local_graph);
  auto expected = embedding_losses(local, local_model);

  graph g;
  auto m = build_embedding_model(g, true);
  // Only gathered rows and their gradients cross: every tensor the ps tasks
  // send or receive has an unknown first dim (rows of this batch), or is w.
  run_signature sig;
  sig.feeds = {m.ids.ref()};
  sig.fetches = {m.loss.ref()};
  sig.targets = {m.train.id()};
  auto parts = partition_graph(g, sig, "/job:worker/task:0");
  int shard_rows_sent = 0;
  for (auto& p : parts.parts)
    for (auto& n : p.g->nodes())
      if (n.op == "recv" && n.outputs[0].dims.rank() == 2 && n.outputs[0].dims[1] == 4) {
        CHECK_MESSAGE(n.outputs[0].dims[0] == -1, n.name << " " << n.outputs[0].dims.to_string());
        ++shard_rows_sent;
      }
  CHECK(shard_rows_sent == 6);  // 3 shards' rows to the client, their gradients back
  // On the ps tasks, SGD updates the rows the batch named, not whole shards.
  int row_updates = 0, dense_gradients = 0;
  for (auto& p : parts.parts)
    for (auto& n : p.g->nodes()) {
      row_updates += n.op == "apply_sgd_rows";
      dense_gradients += n.op == "scatter_add_like";
    }
  CHECK(row_updates == 3);
  CHECK(dense_gradients == 0);

  auto losses = on_two_ps_tasks(g, [&](session& s) { return embedding_losses(s, m); });
  CHECK(losses == expected);  // bit for bit
  CHECK(losses.back() < losses.front());
}

TEST_CASE("synchronous training of a split embedding accumulates rows on the ps tasks") {
  graph local_graph;
  auto local_model = build_embedding_model(local_graph, false, true);
  session local(local_graph);
  auto expected = sync_embedding_losses(local, local_model);

  graph g;
  auto m = build_embedding_model(g, true, true);
  // Each shard's gradient rows go to a sparse accumulator beside the shard;
  // the chief updates the averaged rows there. No shard-sized tensor is made
  // or sent: every rows tensor crossing has an unknown first dim.
  auto ops_on_ps = [&](run_signature sig) {
    std::map<std::string, int> count;
    for (auto& p : partition_graph(g, sig, "/job:worker/task:0").parts)
      for (auto& n : p.g->nodes()) {
        if (device_name::parse(p.task).job == "ps") ++count[n.op];
        if (n.op == "recv" && n.outputs[0].dims.rank() == 2 && n.outputs[0].dims[1] == 4)
          CHECK_MESSAGE(n.outputs[0].dims[0] == -1, n.name << " " << n.outputs[0].dims.to_string());
      }
    return count;
  };
  run_signature worker_step;
  worker_step.feeds = {m.ids.ref()};
  worker_step.targets = {m.sync.worker_train.id()};
  auto on_ps = ops_on_ps(worker_step);
  CHECK(on_ps["sparse_accumulator_apply_gradient"] == 3);
  CHECK(on_ps["accumulator_apply_gradient"] == 1);  // w's, dense
  CHECK(on_ps["scatter_add_like"] == 0);
  run_signature chief_step;
  chief_step.targets = {m.sync.chief_update.id()};
  on_ps = ops_on_ps(chief_step);
  CHECK(on_ps["sparse_accumulator_take_gradient"] == 3);
  CHECK(on_ps["apply_sgd_rows"] == 3);
  CHECK(on_ps["scatter_add_like"] == 0);

  auto losses = on_two_ps_tasks(g, [&](session& s) { return sync_embedding_losses(s, m); });
  CHECK(losses == expected);  // bit for bit
  CHECK(losses.back() < losses.front());
}

TEST_CASE("a kernel failing on a remote task names the node and the task; the session goes on") {
  test_cluster c;
  auto ps = c.start("ps", 0);
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, -1}, "x");
  output bad;
  {
    auto on_ps = g.device_scope("/job:ps/task:0");
    bad = matmul(x, x, false, false, "remote_matmul");
  }
  auto y = neg(bad);
  session s(g, c.connect());
  auto e = error_of([&] { s.run({{x, tensor::zeros(dtype::float32, {2, 3})}}, {y}); });
  CHECK_MESSAGE(e.find("(matmul) on /job:ps/task:0") != std::string::npos, e);
  CHECK_MESSAGE(e.find("remote_matmul") != std::string::npos, e);
  // The kind of failure crosses the processes with the message.
  CHECK(code_of_failure([&] {
          s.run({{x, tensor::zeros(dtype::float32, {2, 3})}}, {y});
        }) == error_code::invalid_argument);
  auto ok = s.run({{x, tensor::zeros(dtype::float32, {2, 2})}}, {y});
  CHECK(ok.at(0).dims() == shape{2, 2});
}

TEST_CASE("a task places its partition on its own devices; a device it lacks is named") {
  test_cluster c;
  auto ps = c.start("ps", 0, {"--cpu-devices", "2", "--stand-in-devices", "1"});
  graph g;
  auto x = placeholder(g, dtype::float32, {2, 2}, "x");
  output on_cpu1, on_stand_in, missing;
  {
    auto d = g.device_scope("/job:ps/task:0/cpu:1");
    on_cpu1 = matmul(x, x, false, false, "on_cpu1");
  }
  {
    auto d = g.device_scope("/job:ps/task:0/stand_in:0");
    on_stand_in = neg(on_cpu1, "on_stand_in");
  }
  {
    auto d = g.device_scope("/job:ps/task:0/cpu:2");
    missing = neg(x, "on_cpu2");
  }
  session s(g, c.connect());
  auto xs = tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  auto out = s.run({{x, xs}}, {on_cpu1, on_stand_in});
  CHECK(out[0].to_vector<float>() == std::vector<float>{7, 10, 15, 22});
  CHECK(out[1].to_vector<float>() == std::vector<float>{-7, -10, -15, -22});
  auto e = error_of([&] { s.run({{x, xs}}, {missing}); });
  CHECK_MESSAGE(
      e.find("node 'on_cpu2' asks for device '/job:ps/task:0/cpu:2', but this process "
             "has no /cpu:2; its devices: /cpu:0, /cpu:1, /stand_in:0") != std::string::npos,
      e);
  CHECK(s.run({{x, xs}}, {on_cpu1})[0].to_vector<float>() == std::vector<float>{7, 10, 15, 22});
}

TEST_CASE("cluster processes poll a while before they sleep; --idle-spin-us sets how long") {
  CHECK(cluster_runtime_options().idle_spin_us == default_cluster_idle_spin_us);
  CHECK(runtime_options{}.idle_spin_us == 0);  // a single process sleeps at once
  CHECK(error_of([] { runtime(runtime_options{.kernel_wait_spin_us = -1}); }) ==
        "[runtime] kernel_wait_spin_us must be >= 0");
  CHECK(error_of([] { runtime(runtime_options{.idle_spin_us = -1}); }) ==
        "[runtime] idle_spin_us must be >= 0");
  {
    runtime rt(cluster_runtime_options());
    CHECK(dynamic_cast<spinning_multiplexer*>(&rt.system().middleman().backend()) != nullptr);
  }
  // A ps task that sleeps at once, a client that polls: steps cross both ways.
  test_cluster c;
  auto ps = c.start("ps", 0, {"--idle-spin-us", "0"});
  graph g;
  auto x = placeholder(g, dtype::float32, {}, "x");
  std::optional<variable> total;
  output add_x;
  {
    auto on_ps = g.device_scope("/job:ps/task:0");
    total = make_variable(scalar(g, 0.0f), "total");
    add_x = assign_add(*total, x);
  }
  session s(g, c.connect({}, cluster_runtime_options()));
  s.run({total->initializer()});
  for (int i = 1; i <= 200; ++i) s.run({{x, tensor::scalar(float(i))}}, {add_x});
  CHECK(s.eval(total->value()).item<float>() == 20100.0f);
  // A negative value is refused, naming the flag.
  child_process bad({ACTORFLOW_NODE_BINARY, "--job", "ps", "--task", "1", "--ps-hosts",
                     c.ps_hosts(), "--idle-spin-us", "-5"});
  CHECK(bad.wait_exit(20s) != 0);
  CHECK_MESSAGE(bad.output().find("--idle-spin-us") != std::string::npos, bad.output());
}

TEST_CASE("a step that waits too long on a remote task fails after the step timeout, naming it") {
  test_cluster c;
  auto ps = c.start("ps", 0);
  graph g;
  output taken, one;
  operation put;
  {
    auto on_ps = g.device_scope("/job:ps/task:0");
    auto q = fifo_queue(g, {dtype::float32}, {shape{}}, 4, "q");
    taken = queue_dequeue(q, "take")[0];
    put = queue_enqueue(q, {scalar(g, 2.0f)}, "put");
    one = neg(scalar(g, -1.0f), "one");
  }
  cluster_options options;
  options.step_timeout = 300ms;
  session s(g, c.connect(options));
  auto start = std::chrono::steady_clock::now();
  auto e = error_of([&] { s.eval(taken); });  // the queue is empty: the dequeue waits
  auto waited = std::chrono::steady_clock::now() - start;
  CHECK(code_of_failure([&] { s.eval(taken); }) == error_code::deadline_exceeded);
  CHECK_MESSAGE(e.find("task /job:ps/task:0: did not finish step") != std::string::npos, e);
  CHECK_MESSAGE(e.find("within 300 ms") != std::string::npos, e);
  CHECK(waited >= 300ms);
  CHECK(waited < 5s);
  // The task and the session still serve other steps.
  CHECK(s.eval(one).item<float>() == 1.0f);
  for (int i = 0; i < 3; ++i) CHECK(s.eval(one).item<float>() == 1.0f);
  // The timed-out dequeue was cancelled on the ps task: the next element
  // goes to the next dequeue, not to the step that was given up.
  s.run({put});
  CHECK(s.eval(taken).item<float>() == 2.0f);
}

TEST_CASE("an unreachable task is an error naming it, within the connect timeout") {
  test_cluster c;  // nothing started
  graph g;
  output y;
  {
    auto on_ps = g.device_scope("/job:ps/task:0");
    y = neg(scalar(g, 1.0f));
  }
  cluster_options options;
  options.connect_timeout = 500ms;
  session s(g, c.connect(options));
  auto start = std::chrono::steady_clock::now();
  auto e = error_of([&] { s.eval(y); });
  CHECK_MESSAGE(e.find("cannot reach task /job:ps/task:0 at 127.0.0.1:" +
                       std::to_string(c.ps_port)) != std::string::npos,
                e);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("a killed ps task fails the step at once; restarted, the session restores it") {
  test_cluster c;
  auto dir = temp_dir("cluster-ckpt");
  auto ps = c.start("ps", 0);
  auto worker1 = c.start("worker", 1);
  graph g;
  auto m = build_model(g, true);
  auto cluster = c.connect();
  session s(g, cluster);
  auto before = train_losses(s, m, 3);
  // The session-level API on a cluster session: the ps task writes its own
  // shard; only the request and its answer cross the network.
  checkpoint_manager ckpt(dir);
  auto path = ckpt.save(s, 3);
  CHECK(std::filesystem::exists(path + "/ps-0.afck"));
  CHECK(std::filesystem::exists(path + "/MANIFEST"));
  auto loss_at_save = *s.run(batch_for(m, 3), {m.loss}).at(0).data<float>();
  train_losses(s, m, 2);  // moves on from the checkpoint

  ps->kill_now();  // kill -9
  auto start = std::chrono::steady_clock::now();
  error_code code = error_code::ok;
  auto e = error_of([&] {
    try {
      s.run(batch_for(m, 3), {m.loss});
    } catch (const error& failed) {
      code = failed.code();
      throw;
    }
  });
  CHECK_MESSAGE(e.find("/job:ps/task:0") != std::string::npos, e);
  CHECK_MESSAGE(code == error_code::unavailable, error_code_name(code));
  CHECK(std::chrono::steady_clock::now() - start < 30s);

  ps = c.start("ps", 0);  // back, without its variables
  auto unset = error_of([&] { s.run(batch_for(m, 3), {m.loss}); });
  CHECK_MESSAGE(unset.find("before it was initialized or restored") != std::string::npos, unset);
  auto r = ckpt.restore_latest(s);
  CHECK(r.restored);
  CHECK(r.step == 3);
  CHECK(r.errors.empty());
  // The session reconnected and registered again; the variables are as saved.
  CHECK(*s.run(batch_for(m, 3), {m.loss}).at(0).data<float>() == loss_at_save);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a cond whose branch runs on a ps task: dead values cross, gradients match one process") {
  auto build = [](graph& g, bool placed) {
    auto pred = placeholder(g, dtype::boolean, {}, "pred");
    auto x = placeholder(g, dtype::float64, {-1}, "x");
    auto y = cond(
        pred,
        [&] {
          auto on_ps = g.device_scope(placed ? "/job:ps/task:0" : "");
          return x * x * 3.0;
        },
        [&] { return x + 1.0; });
    auto grad = gradients({reduce_sum(y)}, {x})[0];
    return std::make_tuple(pred, x, y, grad);
  };
  graph local_graph, placed_graph;
  auto [lp, lx, ly, lgrad] = build(local_graph, false);
  auto [pp, px, py, pgrad] = build(placed_graph, true);
  test_cluster c;
  auto ps = c.start("ps", 0);
  session local(local_graph);
  session placed(placed_graph, c.connect());
  auto xv = tensor::from_vector<double>({0.5, -2.0}, shape{2});
  for (int round = 0; round < 3; ++round)
    for (bool p : {true, false, true}) {
      CAPTURE(p);
      auto want = local.run({{lp, tensor::scalar<bool>(p)}, {lx, xv}}, {ly, lgrad});
      auto got = placed.run({{pp, tensor::scalar<bool>(p)}, {px, xv}}, {py, pgrad});
      CHECK(got[0].to_vector<double>() == want[0].to_vector<double>());
      CHECK(got[1].to_vector<double>() == want[1].to_vector<double>());
    }
}

TEST_CASE("a loop whose body's matmul runs on a ps task: values and gradients match one process") {
  auto build = [](graph& g, bool placed) {
    auto n = placeholder(g, dtype::int64, {}, "n");
    auto x = placeholder(g, dtype::float64, {1, 3}, "x");
    auto w = placeholder(g, dtype::float64, {3, 3}, "w");
    auto outs = while_loop(
        [&](const std::vector<output>& v) { return less(v[0], n); },
        [&](const std::vector<output>& v) {
          output product;
          {
            auto on_ps = g.device_scope(placed ? "/job:ps/task:0" : "");
            product = matmul(v[1], w);
          }
          return std::vector<output>{v[0] + scalar<int64_t>(g, 1), tanh(product) + v[1] * 0.5};
        },
        {scalar<int64_t>(g, 0), x});
    auto loss = reduce_sum(square(outs[1]));
    auto grads = gradients({loss}, {x, w});
    return std::make_tuple(n, x, w, loss, grads[0], grads[1]);
  };
  graph local_graph, placed_graph;
  auto [ln, lx, lw, lloss, lgx, lgw] = build(local_graph, false);
  auto [pn, px, pw, ploss, pgx, pgw] = build(placed_graph, true);
  test_cluster c;
  auto ps = c.start("ps", 0);
  session local(local_graph);
  session placed(placed_graph, c.connect());
  auto xv = tensor::from_vector<double>({0.5, -0.2, 0.1}, shape{1, 3});
  auto wv =
      tensor::from_vector<double>({0.3, -0.1, 0.2, 0.4, 0.1, -0.5, 0.2, 0.3, 0.1}, shape{3, 3});
  for (int64_t iterations : {0, 1, 6}) {
    CAPTURE(iterations);
    auto nv = tensor::scalar<int64_t>(iterations);
    auto want = local.run({{ln, nv}, {lx, xv}, {lw, wv}}, {lloss, lgx, lgw});
    auto got = placed.run({{pn, nv}, {px, xv}, {pw, wv}}, {ploss, pgx, pgw});
    for (size_t i = 0; i < want.size(); ++i)
      CHECK(got[i].to_vector<double>() == want[i].to_vector<double>());
  }
}
