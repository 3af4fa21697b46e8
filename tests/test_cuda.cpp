// The CUDA device, what needs no GPU: the build switch, the placement error,
// the caching allocator over host memory with fake stream fences, the device
// actor's protocol over a CPU stand-in for streams, and the GPU kernel
// registry. What needs a GPU is in tests/cuda/ (the doctest suite "gpu", run
// by ctest as test_cuda_gpu): without a GPU it prints why and is reported
// as skipped.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "actors/compile/placement.hpp"
#include "actors/session.hpp"
#include "apps/lib/convnets.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/lstm_lm.hpp"
#include "cuda/cuda_test_util.hpp"
#include "devices/cuda/caching_allocator.hpp"
#include "devices/cuda/device_tensor.hpp"
#include "devices/cuda/gpu_device_actor.hpp"
#include "devices/cuda/gpu_kernel.hpp"
#include "devices/cuda/gpu_support.hpp"
#include "devices/stand_in/thread_streams.hpp"
#include "ops/math.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"

using namespace actorflow;
using namespace actorflow::gpu;
using namespace actorflow::testing;

// ---------------------------------------------------------------------------------------------
// The build switch

TEST_CASE("the library is built as CMake configured it (ACTORFLOW_CUDA)") {
  CHECK(built_with_cuda() == bool(ACTORFLOW_CUDA_CONFIGURED));
#if ACTORFLOW_HAS_CUDA
  CHECK(ACTORFLOW_CUDA_CONFIGURED == 1);
#else
  CHECK(ACTORFLOW_CUDA_CONFIGURED == 0);
#endif
  const auto& found = discover_gpus();
  if (!built_with_cuda()) {
    CHECK(found.count == 0);
    CHECK(found.reason.find("built without CUDA") != std::string::npos);
  }
  // Either GPUs or a reason, never neither.
  CHECK((found.count > 0) != !found.reason.empty());
}

TEST_CASE("a node placed on a GPU runs there, or is refused with the reason") {
  graph g;
  output y;
  {
    auto d = g.device_scope("/gpu:0");
    y = neg(scalar(g, 1.0f), "y");
  }
  session s(g);
  if (built_with_cuda() && discover_gpus().count > 0) {
    CHECK(s.eval(y).item<float>() == -1.0f);
    REQUIRE(!s.placement_log().empty());
    CHECK(s.placement_log().back().device == "/gpu:0");
    return;
  }
  auto e = error_of([&] { s.eval(y); });
  CHECK_MESSAGE(e.find("asks for device '/gpu:0'") != std::string::npos, e);
  CHECK_MESSAGE(e.find(gpu_placement_refusal()) != std::string::npos, e);
  if (!built_with_cuda())
    CHECK_MESSAGE(e.find("actorflow was built without CUDA (-DACTORFLOW_CUDA=OFF or no nvcc)") !=
                      std::string::npos,
                  e);
  else
    CHECK_MESSAGE(e.find("no CUDA device: ") != std::string::npos, e);
}

// ---------------------------------------------------------------------------------------------
// The caching allocator, over host memory

namespace {

// Streams whose work the test finishes by hand: a fence is done once its
// stream's "completed" counter has passed the work recorded before it.
struct fake_streams {
  std::map<int, int64_t> enqueued, completed;
  int64_t fences_made = 0;

  struct fake_fence : fence {
    fake_streams* owner;
    int stream;
    int64_t mark;
    fake_fence(fake_streams* o, int s, int64_t m) : owner(o), stream(s), mark(m) {}
    bool done() override { return owner->completed[stream] >= mark; }
  };

  void enqueue(int s) { enqueued[s] += 1; }
  void finish(int s) { completed[s] = enqueued[s]; }
  fence_factory factory() {
    return [this](int s) -> std::unique_ptr<fence> {
      fences_made += 1;
      return std::make_unique<fake_fence>(this, s, enqueued[s]);
    };
  }
};

// Counts what reaches the backend, over real host memory.
struct counting_backend : memory_backend {
  std::unique_ptr<memory_backend> host = make_host_backend();
  std::set<void*>* live;
  explicit counting_backend(std::set<void*>* l) : live(l) {}
  void* allocate(size_t bytes) override {
    void* p = host->allocate(bytes);
    live->insert(p);
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    live->erase(p);
    host->deallocate(p, bytes);
  }
  std::string name() const override { return "counting host"; }
};

}  // namespace

