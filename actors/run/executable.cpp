#include "actors/run/executable.hpp"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "actors/run/chains.hpp"
#include "actors/run/coordinator.hpp"
#include "actors/run/device_edges.hpp"
#include "actors/run/node_plan.hpp"
#include "core/device_name.hpp"
#include "ops/transfer.hpp"

namespace actorflow {

namespace {

// ---- compiling a signature ------------------------------------------------

// The nodes `n` hears from, for timelines' flow arrows: its inputs' and
// control inputs' nodes; a recv hears from its send, in another partition.
std::vector<std::string> producers_of(const graph& g, const node& n) {
  std::vector<std::string> names;
  if (n.def->role == op_role::recv) {
    names.push_back(get_attr_or<std::string>(n.attrs, transfer_peer_attr, n.op, ""));
    return names;
  }
  for (auto& in : n.inputs) names.push_back(g.at(in.node).name);
  for (int c : n.control_inputs) names.push_back(g.at(c).name);
  return names;
}

// An enter of a loop invariant (or the recv of one from another partition):
// its value serves every iteration of the frame.
bool is_invariant_enter(const node& n) {
  if (n.def->role == op_role::recv)
    return get_attr_or<bool>(n.attrs, "invariant", n.op, false);  // one, cut
  return is_loop_invariant(n);
}

size_t readers_of_history(const graph& g, const std::vector<bool>& needed, const node& read) {
  auto history = get_attr<std::string>(read.attrs, "history", read.op);
  size_t readers = 0;
  for (auto& n : g.nodes())
    readers += needed[size_t(n.id)] && n.def->role == op_role::history_read &&
               get_attr<std::string>(n.attrs, "history", n.op) == history;
  return readers;
}

// A value inside a loop exists once per iteration; a step returns one.
void check_not_in_loop(const graph& g, const run_signature& sig) {
  std::vector<int> ends;
  for (auto& f : sig.fetches) ends.push_back(f.node);
  for (int t : sig.targets)
    if (!get_attr_or<bool>(g.at(t).attrs, "in_loop", g.at(t).op, false)) ends.push_back(t);
  for (int id : ends)
    if (int f = g.frame_of(id); f >= 0)
      fail("session", "'" + g.at(id).name + "' lies inside loop '" +
                          g.loop_frames()[static_cast<size_t>(f)].name +
                          "': fetch or run the loop's outputs instead");
}

// Which actor runs each node. A loop's nodes share one, per outermost loop
// frame: its iterations mostly follow one another anyway, and between nodes
// of one actor a value is a call, not a message (about a third of a
// microsecond each, several per iteration).
// Every other node has its own actor, as do a loop's sends and recvs (the
// other process addresses a recv as a whole actor) and the nodes the
// coordinator starts.
class node_hosts {
 public:
  node_hosts(const graph& g, const std::vector<std::shared_ptr<node_plan>>& plans,
             const std::vector<bool>& starter)
      : host_of_(plans.size(), -1), member_of_(plans.size(), 0) {
    std::unordered_map<int, int> host_of_loop;  // outermost frame -> host
    for (size_t uid = 0; uid < plans.size(); ++uid) {
      if (!plans[uid]) continue;
      int id = static_cast<int>(uid);
      int loop = shares_loop_host(*plans[uid], starter[uid]) ? outermost_frame(g, id) : -1;
      auto [it, fresh] = host_of_loop.try_emplace(loop, static_cast<int>(members_.size()));
      if (loop < 0 || fresh) {
        host_of_[uid] = static_cast<int>(members_.size());
        members_.emplace_back();
      } else {
        host_of_[uid] = it->second;
      }
      auto& members = members_[static_cast<size_t>(host_of_[uid])];
      member_of_[uid] = static_cast<uint32_t>(members.size());
      members.push_back(id);
    }
  }

  // Spawns the actors; the plans may still change until the first step.
  void spawn(caf::actor_system& system, const std::vector<std::shared_ptr<node_plan>>& plans) {
    for (auto& nodes : members_) {
      std::vector<node_plan_ptr> members;
      for (int id : nodes) members.push_back(plans[static_cast<size_t>(id)]);
      actors_.push_back(spawn_node_host(system, std::move(members)));
    }
  }

