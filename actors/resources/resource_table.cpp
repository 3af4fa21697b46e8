#include "actors/resources/resource_table.hpp"

#include "actors/resources/accumulator_actor.hpp"
#include "actors/resources/queue_actor.hpp"
#include "actors/resources/variable_actor.hpp"
#include "actors/run/messages.hpp"

namespace actorflow {

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (auto& name : names) s += (s.empty() ? "'" : ", '") + name + "'";
  return s;
}

resource_table::~resource_table() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, entry] : variables_)
    caf::anon_send_exit(entry.actor, caf::exit_reason::user_shutdown);
  for (auto& [name, actor] : others_) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

namespace {

bool is_accelerator(const local_device* d) { return d != nullptr && d->accel != nullptr; }

}  // namespace

void resource_table::set_home_resolver(home_resolver resolve) {
  std::lock_guard<std::mutex> lock(mutex_);
  resolve_home_ = std::move(resolve);
}

resource_table::variable_entry& resource_table::variable_locked(const std::string& name,
                                                                const local_device* device,
                                                                const tensor_spec& declared) {
  auto& entry = variables_[name];
  if (!device) device = &runtime_.devices().front();
  if (entry.actor) {
    // CPU devices share one memory: a variable on one serves nodes on another.
    if (entry.home != device && (is_accelerator(entry.home) || is_accelerator(device)))
      fail("session", "variable '" + name + "' lives on " + entry.home->name +
                          ", but a node of it is placed on " + device->name +
                          " (hint the variable's nodes to one device)");
    return entry;
  }
  entry.home = device;
  if (is_accelerator(device)) {
    entry.on_device = std::make_shared<device_variable>();
    entry.on_device->name = name;
    entry.on_device->declared = declared;
    entry.actor = spawn_device_variable_actor(runtime_.system(),
                                              {device->accel, device->actor, entry.on_device});
  } else {
    entry.actor = spawn_variable_actor(runtime_.system(), name, *device->arena);
  }
  return entry;
}

caf::actor resource_table::variable(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = variables_.find(name);
  if (it != variables_.end()) return it->second.actor;
  tensor_spec declared;  // filled by the resolver where the home is an accelerator
  const local_device* home = resolve_home_ ? resolve_home_(name, declared) : nullptr;
  return variable_locked(name, home, declared).actor;
}

caf::actor resource_table::actor_for(const node& n, const local_device* device) {
  return resource_for(n, device).actor;
}

resource_ref resource_table::resource_for(const node& n, const local_device* device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (n.def->role == op_role::variable) {
    auto& entry = variable_locked(n.name, device, n.outputs.at(0));
    return {entry.actor, entry.on_device};
  }
  auto& actor = others_[n.name];
  if (actor) return {actor, nullptr};
  if (n.op == "fifo_queue")
    actor = spawn_queue_actor(runtime_.system(), n.name, queue_spec_of(n.attrs, n.op));
  else if (n.op == "conditional_accumulator")
    actor = spawn_accumulator_actor(runtime_.system(), n.name, accumulator_spec_of(n.attrs, n.op),
                                    is_sparse_accumulator(n.attrs));
  else
    fail("session", "node '" + n.name + "' (" + n.op + ") is not a resource an actor can serve");
  return {actor, nullptr};
}

caf::actor resource_table::find_variable(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = variables_.find(name);
  return it == variables_.end() ? caf::actor() : it->second.actor;
}

std::map<std::string, caf::actor> resource_table::variables() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, caf::actor> out;
  for (auto& [name, entry] : variables_) out.emplace(name, entry.actor);
  return out;
}

void resource_table::close_queues() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, actor] : others_) caf::anon_send(actor, close_atom::value, true);
}

