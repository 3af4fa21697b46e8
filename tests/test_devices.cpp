// Several devices in one process: CPU devices with arenas of their own,
// placement inside a process (hints, colocation, defaults, its log and its
// errors), and model parallelism across two CPU devices.
#include <doctest/doctest.h>
#include <oneapi/tbb/task_scheduler_observer.h>

#include <atomic>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "actors/compile/placement.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "device_training.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/queue.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::entry_of;
using actorflow::testing::error_of;
using actorflow::testing::settled_bytes_in_use;
using actorflow::testing::stand_in_of;
using actorflow::testing::with_stand_in;

namespace {

// The tests below count and name devices: none asks for the GPU a machine may have.
std::shared_ptr<runtime> two_cpu_devices() {
  return std::make_shared<runtime>(
      runtime_options{.cpu_devices = 2, .compute_threads = 1, .gpus = 0});
}

// Which CPU device's arena the calling thread is in (-1: none), set by an
// observer on each arena as threads enter and leave it.
thread_local int arena_of_thread = -1;

class arena_probe : public tbb::task_scheduler_observer {
 public:
  arena_probe(tbb::task_arena& arena, int device)
      : task_scheduler_observer(arena), device_(device) {
    observe(true);
  }
  ~arena_probe() override { observe(false); }
  void on_scheduler_entry(bool) override { arena_of_thread = device_; }
  void on_scheduler_exit(bool) override { arena_of_thread = -1; }

 private:
  int device_;
};

// An expensive op (so the runtime hands it to its device) that says which
// device's arena ran it.
const op_registrar probe_op{op_def{
    .name = "test_device_probe",
    .num_inputs = 1,
    .infer =
        [](const shape_context&) {
          return std::vector<tensor_spec>{{dtype::int32, shape{}}};
        },
    .kernel = [](kernel_context& ctx) { ctx.outputs = {tensor::scalar<int32_t>(arena_of_thread)}; },
    .expensive = true,
    .summary = "test: the CPU device whose arena runs it",
    .not_differentiable = true}};

output probe(output x) {
  auto& n = x.owner().add_node("test_device_probe", {x});
  return output(&x.owner(), endpoint{n.id, 0});
}

tensor random_floats(shape dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  tensor t(dtype::float32, dims);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = u(rng);
  return t;
}

tensor random_labels(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  tensor t(dtype::int32, {n});
  for (int64_t i = 0; i < n; ++i) t.mutable_data<int32_t>()[i] = int32_t(rng() % 10);
  return t;
}

}  // namespace

TEST_CASE("a runtime has the CPU devices it is asked for, each with an arena of its own") {
  auto rt = std::make_shared<runtime>(
      runtime_options{.scheduler_threads = 2, .cpu_devices = 3, .compute_threads = 2, .gpus = 0});
  REQUIRE(rt->devices().size() == 3);
  for (int d = 0; d < 3; ++d) {
    auto& dev = rt->devices()[static_cast<size_t>(d)];
    CHECK(dev.name == "/cpu:" + std::to_string(d));
    CHECK(dev.type == "cpu");
    CHECK(rt->find_device("cpu", d) == &dev);
    // Its compute threads, and a slot for each scheduler thread to join.
    CHECK(dev.arena->max_concurrency() == 4);
  }
  CHECK(rt->devices()[0].arena != rt->devices()[1].arena);
  CHECK(rt->find_device("cpu", 3) == nullptr);
  CHECK(rt->find_device("gpu", 0) == nullptr);
  // The default divides the cores among the devices, at least one each.
  auto many = std::make_shared<runtime>(runtime_options{.cpu_devices = 64});
  CHECK(many->options().compute_threads == 1);
  for (int bad : {0, -1, 257})
    CHECK(error_of([&] {
            runtime r(runtime_options{.cpu_devices = bad});
          }).find("cpu_devices must be 1 to 256, not " + std::to_string(bad)) != std::string::npos);
}