  const caf::actor& actor_of(int id) const {
    return actors_[static_cast<size_t>(host_of_[static_cast<size_t>(id)])];
  }
  consumer consumer_of(int id, int32_t slot, placement place = placement::scheduler) const {
    return consumer{actor_of(id), slot, place, member_of_[static_cast<size_t>(id)]};
  }
  const std::vector<caf::actor>& actors() const { return actors_; }

 private:
  static bool shares_loop_host(const node_plan& plan, bool starter) {
    return plan.in_loop && !starter && plan.kind != node_kind::send && plan.kind != node_kind::recv;
  }
  static int outermost_frame(const graph& g, int id) {
    int f = g.frame_of(id);
    while (g.loop_frames()[static_cast<size_t>(f)].parent >= 0)
      f = g.loop_frames()[static_cast<size_t>(f)].parent;
    return f;
  }

  std::vector<int> host_of_;
  std::vector<uint32_t> member_of_;
  std::vector<std::vector<int>> members_;  // host -> its nodes
  std::vector<caf::actor> actors_;
};

// The nodes of a frame that hold loop invariants and lie before its switches
// (the predicate's) hear where the frame ends from its first switch: they
// see only live values, and would not learn it otherwise.
void wire_frame_ends(const graph& g, const std::vector<std::shared_ptr<node_plan>>& plans,
                     const node_hosts& hosts) {
  std::vector<char> after_switch(plans.size(), 0);
  std::unordered_map<int, node_plan*> first_switch;  // frame -> its first loop switch
  for (size_t id = 0; id < plans.size(); ++id) {
    if (!plans[id]) continue;
    auto& n = g.at(static_cast<int>(id));
    bool after = plans[id]->loop_switch;
    int frame = g.frame_of(n.id);
    auto follows = [&](int from) {
      return g.frame_of(from) == frame && after_switch[static_cast<size_t>(from)] != 0;
    };
    for (auto& in : n.inputs) after |= follows(in.node);
    for (int c : n.control_inputs) after |= follows(c);
    after_switch[id] = after && n.def->role != op_role::exit_frame;
    if (plans[id]->loop_switch) first_switch.try_emplace(g.frame_of(n.id), plans[id].get());
  }
  for (size_t id = 0; id < plans.size(); ++id) {
    if (!plans[id] || after_switch[id] || plans[id]->num_invariant_slots == 0) continue;
    auto sw = first_switch.find(g.frame_of(static_cast<int>(id)));
    if (sw != first_switch.end())
      sw->second->frame_end_listeners.push_back(hosts.consumer_of(static_cast<int>(id), 0));
  }
}

// A next_iteration gets no actor: its loop merge serves it (see loop_merge
// in node_plan.hpp). Its input goes to the merge's slot 1, and the merge
// takes its attributes.
void fold_next_iteration(const graph& g, const node& next,
                         std::vector<std::shared_ptr<node_plan>>& plans,
                         std::vector<plan_edge>& edges) {
  auto merge = g.find(get_attr<std::string>(next.attrs, "merge", next.op));
  if (merge == nullptr || !plans[static_cast<size_t>(merge->id)])
    fail("session", "next_iteration '" + next.name + "' has no loop merge in this run");
  if (g.at(next.inputs[0].node).def->role == op_role::constant &&
      g.at(next.inputs[0].node).control_inputs.empty())
    fail("session", "next_iteration '" + next.name +
                        "' takes a constant: it would not come in every iteration");
  auto& m = *plans[static_cast<size_t>(merge->id)];
  m.loop_name = get_attr<std::string>(next.attrs, "frame", next.op);
  m.max_iterations = get_attr_or<int64_t>(next.attrs, "max_iterations", next.op, 0);
  edges.push_back({next.inputs[0], merge->id, 1, false});
}

// Once every actor is spawned: the variables of a loop with several share a
// gate that bounds the iterations in flight.
void wire_loops(const graph& g, const std::vector<std::shared_ptr<node_plan>>& plans,
                const node_hosts& hosts) {
  wire_frame_ends(g, plans, hosts);
  std::unordered_map<std::string, std::vector<node_plan*>> vars_of_loop;
  for (auto& plan : plans)
    if (plan && plan->kind == node_kind::loop_merge)
      vars_of_loop[plan->loop_name].push_back(plan.get());
  for (auto& [loop, vars] : vars_of_loop) {
    if (vars.size() < 2) continue;
    auto& enter = g.at(g.at(g.find(vars[0]->name)->id).inputs[0].node);
    auto gate = std::make_shared<loop_gate>(
        vars.size(), get_attr_or<int64_t>(enter.attrs, "parallel_iterations", enter.op, 10));
    for (size_t v = 0; v < vars.size(); ++v) {
      vars[v]->gate = gate;
      vars[v]->gate_var = v;
    }
  }
}

// The kind of node a graph node becomes (its op's role, and for a switch
// or a merge whether it belongs to a loop).
node_kind kind_of(const node& n) {
  switch (n.def->role) {
    case op_role::placeholder:
      return node_kind::placeholder;
    case op_role::variable:
      return node_kind::variable_read;
    case op_role::resource_op:
      return node_kind::variable_update;
    case op_role::recv:
      return node_kind::recv;
    case op_role::send:
      return node_kind::send;
    case op_role::switch_value:
      return node_kind::switch_value;
    case op_role::merge_values:
      return n.attrs.count("frame") ? node_kind::loop_merge : node_kind::merge_values;
    case op_role::enter_frame:
      return node_kind::enter_frame;
    case op_role::exit_frame:
      return node_kind::exit_frame;
    case op_role::history_push:
      return node_kind::history_push;
    case op_role::history_read:
      return node_kind::history_read;
    default:
      return node_kind::kernel;
  }
}

// The node's kernel, its attributes read once; a malformed attribute fails
// the compile, naming the node.
kernel_fn kernel_of(const node& n) {
  if (!n.def->make_kernel) return n.def->kernel;
  try {
    return n.def->make_kernel(n.attrs);
  } catch (const error& e) {
    throw error("[session] node '" + n.name + "' (" + n.op + "): " + e.what(), e.code());
  }
}

// Compiles a signature into the executable's actors, in named passes:
// prune, plan each node, add the sinks, spawn, wire the edges, route the
// sources, wire the loops.
class executable_builder {
 public:
  executable_builder(const graph& g, const run_signature& sig, runtime& rt,
                     const variable_lookup& vars, const std::string& task)
      : g_(g), sig_(sig), rt_(rt), vars_(vars), task_(task), placer_(g, rt.devices()) {
    static std::atomic<uint64_t> last_executable_id{0};
    coord_->executable_id = ++last_executable_id;
  }