TEST_CASE("size classes: multiples of 512, at most a quarter above the request") {
  CHECK(caching_allocator::round_size(0) == 512);
  CHECK(caching_allocator::round_size(1) == 512);
  CHECK(caching_allocator::round_size(512) == 512);
  CHECK(caching_allocator::round_size(513) == 1024);
  CHECK(caching_allocator::round_size(1000) == 1024);
  CHECK(caching_allocator::round_size(1025) == 1536);
  CHECK(caching_allocator::round_size(4096) == 4096);
  CHECK(caching_allocator::round_size(4097) == 5120);
  CHECK(caching_allocator::round_size(size_t{1} << 20) == size_t{1} << 20);
  CHECK(caching_allocator::round_size((size_t{1} << 20) + 1) == (size_t{5} << 18));
  for (size_t n : {size_t{700}, size_t{3000}, size_t{123457}, size_t{9999999}}) {
    size_t r = caching_allocator::round_size(n);
    CHECK(r >= n);
    CHECK(r % 512 == 0);
    CHECK(double(r) <= double(n) * 1.25 + 512);
  }
}

TEST_CASE("a freed block is reused for a request of its size class; stats count it") {
  std::set<void*> live;
  caching_allocator a(std::make_unique<counting_backend>(&live), nullptr);
  void* p = a.allocate(1000, 0);
  CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
  auto s = a.stats();
  CHECK(s.bytes_in_use == 1024);
  CHECK(s.backend_allocations == 1);
  a.deallocate(p);
  s = a.stats();
  CHECK(s.bytes_in_use == 0);
  CHECK(s.bytes_pending == 1024);  // not fenced until the next allocate or collect
  a.collect();
  s = a.stats();
  CHECK(s.bytes_pending == 0);
  CHECK(s.bytes_cached == 1024);
  void* q = a.allocate(900, 0);  // same class (1024)
  CHECK(q == p);
  s = a.stats();
  CHECK(s.backend_allocations == 1);
  CHECK(s.reuses == 1);
  CHECK(s.bytes_cached == 0);
  void* r = a.allocate(2000, 0);  // another class: a new block
  CHECK(r != p);
  CHECK(a.stats().backend_allocations == 2);
  CHECK(a.stats().peak_bytes_in_use == 1024 + 2048);
  a.deallocate(q);
  a.deallocate(r);
  a.release_cached();
  s = a.stats();
  CHECK(s.bytes_cached == 0);
  CHECK(s.backend_frees == 2);
  CHECK(live.empty());
}

TEST_CASE("a block freed on a stream is not reused by another stream before that work is done") {
  std::set<void*> live;
  fake_streams streams;
  caching_allocator a(std::make_unique<counting_backend>(&live), streams.factory());
  void* p = a.allocate(4096, 1);
  streams.enqueue(1);  // a kernel on stream 1 uses p
  a.deallocate(p);
  void* q = a.allocate(4096, 2);  // stream 2 must not get p yet
  CHECK(q != p);
  CHECK(a.stats().backend_allocations == 2);
  CHECK(a.stats().bytes_pending == 4096);
  streams.finish(1);
  void* r = a.allocate(4096, 2);  // now it may
  CHECK(r == p);
  CHECK(a.stats().reuses == 1);
  a.deallocate(q);
  a.deallocate(r);
}

TEST_CASE("a block used on one stream goes straight to the next allocation on that stream") {
  std::set<void*> live;
  fake_streams streams;
  caching_allocator a(std::make_unique<counting_backend>(&live), streams.factory());
  void* p = a.allocate(4096, 1);
  streams.enqueue(1);
  a.deallocate(p);
  void* q = a.allocate(4096, 1);  // stream order makes this safe before the work is done
  CHECK(q == p);
  CHECK(a.stats().backend_allocations == 1);
  a.deallocate(q);
}

