#include "actors/session.hpp"

#include <thread>

#include "actors/cluster/cluster.hpp"
#include "actors/cluster/distributed_executable.hpp"
#include "actors/compile/graph_optimizer.hpp"
#include "actors/compile/partition.hpp"
#include "actors/resources/resource_table.hpp"
#include "actors/run/executable.hpp"
#include "actors/run/messages.hpp"
#include "actors/run/runtime.hpp"

namespace actorflow {

namespace {

std::string spec_text(const tensor& t) { return tensor_spec{t.type(), t.dims()}.to_string(); }

void check_same_graph(const graph& g, const graph& other, const std::string& what) {
  if (&g != &other) fail("session", what + " belongs to another graph");
}

// An output handle made for an op without outputs (or a forged index) must
// not reach the executable, which would index past the node's outputs.
void check_output_exists(const graph& g, const endpoint& e, const std::string& what) {
  const node& n = g.at(e.node);
  if (e.index < 0 || e.index >= static_cast<int>(n.outputs.size()))
    fail("session", what + ": node '" + n.name + "' (" + n.op + ") has no output " +
                        std::to_string(e.index) +
                        (n.outputs.empty() ? "; run it as a target" : ""));
}

// The cache key: which placeholders are fed, what is fetched, what is run.
std::string signature_key(const run_signature& sig) {
  std::string key = "f";
  for (auto& e : sig.feeds) key.append(":").append(std::to_string(e.node));
  key.append("|o");
  for (auto& e : sig.fetches)
    key.append(":").append(std::to_string(e.node)).append(".").append(std::to_string(e.index));
  key.append("|t");
  for (int t : sig.targets) key.append(":").append(std::to_string(t));
  return key;
}

void check_feed(const node& n, const tensor& value) {
  if (n.def->role != op_role::placeholder)
    fail("session", "feed for '" + n.name + "': only placeholders can be fed, it is a " + n.op);
  auto& spec = n.outputs[0];
  if (!value.valid()) fail("session", "feed for '" + n.name + "' is an empty tensor");
  if (value.type() != spec.type || !spec.dims.compatible_with(value.dims()))
    fail("session", "feed for '" + n.name + "' is " + spec_text(value) +
                        ", but the placeholder is " + spec.to_string());
}

// A runnable compiled from an optimized copy of the graph, which it keeps
// (declared first, so that it outlives the runnable's actors).
class optimized_runnable : public runnable {
 public:
  optimized_runnable(std::unique_ptr<graph> g, std::shared_ptr<runnable> inner)
      : graph_(std::move(g)), inner_(std::move(inner)) {}
  void start(step_request_ptr request) const override { inner_->start(std::move(request)); }
  bool broken() const override { return inner_->broken(); }
  std::vector<std::string> dead_tasks() const override { return inner_->dead_tasks(); }
  const std::vector<placement_entry>& placement_log() const override {
    return inner_->placement_log();
  }

