#include "actors/executable.hpp"

#include <algorithm>
#include <unordered_map>

#include "actors/node_plan.hpp"

namespace actorflow {

namespace {

// ---- the step coordinator -------------------------------------------------

struct feed_route {
  caf::actor target;
  size_t feed_index;
};

struct coordinator_plan {
  std::vector<feed_route> placeholders;  // get their feed in slot 0
  std::vector<caf::actor> starters;      // nodes without inputs get an empty start value
  size_t num_fetches = 0;
  size_t num_targets = 0;
};

struct active_step {
  step_request_ptr request;
  std::vector<tensor> fetched;
  size_t remaining = 0;
  std::string error;
};

struct coordinator_state {
  uint64_t next_step = 1;
  std::unordered_map<uint64_t, active_step> steps;
};

void finish(const step_request_ptr& request, std::vector<tensor> fetched, const std::string& err) {
  if (err.empty()) request->result.set_value(std::move(fetched));
  else request->result.set_exception(std::make_exception_ptr(error(err)));
  if (request->on_done) request->on_done();
}

caf::behavior coordinator(caf::stateful_actor<coordinator_state>* self,
                          std::shared_ptr<coordinator_plan> plan) {
  return {
      [self, plan](run_atom, step_request_ptr& request) {
        size_t sinks = plan->num_fetches + plan->num_targets;
        if (sinks == 0) {
          finish(request, {}, "");
          return;
        }
        uint64_t step = self->state.next_step++;
        auto& st = self->state.steps[step];
        st.fetched.resize(plan->num_fetches);
        st.remaining = sinks;
        for (auto& p : plan->placeholders)
          self->send(p.target, input_atom::value, step, int32_t{0},
                     step_value{request->feeds[p.feed_index], ""});
        for (auto& a : plan->starters) self->send(a, input_atom::value, step, int32_t{0}, step_value{});
        st.request = std::move(request);
      },
      [self, plan](input_atom, uint64_t step, int32_t slot, step_value& v) {
        auto it = self->state.steps.find(step);
        if (it == self->state.steps.end()) return;
        auto& st = it->second;
        if (!v.ok()) {
          if (st.error.empty()) st.error = std::move(v.error);
        } else if (static_cast<size_t>(slot) < plan->num_fetches) {
          st.fetched[static_cast<size_t>(slot)] = std::move(v.value);
        }
        if (--st.remaining > 0) return;
        auto request = std::move(st.request);
        auto fetched = std::move(st.fetched);
        auto err = std::move(st.error);
        self->state.steps.erase(it);
        finish(request, std::move(fetched), err);
      },
  };
}

// ---- compiling a signature ------------------------------------------------

// Update ops (and queue ops) go to the actor of the resource at input 0.
bool is_update(const node& n) { return n.def->acts_on_resource(); }

// A constant without control inputs is folded into its consumers: its value
// is bound into their plans and it sends no message.
bool is_foldable_constant(const node& n) { return n.op == "constant" && n.control_inputs.empty(); }

void check_device(const node& n) {
  if (n.device.empty()) return;
  std::string d = n.device;
  std::transform(d.begin(), d.end(), d.begin(), ::tolower);
  if (d.find("cpu") == std::string::npos)
    fail("session", "node '" + n.name + "' asks for device '" + n.device +
                        "', but this process has only /cpu:0 (no GPU support is built)");
}

std::vector<bool> prune(const graph& g, const run_signature& sig) {
  std::vector<bool> needed(g.size(), false);
  std::vector<int> stack;
  for (auto& f : sig.fetches) stack.push_back(f.node);
  for (int t : sig.targets) stack.push_back(t);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[static_cast<size_t>(id)]) continue;
    needed[static_cast<size_t>(id)] = true;
    auto& n = g.at(id);
    for (size_t i = is_update(n) ? 1 : 0; i < n.inputs.size(); ++i) stack.push_back(n.inputs[i].node);
    for (int c : n.control_inputs) stack.push_back(c);
  }
  return needed;
}

// An edge the runtime carries: output (node, index) of a source to a slot of a consumer.
struct edge {
  endpoint from;
  int to_node;  // -1: the coordinator
  int32_t slot;
  bool control;
};

}  // namespace