TEST_CASE("a block recorded on a second stream waits for both streams") {
  std::set<void*> live;
  fake_streams streams;
  caching_allocator a(std::make_unique<counting_backend>(&live), streams.factory());
  void* p = a.allocate(4096, 1);
  a.record_stream(p, 2);  // e.g. a copy engine reads it
  streams.enqueue(1);
  streams.enqueue(2);
  a.deallocate(p);
  CHECK(a.allocate(4096, 1) != p);  // no shortcut: stream 2 may still read it
  streams.finish(1);
  CHECK(a.allocate(4096, 1) != p);
  streams.finish(2);
  CHECK(a.allocate(4096, 1) == p);
  CHECK(a.stats().backend_allocations == 3);
  CHECK(error_of([&] { a.record_stream(reinterpret_cast<void*>(0x100), 1); }).find("not in use") !=
        std::string::npos);
}

TEST_CASE("pinned staging buffers are reused only after their copy is done") {
  // The host writes a staging buffer as soon as it gets it, outside stream
  // order, so even the same stream must wait for the copy that read it.
  std::set<void*> live;
  fake_streams streams;
  caching_allocator staging(std::make_unique<counting_backend>(&live), streams.factory(),
                            {.stream_ordered_reuse = false});
  void* p = staging.allocate(1 << 16, 3);
  streams.enqueue(3);  // the host-to-device copy from p
  staging.deallocate(p);
  void* q = staging.allocate(1 << 16, 3);
  CHECK(q != p);
  streams.finish(3);
  CHECK(staging.allocate(1 << 16, 3) == p);
  staging.deallocate(q);
}

TEST_CASE("deallocate records no fence; allocate and collect do, once per block") {
  std::set<void*> live;
  fake_streams streams;
  caching_allocator a(std::make_unique<counting_backend>(&live), streams.factory());
  void* p = a.allocate(100, 0);
  void* q = a.allocate(100, 0);
  a.record_stream(q, 1);
  a.deallocate(p);
  a.deallocate(q);
  CHECK(streams.fences_made == 0);  // safe from a stream callback: no CUDA call there
  a.collect();
  CHECK(streams.fences_made == 3);  // p on stream 0; q on streams 0 and 1
  a.collect();
  CHECK(streams.fences_made == 3);
  CHECK(a.stats().bytes_cached == 1024);  // no work was enqueued: both fences are done
}

TEST_CASE("a fence that cannot be recorded leaves its block queued, neither lost nor doubled") {
  std::set<void*> live;
  fake_streams streams;
  bool broken = true;
  auto factory = streams.factory();
  caching_allocator a(std::make_unique<counting_backend>(&live),
                      [&](int s) -> std::unique_ptr<fence> {
                        if (broken) fail("gpu memory", "cudaEventRecord: device lost");
                        return factory(s);
                      });
  void* p = a.allocate(4096, 0);
  a.deallocate(p);
  CHECK(error_of([&] { a.collect(); }).find("device lost") != std::string::npos);
  CHECK(a.stats().bytes_pending == 4096);
  broken = false;
  a.collect();
  CHECK(a.stats().bytes_cached == 4096);
  void* q = a.allocate(4096, 1);
  void* r = a.allocate(4096, 1);
  CHECK(q == p);
  CHECK(r != p);
  a.deallocate(q);
  a.deallocate(r);
}