 private:
  std::unique_ptr<graph> graph_;
  std::shared_ptr<runnable> inner_;
};

}  // namespace

session::session(graph& g, session_options options) : session(g, runtime::shared(), options) {}

session::session(graph& g, std::shared_ptr<runtime> rt, session_options options)
    : graph_(g),
      runtime_(rt ? std::move(rt) : throw error("[session] no runtime")),
      options_(options),
      resources_(std::make_unique<resource_table>(*runtime_)),
      in_flight_(std::make_shared<std::atomic<int64_t>>(0)) {
  resources_->set_home_resolver(
      [this](const std::string& name, tensor_spec& declared) { return home_of(name, declared); });
}

// Where the graph places variable `name` in this process, for a restore
// before any step placed it (null: the first device, as for a name the
// graph lacks or places on another task).
const local_device* session::home_of(const std::string& name, tensor_spec& declared) const {
  const node* n = graph_.find(name);
  if (n == nullptr || n->def->role != op_role::variable) return nullptr;
  if (cluster_ && !checked_device(*n).job.empty()) return nullptr;
  device_placer placer(graph_, runtime_->devices());
  const local_device& d = runtime_->devices()[static_cast<size_t>(placer.device_of(n->id))];
  declared = n->outputs.at(0);
  return &d;
}

session::session(graph& g, std::shared_ptr<cluster_connection> cluster, session_options options)
    : session(g, cluster ? cluster->rt() : throw error("[session] no cluster"), options) {
  cluster_ = std::move(cluster);
}

session::~session() {
  // A step waiting on a queue that no one feeds would never finish: closing
  // fails such dequeues (and waiting enqueues) once the queue is drained.
  resources_->close_queues();
  // Steps cannot hang (errors flow like values), so this wait is bounded.
  while (in_flight_->load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  std::lock_guard<std::mutex> lock(mutex_);
  executables_.clear();
}

caf::actor session::queue_actor(output queue) {
  check_same_graph(graph_, queue.owner(), "queue '" + queue.name() + "'");
  if (queue.node().op != "fifo_queue") {
    // Appended, not "'" + ...: GCC 12 warns falsely (-Wrestrict) about the sum.
    std::string what = "'";
    what += queue.name();
    fail("session", what + "' is a " + queue.node().op + ", not a queue");
  }
  return resources_->actor_for(queue.node());
}

size_t session::num_executables() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return executables_.size();
}

std::vector<placement_entry> session::placement_log() const {
  std::map<std::string, placement_entry> by_name;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, exe] : executables_)
      for (auto& e : exe->placement_log()) by_name.emplace(e.node, e);
  }
  std::vector<placement_entry> log;
  for (auto& n : graph_.nodes())
    if (auto it = by_name.find(n.name); it != by_name.end()) log.push_back(it->second);
  return log;
}

std::shared_ptr<const runnable> session::compile(const feed_list& feeds,
                                                 const std::vector<output>& fetches,
                                                 const std::vector<operation>& targets) {
  run_signature sig;
  for (auto& [target, value] : feeds) {
    check_same_graph(graph_, target.owner(), "feed '" + target.name() + "'");
    check_output_exists(graph_, target.ref(), "feed");
    sig.feeds.push_back(target.ref());
  }
  for (auto& f : fetches) {
    check_same_graph(graph_, f.owner(), "fetch '" + f.name() + "'");
    check_output_exists(graph_, f.ref(), "fetch");
    sig.fetches.push_back(f.ref());
  }
  for (auto& t : targets) {
    check_same_graph(graph_, t.owner(), "target '" + t.name() + "'");
    sig.targets.push_back(t.id());
  }
  auto key = signature_key(sig);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = executables_.find(key);
  if (it != executables_.end()) {
    if (!it->second->broken()) return it->second;
    // A task went down: reconnect (it may have been restarted) and register again.
    for (auto& task : it->second->dead_tasks()) cluster_->forget(task);
    executables_.erase(it);
  }
  auto exe = build(sig);
  executables_.emplace(key, exe);
  return exe;
}

// The signature's runnable, on the optimized copy of the graph unless the
// options say otherwise.
std::shared_ptr<runnable> session::build(const run_signature& sig) {
  if (!options_.optimize) return build_on(graph_, sig);
  graph_optimizer_options options;
  // A fused op is made only where every device of this process has its
  // kernel (a GPU has some of them); in a cluster, where a node may go to
  // another task's devices, layers stay as built.
  options.fuse = !cluster_;
  options.fold_on_tasks = !cluster_;
  std::vector<accelerator*> accelerators;
  for (auto& d : runtime_->devices())
    if (d.accel) accelerators.push_back(d.accel);
  if (!accelerators.empty())
    options.runs_everywhere = [accelerators](const std::string& op) {
      const op_def& def = op_registry::global().get(op);
      for (auto* a : accelerators)
        if (def.update ? !a->has_update_kernel(def, dtype::float32)
                       : !a->has_kernel(def, {dtype::float32}))
          return false;
      return true;
    };
  auto optimized = optimize_graph(graph_, sig, options);
  return std::make_shared<optimized_runnable>(std::move(optimized.g),
                                              build_on(*optimized.g, optimized.sig));
}