TEST_CASE("a node's kernels run on the threads of the device it is placed on") {
  auto rt = two_cpu_devices();
  arena_probe on0(*rt->devices()[0].arena, 0), on1(*rt->devices()[1].arena, 1);
  graph g;
  auto x = placeholder(g, dtype::float32, {-1}, "x");
  output p_default, p0, p1, p_any;
  p_default = probe(x);
  {
    auto d = g.device_scope("/cpu:1");
    p1 = probe(x);
  }
  {
    auto d = g.device_scope("/device:CPU:0");
    p0 = probe(x);
  }
  {
    auto d = g.device_scope("/cpu:*");
    p_any = probe(x);
  }
  session s(g, rt);
  tensor big(dtype::float32, {32 * 1024});  // past the size kernels run inline at
  for (int round = 0; round < 5; ++round) {
    auto out = s.run({{x, big}}, {p_default, p0, p1, p_any});
    CHECK(out[0].item<int32_t>() == 0);
    CHECK(out[1].item<int32_t>() == 0);
    CHECK(out[2].item<int32_t>() == 1);
    CHECK(out[3].item<int32_t>() == 0);
  }
  CHECK(entry_of(s, p_default.name()).reason == "default");
  CHECK(entry_of(s, p1.name()).device == "/cpu:1");
  CHECK(entry_of(s, p1.name()).reason == "hint '/cpu:1'");
  CHECK(entry_of(s, p_any.name()).device == "/cpu:0");
}

TEST_CASE("updates sit with their variable and colocate_with follows its op") {
  auto rt = two_cpu_devices();
  graph g;
  variable v;
  {
    auto d = g.device_scope("/cpu:1");
    v = make_variable(fill(g, {4}, 0.0), "v");
  }
  output read, sum;
  operation bump;
  {
    auto d = g.device_scope("/cpu:0");  // ignored: an update runs where its variable is
    auto added = assign_add(v, fill(g, {4}, 1.0));
    bump = operation(&g, added.ref().node);
  }
  {
    auto c = g.colocate_with(bump);
    auto d = g.device_scope("/cpu:0");  // ignored too, as TensorFlow's colocate_with does
    read = identity(v.value(), "read");
    sum = reduce_sum(read, {}, false, "sum");
  }
  session s(g, rt);
  s.run({global_variables_initializer(g)});
  s.run({bump});
  CHECK(s.eval(sum).item<float>() == 4.0f);
  CHECK(entry_of(s, v.value().node().name).device == "/cpu:1");
  auto update = entry_of(s, bump.name());
  CHECK(update.device == "/cpu:1");
  CHECK(update.reason == "with its resource 'v'");
  auto colocated = entry_of(s, "read");
  CHECK(colocated.device == "/cpu:1");
  CHECK(colocated.reason == "colocated with 'v'");
  CHECK(to_string(s.placement_log()).find("read (identity) -> /cpu:1: colocated with 'v'") !=
        std::string::npos);
}

TEST_CASE("placement errors name the node and the device, and the session stays usable") {
  auto rt = two_cpu_devices();
  graph g;
  auto a = scalar(g, 2.0f);
  auto ok = a * 3.0f;
  output missing, gpu;
  {
    auto d = g.device_scope("/cpu:5");
    missing = neg(a, "on_cpu5");
  }
  {
    auto d = g.device_scope("/gpu:0");
    gpu = neg(a, "on_gpu");
  }
  session s(g, rt);
  auto e = error_of([&] { s.eval(missing); });
  CHECK_MESSAGE(e.find("node 'on_cpu5' asks for device '/cpu:5', but this process has no "
                       "/cpu:5; its devices: /cpu:0, /cpu:1") != std::string::npos,
                e);
  e = error_of([&] { s.eval(gpu); });
  CHECK_MESSAGE(e.find("node 'on_gpu' asks for device '/gpu:0'") != std::string::npos, e);
  CHECK_MESSAGE(e.find("(no GPU: ") != std::string::npos, e);
  CHECK(s.eval(ok).item<float>() == 6.0f);

  // Colocations a graph file could hold: with a node it lacks, or in a cycle.
  graph h;
  auto c = scalar(h, 1.0f);
  h.add_node_raw("neg", {c.ref()}, {}, {{colocate_attr, std::string("b")}}, "a", "");
  h.add_node_raw("neg", {c.ref()}, {}, {{colocate_attr, std::string("a")}}, "b", "");
  h.add_node_raw("neg", {c.ref()}, {}, {{colocate_attr, std::string("nowhere")}}, "lost", "");
  session t(h, rt);
  e = error_of([&] { t.run_by_name({}, {"b"}); });
  CHECK_MESSAGE(e.find("colocation cycle: 'b' -> 'a' -> 'b'") != std::string::npos, e);
  e = error_of([&] { t.run_by_name({}, {"lost"}); });
  CHECK_MESSAGE(
      e.find("node 'lost' is colocated with 'nowhere', which the graph lacks") != std::string::npos,
      e);
  CHECK(t.eval(c).item<float>() == 1.0f);
}