TEST_CASE("out of memory: the cache is released and the backend asked again; then a clear error") {
  struct small_backend : memory_backend {
    std::unique_ptr<memory_backend> host = make_host_backend();
    size_t used = 0, limit = 4096;
    void* allocate(size_t bytes) override {
      if (used + bytes > limit) fail("gpu memory", "test device: out of memory");
      used += bytes;
      return host->allocate(bytes);
    }
    void deallocate(void* p, size_t bytes) noexcept override {
      used -= bytes;
      host->deallocate(p, bytes);
    }
    std::string name() const override { return "small"; }
  };
  caching_allocator a(std::make_unique<small_backend>(), nullptr);
  void* p = a.allocate(2048, 0);
  a.deallocate(p);
  a.collect();
  CHECK(a.stats().bytes_cached == 2048);
  void* q = a.allocate(4096, 0);  // needs the cached 2048 back first
  CHECK(q != nullptr);
  CHECK(a.stats().backend_frees == 1);
  auto e = error_of([&] { a.allocate(512, 0); });
  CHECK_MESSAGE(e.find("out of memory") != std::string::npos, e);
  CHECK_MESSAGE(e.find("4096 bytes in use") != std::string::npos, e);
  a.deallocate(q);
}

TEST_CASE("a device tensor gives its block back when its last handle drops") {
  std::set<void*> live;
  auto memory =
      std::make_shared<caching_allocator>(std::make_unique<counting_backend>(&live), nullptr);
  {
    auto t = device_tensor::allocate(memory, 0, dtype::float32, shape{10, 30});
    CHECK(t.size_bytes() == 1200);
    CHECK(memory->stats().bytes_in_use == 1536);
    auto view = t.reshaped(shape{300});
    CHECK(view.shares_buffer_with(t));
    CHECK(error_of([&] { t.reshaped(shape{7}); }).find("cannot reshape") != std::string::npos);
    CHECK(error_of([&] { t.data<double>(); }).find("accessed as float64") != std::string::npos);
    CHECK(memory->stats().bytes_in_use == 1536);
  }
  CHECK(memory->stats().bytes_in_use == 0);
  CHECK(memory->stats().bytes_pending + memory->stats().bytes_cached == 1536);
}

// ---------------------------------------------------------------------------------------------
// The device actor's protocol, over the stand-in's streams (devices/stand_in/thread_streams.hpp)

TEST_CASE("the device actor enqueues without waiting and reports completion as a message") {
  caf::actor_system_config cfg;
  caf::actor_system system(cfg);
  auto streams = std::make_shared<thread_streams>(2);
  auto device = spawn_gpu_device(system, streams);
  caf::scoped_actor self(system);

  // Stream 0's first task waits for a gate; the actor must still take the next
  // message and launch stream 1's work, which completes first.
  std::mutex gate_mutex;
  std::condition_variable gate;
  bool open = false;
  std::atomic<int> ran{0};
  self->send(device.actor, run_atom::value,
             gpu_task{0,
                      [&] {
                        std::unique_lock<std::mutex> l(gate_mutex);
                        gate.wait(l, [&] { return open; });
                        ran += 1;
                      },
                      1});
  self->send(device.actor, run_atom::value, gpu_task{1, [&] { ran += 10; }, 2});
  auto first = next_completion(self);
  const int ran_first = ran;
  {
    std::lock_guard<std::mutex> l(gate_mutex);
    open = true;
  }
  gate.notify_all();
  CHECK(first.id == 2);
  CHECK(first.error.empty());
  CHECK(ran_first == 10);
  auto second = next_completion(self);
  CHECK(second.id == 1);
  CHECK(second.error.empty());
  CHECK(ran == 11);

  // A failing kernel fails its stream: its completion and later ones say why.
  self->send(device.actor, run_atom::value,
             gpu_task{1, [] { throw error("[relu] kernel launch failed"); }, 3});
  self->send(device.actor, run_atom::value, gpu_task{1, [&] { ran += 100; }, 4});
  for (uint64_t want : {3, 4}) {
    auto c = next_completion(self);
    CHECK(c.id == want);
    CHECK(c.error == "[relu] kernel launch failed");
  }
  CHECK(ran == 11);

  // A bad stream is answered at once, with the reason.
  self->send(device.actor, run_atom::value, gpu_task{7, [] {}, 5});
  auto bad = next_completion(self);
  CHECK(bad.id == 5);
  CHECK(bad.error.find("stream 7 of 2") != std::string::npos);
  CHECK(drains(device));
  self->send_exit(device.actor, caf::exit_reason::user_shutdown);
}

