#include "actors/cluster/distributed_executable.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_map>

#include "actors/cluster/task_server.hpp"
#include "schema/graph_io.hpp"

namespace actorflow {

namespace {

using watch_atom = caf::atom_constant<caf::atom("watch")>;  // (actor, task): monitor it
using tick_atom = caf::atom_constant<caf::atom("tick")>;    // check the steps' deadlines

// ---- the step driver --------------------------------------------------------

struct partition_route {
  std::string task;
  caf::actor coordinator;
  std::vector<size_t> feed_index;  // which of the step's feeds it takes
  bool client = false;             // holds the fetches
};

struct driver_plan {
  std::vector<partition_route> parts;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<distributed_executable::health> health;
};

struct driver_step {
  step_request_ptr request;
  std::vector<bool> answered;  // by part
  std::chrono::steady_clock::time_point deadline;
  std::vector<tensor> fetched;
  std::string error;
  error_code code = error_code::unknown;  // of the error
  int64_t sent_ns = 0;                    // a traced step: when its starts went out
};

struct driver_state {
  uint64_t next_step = 1;
  std::unordered_map<uint64_t, driver_step> steps;
  std::map<caf::actor_addr, std::string> watched;  // -> task
  std::string down;                                // why the executable is broken
  bool watchdog_armed = false;
};

using driver_actor = caf::stateful_actor<driver_state>;

// Errors about a task as a whole (a node's error names its task already).
std::string from_task(const std::string& task, const std::string& what) {
  return "[cluster] task " + task + ": " + what;
}

// A traced step's records from one partition, brought onto our clock: a
// remote task's offset is estimated from this step's round trip to it.
void add_partition_trace(step_request& request, const partition_route& part, int64_t sent,
                         step_result& r) {
  int64_t offset = 0;
  if (!part.client && r.received_ns != 0) {
    offset = clock_offset_ns(sent, r.received_ns, r.answered_ns, trace_now_ns());
    request.clock_offset_ns[part.task] = offset;
  }
  for (auto& t : r.trace) {
    for (int64_t* time : {&t.ready_ns, &t.start_ns, &t.end_ns}) *time -= offset;
    if (t.kind > trace_kind::last) t.kind = trace_kind::kernel;  // a peer's garbage
    request.trace_records.push_back(std::move(t));
  }
}

void part_done(driver_actor* self, const driver_plan& plan, uint64_t step, size_t part,
               step_result& r) {
  auto it = self->state.steps.find(step);
  if (it == self->state.steps.end() || it->second.answered[part]) return;  // failed already
  auto& st = it->second;
  st.answered[part] = true;
  if (st.request->trace) add_partition_trace(*st.request, plan.parts[part], st.sent_ns, r);
  if (!r.ok() && st.error.empty()) {
    st.error = r.error;                                      // names the node and its task
    st.code = checked_error_code(static_cast<int>(r.code));  // from the wire
    // The others may wait on a value that will never come: drop the step.
    for (size_t i = 0; i < plan.parts.size(); ++i)
      if (i != part) self->send(plan.parts[i].coordinator, abort_atom::value, step);
  } else if (r.ok() && plan.parts[part].client) {
    st.fetched = std::move(r.values);
  }
  if (std::find(st.answered.begin(), st.answered.end(), false) != st.answered.end()) return;
  auto done = std::move(st);
  self->state.steps.erase(it);
  done.request->complete(std::move(done.fetched), done.error, done.code);
}

// Step timeouts. One check every tenth of the timeout while steps are in
// flight, rather than a timeout per request: CAF wakes its clock thread to
// set and again to cancel each request's timeout, which was 6 thread
// switches of a null step's ~20 on the client.
std::chrono::milliseconds watchdog_period(const driver_plan& plan) {
  return std::max(plan.timeout / 10, std::chrono::milliseconds(1));
}

void arm_watchdog(driver_actor* self, const driver_plan& plan) {
  if (self->state.watchdog_armed || self->state.steps.empty()) return;
  self->state.watchdog_armed = true;
  self->delayed_send(self, watchdog_period(plan), tick_atom::value);
}

void check_deadlines(driver_actor* self, const driver_plan& plan) {
  self->state.watchdog_armed = false;
  auto now = std::chrono::steady_clock::now();
  // (step, part) that did not answer in time. The client's own partition
  // comes last, so that the step's error names a remote task it waited on.
  std::vector<std::pair<uint64_t, size_t>> late;
  for (auto& [step, st] : self->state.steps) {
    if (st.deadline > now) continue;
    for (size_t i = 0; i < st.answered.size(); ++i)
      if (!st.answered[i] && !plan.parts[i].client) late.emplace_back(step, i);
    for (size_t i = 0; i < st.answered.size(); ++i)
      if (!st.answered[i] && plan.parts[i].client) late.emplace_back(step, i);
  }
  for (auto [step, part] : late) {
    // The late part is dropped as well: what it waits on (a dequeue on an
    // empty queue) is cancelled there, rather than served to nobody later.
    self->send(plan.parts[part].coordinator, abort_atom::value, step);
    step_result r;
    r.code = error_code::deadline_exceeded;
    r.error = from_task(plan.parts[part].task, "did not finish step " + std::to_string(step) +
                                                   " within " +
                                                   std::to_string(plan.timeout.count()) + " ms");
    part_done(self, plan, step, part, r);
  }
  arm_watchdog(self, plan);
}

void start_step(driver_actor* self, std::shared_ptr<driver_plan> plan, step_request_ptr request) {
  if (!self->state.down.empty())
    return request->complete({}, self->state.down, error_code::unavailable);
  uint64_t step = self->state.next_step++;
  auto& st = self->state.steps[step];
  st.request = request;
  st.answered.assign(plan->parts.size(), false);
  st.deadline = std::chrono::steady_clock::now() + plan->timeout;
  const bool trace = request->trace;
  if (trace) st.sent_ns = trace_now_ns();
  for (size_t i = 0; i < plan->parts.size(); ++i) {
    auto& part = plan->parts[i];
    std::vector<tensor> feeds;
    for (size_t f : part.feed_index) feeds.push_back(request->feeds[f]);
    self->request(part.coordinator, caf::infinite, start_atom::value, step, std::move(feeds), trace)
        .then([self, plan, step, i](step_result& r) { part_done(self, *plan, step, i, r); },
              [self, plan, step, i](caf::error& e) {
                step_result r;
                r.code = error_code::unavailable;
                r.error = from_task(plan->parts[i].task, "unreachable: " + error_text(e));
                part_done(self, *plan, step, i, r);
              });
  }
  arm_watchdog(self, *plan);
}

// A task went down: every step in flight fails now, and so does every later
// one, until the session compiles the signature again.
void task_down(driver_actor* self, const driver_plan& plan, const caf::down_msg& down) {
  auto it = self->state.watched.find(down.source);
  std::string task = it == self->state.watched.end() ? "?" : it->second;
  if (self->state.down.empty())
    self->state.down =
        from_task(task, "went down (" + caf::to_string(down.reason) + "); the next run reconnects");
  {
    std::lock_guard<std::mutex> lock(plan.health->mutex);
    plan.health->dead.push_back(task);
  }
  plan.health->broken = true;
  auto steps = std::move(self->state.steps);
  self->state.steps.clear();
  for (auto& [step, st] : steps) {
    for (auto& part : plan.parts) self->send(part.coordinator, abort_atom::value, step);
    st.request->complete({}, self->state.down, error_code::unavailable);
  }
}

caf::behavior driver(driver_actor* self, std::shared_ptr<driver_plan> plan) {
  self->set_down_handler([self, plan](caf::down_msg& down) { task_down(self, *plan, down); });
  return {
      [self, plan](run_atom, step_request_ptr& request) {
        start_step(self, plan, std::move(request));
      },
      [self, plan](tick_atom) { check_deadlines(self, *plan); },
      [self](watch_atom, caf::actor& whom, std::string& task) {
        self->state.watched.emplace(whom.address(), task);
        self->monitor(whom);
      },
  };
}

// ---- setting up -------------------------------------------------------------

struct registration {
  uint64_t id = 0;
  caf::actor coordinator;
  std::map<std::string, caf::actor> recvs;
};

registration register_remote(caf::scoped_actor& self, const caf::actor& server,
                             const caf::actor& owner, partition& p,
                             std::chrono::milliseconds timeout) {
  registration reg;
  std::string failure;
  error_code code = error_code::unknown;
  self->request(server, timeout, register_atom::value, owner, serialize_graph(*p.g), p.feeds,
                p.fetches, p.targets)
      .receive(
          [&](uint64_t id, caf::actor& coordinator, std::vector<std::string>& names,
              std::vector<caf::actor>& actors) {
            reg.id = id;
            reg.coordinator = std::move(coordinator);
            for (size_t i = 0; i < names.size() && i < actors.size(); ++i)
              reg.recvs.emplace(names[i], actors[i]);
          },
          [&](caf::error& e) {
            failure = error_text(e);
            code = error_code_of(e);
          });
  if (!failure.empty())
    fail(code, "cluster", "registering a partition with task " + p.task + ": " + failure);
  return reg;
}

void connect_remote(caf::scoped_actor& self, const caf::actor& server, const std::string& task,
                    uint64_t id, const std::vector<std::string>& sends,
                    const std::vector<caf::actor>& recvs, std::chrono::milliseconds timeout) {
  std::string failure;
  error_code code = error_code::unknown;
  self->request(server, timeout, connect_atom::value, id, sends, recvs)
      .receive([](bool) {},
               [&](caf::error& e) {
                 failure = error_text(e);
                 code = error_code_of(e);
               });
  if (!failure.empty())
    fail(code, "cluster", "connecting the sends of task " + task + ": " + failure);
}

}  // namespace

distributed_executable::distributed_executable(const graph& g, const run_signature& sig,
                                               std::vector<std::string> tasks,
                                               cluster_connection& cluster,
                                               const variable_lookup& local_resources)
    : runtime_(*cluster.rt()),
      parts_(partition_graph(g, sig, cluster.local_task(), std::move(tasks),
                             cluster.options().transfer_precision)),
      health_(std::make_shared<health>()) {
  auto plan = std::make_shared<driver_plan>();
  plan->timeout = cluster.options().step_timeout;
  plan->health = health_;
  driver_ = runtime_.system().spawn(driver, plan);
  try {
    auto& client = parts_.parts[0];
    local_ = std::make_unique<executable>(*client.g, client.signature(), runtime_, local_resources,
                                          client.task);
    plan->parts.push_back({client.task, local_->coordinator(), client.feed_index, true});

    caf::scoped_actor self{runtime_.system()};
    auto timeout = cluster.options().connect_timeout;
    std::map<std::pair<std::string, std::string>, caf::actor> recvs;  // (task, name) -> actor
    for (auto& [name, actor] : local_->recvs()) recvs[{client.task, name}] = actor;
    std::map<std::string, size_t> remote_of;  // task -> index in remotes_
    for (size_t i = 1; i < parts_.parts.size(); ++i) {
      auto& p = parts_.parts[i];
      auto server = cluster.server(p.task);
      auto reg = register_remote(self, server, driver_, p, timeout);
      remotes_.push_back({p.task, server, reg.id});
      remote_of[p.task] = remotes_.size() - 1;
      for (auto& [name, actor] : reg.recvs) recvs[{p.task, name}] = actor;
      plan->parts.push_back({p.task, reg.coordinator, p.feed_index, false});
      caf::anon_send(driver_, watch_atom::value, server, p.task);
      caf::anon_send(driver_, watch_atom::value, reg.coordinator, p.task);
    }
    // Every send to its recv: local sends directly, remote ones per task.
    std::map<std::string, std::pair<std::vector<std::string>, std::vector<caf::actor>>> by_task;
    for (auto& cut : parts_.cuts) {
      auto recv = recvs.find({cut.recv_task, cut.recv_name});
      if (recv == recvs.end())
        fail("cluster",
             "task " + cut.recv_task + " did not report its recv '" + cut.recv_name + "'");
      if (cut.send_task == client.task) {
        local_->connect(cut.send_name, recv->second);
      } else {
        by_task[cut.send_task].first.push_back(cut.send_name);
        by_task[cut.send_task].second.push_back(recv->second);
      }
    }
    for (auto& [task, sends] : by_task) {
      auto& r = remotes_[remote_of.at(task)];
      connect_remote(self, r.server, task, r.id, sends.first, sends.second, timeout);
    }
  } catch (...) {
    release();
    throw;
  }
}

distributed_executable::~distributed_executable() { release(); }

void distributed_executable::release() {
  for (auto& r : remotes_) caf::anon_send(r.server, release_atom::value, r.id);
  remotes_.clear();
  if (driver_) caf::anon_send_exit(driver_, caf::exit_reason::user_shutdown);
  driver_ = nullptr;
  local_.reset();
}

void distributed_executable::start(step_request_ptr request) const {
  caf::anon_send(driver_, run_atom::value, std::move(request));
}

std::vector<std::string> distributed_executable::dead_tasks() const {
  std::lock_guard<std::mutex> lock(health_->mutex);
  return health_->dead;
}

}  // namespace actorflow