namespace {

struct mlp_run {
  std::vector<float> losses;
  std::map<std::string, variable_state> variables;
  std::vector<placement_entry> log;
};

// Trains the Fashion-MNIST MLP for a few Adam steps on two fixed random
// batches, in turn (so the loss falls).
mlp_run train_mlp(std::shared_ptr<runtime> rt, const std::vector<std::string>& devices) {
  constexpr int batch = 64;
  graph g;
  auto images = placeholder(g, dtype::float32, {batch, 28, 28, 1}, "images");
  auto labels = placeholder(g, dtype::int32, {batch}, "labels");
  auto net = models::make_classifier(g, "mlp", 3, devices);
  auto loss = models::mean_cross_entropy(net->logits(images), labels);
  auto train = adam(1e-3).minimize(loss);
  session s(g, rt);
  s.run({global_variables_initializer(g)});
  mlp_run out;
  for (uint32_t step = 0; step < 8; ++step) {
    feed_list feeds{{images, random_floats({batch, 28, 28, 1}, step % 2)},
                    {labels, random_labels(batch, step % 2)}};
    out.losses.push_back(s.run(feeds, {loss}, {train})[0].item<float>());
  }
  out.variables = s.snapshot_variables();
  out.log = s.placement_log();
  return out;
}

bool same_bits(const tensor& a, const tensor& b) { return a.equals(b); }

}  // namespace

TEST_CASE("an MLP split over two CPU devices trains to the same bits as on one") {
  auto one = train_mlp(std::make_shared<runtime>(runtime_options{.compute_threads = 1}), {});
  auto two = train_mlp(two_cpu_devices(), {"/cpu:0", "/cpu:1"});
  CHECK(one.losses == two.losses);
  CHECK(one.losses.back() < one.losses.front());
  REQUIRE(one.variables.size() == two.variables.size());
  for (auto& [name, state] : one.variables) {
    auto& other = two.variables.at(name);
    CHECK_MESSAGE(same_bits(state.value, other.value), name);
    for (auto& [slot, value] : state.slots)
      CHECK_MESSAGE(same_bits(value, other.slots.at(slot)), name << "/" << slot);
  }
  // fc1 (forward, gradient, update) on /cpu:0; fc2 and fc3 on /cpu:1.
  std::map<std::string, std::set<std::string>> devices_of_layer;
  for (auto& e : two.log)
    for (auto layer : {"fc1", "fc2", "fc3"})
      if (e.node.find(std::string(layer) + "/") != std::string::npos ||
          e.node.find(std::string("/") + layer) != std::string::npos)
        devices_of_layer[layer].insert(e.device);
  CHECK(devices_of_layer["fc1"] == std::set<std::string>{"/cpu:0"});
  CHECK(devices_of_layer["fc2"] == std::set<std::string>{"/cpu:1"});
  CHECK(devices_of_layer["fc3"] == std::set<std::string>{"/cpu:1"});
}

