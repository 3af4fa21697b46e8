// The CUDA device. What needs no GPU runs everywhere: the build switch, the
// caching allocator over host memory with fake stream fences, the device
// actor's protocol over a CPU stand-in for streams, and the placement error.
// What needs a GPU (every registered GPU kernel against the CPU kernel, the
// optimizer updates, host/device copies, the device actor over real streams)
// runs when the build has CUDA and the machine a GPU; otherwise it prints
// why it was skipped, once, and passes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "devices/cuda/caching_allocator.hpp"
#include "devices/cuda/device_tensor.hpp"
#include "devices/cuda/gpu_device_actor.hpp"
#include "devices/cuda/gpu_kernel.hpp"
#include "devices/cuda/gpu_support.hpp"
#include "ops/math.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"

#if ACTORFLOW_HAS_CUDA
#include "devices/cuda/cuda_device.hpp"
#endif

using namespace actorflow;
using namespace actorflow::gpu;
using actorflow::testing::error_of;

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

TEST_CASE("a node placed on a GPU is refused with the reason") {
  graph g;
  output y;
  {
    auto d = g.device_scope("/gpu:0");
    y = neg(scalar(g, 1.0f));
  }
  session s(g);
  auto e = error_of([&] { s.eval(y); });
  CHECK_MESSAGE(e.find("asks for device '/gpu:0'") != std::string::npos, e);
  CHECK_MESSAGE(e.find(gpu_placement_refusal()) != std::string::npos, e);
  if (!built_with_cuda())
    CHECK_MESSAGE(e.find("actorflow was built without CUDA (-DACTORFLOW_CUDA=OFF or no nvcc)") !=
                      std::string::npos,
                  e);
  else if (discover_gpus().count == 0)
    CHECK_MESSAGE(e.find("no CUDA device: ") != std::string::npos, e);
  else
    CHECK_MESSAGE(e.find("does not run graph nodes on a GPU yet") != std::string::npos, e);
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
// The device actor's protocol, over a CPU stand-in for streams

namespace {

// Each stream is a thread running its work in order; when_done queues a
// marker behind the work. A throwing work item fails the stream for good, as
// an error does a CUDA stream.
class cpu_streams final : public stream_executor {
 public:
  explicit cpu_streams(int n) : queues_(static_cast<size_t>(n)) {
    for (auto& q : queues_) q.thread = std::thread([&q] { q.run(); });
  }
  ~cpu_streams() override {
    for (auto& q : queues_) {
      {
        std::lock_guard<std::mutex> lock(q.mutex);
        q.stop = true;
      }
      q.wake.notify_all();
      q.thread.join();
    }
  }
  int num_streams() const override { return static_cast<int>(queues_.size()); }
  void launch(int s, std::function<void()> work) override {
    queues_[static_cast<size_t>(s)].push([work = std::move(work)](std::string& error) {
      if (error.empty()) {
        try {
          work();
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
    });
  }
  void when_done(int s, std::function<void(std::string)> done) override {
    queues_[static_cast<size_t>(s)].push(
        [done = std::move(done)](std::string& error) { done(error); });
  }

 private:
  struct queue {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void(std::string&)>> items;
    bool stop = false;
    std::string error;  // sticky
    std::thread thread;
    void push(std::function<void(std::string&)> f) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        items.push_back(std::move(f));
      }
      wake.notify_one();
    }
    void run() {
      for (;;) {
        std::function<void(std::string&)> f;
        {
          std::unique_lock<std::mutex> lock(mutex);
          wake.wait(lock, [&] { return stop || !items.empty(); });
          if (items.empty()) return;
          f = std::move(items.front());
          items.pop_front();
        }
        f(error);
      }
    }
  };
  std::deque<queue> queues_;
};

}  // namespace

namespace {

struct completion {
  uint64_t id = 0;
  std::string error = "(no completion)";
};

// The next completion message; nothing may hang, so 30 s without one fails.
completion next_completion(caf::scoped_actor& self) {
  completion c;
  self->receive(
      [&](gpu_done_atom, uint64_t id, std::string error) {
        c.id = id;
        c.error = std::move(error);
      },
      caf::after(std::chrono::seconds(30)) >> [&] { FAIL_CHECK("no completion within 30 s"); });
  return c;
}

// Tasks in flight drop to zero just after their completion is sent.
bool drains(const gpu_device& device) {
  for (int i = 0; i < 1000 && device.in_flight->load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return device.in_flight->load() == 0;
}

}  // namespace

TEST_CASE("the device actor enqueues without waiting and reports completion as a message") {
  caf::actor_system_config cfg;
  caf::actor_system system(cfg);
  auto streams = std::make_shared<cpu_streams>(2);
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

TEST_CASE("the device actor keeps nothing of a task once it is launched") {
  // A CUDA stream callback must not call CUDA, which releasing a device tensor
  // would do: what the work captured is gone before its completion arrives.
  caf::actor_system_config cfg;
  caf::actor_system system(cfg);
  auto streams = std::make_shared<cpu_streams>(1);
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

// ---------------------------------------------------------------------------------------------
// Cases for the GPU kernels: random inputs, run on the CPU kernel and on the GPU kernel

namespace {

struct gpu_case {
  std::string label;
  std::vector<tensor> inputs;
  attr_map attrs;
  double tolerance = 0;  // 0: by dtype (1e-5 float32, 1e-12 float64, exact otherwise)
};

using case_list = std::vector<gpu_case>;

struct random_source {
  std::mt19937_64 engine{20240607};

  // Uniform in [lo, hi] (integers: whole numbers; bool: random bits).
  tensor uniform(dtype type, shape dims, double lo = -1, double hi = 1) {
    tensor t(type, std::move(dims));
    visit_dtype(type, [&](auto tag) {
      using T = decltype(tag);
      T* p = t.mutable_data<T>();
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        if constexpr (std::is_same_v<T, bool>)
          p[i] = (engine() & 1) != 0;
        else if constexpr (std::is_floating_point_v<T>)
          p[i] = static_cast<T>(std::uniform_real_distribution<double>(lo, hi)(engine));
        else
          p[i] = static_cast<T>(
              std::uniform_int_distribution<int64_t>(int64_t(lo), int64_t(hi))(engine));
      }
    });
    return t;
  }
  // Rows of probabilities (label distributions).
  tensor distribution(dtype type, int64_t rows, int64_t cols) {
    auto t = uniform(type, shape{rows, cols}, 0.01, 1);
    visit_floating(type, "test", [&](auto tag) {
      using T = decltype(tag);
      T* p = t.mutable_data<T>();
      for (int64_t r = 0; r < rows; ++r) {
        T sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += p[r * cols + c];
        for (int64_t c = 0; c < cols; ++c) p[r * cols + c] /= sum;
      }
    });
    return t;
  }
};

// Every element of a float tensor at position k * step set to `v` (NaN, inf).
tensor with_value_every(tensor t, int64_t step, double v) {
  visit_floating(t.type(), "test", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.mutable_data<T>();
    for (int64_t i = 0; i < t.num_elements(); i += step) p[i] = static_cast<T>(v);
  });
  return t;
}

const std::vector<dtype> floats{dtype::float32, dtype::float64};
const std::vector<dtype> signed_nums{dtype::float32, dtype::float64, dtype::int32, dtype::int64};
const std::vector<dtype> nums{dtype::float32, dtype::float64, dtype::int32, dtype::int64,
                              dtype::uint8};
const std::vector<dtype> every{dtype::float32, dtype::float64, dtype::int32,
                               dtype::int64,   dtype::uint8,   dtype::boolean};

std::string label_of(const std::string& what, dtype t) { return what + " " + dtype_name(t); }

attr_map axes_attrs(std::vector<int64_t> axes, bool keep_dims = false) {
  return {{"axes", std::move(axes)}, {"keep_dims", keep_dims}};
}

attr_map window_attrs(std::vector<int64_t> strides, const std::string& padding,
                      std::vector<int64_t> ksize = {}) {
  attr_map a{{"strides", std::move(strides)}, {"padding", padding}};
  if (!ksize.empty()) a["ksize"] = std::move(ksize);
  return a;
}

// The cases of every op that has a GPU kernel; the test fails for a kernel without any.
std::map<std::string, case_list> gpu_cases() {
  random_source rnd;
  std::map<std::string, case_list> cases;
  auto unary_cases = [&](const std::string& op, const std::vector<dtype>& types, double lo,
                         double hi) {
    for (dtype t : types) {
      cases[op].push_back({label_of("(3,257)", t), {rnd.uniform(t, shape{3, 257}, lo, hi)}});
      cases[op].push_back({label_of("scalar", t), {rnd.uniform(t, shape{}, lo, hi)}});
    }
  };
  for (auto op : {"exp", "sigmoid", "tanh"}) unary_cases(op, floats, -5, 5);
  for (auto op : {"log", "sqrt", "rsqrt"}) unary_cases(op, floats, 0.01, 10);
  unary_cases("reciprocal", floats, 0.1, 4);
  for (auto op : {"neg", "abs", "square", "sign"}) unary_cases(op, signed_nums, -100, 100);
  unary_cases("relu", nums, -100, 100);
  unary_cases("logical_not", {dtype::boolean}, 0, 1);
  for (dtype t : floats)
    cases["relu"].push_back(
        {label_of("NaN passes", t), {with_value_every(rnd.uniform(t, shape{64}), 7, NAN)}});

  // cast: saturation, NaN -> 0, to and from bool
  auto big = with_value_every(rnd.uniform(dtype::float32, shape{200}, -1e10, 1e10), 9, NAN);
  for (dtype to : {dtype::int32, dtype::int64, dtype::uint8, dtype::boolean, dtype::float64})
    cases["cast"].push_back({std::string("float32 -> ") + dtype_name(to), {big}, {{"dtype", to}}});
  for (dtype from : {dtype::int64, dtype::boolean, dtype::uint8, dtype::float64})
    cases["cast"].push_back({std::string(dtype_name(from)) + " -> float32",
                             {rnd.uniform(from, shape{100}, -300, 300)},
                             {{"dtype", dtype::float32}}});
  cases["cast"].push_back({"int32 -> uint8 wraps",
                           {rnd.uniform(dtype::int32, shape{100}, -1000, 1000)},
                           {{"dtype", dtype::uint8}}});

  // Derivative helpers: same-shape pairs.
  for (dtype t : nums)
    cases["relu_grad"].push_back(
        {label_of("(dy, x)", t),
         {rnd.uniform(t, shape{5, 40}, 0, 50), rnd.uniform(t, shape{5, 40}, -50, 50)}});
  for (auto op : {"sigmoid_grad", "tanh_grad", "sqrt_grad", "rsqrt_grad", "reciprocal_grad"})
    for (dtype t : floats)
      cases[op].push_back({label_of("(y, dy)", t),
                           {rnd.uniform(t, shape{5, 40}, 0.1, 1), rnd.uniform(t, shape{5, 40})}});

  // Broadcasting binary ops.
  const std::vector<std::pair<shape, shape>> pairs{{shape{6, 40}, shape{6, 40}},
                                                   {shape{4, 1, 5}, shape{3, 1}},
                                                   {shape{}, shape{2, 3}},
                                                   {shape{2, 1, 3, 1, 2}, shape{1, 4, 1, 5, 2}},
                                                   {shape{0, 3}, shape{3}}};
  auto binary_cases = [&](const std::string& op, const std::vector<dtype>& types, double lo,
                          double hi, double blo, double bhi) {
    for (dtype t : types)
      for (auto& [a, b] : pairs)
        cases[op].push_back({label_of(a.to_string() + " with " + b.to_string(), t),
                             {rnd.uniform(t, a, lo, hi), rnd.uniform(t, b, blo, bhi)}});
  };
  for (auto op : {"add", "sub", "mul", "maximum", "minimum"})
    binary_cases(op, nums, -100, 100, -100, 100);
  binary_cases("div", floats, -10, 10, 0.5, 3);
  binary_cases("pow", floats, 0.1, 3, -2, 2);
  for (dtype t : floats)
    cases["pow"].push_back(
        {label_of("squares", t), {rnd.uniform(t, shape{50}), tensor(t, shape{})}});
  for (auto& c : cases["pow"])
    if (c.label.rfind("squares", 0) == 0)
      visit_floating(c.inputs[1].type(), "test",
                     [&](auto tag) { c.inputs[1].mutable_data<decltype(tag)>()[0] = 2; });
  for (auto op : {"maximum", "minimum"})
    for (dtype t : floats)
      cases[op].push_back({label_of("NaN wins", t),
                           {with_value_every(rnd.uniform(t, shape{30}), 4, NAN),
                            with_value_every(rnd.uniform(t, shape{30}), 3, NAN)}});
  for (auto op : {"equal", "not_equal"}) binary_cases(op, every, 0, 3, 0, 3);
  for (auto op : {"less", "less_equal", "greater", "greater_equal"})
    binary_cases(op, nums, 0, 3, 0, 3);
  for (auto op : {"logical_and", "logical_or"}) binary_cases(op, {dtype::boolean}, 0, 1, 0, 1);
  for (dtype t : every)
    cases["select"].push_back(
        {label_of("cond (4,1), a (4,5), b (5)", t),
         {rnd.uniform(dtype::boolean, shape{4, 1}), rnd.uniform(t, shape{4, 5}, 0, 100),
          rnd.uniform(t, shape{5}, 0, 100)}});

  // Array ops.
  for (dtype t : every) {
    auto x = rnd.uniform(t, shape{6, 4}, 0, 9);
    cases["reshape"].push_back(
        {label_of("(6,4) -> (-1,8)", t), {x}, {{"shape", std::vector<int64_t>{-1, 8}}}});
    cases["reshape_like"].push_back(
        {label_of("like (3,8)", t), {x, rnd.uniform(dtype::float32, shape{3, 8})}});
    cases["expand_dims"].push_back({label_of("axis 1", t), {x}, {{"axis", int64_t{1}}}});
    cases["squeeze"].push_back({label_of("(6,1,4)", t), {x.reshaped(shape{6, 1, 4})}});
    cases["identity"].push_back({label_of("(6,4)", t), {x}});
    cases["stop_gradient"].push_back({label_of("(6,4)", t), {x}});
    cases["zeros_like"].push_back({label_of("(6,4)", t), {x}});
    cases["ones_like"].push_back({label_of("(6,4)", t), {x}});
    cases["size"].push_back({label_of("(6,4)", t), {x}});
    cases["transpose"].push_back({label_of("(2,3,4) perm (2,0,1)", t),
                                  {x.reshaped(shape{2, 3, 4})},
                                  {{"perm", std::vector<int64_t>{2, 0, 1}}}});
    cases["transpose"].push_back({label_of("reversed", t), {x}});
    cases["broadcast_to"].push_back({label_of("(6,1,4) -> (6,5,4)", t),
                                     {x.reshaped(shape{6, 1, 4})},
                                     {{"shape", std::vector<int64_t>{6, 5, 4}}}});
    cases["broadcast_like"].push_back(
        {label_of("(4) like (3,4)", t),
         {rnd.uniform(t, shape{4}, 0, 9), rnd.uniform(dtype::float32, shape{3, 4})}});
    cases["fill"].push_back(
        {label_of("(3,5) of 1", t),
         {},
         {{"shape", std::vector<int64_t>{3, 5}}, {"dtype", t}, {"value", 1.0}}});
  }

  // Reductions: trailing, leading, middle and scattered axes, keep_dims, long rows and columns
  // (split into parts), empty inputs.
  const std::vector<std::pair<shape, std::vector<int64_t>>> reductions{
      {shape{4, 5, 6}, {}},   {shape{4, 5, 6}, {2}},    {shape{4, 5, 6}, {0}},
      {shape{4, 5, 6}, {1}},  {shape{4, 5, 6}, {0, 2}}, {shape{3, 20000}, {1}},
      {shape{20000, 3}, {0}}, {shape{300, 700}, {0}},   {shape{0, 4}, {1}}};
  for (auto op : {"sum", "mean", "max", "min", "prod"})
    for (dtype t : nums)
      for (auto& [dims, axes] : reductions) {
        if (std::string(op) == "prod" && dims.num_elements() > 1000) continue;  // overflows
        const double lo = std::string(op) == "prod" ? 0.9 : (t == dtype::uint8 ? 0 : -100);
        const double hi = std::string(op) == "prod" ? 1.1 : 100;
        cases[op].push_back({label_of(dims.to_string() + " axes " + std::to_string(axes.size()), t),
                             {rnd.uniform(t, dims, lo, hi)},
                             axes_attrs(axes)});
      }
  for (dtype t : floats) {
    cases["sum"].push_back(
        {label_of("keep_dims", t), {rnd.uniform(t, shape{4, 5, 6})}, axes_attrs({-1}, true)});
    cases["sum"].push_back(
        {label_of("sum over an empty dim", t), {rnd.uniform(t, shape{4, 0})}, axes_attrs({1})});
    cases["mean"].push_back({label_of("mean over an empty dim is NaN", t),
                             {rnd.uniform(t, shape{4, 0})},
                             axes_attrs({1})});
    cases["max"].push_back({label_of("NaN wins", t),
                            {with_value_every(rnd.uniform(t, shape{8, 9}), 10, NAN)},
                            axes_attrs({1})});
  }
  for (auto op : {"argmax", "argmin"})
    for (dtype t : nums)
      for (int64_t axis : {0, 1, -1})
        cases[op].push_back({label_of("(7,9,5) axis " + std::to_string(axis) + ", ties", t),
                             {rnd.uniform(t, shape{7, 9, 5}, 0, 5)},
                             {{"axis", axis}}});
  for (dtype t : nums) {
    cases["sum_to_shape_of"].push_back(
        {label_of("(4,3,5) to (3,1)", t),
         {rnd.uniform(t, shape{4, 3, 5}, 0, 20), rnd.uniform(t, shape{3, 1})}});
    cases["bias_add_grad"].push_back(
        {label_of("(64,10)", t), {rnd.uniform(t, shape{64, 10}, 0, 20)}});
    cases["bias_add_grad"].push_back(
        {label_of("(2,3,4)", t), {rnd.uniform(t, shape{2, 3, 4}, 0, 20)}});
    cases["bias_add"].push_back(
        {label_of("(8,10) + (10)", t),
         {rnd.uniform(t, shape{8, 10}, 0, 20), rnd.uniform(t, shape{10}, 0, 20)}});
  }

  // Softmax and cross-entropy.
  for (dtype t : floats) {
    for (auto op : {"softmax", "log_softmax"}) {
      cases[op].push_back({label_of("(7,10)", t), {rnd.uniform(t, shape{7, 10}, -20, 20)}});
      cases[op].push_back(
          {label_of("(2,3,1000)", t), {rnd.uniform(t, shape{2, 3, 1000}, -20, 20)}});
    }
    cases["softmax_cross_entropy_with_logits"].push_back(
        {label_of("(9,10)", t),
         {rnd.uniform(t, shape{9, 10}, -20, 20), rnd.distribution(t, 9, 10)}});
    cases["softmax_cross_entropy_with_logits"].push_back(
        {label_of("(3,100)", t),
         {rnd.uniform(t, shape{3, 100}, -20, 20), rnd.distribution(t, 3, 100)}});
    for (dtype l : {dtype::int32, dtype::int64})
      cases["sparse_softmax_cross_entropy_with_logits"].push_back(
          {label_of(std::string("(33,10), labels ") + dtype_name(l), t),
           {rnd.uniform(t, shape{33, 10}, -20, 20), rnd.uniform(l, shape{33}, 0, 9)}});
  }

  // matmul: every transpose flag, batched on either side or both.
  struct mm {
    shape a, b;
    bool ta, tb;
  };
  const std::vector<mm> products{{shape{5, 7}, shape{7, 3}, false, false},
                                 {shape{7, 5}, shape{7, 3}, true, false},
                                 {shape{5, 7}, shape{3, 7}, false, true},
                                 {shape{7, 5}, shape{3, 7}, true, true},
                                 {shape{2, 5, 7}, shape{7, 3}, false, false},
                                 {shape{2, 7, 5}, shape{7, 3}, true, false},
                                 {shape{5, 7}, shape{2, 7, 3}, false, false},
                                 {shape{2, 5, 7}, shape{2, 3, 7}, false, true},
                                 {shape{64, 784}, shape{784, 512}, false, false},
                                 {shape{5, 0}, shape{0, 3}, false, false}};
  for (dtype t : floats)
    for (auto& p : products)
      cases["matmul"].push_back({label_of(p.a.to_string() + " x " + p.b.to_string() +
                                              (p.ta ? " ta" : "") + (p.tb ? " tb" : ""),
                                          t),
                                 {rnd.uniform(t, p.a), rnd.uniform(t, p.b)},
                                 {{"transpose_a", p.ta}, {"transpose_b", p.tb}},
                                 t == dtype::float32 ? 1e-4 : 0});

  // conv2d and its backprops: symmetric and TF's bottom-heavy SAME padding, strides, VALID.
  struct conv {
    shape x, f;
    std::vector<int64_t> strides;
    std::string padding;
    shape y;
  };
  const std::vector<conv> convs{
      {shape{2, 9, 9, 3}, shape{3, 3, 3, 4}, {1, 1}, "SAME", shape{2, 9, 9, 4}},
      {shape{2, 8, 8, 3}, shape{3, 3, 3, 4}, {2, 2}, "SAME", shape{2, 4, 4, 4}},
      {shape{1, 8, 7, 2}, shape{2, 2, 2, 3}, {1, 1}, "SAME", shape{1, 8, 7, 3}},
      {shape{2, 9, 9, 3}, shape{3, 3, 3, 4}, {2, 1}, "VALID", shape{2, 4, 7, 4}},
      {shape{2, 28, 28, 1}, shape{5, 5, 1, 32}, {1, 1}, "SAME", shape{2, 28, 28, 32}}};
  for (auto& c : convs) {
    const auto label = c.x.to_string() + " * " + c.f.to_string() + " " + c.padding + " strides " +
                       std::to_string(c.strides[0]) + "," + std::to_string(c.strides[1]);
    auto x = rnd.uniform(dtype::float32, c.x);
    auto f = rnd.uniform(dtype::float32, c.f);
    auto dy = rnd.uniform(dtype::float32, c.y);
    auto a = window_attrs(c.strides, c.padding);
    cases["conv2d"].push_back({label, {x, f}, a, 1e-4});
    cases["conv2d_backprop_input"].push_back({label, {x, f, dy}, a, 1e-4});
    cases["conv2d_backprop_filter"].push_back({label, {x, f, dy}, a, 1e-4});
  }

  // Pooling: odd SAME padding (bottom / right), VALID, overlapping windows.
  struct pool {
    shape x;
    std::vector<int64_t> ksize, strides;
    std::string padding;
  };
  const std::vector<pool> pools{{shape{2, 7, 7, 3}, {2, 2}, {2, 2}, "SAME"},
                                {shape{2, 7, 7, 3}, {2, 2}, {2, 2}, "VALID"},
                                {shape{1, 6, 5, 2}, {3, 3}, {1, 1}, "SAME"},
                                {shape{1, 6, 5, 2}, {3, 2}, {2, 1}, "SAME"}};
  for (dtype t : floats)
    for (auto& p : pools) {
      const auto label = label_of(p.x.to_string() + " ksize " + std::to_string(p.ksize[0]) + "," +
                                      std::to_string(p.ksize[1]) + " " + p.padding,
                                  t);
      auto a = window_attrs(p.strides, p.padding, p.ksize);
      auto x = rnd.uniform(t, p.x);
      auto y = run_kernel("max_pool", {x}, a)[0];
      auto dy = rnd.uniform(t, y.dims());
      cases["max_pool"].push_back({label, {x}, a});
      cases["avg_pool"].push_back({label, {x}, a});
      cases["max_pool_grad"].push_back({label, {x, y, dy}, a});
      cases["avg_pool_grad"].push_back({label, {x, dy}, a});
    }
  return cases;
}

double default_tolerance(dtype t) {
  return t == dtype::float32 ? 1e-5 : t == dtype::float64 ? 1e-12 : 0;
}

// "" when equal (floats within tol * (1 + |expected|), NaN equal to NaN), else what differs.
std::string compare(const tensor& got, const tensor& want, double tol) {
  if (got.type() != want.type())
    return std::string("dtype ") + dtype_name(got.type()) + ", expected " + dtype_name(want.type());
  if (got.dims() != want.dims())
    return "shape " + got.dims().to_string() + ", expected " + want.dims().to_string();
  std::string diff;
  visit_dtype(got.type(), [&](auto tag) {
    using T = decltype(tag);
    const T* a = got.data<T>();
    const T* e = want.data<T>();
    for (int64_t i = 0; i < got.num_elements() && diff.empty(); ++i) {
      bool same = a[i] == e[i];
      if constexpr (std::is_floating_point_v<T>)
        same = same || (std::isnan(a[i]) && std::isnan(e[i])) ||
               std::abs(double(a[i]) - double(e[i])) <= tol * (1 + std::abs(double(e[i])));
      if (!same)
        diff = "element " + std::to_string(i) + ": got " + std::to_string(double(a[i])) +
               ", expected " + std::to_string(double(e[i]));
    }
  });
  return diff;
}

// The dtype a GPU kernel is selected by, for a case's inputs.
dtype key_type(const gpu_kernel_def& k, const gpu_case& c) {
  if (k.update || c.inputs.empty())
    return c.attrs.count("dtype") ? std::get<dtype>(c.attrs.at("dtype")) : dtype::float32;
  return c.inputs[static_cast<size_t>(k.type_input)].type();
}

}  // namespace

TEST_CASE("every GPU kernel has cases, and they are valid inputs of the CPU kernel") {
  auto cases = gpu_cases();
  for (auto* k : gpu_kernel_registry::global().all()) {
    if (k->update) continue;  // the optimizer updates have their own test
    INFO("GPU kernel '" << k->op << "'");
    auto it = cases.find(k->op);
    REQUIRE_MESSAGE(it != cases.end(), "no cases for the GPU kernel of '" << k->op << "'");
    std::set<dtype> covered;
    for (auto& c : it->second) {
      INFO("case " << c.label);
      CHECK_NOTHROW(run_kernel(k->op, c.inputs, c.attrs));
      if (k->supports(key_type(*k, c))) covered.insert(key_type(*k, c));
    }
    for (dtype t : k->types)
      CHECK_MESSAGE(covered.count(t), "no case for " << std::string(dtype_name(t)));
  }
  // And no cases for kernels that do not exist (a misspelt op would test nothing).
  if (built_with_cuda())
    for (auto& [op, list] : cases)
      CHECK_MESSAGE(gpu_kernel_registry::global().find(op) != nullptr, "cases for '" << op << "'");
}

// ---------------------------------------------------------------------------------------------
// On the GPU. Without one (or without CUDA) each case prints why and passes; the reason is
// printed once.

namespace {

#if ACTORFLOW_HAS_CUDA
using gpu_device_ptr = std::unique_ptr<cuda_device>;
#else
using gpu_device_ptr = std::unique_ptr<int>;  // never set
#endif

struct gpu_under_test {
  gpu_device_ptr device;
  std::string skip_reason;
};

gpu_under_test& the_gpu() {
  static gpu_under_test gpu = [] {
    gpu_under_test g;
#if ACTORFLOW_HAS_CUDA
    const auto& found = discover_gpus();
    if (found.count == 0) {
      g.skip_reason = found.reason;
    } else {
      try {
        g.device = std::make_unique<cuda_device>();
        std::cout << "GPU tests run on " << g.device->description() << std::endl;
      } catch (const error& e) {
        g.skip_reason = e.what();
      }
    }
#else
    g.skip_reason = gpu_placement_refusal();
#endif
    if (!g.device) std::cout << "GPU tests skipped: " << g.skip_reason << std::endl;
    return g;
  }();
  return gpu;
}

// True when the GPU tests can run; otherwise the reason has been printed.
bool have_gpu() { return static_cast<bool>(the_gpu().device); }

}  // namespace

TEST_SUITE("gpu") {
#if ACTORFLOW_HAS_CUDA

  namespace {

  std::vector<device_tensor> upload_all(cuda_device& dev, const std::vector<tensor>& host) {
    std::vector<device_tensor> out;
    for (auto& t : host) out.push_back(dev.upload(t));
    return out;
  }

  std::vector<tensor> run_on_gpu(cuda_device& dev, const std::string& op,
                                 const std::vector<tensor>& inputs, const attr_map& attrs) {
    auto outs = dev.run_kernel(op, upload_all(dev, inputs), attrs);
    std::vector<tensor> host;
    for (auto& t : outs) host.push_back(dev.copy_to_host(t));
    return host;
  }

  }  // namespace

  TEST_CASE("every GPU kernel computes what its CPU kernel does") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    auto cases = gpu_cases();
    int64_t runs = 0;
    for (auto* k : gpu_kernel_registry::global().all()) {
      if (k->update) continue;
      for (auto& c : cases[k->op]) {
        if (!k->supports(key_type(*k, c))) continue;
        INFO("op '" << k->op << "' case " << c.label);
        auto want = run_kernel(k->op, c.inputs, c.attrs);
        std::vector<tensor> got;
        try {
          got = run_on_gpu(dev, k->op, c.inputs, c.attrs);
        } catch (const std::exception& e) {
          FAIL_CHECK("threw: " << e.what());
          continue;
        }
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          const double tol = c.tolerance > 0 ? c.tolerance : default_tolerance(want[i].type());
          auto diff = compare(got[i], want[i], tol);
          CHECK_MESSAGE(diff.empty(), "output " << i << ": " << diff);
        }
        ++runs;
      }
    }
    CHECK(runs > 300);
    dev.synchronize();
  }

  TEST_CASE("the fused optimizer updates match the CPU updates, step after step") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    const std::vector<std::pair<std::string, attr_map>> updates{
        {"apply_sgd", {{"weight_decay", 0.01}}},
        {"apply_momentum", {{"momentum", 0.9}}},
        {"apply_momentum", {{"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 0.01}}},
        {"apply_adam", {{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}}},
        {"apply_rmsprop", {{"rho", 0.9}, {"epsilon", 1e-8}}},
        {"apply_rmsprop", {{"rho", 0.9}, {"epsilon", 1e-8}, {"momentum", 0.5}}},
        {"apply_adagrad", {{"epsilon", 1e-10}, {"initial_accumulator", 0.1}}}};
    for (dtype t : floats)
      for (dtype lr_type : floats)
        for (auto& [op, attrs] : updates) {
          INFO(op << " " << dtype_name(t) << ", learning rate " << dtype_name(lr_type));
          const auto& def = op_registry::global().get(op);
          variable_state cpu;
          cpu.value = rnd.uniform(t, shape{1000});
          gpu_variable_state gpu;
          gpu.value = dev.upload(cpu.value);
          for (int step = 0; step < 3; ++step) {
            auto grad = rnd.uniform(t, shape{1000});
            tensor lr = lr_type == dtype::float32 ? tensor::scalar<float>(0.01f)
                                                  : tensor::scalar<double>(0.01);
            std::string name = op;
            kernel_context ctx{def.name, name, attrs, {grad, lr}, {}, 0};
            def.update(cpu, ctx);
            auto out = dev.run_update(op, gpu, {dev.upload(grad), dev.upload(lr)}, attrs);
            REQUIRE(out.size() == 1);
            auto diff = compare(dev.copy_to_host(out[0]), cpu.value, default_tolerance(t) * 10);
            CHECK_MESSAGE(diff.empty(), "step " << step << ": " << diff);
          }
          for (auto& [slot, value] : cpu.slots) {
            if (value.type() == dtype::int64) continue;  // Adam's step count: a host counter
            REQUIRE_MESSAGE(gpu.slots.count(slot), "slot " << slot);
            auto diff =
                compare(dev.copy_to_host(gpu.slots[slot]), value, default_tolerance(t) * 10);
            CHECK_MESSAGE(diff.empty(), "slot " << slot << ": " << diff);
          }
        }
    dev.synchronize();
  }

  TEST_CASE("host/device copies round-trip every dtype through pinned staging buffers") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    for (dtype t : every)
      for (shape dims : {shape{}, shape{0}, shape{3, 1000}}) {
        auto host = rnd.uniform(t, dims, 0, 100);
        auto back = dev.copy_to_host(dev.upload(host));
        CHECK_MESSAGE(back.equals(host), dtype_name(t) << " " << dims.to_string());
      }
    // Copies run on their own streams, ordered with the compute stream by events.
    auto x = dev.upload(rnd.uniform(dtype::float32, shape{1 << 20}));
    auto y = dev.run_kernel("neg", {x});
    auto z = dev.run_kernel("neg", {y[0]});
    CHECK(dev.copy_to_host(z[0]).equals(dev.copy_to_host(x)));
  }

  TEST_CASE("a training-sized step allocates nothing new once the cache is warm") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    auto a = rnd.uniform(dtype::float32, shape{128, 784});
    auto w = dev.upload(rnd.uniform(dtype::float32, shape{784, 512}));
    auto b = dev.upload(rnd.uniform(dtype::float32, shape{512}));
    auto step = [&] {
      auto x = dev.upload(a);
      auto h = dev.run_kernel("matmul", {x, w});
      auto y = dev.run_kernel("relu", {dev.run_kernel("bias_add", {h[0], b})[0]});
      auto g = dev.run_kernel("bias_add_grad", {y[0]});
      dev.copy_to_host(g[0]);
    };
    step();
    step();
    dev.synchronize();
    const auto before = dev.memory()->stats();
    for (int i = 0; i < 5; ++i) step();
    dev.synchronize();
    const auto after = dev.memory()->stats();
    CHECK(after.backend_allocations == before.backend_allocations);
    CHECK(after.reuses > before.reuses);
    CHECK(dev.staging()->stats().backend_allocations <= 4);
  }

  TEST_CASE("the device actor runs kernels on CUDA streams and reports completion") {
    if (!have_gpu()) return;
    // A device of its own: the actor system may outlive the test's shared one.
    auto dev = std::make_shared<cuda_device>();
    caf::actor_system_config cfg;
    caf::actor_system system(cfg);
    auto device = spawn_gpu_device(system, dev);
    caf::scoped_actor self(system);
    random_source rnd;
    auto host = rnd.uniform(dtype::float32, shape{4096});
    auto x = dev->upload(host);
    auto result = std::make_shared<std::vector<device_tensor>>();
    self->send(device.actor, run_atom::value,
               gpu_task{0, [dev, x, result] { *result = dev->run_kernel("square", {x}); }, 42});
    auto done = next_completion(self);
    CHECK(done.id == 42);
    CHECK(done.error.empty());
    REQUIRE(result->size() == 1);
    auto want = run_kernel("square", {host})[0];
    CHECK(compare(dev->copy_to_host((*result)[0]), want, 1e-6).empty());
    // A kernel that cannot launch reports its error in the completion message.
    self->send(device.actor, run_atom::value,
               gpu_task{0,
                        [dev, x] {
                          dev->run_kernel("conv2d", {x, x});
                        },
                        43});
    auto failed = next_completion(self);
    CHECK(failed.id == 43);
    CHECK_MESSAGE(failed.error.find("[conv2d]") != std::string::npos, failed.error);
    result->clear();
    self->send_exit(device.actor, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("numeric gradients on the GPU: the derivative helpers, cross-entropy, pooling") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    const double h = 1e-6;
    auto gpu_eval = [&](const std::string& op, const std::vector<tensor>& in,
                        const attr_map& a = {}) { return run_on_gpu(dev, op, in, a); };
    auto shifted = [](const tensor& x, int64_t i, double by) {
      tensor y = x.clone();
      y.mutable_data<double>()[i] += by;
      return y;
    };
    auto dot = [](const tensor& a, const tensor& b) {
      double s = 0;
      for (int64_t i = 0; i < a.num_elements(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
      return s;
    };

    // Element-wise ops: every element perturbed at once (the ops are element-wise).
    const std::vector<std::tuple<std::string, std::string, double, double>> helpers{
        {"sigmoid", "sigmoid_grad", -4, 4},
        {"tanh", "tanh_grad", -3, 3},
        {"sqrt", "sqrt_grad", 0.2, 5},
        {"rsqrt", "rsqrt_grad", 0.2, 5},
        {"reciprocal", "reciprocal_grad", 0.2, 5},
        {"relu", "relu_grad", -1, 1}};
    for (auto& [f, grad, lo, hi] : helpers) {
      INFO(grad);
      auto x = rnd.uniform(dtype::float64, shape{200}, lo, hi);
      auto dy = rnd.uniform(dtype::float64, shape{200});
      auto y = gpu_eval(f, {x})[0];
      auto analytic = f == "relu" ? gpu_eval(grad, {dy, x})[0] : gpu_eval(grad, {y, dy})[0];
      auto xp = x.clone(), xm = x.clone();
      for (int64_t i = 0; i < 200; ++i) {
        xp.mutable_data<double>()[i] += h;
        xm.mutable_data<double>()[i] -= h;
      }
      auto yp = gpu_eval(f, {xp})[0], ym = gpu_eval(f, {xm})[0];
      for (int64_t i = 0; i < 200; ++i) {
        double numeric =
            (yp.data<double>()[i] - ym.data<double>()[i]) / (2 * h) * dy.data<double>()[i];
        CHECK(analytic.data<double>()[i] == doctest::Approx(numeric).epsilon(1e-5));
      }
    }

    // Cross-entropy: the backprop output is d loss[r] / d logits[r, c].
    for (std::string op :
         {"softmax_cross_entropy_with_logits", "sparse_softmax_cross_entropy_with_logits"}) {
      INFO(op);
      auto logits = rnd.uniform(dtype::float64, shape{4, 6}, -3, 3);
      const bool sparse = op.rfind("sparse", 0) == 0;
      tensor labels = sparse ? rnd.uniform(dtype::int64, shape{4}, 0, 5)
                             : rnd.distribution(dtype::float64, 4, 6);
      auto out = gpu_eval(op, {logits, labels});
      for (int64_t i = 0; i < 24; ++i) {
        auto lp = gpu_eval(op, {shifted(logits, i, h), labels})[0];
        auto lm = gpu_eval(op, {shifted(logits, i, -h), labels})[0];
        const int64_t r = i / 6;
        double numeric = (lp.data<double>()[r] - lm.data<double>()[r]) / (2 * h);
        CHECK(out[1].data<double>()[i] == doctest::Approx(numeric).epsilon(1e-5));
      }
    }

    // Pooling: d sum(pool(x) * dy) / dx.
    for (auto& padding : {std::string("SAME"), std::string("VALID")}) {
      INFO(padding);
      auto a = window_attrs({2, 2}, padding, {3, 3});
      auto x = rnd.uniform(dtype::float64, shape{1, 6, 5, 2});
      auto y = gpu_eval("max_pool", {x}, a)[0];
      auto dy = rnd.uniform(dtype::float64, y.dims());
      auto dmax = gpu_eval("max_pool_grad", {x, y, dy}, a)[0];
      auto davg = gpu_eval("avg_pool_grad", {x, dy}, a)[0];
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        for (std::string op : {"max_pool", "avg_pool"}) {
          double lp = dot(gpu_eval(op, {shifted(x, i, h)}, a)[0], dy);
          double lm = dot(gpu_eval(op, {shifted(x, i, -h)}, a)[0], dy);
          const tensor& analytic = op == "max_pool" ? dmax : davg;
          CHECK(analytic.data<double>()[i] == doctest::Approx((lp - lm) / (2 * h)).epsilon(1e-5));
        }
      }
    }
  }

  TEST_CASE("TF32 and BF16 products (gpu_math) stay close to the float32 result") {
    if (!have_gpu()) return;
    random_source rnd;
    auto a = rnd.uniform(dtype::float32, shape{64, 256});
    auto b = rnd.uniform(dtype::float32, shape{256, 96});
    auto want = run_kernel("matmul", {a, b})[0];
    auto x = rnd.uniform(dtype::float32, shape{2, 12, 12, 8});
    auto f = rnd.uniform(dtype::float32, shape{3, 3, 8, 16});
    auto conv_attrs = window_attrs({1, 1}, "SAME");
    auto want_conv = run_kernel("conv2d", {x, f}, conv_attrs)[0];
    for (auto [math, tol] : {std::pair{gpu_math::tf32, 1e-2}, std::pair{gpu_math::bf16, 5e-2}}) {
      INFO("gpu_math " << int(math));
      cuda_device dev(cuda_device_options{.math = math});
      CHECK(compare(run_on_gpu(dev, "matmul", {a, b}, {})[0], want, tol).empty());
      CHECK(compare(run_on_gpu(dev, "conv2d", {x, f}, conv_attrs)[0], want_conv, tol).empty());
    }
  }

  TEST_CASE("conv2d's GPU backprops are its adjoints (float32, TF's odd SAME padding included)") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    auto dot = [](const tensor& a, const tensor& b) {
      double s = 0;
      for (int64_t i = 0; i < a.num_elements(); ++i)
        s += double(a.data<float>()[i]) * double(b.data<float>()[i]);
      return s;
    };
    for (auto& [strides, padding] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
             {{1, 1}, "SAME"}, {{2, 2}, "SAME"}, {{2, 1}, "VALID"}}) {
      INFO(padding << " strides " << strides[0] << "," << strides[1]);
      auto a = window_attrs(strides, padding);
      auto x = rnd.uniform(dtype::float32, shape{2, 8, 8, 3});
      auto f = rnd.uniform(dtype::float32, shape{3, 3, 3, 4});
      auto y = run_on_gpu(dev, "conv2d", {x, f}, a)[0];
      auto dy = rnd.uniform(dtype::float32, y.dims());
      auto dx = run_on_gpu(dev, "conv2d_backprop_input", {x, f, dy}, a)[0];
      auto df = run_on_gpu(dev, "conv2d_backprop_filter", {x, f, dy}, a)[0];
      const double yy = dot(y, dy);
      CHECK(dot(x, dx) == doctest::Approx(yy).epsilon(1e-4));
      CHECK(dot(f, df) == doctest::Approx(yy).epsilon(1e-4));
    }
  }

#else

  TEST_CASE("GPU kernels against the CPU kernels") { CHECK_FALSE(have_gpu()); }

#endif
}
