#include "actors/session.hpp"

#include <thread>

#include "actors/executable.hpp"
#include "actors/messages.hpp"
#include "actors/queue_actor.hpp"
#include "actors/variable_actor.hpp"

namespace actorflow {

namespace {

std::string spec_text(const tensor& t) { return tensor_spec{t.type(), t.dims()}.to_string(); }

void check_same_graph(const graph& g, const graph& other, const std::string& what) {
  if (&g != &other) fail("session", what + " belongs to another graph");
}

// The cache key: which placeholders are fed, what is fetched, what is run.
std::string signature_key(const run_signature& sig) {
  std::string key = "f";
  for (auto& e : sig.feeds) key += ":" + std::to_string(e.node);
  key += "|o";
  for (auto& e : sig.fetches) key += ":" + std::to_string(e.node) + "." + std::to_string(e.index);
  key += "|t";
  for (int t : sig.targets) key += ":" + std::to_string(t);
  return key;
}

void check_feed(const node& n, const tensor& value) {
  if (n.op != "placeholder")
    fail("session", "feed for '" + n.name + "': only placeholders can be fed, it is a " + n.op);
  auto& spec = n.outputs[0];
  if (!value.valid()) fail("session", "feed for '" + n.name + "' is an empty tensor");
  if (value.type() != spec.type || !spec.dims.compatible_with(value.dims()))
    fail("session", "feed for '" + n.name + "' is " + spec_text(value) + ", but the placeholder is " +
                        spec.to_string());
}

}  // namespace

session::session(graph& g, std::shared_ptr<runtime> rt)
    : graph_(g), runtime_(std::move(rt)), in_flight_(std::make_shared<std::atomic<int64_t>>(0)) {
  if (!runtime_) fail("session", "no runtime");
}

session::~session() {
  {
    // A step waiting on a queue that no one feeds would never finish: closing
    // fails such dequeues (and waiting enqueues) once the queue is drained.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [name, actor] : queues_) caf::anon_send(actor, close_atom::value, true);
  }
  // Steps cannot hang (errors flow like values), so this wait is bounded.
  while (in_flight_->load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  std::lock_guard<std::mutex> lock(mutex_);
  executables_.clear();
  for (auto& [name, actor] : variables_) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  variables_.clear();
  for (auto& [name, actor] : queues_) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  queues_.clear();
}

caf::actor session::variable_actor(const std::string& name) {
  auto& actor = variables_[name];
  if (!actor) actor = spawn_variable_actor(runtime_->system(), name, runtime_->arena());
  return actor;
}

caf::actor session::resource_actor(const std::string& name) {
  const node* n = graph_.find(name);
  if (!n || n->op != "fifo_queue") return variable_actor(name);
  auto& actor = queues_[name];
  if (!actor) actor = spawn_queue_actor(runtime_->system(), name, queue_spec_of(n->attrs, n->op));
  return actor;
}

caf::actor session::queue_actor(output queue) {
  check_same_graph(graph_, queue.owner(), "queue '" + queue.name() + "'");
  if (queue.node().op != "fifo_queue")
    fail("session", "'" + queue.name() + "' is a " + queue.node().op + ", not a queue");
  std::lock_guard<std::mutex> lock(mutex_);
  return resource_actor(queue.node().name);
}

size_t session::num_executables() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return executables_.size();
}

std::shared_ptr<const executable> session::compile(const feed_list& feeds,
                                                   const std::vector<output>& fetches,
                                                   const std::vector<operation>& targets) {
  run_signature sig;
  for (auto& [target, value] : feeds) {
    check_same_graph(graph_, target.owner(), "feed '" + target.name() + "'");
    sig.feeds.push_back(target.ref());
  }
  for (auto& f : fetches) {
    check_same_graph(graph_, f.owner(), "fetch '" + f.name() + "'");
    sig.fetches.push_back(f.ref());
  }
  for (auto& t : targets) {
    check_same_graph(graph_, t.owner(), "target '" + t.name() + "'");
    sig.targets.push_back(t.id());
  }
  auto key = signature_key(sig);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = executables_.find(key);
  if (it != executables_.end()) return it->second;
  auto exe = std::make_shared<const executable>(
      graph_, sig, *runtime_, [this](const std::string& name) { return resource_actor(name); });
  executables_.emplace(key, exe);
  return exe;
}

std::future<std::vector<tensor>> session::run_async(const feed_list& feeds,
                                                    const std::vector<output>& fetches,
                                                    const std::vector<operation>& targets) {
  auto request = std::make_shared<step_request>();
  request->feeds.reserve(feeds.size());
  for (auto& [target, value] : feeds) {
    check_feed(target.node(), value);
    request->feeds.push_back(value);
  }
  auto exe = compile(feeds, fetches, targets);
  auto future = request->result.get_future();
  in_flight_->fetch_add(1);
  request->on_done = [counter = in_flight_, exe] { counter->fetch_sub(1); };
  exe->start(std::move(request));
  return future;
}

std::vector<tensor> session::run(const feed_list& feeds, const std::vector<output>& fetches,
                                 const std::vector<operation>& targets) {
  return run_async(feeds, fetches, targets).get();
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