  // Fills the executable's members.
  void build(std::vector<caf::actor>& actors, caf::actor& coordinator,
             std::map<std::string, caf::actor>& recvs,
             std::map<std::string, std::shared_ptr<send_route>>& routes,
             std::vector<placement_entry>& placement_log) {
    prune();
    if (rt_.options().cost_model_placement) placer_.place_by_cost(needed_, rt_.device_rates());
    for (size_t uid = 0; uid < g_.size(); ++uid)
      if (spawn_[uid]) plan_node(static_cast<int>(uid), routes, placement_log);
    add_sinks();
    check_not_in_loop(g_, sig_);
    // The actors first, then the consumers each plan names (loops make the
    // edges a cycle); the coordinator reads its plan only once a step
    // starts, after the executable's constructor has returned.
    coordinator = spawn_coordinator(rt_.system(), coord_);
    node_hosts hosts(g_, plans_, starter_);
    hosts.spawn(rt_.system(), plans_);
    actors = hosts.actors();
    wire_edges(hosts, coordinator);
    route_sources(hosts, recvs);
    if (coord_->has_loops) {
      wire_loops(g_, plans_, hosts);
      coord_->nodes = actors;
    }
  }

 private:
  // The nodes the signature needs, and which of them need an actor: not the
  // constants folded into their consumers, unless fetched or waited on by a
  // control edge.
  void prune() {
    needed_ = needed_nodes(g_, sig_, false);
    for (size_t i = 0; i < sig_.feeds.size(); ++i) feed_index_[sig_.feeds[i].node] = i;
    spawn_.assign(g_.size(), false);
    for (size_t id = 0; id < g_.size(); ++id)
      if (needed_[id]) spawn_[id] = !is_foldable_constant(g_.at(static_cast<int>(id)));
    for (auto& f : sig_.fetches) spawn_[static_cast<size_t>(f.node)] = true;
    for (int t : sig_.targets) spawn_[static_cast<size_t>(t)] = true;
    for (size_t id = 0; id < g_.size(); ++id)
      if (needed_[id])
        for (int c : g_.at(static_cast<int>(id)).control_inputs)
          spawn_[static_cast<size_t>(c)] = true;
    plans_.resize(g_.size());
    starter_.assign(g_.size(), false);
    node_device_.assign(g_.size(), -1);
  }