TEST_CASE("steps in flight pipeline through the two halves and give each batch's result") {
  auto rt_one = std::make_shared<runtime>(runtime_options{.compute_threads = 1});
  auto rt_two = two_cpu_devices();
  constexpr int batch = 32, steps = 16;
  auto logits_of = [&](std::shared_ptr<runtime> rt, std::vector<std::string> devices) {
    graph g;
    auto images = placeholder(g, dtype::float32, {batch, 28, 28, 1}, "images");
    auto net = models::make_classifier(g, "mlp", 4, devices);
    auto logits = net->logits(images);
    session s(g, rt);
    s.run({global_variables_initializer(g)});
    std::vector<std::future<std::vector<tensor>>> in_flight;
    for (uint32_t i = 0; i < steps; ++i)
      in_flight.push_back(
          s.run_async({{images, random_floats({batch, 28, 28, 1}, 100 + i)}}, {logits}));
    std::vector<tensor> out;
    for (auto& f : in_flight) out.push_back(f.get()[0]);
    return out;
  };
  auto one = logits_of(rt_one, {});
  auto two = logits_of(rt_two, {"/cpu:0", "/cpu:1"});
  REQUIRE(two.size() == one.size());
  for (size_t i = 0; i < one.size(); ++i) CHECK_MESSAGE(same_bits(one[i], two[i]), "batch " << i);
}

// ---------------------------------------------------------------------------------------------
// The accelerator stand-in: placement and execution on a device with memory of its own

TEST_CASE("nodes on the stand-in run there, and values cross to it and back only at the cuts") {
  auto rt = with_stand_in();
  auto& device = stand_in_of(*rt);
  graph g;
  auto x = placeholder(g, dtype::float32, {2, 3}, "x");
  auto w = constant(g, tensor::from_vector<float>({1, -1, 2, 0, 1, -2}, {3, 2}), "w");
  output product, activated, doubled;
  {
    auto d = g.device_scope("/stand_in:0");
    product = matmul(x, w, false, false, "product");
    activated = relu(product, "activated");
    doubled = activated * 2.0f;
  }
  auto total = reduce_sum(doubled, {}, false, "total");  // on /cpu:0
  auto owned = std::make_unique<session>(g, rt);
  session& s = *owned;
  auto xs = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  constexpr int steps = 3;
  for (int i = 0; i < steps; ++i) {
    auto out = s.run({{x, xs}}, {doubled, total});
    // (1,2,3).w = (1+4+3, -1+0-6) = (8, -7), (4,5,6).w = (4+10+6, -4+0-12) = (20, -16);
    // relu, then doubled.
    CHECK(out[0].to_vector<float>() == std::vector<float>{16, 0, 40, 0});
    CHECK(out[1].item<float>() == 56.0f);
  }
  auto stats = device.stats();
  CHECK(stats.launches == 3 * steps);
  // In: x each step, and w and the scalar 2 (constants folded into their
  // nodes) once, kept by their nodes; out: `doubled` once, for both of its
  // consumers off the device. product and activated never cross.
  CHECK(stats.bytes_copied_in == steps * 6 * 4 + 6 * 4 + 4);
  CHECK(stats.bytes_copied_out == steps * 4 * 4);
  CHECK(entry_of(s, "product").device == "/stand_in:0");
  CHECK(entry_of(s, "total").device == "/cpu:0");
  CHECK(stats.memory.backend_allocations < 3 * steps);  // the pool reuses its blocks
  CHECK(settled_bytes_in_use(device) > 0);              // the constants' copies
  owned.reset();
  CHECK(settled_bytes_in_use(device) == 0);
}