namespace {

// Streams that enqueue on call, as a GPU's do: the work runs at launch; the
// stream "runs" it (when_done fires) only when the test says so.
class held_streams final : public gpu::stream_executor {
 public:
  int num_streams() const override { return 1; }
  bool enqueues_on_call() const override { return true; }
  void launch(int, std::function<void()> work) override { work(); }
  void when_done(int, std::function<void(std::string)> done) override {
    std::lock_guard<std::mutex> l(mutex);
    waiting.push_back(std::move(done));
  }
  void run_all() {
    std::vector<std::function<void(std::string)>> now;
    {
      std::lock_guard<std::mutex> l(mutex);
      now.swap(waiting);
    }
    for (auto& done : now) done("");
  }
  std::mutex mutex;
  std::vector<std::function<void(std::string)>> waiting;
};

}  // namespace

TEST_CASE("work whose results stay on the device is answered once enqueued, the rest once run") {
  caf::actor_system_config cfg;
  caf::actor_system system(cfg);
  auto streams = std::make_shared<held_streams>();
  auto device = spawn_gpu_device(system, streams);
  caf::scoped_actor self(system);
  gpu_task stays{0, [] {}, 1};
  stays.answer_on_enqueue = true;
  self->send(device.actor, run_atom::value, std::move(stays));
  auto c = next_completion(self);  // the stream has run nothing yet
  CHECK(c.id == 1);
  CHECK(c.error.empty());
  self->send(device.actor, run_atom::value, gpu_task{0, [] {}, 2});  // a copy to the host, say
  bool early = false;
  self->receive([&](gpu_done_atom, uint64_t, std::string) { early = true; },
                caf::after(std::chrono::milliseconds(200)) >> [] {});
  CHECK_FALSE(early);
  streams->run_all();
  CHECK(next_completion(self).id == 2);
  // A throwing work function is answered with its error either way.
  gpu_task bad{0, [] { throw error("[neg] out of memory"); }, 3};
  bad.answer_on_enqueue = true;
  self->send(device.actor, run_atom::value, std::move(bad));
  auto failed = next_completion(self);
  CHECK(failed.id == 3);
  CHECK(failed.error == "[neg] out of memory");
  self->send_exit(device.actor, caf::exit_reason::user_shutdown);
}

TEST_CASE("the device actor keeps nothing of a task once it is launched") {
  // A CUDA stream callback must not call CUDA, which releasing a device tensor
  // would do: what the work captured is gone before its completion arrives.
  caf::actor_system_config cfg;
  caf::actor_system system(cfg);
  auto streams = std::make_shared<thread_streams>(1);
  auto device = spawn_gpu_device(system, streams);
  caf::scoped_actor self(system);
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  self->send(device.actor, run_atom::value, gpu_task{0, [held] { (void)*held; }, 1});
  held.reset();
  auto c = next_completion(self);
  CHECK(c.id == 1);
  CHECK(watch.expired());
  self->send_exit(device.actor, caf::exit_reason::user_shutdown);
}

// ---------------------------------------------------------------------------------------------
// The GPU kernel registry (filled in CUDA builds, empty otherwise)

namespace {

// Ops a step runs without a kernel of its own: the runtime serves them (feeds,
// variables and their assignments), or they run once, at initialization.
bool runtime_or_init_op(const std::string& op) {
  static const std::set<std::string> ops{"placeholder", "variable",   "constant",
                                         "assign",      "assign_add", "random_uniform"};
  return ops.count(op) > 0;
}

std::set<std::string> training_ops(const std::string& model, const std::string& optimizer) {
  graph g;
  auto m = models::make_classifier(g, model, 1);
  auto images = placeholder(g, dtype::float32, shape{-1, 28, 28, 1}, "images");
  auto labels = placeholder(g, dtype::int32, shape{-1}, "labels");
  auto loss = models::mean_cross_entropy(m->logits(images), labels);
  make_optimizer(optimizer, 1e-3)->minimize(loss);
  std::set<std::string> ops;
  for (auto& n : g.nodes()) ops.insert(n.op);
  return ops;
}

}  // namespace