  // The plan of node `id` (in topological order), placed on its device,
  // with the edges into it.
  void plan_node(int id, std::map<std::string, std::shared_ptr<send_route>>& routes,
                 std::vector<placement_entry>& placement_log) {
    auto uid = static_cast<size_t>(id);
    auto& n = g_.at(id);
    node_device_[uid] = placer_.device_of(id);
    const local_device& device = rt_.devices()[static_cast<size_t>(node_device_[uid])];
    placement_log.push_back(placer_.entry(id));
    if (n.def->role == op_role::next_iteration) return fold_next_iteration(g_, n, plans_, edges_);
    auto plan = std::make_shared<node_plan>();
    plan->kind = kind_of(n);
    // A variable in an accelerator's memory: its nodes there are launches on it.
    if (device.accel && (plan->kind == node_kind::variable_read ||
                         (plan->kind == node_kind::variable_update && n.def->update))) {
      const node& var = plan->kind == node_kind::variable_read ? n : g_.at(n.inputs[0].node);
      plan->device_variable = vars_(var, device).on_device;
      if (!plan->device_variable)
        fail("session", "node '" + n.name + "' is placed on " + device.name + ", but variable '" +
                            var.name + "' does not live there");
      plan->kind = node_kind::kernel;
    }
    plan->def = n.def;
    plan->name = n.name;
    plan->task = task_;
    plan->device_name = device.name;
    plan->producers = producers_of(g_, n);
    plan->executable_id = coord_->executable_id;
    plan->attrs = n.attrs;
    plan->kernel = kernel_of(n);
    plan->device = device.actor;
    plan->arena = device.arena;
    plan->accel = device.accel;
    plan->in_loop = g_.frame_of(id) >= 0;
    if (plan->accel && plan->kind == node_kind::kernel && !plan->device_variable &&
        runs_in_host_memory(g_, n))
      run_on_host(*plan);
    plan->output_consumers.resize(n.outputs.size());
    plan_kind(n, device, *plan, routes);
    plan_inputs(n, *plan);
    if (plan->accel) {
      plan->constants_on_device = std::make_shared<device_constants>();
      for (auto& bound : plan->bound_inputs)
        plan->constants_on_device->is_constant.push_back(bound.valid());
    }
    coord_->has_loops |= plan->kind == node_kind::enter_frame;
    if (plan->kind == node_kind::loop_merge) {
      if (plan->slot_input.size() != 1)
        fail("session", "loop merge '" + n.name + "' must have exactly one input, its enter");
      plan->slot_input.push_back(-1);  // slot 1: the back edge from its next_iteration
    }
    if (plan->slot_input.empty()) {  // no inputs at all: the coordinator starts it
      plan->slot_input.push_back(-1);
      starter_[uid] = true;
    }
    plans_[uid] = plan;
  }

  // The node's kernel runs on a CPU device's pool, though placed on an accelerator.
  void run_on_host(node_plan& plan) const {
    for (auto& d : rt_.devices())
      if (!d.accel) {
        plan.device = d.actor;
        plan.arena = d.arena;
        plan.accel = nullptr;
        return;
      }
  }