TEST_CASE("what the stand-in cannot run falls back to a CPU device, and the log says why") {
  auto rt = with_stand_in();
  graph g;
  variable v;
  output x, y, looped, queue, size;
  {
    auto d = g.device_scope("/stand_in:0");
    v = make_variable(fill(g, {3}, 1.0), "v");
    x = placeholder(g, dtype::float32, {3}, "x");
    y = neg(x + v.value(), "y");
    looped = while_loop(
        [](const std::vector<output>& vs) { return less(vs[0], scalar(vs[0].owner(), 5.0f)); },
        [](const std::vector<output>& vs) { return std::vector<output>{vs[0] + 1.0f}; },
        {scalar(g, 0.0f)}, {.name = "count"})[0];
    queue = fifo_queue(g, {dtype::float32}, {{3}}, 4, "q");
    size = queue_size(queue, "q_size");
  }
  session s(g, rt);
  s.run({global_variables_initializer(g)});
  auto out = s.run({{x, tensor::from_vector<float>({1, 2, 3}, {3})}}, {y, looped, size});
  CHECK(out[0].to_vector<float>() == std::vector<float>{-2, -3, -4});
  CHECK(out[1].item<float>() == 5.0f);
  CHECK(out[2].item<int32_t>() == 0);
  CHECK(entry_of(s, "y").device == "/stand_in:0");
  CHECK(entry_of(s, "v").device == "/stand_in:0");  // variables live there too
  CHECK(entry_of(s, "x").device == "/stand_in:0");  // its consumers copy the feed in
  for (auto& e : s.placement_log())  // a loop runs there too (tests/test_device_loops.cpp)
    if (e.node.rfind("count/", 0) == 0) CHECK(e.device == "/stand_in:0");
  // A queue's actor serves it on the host; its ops go with it.
  CHECK(entry_of(s, "q_size").device == "/cpu:0");
  CHECK(entry_of(s, "q_size").reason == "with its resource 'q'");
}

TEST_CASE("bfloat16 casts and products run on an accelerator whose kernels take bfloat16") {
  auto rt = with_stand_in();  // its kernels are the CPU's: bfloat16 ones included
  graph g;
  auto x = placeholder(g, dtype::float32, {2, 3}, "x");
  auto w = constant(g, tensor::from_vector<float>({1, -1, 2, 0, 1, -2}, {3, 2}), "w");
  output activated;
  {
    auto d = g.device_scope("/stand_in:0");
    auto product = matmul(cast(x, dtype::bfloat16, "narrow_x"),
                          cast(w, dtype::bfloat16, "narrow_w"), false, false, "product");
    activated = relu(cast(product, dtype::float32, "wide"), "activated");
  }
  session s(g, rt);
  auto out = s.run({{x, tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}}, {activated});
  CHECK(out[0].to_vector<float>() == std::vector<float>{8, 0, 20, 0});  // exact in bfloat16
  for (auto name : {"narrow_x", "product", "wide", "activated"}) {
    CAPTURE(name);
    CHECK(entry_of(s, name).device == "/stand_in:0");
  }
}

TEST_CASE("a kernel error on the stand-in fails its step only; the device goes on") {
  auto rt = with_stand_in();
  graph g;
  auto params = constant(g, tensor::from_vector<float>({10, 20, 30}, {3}), "params");
  auto idx = placeholder(g, dtype::int32, {2}, "idx");
  output picked;
  {
    auto d = g.device_scope("/stand_in:0");
    picked = gather(params, idx, 0, "picked");
  }
  auto owned = std::make_unique<session>(g, rt);
  session& s = *owned;
  auto e = error_of([&] { s.eval(picked, {{idx, tensor::from_vector<int32_t>({0, 7}, {2})}}); });
  CHECK_MESSAGE(e.find("node 'picked' (gather)") != std::string::npos, e);
  for (int i = 0; i < 3; ++i)
    CHECK(s.eval(picked, {{idx, tensor::from_vector<int32_t>({2, 0}, {2})}}).to_vector<float>() ==
          std::vector<float>{30, 10});
  owned.reset();  // with the copy of its constant `params`
  CHECK(settled_bytes_in_use(stand_in_of(*rt)) == 0);
}

TEST_CASE("the stand-in out of memory fails the step naming the node and the device") {
  auto rt = with_stand_in(64 * 1024);
  graph g;
  auto x = placeholder(g, dtype::float32, {-1}, "x");
  output y;
  {
    auto d = g.device_scope("/stand_in:0");
    y = neg(x, "y");
  }
  session s(g, rt);
  auto e = error_of([&] { s.eval(y, {{x, tensor(dtype::float32, {256 * 1024})}}); });
  CHECK_MESSAGE(e.find("node 'y' (neg)") != std::string::npos, e);
  CHECK_MESSAGE(e.find("[/stand_in:0] out of memory") != std::string::npos, e);
  CHECK(actorflow::testing::code_of_failure([&] {
          s.eval(y, {{x, tensor(dtype::float32, {256 * 1024})}});
        }) == error_code::resource_exhausted);
  auto small = s.eval(y, {{x, tensor::from_vector<float>({1, -2}, {2})}});
  CHECK(small.to_vector<float>() == std::vector<float>{-1, 2});
  CHECK(settled_bytes_in_use(stand_in_of(*rt)) == 0);
}