executable::executable(const graph& g, const run_signature& sig, runtime& rt,
                       const variable_lookup& vars) {
  auto needed = prune(g, sig);
  std::unordered_map<int, size_t> feed_index;
  for (size_t i = 0; i < sig.feeds.size(); ++i) feed_index[sig.feeds[i].node] = i;

  // Which constants still need an actor: fetched ones, or ones others wait on by control edge.
  std::vector<bool> spawn(g.size(), false);
  for (size_t id = 0; id < g.size(); ++id)
    if (needed[id]) spawn[id] = !is_foldable_constant(g.at(static_cast<int>(id)));
  for (auto& f : sig.fetches) spawn[static_cast<size_t>(f.node)] = true;
  for (int t : sig.targets) spawn[static_cast<size_t>(t)] = true;
  for (size_t id = 0; id < g.size(); ++id)
    if (needed[id])
      for (int c : g.at(static_cast<int>(id)).control_inputs) spawn[static_cast<size_t>(c)] = true;

  // Plans in topological order, and the edges between them.
  std::vector<std::shared_ptr<node_plan>> plans(g.size());
  std::vector<edge> edges;
  std::vector<bool> starter(g.size(), false);
  auto coord = std::make_shared<coordinator_plan>();
  for (size_t uid = 0; uid < g.size(); ++uid) {
    if (!spawn[uid]) continue;
    int id = static_cast<int>(uid);
    auto& n = g.at(id);
    check_device(n);
    auto plan = std::make_shared<node_plan>();
    plan->def = n.def;
    plan->name = n.name;
    plan->attrs = n.attrs;
    plan->device = rt.cpu_device_actor();
    plan->output_consumers.resize(n.outputs.size());
    if (n.op == "placeholder") {
      auto f = feed_index.find(id);
      if (f == feed_index.end())
        fail("session", "placeholder '" + n.name + "' must be fed: a fetch or target depends on it");
      plan->kind = node_kind::placeholder;
      plan->slot_input.push_back(-1);
      coord->placeholders.push_back({caf::actor(), f->second});
    } else if (n.op == "variable") {
      plan->kind = node_kind::variable_read;
      plan->variable = vars(n.name);
    } else if (is_update(n)) {
      plan->kind = node_kind::variable_update;
      plan->variable = vars(g.at(n.inputs[0].node).name);
    }
    size_t first_input = is_update(n) ? 1 : 0;
    for (size_t i = first_input; i < n.inputs.size(); ++i) {
      auto& src = g.at(n.inputs[i].node);
      int input = static_cast<int>(i - first_input);
      if (is_foldable_constant(src)) {
        plan->bound_inputs.push_back(std::get<tensor>(src.attrs.at("value")));
        continue;
      }
      plan->bound_inputs.emplace_back();
      edges.push_back({n.inputs[i], id, static_cast<int32_t>(plan->slot_input.size()), false});
      plan->slot_input.push_back(input);
    }
    for (int c : n.control_inputs) {
      edges.push_back({{c, 0}, id, static_cast<int32_t>(plan->slot_input.size()), true});
      plan->slot_input.push_back(-1);
    }
    if (plan->slot_input.empty()) {  // no inputs at all: the coordinator starts it
      plan->slot_input.push_back(-1);
      starter[uid] = true;
    }
    plans[uid] = plan;
  }
  for (size_t i = 0; i < sig.fetches.size(); ++i)
    edges.push_back({sig.fetches[i], -1, static_cast<int32_t>(i), false});
  for (size_t i = 0; i < sig.targets.size(); ++i)
    edges.push_back({{sig.targets[i], 0}, -1, static_cast<int32_t>(sig.fetches.size() + i), true});
  coord->num_fetches = sig.fetches.size();
  coord->num_targets = sig.targets.size();

  // Spawn consumers before producers, so each plan can name its consumers' actors.
  // The coordinator's plan gets its routes below; it reads them only once a
  // step starts, after this constructor has returned.
  coordinator_ = rt.system().spawn(coordinator, coord);
  std::vector<caf::actor> actor_of(g.size());
  std::sort(edges.begin(), edges.end(),
            [](const edge& a, const edge& b) { return a.from.node > b.from.node; });
  size_t e = 0;
  for (size_t uid = g.size(); uid-- > 0;) {
    if (!plans[uid]) continue;
    for (; e < edges.size() && edges[e].from.node >= static_cast<int>(uid); ++e) {
      auto& ed = edges[e];
      if (ed.from.node != static_cast<int>(uid)) continue;
      consumer c{ed.to_node < 0 ? coordinator_ : actor_of[static_cast<size_t>(ed.to_node)], ed.slot};
      if (ed.control) plans[uid]->control_consumers.push_back(c);
      else plans[uid]->output_consumers[static_cast<size_t>(ed.from.index)].push_back(c);
    }
    auto actor = spawn_node_actor(rt.system(), plans[uid]);
    actor_of[uid] = actor;
    actors_.push_back(actor);
    if (plans[uid]->kind == node_kind::placeholder) {
      for (auto& p : coord->placeholders)
        if (!p.target && p.feed_index == feed_index.at(static_cast<int>(uid))) p.target = actor;
    } else if (starter[uid]) {
      coord->starters.push_back(actor);
    }
  }
}

executable::~executable() {
  for (auto& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(coordinator_, caf::exit_reason::user_shutdown);
}

void executable::start(step_request_ptr request) const {
  caf::anon_send(coordinator_, run_atom::value, std::move(request));
}

}  // namespace actorflow