std::map<std::string, variable_state> resource_table::initialized_states(
    const std::vector<std::string>& names, std::chrono::milliseconds timeout,
    std::vector<std::string>& uninitialized) {
  std::map<std::string, variable_state> out;
  caf::scoped_actor self{runtime_.system()};
  for (auto& name : names) {
    auto actor = find_variable(name);
    if (!actor) {  // no actor yet: no step has touched it, so nothing set it
      uninitialized.push_back(name);
      continue;
    }
    std::string failure;
    self->request(actor, timeout, snapshot_atom::value)
        .receive(
            [&](variable_state& state) {
              if (!state.initialized())
                uninitialized.push_back(name);
              else
                out.emplace(name, std::move(state));
            },
            [&](caf::error& e) { failure = caf::to_string(e); });
    if (!failure.empty())
      fail("session", "snapshot: the actor of variable '" + name + "' did not answer: " + failure);
  }
  return out;
}

std::map<std::string, variable_state> resource_table::snapshot(
    const std::vector<std::string>& names, std::chrono::milliseconds timeout) {
  std::vector<std::string> uninitialized;
  auto out = initialized_states(names, timeout, uninitialized);
  if (!uninitialized.empty())
    fail("session",
         "snapshot: " + std::string(uninitialized.size() == 1 ? "variable " : "variables ") +
             quoted_list(uninitialized) + " not initialized (run the initializers first)");
  return out;
}

void resource_table::check_device_restores(const std::map<std::string, variable_state>& states) {
  for (auto& [name, state] : states) {
    variable(name);  // spawned where the graph places it
    std::lock_guard<std::mutex> lock(mutex_);
    auto& entry = variables_.at(name);
    if (entry.on_device) check_restorable(*entry.on_device, state, entry.home->name);
  }
}

void resource_table::restore(const std::map<std::string, variable_state>& states,
                             std::chrono::milliseconds timeout) {
  check_device_restores(states);
  caf::scoped_actor self{runtime_.system()};
  for (auto& [name, state] : states) {
    auto actor = variable(name);
    std::string failure;
    self->request(actor, timeout, restore_atom::value, state)
        .receive([](bool) {}, [&](caf::error& e) { failure = caf::to_string(e); });
    if (!failure.empty())
      fail("session", "restore: the actor of variable '" + name + "' did not answer (" + failure +
                          "); the variables may be partly restored");
  }
}

size_t resource_table::freeze(uint64_t id, std::chrono::milliseconds hold,
                              std::chrono::milliseconds timeout) {
  auto actors = variables();
  caf::scoped_actor self{runtime_.system()};
  // Every request goes out before the first answer is awaited: the freeze
  // takes one round trip, not one per variable.
  using handle = decltype(self->request(caf::actor(), timeout, freeze_atom::value, id, int64_t{}));
  std::vector<std::pair<std::string, handle>> pending;
  for (auto& [name, actor] : actors)
    pending.emplace_back(
        name, self->request(actor, timeout, freeze_atom::value, id, int64_t(hold.count())));
  std::string failure;
  for (auto& [name, h] : pending)
    h.receive(
        [&, n = name](bool frozen) {
          if (!frozen && failure.empty())
            failure = "variable '" + n +
                      "' lives on an accelerator, where a freeze cannot hold its updates";
        },
        [&, n = name](caf::error& e) {
          if (failure.empty())
            failure = "the actor of variable '" + n + "' did not answer: " + caf::to_string(e);
        });
  if (!failure.empty()) {
    thaw(id);
    fail("session", "freeze: " + failure);
  }
  return actors.size();
}

std::map<std::string, variable_state> resource_table::snapshot_frozen(
    uint64_t id, std::chrono::milliseconds timeout) {
  std::vector<std::string> names, uninitialized;  // unset ones hold nothing to save
  for (auto& [name, actor] : variables()) names.push_back(name);
  try {
    // One request at a time: the actors are frozen, so the order does not
    // matter, and no bytes are copied.
    auto out = initialized_states(names, timeout, uninitialized);
    thaw(id);
    return out;
  } catch (...) {
    thaw(id);
    throw;
  }
}

void resource_table::thaw(uint64_t id) {
  for (auto& [name, actor] : variables()) caf::anon_send(actor, thaw_atom::value, id);
}

}  // namespace actorflow