  // What the node's kind needs beside the common fields.
  void plan_kind(const node& n, const local_device& device, node_plan& plan,
                 std::map<std::string, std::shared_ptr<send_route>>& routes) {
    switch (plan.kind) {
      case node_kind::placeholder: {
        auto f = feed_index_.find(n.id);
        if (f == feed_index_.end())
          fail("session",
               "placeholder '" + n.name + "' must be fed: a fetch or target depends on it");
        plan.slot_input.push_back(-1);
        coord_->placeholders.push_back({caf::actor(), f->second});
        return;
      }
      case node_kind::recv:  // forwards what its remote send delivers
        plan.slot_input.push_back(-1);
        return;
      case node_kind::variable_read:
        plan.variable = vars_(n, device).actor;
        return;
      case node_kind::variable_update: {
        plan.variable = vars_(g_.at(n.inputs[0].node), device).actor;
        auto& waiting = coord_->waiting_resources;
        if (n.def->may_wait &&
            std::find(waiting.begin(), waiting.end(), plan.variable) == waiting.end())
          waiting.push_back(plan.variable);
        return;
      }
      case node_kind::send:
        plan.route = std::make_shared<send_route>();
        routes.emplace(n.name, plan.route);
        return;
      case node_kind::switch_value:
        plan.loop_switch = n.attrs.count("frame") > 0;
        return;
      case node_kind::enter_frame:
        plan.frame_id = std::hash<std::string>()(get_attr<std::string>(n.attrs, "frame", n.op));
        return;
      case node_kind::history_push:
      case node_kind::history_read: {
        auto& store = histories_[get_attr<std::string>(n.attrs, "history", n.op)];
        if (!store) {
          store = std::make_shared<loop_history>();
          coord_->histories.push_back(store);
        }
        plan.history = store;
        // A read lets go of what it reads only where it is its history's one
        // reader and reads each value once (in the saving loop's own gradient).
        plan.history_pop = get_attr_or<bool>(n.attrs, "pop", n.op, false) &&
                           readers_of_history(g_, needed_, n) == 1;
        return;
      }
      default:
        return;
    }
  }

  // Its inputs: folded constants bound into the plan, the others as edges
  // into slots, then one slot per control input.
  void plan_inputs(const node& n, node_plan& plan) {
    size_t first_input = n.def->acts_on_resource() ? 1 : 0;  // input 0: the resource
    for (size_t i = first_input; i < n.inputs.size(); ++i) {
      auto& src = g_.at(n.inputs[i].node);
      int input = static_cast<int>(i - first_input);
      if (is_foldable_constant(src)) {
        plan.bound_inputs.push_back(std::get<tensor>(src.attrs.at("value")));
        continue;
      }
      plan.bound_inputs.emplace_back();
      edges_.push_back({n.inputs[i], n.id, static_cast<int32_t>(plan.slot_input.size()), false});
      plan.slot_input.push_back(input);
      plan.invariant_slot.push_back(is_invariant_enter(src));
      plan.num_invariant_slots += plan.invariant_slot.back() ? 1 : 0;
    }
    for (int c : n.control_inputs) {
      edges_.push_back({{c, 0}, n.id, static_cast<int32_t>(plan.slot_input.size()), true});
      plan.slot_input.push_back(-1);
    }
    plan.invariant_slot.resize(plan.slot_input.size(), false);
    if (plan.num_invariant_slots == 0) plan.invariant_slot.clear();
    if (plan.num_invariant_slots > 0 && plan.num_invariant_slots == plan.slot_input.size())
      fail("session", "node '" + n.name +
                          "' takes only loop invariants: it needs an input (or a control input) "
                          "that comes in every iteration");
  }

  // The edges to the coordinator: the fetches, then the targets that report.
  // A send of a loop's values (actors/compile/partition.cpp) sends once per
  // iteration: it runs, but does not report to the coordinator.
  void add_sinks() {
    for (size_t i = 0; i < sig_.fetches.size(); ++i)
      edges_.push_back({sig_.fetches[i], -1, static_cast<int32_t>(i), false});
    std::vector<int> reporting;
    for (int t : sig_.targets)
      if (!get_attr_or<bool>(g_.at(t).attrs, "in_loop", g_.at(t).op, false)) reporting.push_back(t);
    for (size_t i = 0; i < reporting.size(); ++i)
      edges_.push_back(
          {{reporting[i], 0}, -1, static_cast<int32_t>(sig_.fetches.size() + i), true});
    coord_->num_feeds = sig_.feeds.size();
    coord_->num_fetches = sig_.fetches.size();
    for (auto& f : sig_.fetches)
      coord_->fetch_names.push_back(g_.at(f.node).name + ":" + std::to_string(f.index));
    coord_->num_targets = reporting.size();
  }