// One process's executable, unless placement puts nodes on other tasks.
std::shared_ptr<runnable> session::build_on(const graph& g, const run_signature& sig) {
  auto resources = [this](const node& n, const local_device& d) {
    return resources_->resource_for(n, &d);
  };
  std::string local = cluster_ ? cluster_->local_task() : "/job:localhost/task:0";
  auto tasks = place(g, sig, local);
  for (size_t id = 0; id < tasks.size(); ++id) {
    if (tasks[id].empty() || tasks[id] == local) continue;
    if (!cluster_)
      fail("session", "node '" + g.at(static_cast<int>(id)).name + "' is placed on " + tasks[id] +
                          ", but this session has no cluster (make it with a " +
                          "cluster_connection)");
    return std::make_shared<distributed_executable>(g, sig, std::move(tasks), *cluster_, resources);
  }
  return std::make_shared<executable>(g, sig, *runtime_, resources);
}

std::future<std::vector<tensor>> session::run_async(const feed_list& feeds,
                                                    const std::vector<output>& fetches,
                                                    const std::vector<operation>& targets) {
  return start(std::make_shared<step_request>(), feeds, fetches, targets);
}

void session::launch(std::shared_ptr<step_request> request, const feed_list& feeds,
                     const std::vector<output>& fetches, const std::vector<operation>& targets) {
  request->feeds.reserve(feeds.size());
  for (auto& [target, value] : feeds) {
    check_feed(target.node(), value);
    request->feeds.push_back(value);
  }
  auto exe = compile(feeds, fetches, targets);
  in_flight_->fetch_add(1);
  request->on_done = [counter = in_flight_, exe, then = std::move(request->on_done)] {
    counter->fetch_sub(1);
    if (then) then();
  };
  exe->start(std::move(request));
}

std::future<std::vector<tensor>> session::start(std::shared_ptr<step_request> request,
                                                const feed_list& feeds,
                                                const std::vector<output>& fetches,
                                                const std::vector<operation>& targets) {
  auto future = request->result.get_future();
  launch(std::move(request), feeds, fetches, targets);
  return future;
}

void session::run_then(const feed_list& feeds, const std::vector<output>& fetches,
                       step_callback done) {
  auto request = std::make_shared<step_request>();
  // Taken before the step starts: it may finish before launch returns.
  auto result = std::make_shared<std::future<std::vector<tensor>>>(request->result.get_future());
  request->on_done = [result, done = std::move(done)] {
    std::vector<tensor> fetched;
    std::exception_ptr failure;
    try {
      fetched = result->get();
    } catch (...) {
      failure = std::current_exception();
    }
    done(std::move(fetched), failure);
  };
  launch(std::move(request), feeds, fetches, {});
}

std::vector<tensor> session::run(const feed_list& feeds, const std::vector<output>& fetches,
                                 const std::vector<operation>& targets) {
  return run_async(feeds, fetches, targets).get();
}

std::vector<tensor> session::run(const run_options& options, const feed_list& feeds,
                                 const std::vector<output>& fetches,
                                 const std::vector<operation>& targets, run_metadata* metadata) {
  auto request = std::make_shared<step_request>();
  request->trace = options.trace;
  const int64_t started = trace_now_ns();
  auto result = start(request, feeds, fetches, targets);
  result.wait();
  if (metadata) {
    metadata->start_ns = started;
    metadata->end_ns = trace_now_ns();
    metadata->nodes = std::move(request->trace_records);
    metadata->clock_offset_ns = std::move(request->clock_offset_ns);
  }
  return result.get();
}

tensor session::eval(output fetch, const feed_list& feeds) {
  return run(feeds, std::vector<output>{fetch}).at(0);
}

void session::run(const std::vector<operation>& targets) { run({}, {}, targets); }

std::vector<tensor> session::run_by_name(const std::vector<std::pair<std::string, tensor>>& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets) {
  feed_list f;
  for (auto& [name, value] : feeds) f.emplace_back(graph_.output_by_name(name), value);
  std::vector<output> o;
  for (auto& name : fetches) o.push_back(graph_.output_by_name(name));
  std::vector<operation> t;
  for (auto& name : targets) t.push_back(graph_.operation_by_name(name));
  return run(f, o, t);
}

}  // namespace actorflow