TEST_CASE("GPU kernels are registered for CUDA builds only, each for a known op") {
  auto all = gpu_kernel_registry::global().all();
  if (!built_with_cuda()) {
    CHECK(all.empty());
    return;
  }
  CHECK(all.size() > 50);
  for (auto* k : all) {
    INFO("GPU kernel '" << k->op << "'");
    const op_def* def = op_registry::global().find(k->op);
    REQUIRE(def != nullptr);
    CHECK(static_cast<bool>(k->update) == static_cast<bool>(def->update));
    CHECK(k->type_input < std::max(1, def->num_inputs));
  }
}

namespace {

// "op on dtype" for each node of g that a GPU could not run: no kernel for
// its input's dtype, or (a variable) no update kernel for an op applied to it.
std::string without_gpu_kernel(const graph& g) {
  std::set<std::string> missing;
  auto& kernels = gpu_kernel_registry::global();
  for (auto& n : g.nodes()) {
    // What the runtime routes, constants folded, variables (their ops are checked), and what
    // runs in host memory need no GPU kernel.
    const op_role role = n.def->role;
    if (routes_values(role) || role == op_role::constant || role == op_role::group ||
        role == op_role::variable)
      continue;
    if (!n.def->update && runs_in_host_memory(g, n)) continue;
    const gpu_kernel_def* k = kernels.find(n.op);
    if (n.def->update) {
      dtype t = g.at(n.inputs[0].node).outputs[0].type;
      if (!k || !k->update || !k->supports(t))
        missing.insert(n.op + " (update) on " + dtype_name(t));
      continue;
    }
    auto at = k ? static_cast<size_t>(k->type_input) : 0;
    dtype t = at < n.inputs.size()
                  ? g.at(n.inputs[at].node).outputs[size_t(n.inputs[at].index)].type
                  : dtype::float32;
    if (!k || !k->kernel || (at < n.inputs.size() && !k->supports(t)))
      missing.insert(n.op + " on " + dtype_name(t));
  }
  std::string list;
  for (auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  return list;
}

}  // namespace

TEST_CASE("every op of the LSTM language model and of Table 1's convnets has a GPU kernel") {
  if (!built_with_cuda()) return;
  for (bool full : {false, true})
    for (auto opt : {"adam", "lazy_adam", "adagrad"}) {
      graph g;
      lm::lm_config c;
      c.vocab = 1000;
      c.full_softmax = full;
      c.optimizer = opt;
      auto vars = lm::make_lm_variables(g, c);
      lm::make_training_graph(g, vars, c);
      lm::make_eval_graph(g, vars, c);
      INFO("lstm_lm, " << std::string(full ? "full" : "sampled") << " softmax, " << opt);
      CHECK(without_gpu_kernel(g) == "");
    }
  for (auto& name : models::convnet_names()) {
    graph g;
    auto net = models::make_convnet(g, name, 2);
    make_optimizer("sgd", 0.01)->minimize(net.loss);
    INFO(name);
    CHECK(without_gpu_kernel(g) == "");
  }
}

TEST_CASE("every op of an MLP and a CNN training step has a GPU kernel (CUDA builds)") {
  if (!built_with_cuda()) return;
  std::set<std::string> ops;
  for (auto model : {"mlp", "cnn"})
    for (auto opt : {"sgd", "momentum", "adam", "rmsprop", "adagrad"})
      for (auto& op : training_ops(model, opt)) ops.insert(op);
  CHECK(ops.count("conv2d_backprop_filter"));  // the graphs are what they should be
  for (auto& op : ops) {
    if (runtime_or_init_op(op)) continue;
    CHECK_MESSAGE(gpu_kernel_registry::global().find(op) != nullptr,
                  "op '" << op << "' of a training step has no GPU kernel");
  }
}