  // Names each edge's consumer in its producer's plan, placed on a worker
  // (actors/run/chains.hpp).
  void wire_edges(const node_hosts& hosts, const caf::actor& coordinator) {
    std::sort(edges_.begin(), edges_.end(),
              [](const plan_edge& a, const plan_edge& b) { return a.from.node > b.from.node; });
    auto place = place_chains(edges_, plans_, coord_->num_fetches + coord_->num_targets,
                              static_cast<size_t>(rt_.options().scheduler_threads));
    std::vector<bool> on_accelerator(plans_.size());
    for (size_t id = 0; id < plans_.size(); ++id)
      on_accelerator[id] = plans_[id] && plans_[id]->accel != nullptr;
    auto carries_device = device_edges(edges_, plans_, node_device_, on_accelerator);
    for (size_t e = 0; e < edges_.size(); ++e) {
      auto& ed = edges_[e];
      if (!plans_[static_cast<size_t>(ed.from.node)]) continue;  // from a node with no actor
      auto& producer = *plans_[static_cast<size_t>(ed.from.node)];
      consumer c = ed.to_node < 0 ? consumer{coordinator, ed.slot, place[e]}
                                  : hosts.consumer_of(ed.to_node, ed.slot, place[e]);
      c.on_device = carries_device[e];
      if (ed.control)
        producer.control_consumers.push_back(c);
      else
        producer.output_consumers[static_cast<size_t>(ed.from.index)].push_back(c);
    }
  }

  // Where the step's values come from: the coordinator's placeholders and
  // starters, and the recvs that other partitions' sends deliver to.
  void route_sources(const node_hosts& hosts, std::map<std::string, caf::actor>& recvs) {
    for (size_t uid = 0; uid < plans_.size(); ++uid) {
      if (!plans_[uid]) continue;
      const caf::actor& actor = hosts.actor_of(static_cast<int>(uid));
      if (plans_[uid]->kind == node_kind::recv) {
        recvs.emplace(plans_[uid]->name, actor);
      } else if (plans_[uid]->kind == node_kind::placeholder) {
        for (auto& p : coord_->placeholders)
          if (!p.target && p.feed_index == feed_index_.at(static_cast<int>(uid))) p.target = actor;
      } else if (starter_[uid]) {
        coord_->starters.push_back(actor);
      }
    }
  }

  const graph& g_;
  const run_signature& sig_;
  runtime& rt_;
  const variable_lookup& vars_;
  const std::string& task_;
  device_placer placer_;
  std::shared_ptr<coordinator_plan> coord_ = std::make_shared<coordinator_plan>();
  std::vector<bool> needed_, spawn_, starter_;
  std::unordered_map<int, size_t> feed_index_;
  std::vector<std::shared_ptr<node_plan>> plans_;  // by node id; null: no actor
  std::vector<plan_edge> edges_;
  std::vector<int> node_device_;  // by node id: its index in the runtime's devices
  std::unordered_map<std::string, std::shared_ptr<loop_history>> histories_;
};

}  // namespace

executable::executable(const graph& g, const run_signature& sig, runtime& rt,
                       const variable_lookup& vars, const std::string& task) {
  executable_builder(g, sig, rt, vars, task)
      .build(actors_, coordinator_, recvs_, routes_, placement_log_);
}

executable::~executable() {
  for (auto& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(coordinator_, caf::exit_reason::user_shutdown);
}

void executable::connect(const std::string& send_name, caf::actor recv) const {
  auto it = routes_.find(send_name);
  if (it == routes_.end()) fail("session", "no send node '" + send_name + "' in this partition");
  it->second->set(std::move(recv));
}

void executable::start(step_request_ptr request) const {
  caf::anon_send(coordinator_, run_atom::value, std::move(request));
}

}  // namespace actorflow