TEST_CASE("the MLP trains on the stand-in to the losses it has on the CPU") {
  auto cpu = train_mlp(std::make_shared<runtime>(runtime_options{.compute_threads = 1}), {});
  auto rt = with_stand_in();
  auto stand_in = train_mlp(rt, {"/stand_in:0"});
  REQUIRE(stand_in.losses.size() == cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    CHECK(stand_in.losses[i] == doctest::Approx(cpu.losses[i]).epsilon(1e-5));
  int on_device = 0;
  for (auto& e : stand_in.log) on_device += e.device == "/stand_in:0";
  CHECK(on_device > 20);  // forward and backward products, activations, gradients
  CHECK(settled_bytes_in_use(stand_in_of(*rt)) == 0);
}

// ---------------------------------------------------------------------------------------------
// The cost model's placement

TEST_CASE("the cost model spreads independent products over CPU devices and keeps chains") {
  auto rt = std::make_shared<runtime>(runtime_options{
      .cpu_devices = 2, .compute_threads = 1, .gpus = 0, .cost_model_placement = true});
  auto rates = rt->device_rates();
  REQUIRE(rates.size() == 2);
  for (auto& r : rates) CHECK(r.gflops > 0.1);
  graph g;
  auto x = placeholder(g, dtype::float32, {256, 256}, "x");
  auto w =
      constant(g, tensor::from_vector<float>(std::vector<float>(256 * 256, 0.01f), {256, 256}));
  auto left = matmul(x, w, false, false, "left");
  auto right = matmul(x, w, false, true, "right");
  auto chained = matmul(left, w, false, false, "chained");
  output pinned;
  {
    auto d = g.device_scope("/cpu:1");
    pinned = neg(chained, "pinned");
  }
  auto total = add(chained, right, "total");
  session s(g, rt);
  tensor ones(dtype::float32, {256, 256});
  for (int64_t i = 0; i < ones.num_elements(); ++i) ones.mutable_data<float>()[i] = 1.0f;
  auto out = s.run({{x, ones}}, {total, pinned});
  // Each product of ones and 0.01s sums 256 terms: 2.56; the chain's 2.56 * 2.56.
  CHECK(out[0].data<float>()[0] == doctest::Approx(2.56 * 2.56 + 2.56).epsilon(1e-4));
  auto l = entry_of(s, "left"), r = entry_of(s, "right"), c = entry_of(s, "chained");
  CHECK(l.device != r.device);
  CHECK(c.device == l.device);
  CHECK(l.reason.rfind("cost model: done at ", 0) == 0);
  CHECK(entry_of(s, "pinned").reason == "hint '/cpu:1'");
}

TEST_CASE("layers fuse on an accelerator that runs the fused ops (the stand-in runs them all)") {
  auto rt = with_stand_in();
  auto w = tensor::from_vector<float>({1, -2, 3, -4, 5, -6}, {3, 2});
  auto bias = tensor::from_vector<float>({0.5f, -0.5f}, {2});
  graph g;
  output x, layer;
  {
    auto d = g.device_scope("/stand_in:0");
    x = placeholder(g, dtype::float32, {4, 3}, "x");
    layer = relu(bias_add(matmul(x, constant(g, w)), constant(g, bias)), "layer");
  }
  session s(g, rt);
  auto input = tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -2, -3}, {4, 3});
  auto got = s.run({{x, input}}, {layer})[0];
  CHECK(entry_of(s, "layer").op == "fused_matmul");
  CHECK(entry_of(s, "layer").device == "/stand_in:0");
  auto product = run_kernel("matmul", {input, w})[0];
  CHECK(got.equals(run_kernel("relu", {run_kernel("bias_add", {product, bias})[0]})[0]));
}
