#include "actors/run/executable.hpp"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "actors/run/cancelled_steps.hpp"
#include "actors/run/node_plan.hpp"
#include "core/device_name.hpp"
#include "ops/transfer.hpp"

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
  size_t num_feeds = 0;
  size_t num_fetches = 0;
  std::vector<std::string> fetch_names;  // "node:index", for errors
  size_t num_targets = 0;
  uint64_t executable_id = 0;
  /// The resource actors that may hold a request of a step (op_def::may_wait):
  /// told to cancel them when the step fails or is aborted.
  std::vector<caf::actor> waiting_resources;
  /// With loops, a failed step ends at its first error and its node actors
  /// drop it (drop_atom): a loop would not otherwise stop to let the errors
  /// reach every sink.
  bool has_loops = false;
  std::vector<caf::actor> nodes;
  /// The stores of saved forward values (loop gradients): a step's are
  /// freed when it ends.
  std::vector<std::shared_ptr<loop_history>> histories;
};

// One step in flight. Its state appears with the first message about it: a
// partition's sinks may hear from a remote send before the client's start.
struct active_step {
  bool started = false;
  bool traced = false;
  int64_t received_ns = 0;      // a traced partition step: when its start came
  step_request_ptr request;     // a local run
  caf::response_promise reply;  // a start from a cluster client
  std::vector<tensor> fetched;
  size_t remaining = 0;
  std::string error;
  error_code code = error_code::unknown;  // of the error
};

struct coordinator_state {
  uint64_t next_step = 1;
  std::unordered_map<uint64_t, active_step> steps;
  aborted_steps aborted;
};

using coordinator_actor = caf::stateful_actor<coordinator_state>;

active_step& step_state(coordinator_actor* self, const coordinator_plan& plan, uint64_t step) {
  auto [it, fresh] = self->state.steps.try_emplace(step);
  if (fresh) {
    it->second.fetched.resize(plan.num_fetches);
    it->second.remaining = plan.num_fetches + plan.num_targets;
  }
  return it->second;
}

// A step that failed or was aborted will not use what its waiting requests
// would get: a dequeue still waiting would otherwise take the next element
// for nobody, and the step would wait for it.
void cancel_waiting_requests(coordinator_actor* self, const coordinator_plan& plan, uint64_t step,
                             const std::string& why) {
  for (auto& r : plan.waiting_resources)
    self->send(r, cancel_atom::value, plan.executable_id, step, why);
}

void launch(coordinator_actor* self, const coordinator_plan& plan, uint64_t step,
            const std::vector<tensor>& feeds) {
  for (auto& p : plan.placeholders)
    self->send(p.target, input_atom::value,
               step_input{step, 0, step_value{feeds[p.feed_index], ""}});
  for (auto& a : plan.starters) self->send(a, input_atom::value, step_input{step, 0, step_value{}});
}

// Answers a step's caller: a local run's promise, or the cluster client's
// start (with the partition's timeline when it was traced).
void answer_step(const coordinator_plan& plan, uint64_t step, active_step& st,
                 std::vector<tensor> fetched) {
  std::vector<node_trace> trace;
  if (any_step_traced()) {
    trace = end_step_trace(plan.executable_id, step);  // also one a recv began
    forget_stale_step_traces();
  }
  if (!st.traced) trace.clear();
  if (st.request) {
    st.request->trace_records = std::move(trace);
    return st.request->complete(std::move(fetched), st.error, st.code);
  }
  step_result r{std::move(fetched), std::move(st.error)};
  r.code = st.code;
  if (st.traced) {
    r.trace = std::move(trace);
    r.received_ns = st.received_ns;
    r.answered_ns = trace_now_ns();
  }
  st.reply.deliver(std::move(r));
}

// A step of an executable with loops that failed: answered now, and
// forgotten by its nodes, whose late messages are dropped.
void fail_now(coordinator_actor* self, const coordinator_plan& plan, uint64_t step) {
  for (auto& h : plan.histories) h->forget(step);
  auto it = self->state.steps.find(step);
  active_step st = std::move(it->second);
  self->state.steps.erase(it);
  self->state.aborted.add(step);
  for (auto& n : plan.nodes) self->send(n, drop_atom::value, step);
  answer_step(plan, step, st, {});
}

// Answers the step's caller once it started and every sink reported.
void finish_if_done(coordinator_actor* self, const coordinator_plan& plan, uint64_t step) {
  auto it = self->state.steps.find(step);
  if (it == self->state.steps.end() || !it->second.started || it->second.remaining > 0) return;
  for (auto& h : plan.histories) h->forget(step);
  active_step st = std::move(it->second);
  self->state.steps.erase(it);
  answer_step(plan, step, st, std::move(st.fetched));
}

caf::behavior coordinate(coordinator_actor* self, std::shared_ptr<coordinator_plan> plan) {
  return {
      [self, plan](run_atom, step_request_ptr& request) {
        if (plan->num_fetches + plan->num_targets == 0) {
          request->complete({});
          return;
        }
        uint64_t step = self->state.next_step++;
        auto& st = step_state(self, *plan, step);
        st.started = true;
        if (request->trace) {
          st.traced = true;
          begin_step_trace(plan->executable_id, step);
        }
        launch(self, *plan, step, request->feeds);
        st.request = std::move(request);
      },
      [self, plan](start_atom, uint64_t step, std::vector<tensor>& feeds, bool trace) {
        const int64_t received = trace ? trace_now_ns() : 0;
        auto reply = self->make_response_promise();
        if (feeds.size() != plan->num_feeds) {
          reply.deliver(step_result::failure(
              "[session] a partition step got " + std::to_string(feeds.size()) +
                  " feeds, it takes " + std::to_string(plan->num_feeds),
              error_code::invalid_argument));
          return;
        }
        if (plan->num_fetches + plan->num_targets == 0) {
          reply.deliver(step_result{});
          return;
        }
        auto& st = step_state(self, *plan, step);
        st.started = true;
        st.reply = std::move(reply);
        if (trace) {
          st.traced = true;
          st.received_ns = received;
          begin_step_trace(plan->executable_id, step);
        }
        launch(self, *plan, step, feeds);
        finish_if_done(self, *plan, step);
      },
      [self, plan](abort_atom, uint64_t step) {
        self->state.aborted.add(step);
        cancel_waiting_requests(self, *plan, step,
                                "step " + std::to_string(step) + " was aborted by its client");
        // A loop's part here would otherwise go on with the step's values.
        for (auto& h : plan->histories) h->forget(step);
        if (plan->has_loops)
          for (auto& n : plan->nodes) self->send(n, drop_atom::value, step);
        if (any_step_traced())
          end_step_trace(plan->executable_id, step);  // a recv may have begun it
        auto it = self->state.steps.find(step);
        if (it == self->state.steps.end()) return;
        auto& st = it->second;
        if (st.started && !st.request)
          st.reply.deliver(step_result::failure(
              "[session] step " + std::to_string(step) + " aborted", error_code::aborted));
        self->state.steps.erase(it);
      },
      [self, plan](input_atom, step_input& in) {
        if (self->state.aborted.contains(in.step)) return;
        auto& st = step_state(self, *plan, in.step);
        if (!in.value.ok()) {
          if (st.error.empty()) {
            st.error = std::move(in.value.error);
            st.code = in.value.code;
            cancel_waiting_requests(self, *plan, in.step,
                                    "another node of step " + std::to_string(in.step) + " failed");
            if (plan->has_loops && st.started) return fail_now(self, *plan, in.step);
          }
        } else if (static_cast<size_t>(in.slot) < plan->num_fetches) {
          if (in.value.dead && st.error.empty()) {  // a target may be dead: it did not run
            st.error = "[session] fetch '" + plan->fetch_names[static_cast<size_t>(in.slot)] +
                       "' has no value in this step: it lies in a branch of a cond that was "
                       "not taken";
            st.code = error_code::invalid_argument;
          }
          st.fetched[static_cast<size_t>(in.slot)] = std::move(in.value.value);
        }
        --st.remaining;
        finish_if_done(self, *plan, in.step);
      },
  };
}

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
  if (n.def->role == op_role::recv) return get_attr_or<bool>(n.attrs, "invariant", n.op, false);  // one, cut
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

// Update ops (and queue ops) go to the actor of the resource at input 0.
bool is_update(const node& n) { return n.def->acts_on_resource(); }

// An edge the runtime carries: output (node, index) of a source to a slot of a consumer.
struct edge {
  endpoint from;
  int to_node;  // -1: the coordinator
  int32_t slot;
  bool control;
};

// A long chain is cut into at most one segment per worker, each at least
// this long: a hand-over to another worker costs a wake-up (about 50 us
// here), which a segment must win back.
constexpr size_t min_links_per_segment = 128;

// Steps a node of a segmented chain handles per turn. Handling all that wait
// would move the steps in flight down the chain as one wave, which keeps one
// segment, and so one worker, busy at a time; waves of a few steps follow one
// another down the segments. 3 to 6 measured alike on the pipelined chain.
constexpr size_t segmented_batch_limit = 4;

// Marks the chain links among the edges (sorted by producer): an edge that
// is its producer's only one and its consumer's only input runs its consumer
// next on the producer's worker. Returns producer -> its link to another node.
std::unordered_map<int, size_t> mark_chain_links(
    const std::vector<edge>& edges, const std::vector<std::shared_ptr<node_plan>>& plans,
    size_t coordinator_slots, std::vector<placement>& place) {
  std::unordered_map<int, size_t> link_from;
  for (size_t e = 0, end = 0; e < edges.size(); e = end) {
    end = e;
    while (end < edges.size() && edges[end].from.node == edges[e].from.node) ++end;
    int to = edges[e].to_node;
    size_t slots = to < 0 ? coordinator_slots : plans[static_cast<size_t>(to)]->num_slots();
    if (end - e != 1 || slots != 1) continue;
    place[e] = placement::same_worker;
    if (to >= 0) link_from[edges[e].from.node] = e;  // the coordinator ends a chain
  }
  return link_from;
}

// How each edge (sorted by producer) places its consumer (see placement in
// node_plan.hpp). A chain of many links is cut into segments, one per
// worker, so that its steps in flight keep all the workers busy; its nodes
// get a batch limit.
// A cond stays on the worker that runs its switch: of a switch's outputs
// only one is live in a step, and the other's dead values cost a message per
// node, so handing either branch to another worker would buy a wake-up for
// nothing; a merge fires once per step on its first live input. So an edge
// out of a switch to a one-input node, and an edge into a merge, run their
// consumer next on the producer's worker, as a chain link does. So do the
// edges inside a loop: its iterations mostly follow one another, and a hop
// to another worker per node would cost a wake-up each (an idle worker
// still steals from the queue when iterations overlap).
void mark_cond_links(const std::vector<edge>& edges,
                     const std::vector<std::shared_ptr<node_plan>>& plans,
                     std::vector<placement>& place) {
  for (size_t e = 0; e < edges.size(); ++e) {
    int to = edges[e].to_node;
    if (to < 0 || place[e] != placement::scheduler) continue;
    auto& consumer = *plans[static_cast<size_t>(to)];
    auto& producer = *plans[static_cast<size_t>(edges[e].from.node)];
    if (consumer.kind == node_kind::merge_values ||
        (producer.kind == node_kind::switch_value && consumer.num_slots() == 1) ||
        (producer.in_loop && consumer.in_loop))
      place[e] = placement::same_worker;
  }
}

std::vector<placement> place_chains(const std::vector<edge>& edges,
                                    const std::vector<std::shared_ptr<node_plan>>& plans,
                                    size_t coordinator_slots, size_t workers) {
  std::vector<placement> place(edges.size(), placement::scheduler);
  auto link_from = mark_chain_links(edges, plans, coordinator_slots, place);
  mark_cond_links(edges, plans, place);
  std::unordered_set<int> linked_to;
  for (auto [from, e] : link_from) linked_to.insert(edges[e].to_node);
  for (auto [head, unused] : link_from) {
    if (linked_to.count(head)) continue;  // not the first node of its chain
    std::vector<size_t> chain;
    for (auto it = link_from.find(head); it != link_from.end();
         it = link_from.find(edges[it->second].to_node))
      chain.push_back(it->second);
    size_t segments = std::min(workers, chain.size() / min_links_per_segment);
    if (segments < 2) continue;
    plans[static_cast<size_t>(head)]->batch_limit = segmented_batch_limit;
    for (size_t e : chain) {
      place[e] = placement::pinned;
      plans[static_cast<size_t>(edges[e].to_node)]->batch_limit = segmented_batch_limit;
    }
    for (size_t j = 1; j < segments; ++j)
      place[chain[chain.size() * j / segments]] = placement::next_segment;
  }
  return place;
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
      int loop = shares_loop_host(g, *plans[uid], id, starter[uid]) ? outermost_frame(g, id) : -1;
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
  static bool shares_loop_host(const graph& g, const node_plan& plan, int id, bool starter) {
    return plan.in_loop && !starter && plan.kind != node_kind::send && g.at(id).def->role != op_role::recv;
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
                         std::vector<std::shared_ptr<node_plan>>& plans, std::vector<edge>& edges) {
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

// A consumer on the producer's accelerator takes the value in device memory;
// any other (a fetch included) a host copy.
bool on_same_device(const edge& ed, const std::vector<int>& node_device) {
  return ed.to_node >= 0 && node_device[static_cast<size_t>(ed.to_node)] ==
                                node_device[static_cast<size_t>(ed.from.node)];
}

}  // namespace

executable::executable(const graph& g, const run_signature& sig, runtime& rt,
                       const variable_lookup& vars, const std::string& task) {
  static std::atomic<uint64_t> last_executable_id{0};
  uint64_t executable_id = ++last_executable_id;
  auto needed = needed_nodes(g, sig, false);
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
  std::unordered_map<std::string, std::shared_ptr<loop_history>> histories;
  auto coord = std::make_shared<coordinator_plan>();
  coord->executable_id = executable_id;
  device_placer placer(g, rt.devices());
  if (rt.options().cost_model_placement) placer.place_by_cost(needed, rt.device_rates());
  std::vector<int> node_device(g.size(), -1);
  for (size_t uid = 0; uid < g.size(); ++uid) {
    if (!spawn[uid]) continue;
    int id = static_cast<int>(uid);
    auto& n = g.at(id);
    node_device[uid] = placer.device_of(id);
    const local_device& device = rt.devices()[static_cast<size_t>(node_device[uid])];
    placement_log_.push_back(placer.entry(id));
    auto plan = std::make_shared<node_plan>();
    plan->def = n.def;
    plan->name = n.name;
    plan->task = task;
    plan->device_name = device.name;
    plan->producers = producers_of(g, n);
    plan->executable_id = executable_id;
    plan->attrs = n.attrs;
    plan->device = device.actor;
    plan->arena = device.arena;
    plan->accel = device.accel;
    plan->in_loop = g.frame_of(id) >= 0;
    plan->output_consumers.resize(n.outputs.size());
    if (n.def->role == op_role::placeholder) {
      auto f = feed_index.find(id);
      if (f == feed_index.end())
        fail("session",
             "placeholder '" + n.name + "' must be fed: a fetch or target depends on it");
      plan->kind = node_kind::placeholder;
      plan->slot_input.push_back(-1);
      coord->placeholders.push_back({caf::actor(), f->second});
    } else if (n.def->role == op_role::variable) {
      plan->kind = node_kind::variable_read;
      plan->variable = vars(n, device);
    } else if (n.def->role == op_role::recv) {
      plan->kind = node_kind::placeholder;  // forwards what its remote send delivers
      plan->slot_input.push_back(-1);
    } else if (n.def->role == op_role::send) {
      plan->kind = node_kind::send;
      plan->route = std::make_shared<send_route>();
      routes_.emplace(n.name, plan->route);
    } else if (n.def->role == op_role::switch_value) {
      plan->kind = node_kind::switch_value;
      plan->loop_switch = n.attrs.count("frame") > 0;
    } else if (n.def->role == op_role::merge_values) {
      plan->kind = n.attrs.count("frame") ? node_kind::loop_merge : node_kind::merge_values;
    } else if (n.def->role == op_role::enter_frame) {
      plan->kind = node_kind::enter_frame;
      plan->frame_id = std::hash<std::string>()(get_attr<std::string>(n.attrs, "frame", n.op));
    } else if (n.def->role == op_role::exit_frame) {
      plan->kind = node_kind::exit_frame;
    } else if (n.def->role == op_role::history_push || n.def->role == op_role::history_read) {
      plan->kind = n.def->role == op_role::history_push ? node_kind::history_push : node_kind::history_read;
      auto& store = histories[get_attr<std::string>(n.attrs, "history", n.op)];
      if (!store) {
        store = std::make_shared<loop_history>();
        coord->histories.push_back(store);
      }
      plan->history = store;
      // A read lets go of what it reads only where it is its history's one
      // reader and reads each value once (in the saving loop's own gradient).
      plan->history_pop =
          get_attr_or<bool>(n.attrs, "pop", n.op, false) && readers_of_history(g, needed, n) == 1;
    } else if (n.def->role == op_role::next_iteration) {
      fold_next_iteration(g, n, plans, edges);
      continue;
    } else if (is_update(n)) {
      plan->kind = node_kind::variable_update;
      plan->variable = vars(g.at(n.inputs[0].node), device);
      auto& waiting = coord->waiting_resources;
      if (n.def->may_wait &&
          std::find(waiting.begin(), waiting.end(), plan->variable) == waiting.end())
        waiting.push_back(plan->variable);
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
      plan->invariant_slot.push_back(is_invariant_enter(src));
      plan->num_invariant_slots += plan->invariant_slot.back() ? 1 : 0;
    }
    for (int c : n.control_inputs) {
      edges.push_back({{c, 0}, id, static_cast<int32_t>(plan->slot_input.size()), true});
      plan->slot_input.push_back(-1);
    }
    plan->invariant_slot.resize(plan->slot_input.size(), false);
    if (plan->num_invariant_slots == 0) plan->invariant_slot.clear();
    if (plan->num_invariant_slots > 0 && plan->num_invariant_slots == plan->slot_input.size())
      fail("session", "node '" + n.name +
                          "' takes only loop invariants: it needs an input (or a control input) "
                          "that comes in every iteration");
    coord->has_loops |= n.def->role == op_role::enter_frame;
    if (plan->kind == node_kind::loop_merge) {
      if (plan->slot_input.size() != 1)
        fail("session", "loop merge '" + n.name + "' must have exactly one input, its enter");
      plan->slot_input.push_back(-1);  // slot 1: the back edge from its next_iteration
    }
    if (plan->slot_input.empty()) {  // no inputs at all: the coordinator starts it
      plan->slot_input.push_back(-1);
      starter[uid] = true;
    }
    plans[uid] = plan;
  }
  for (size_t i = 0; i < sig.fetches.size(); ++i)
    edges.push_back({sig.fetches[i], -1, static_cast<int32_t>(i), false});
  // A send of a loop's values (actors/compile/partition.cpp) sends once per
  // iteration: it runs, but does not report to the coordinator.
  std::vector<int> reporting;
  for (int t : sig.targets)
    if (!get_attr_or<bool>(g.at(t).attrs, "in_loop", g.at(t).op, false)) reporting.push_back(t);
  for (size_t i = 0; i < reporting.size(); ++i)
    edges.push_back({{reporting[i], 0}, -1, static_cast<int32_t>(sig.fetches.size() + i), true});
  coord->num_feeds = sig.feeds.size();
  coord->num_fetches = sig.fetches.size();
  for (auto& f : sig.fetches)
    coord->fetch_names.push_back(g.at(f.node).name + ":" + std::to_string(f.index));
  coord->num_targets = reporting.size();
  check_not_in_loop(g, sig);

  // The actors first, then the consumers each plan names (loops make the
  // edges a cycle); the coordinator's plan gets its routes below; it reads
  // them only once a step starts, after this constructor has returned.
  coordinator_ = rt.system().spawn(coordinate, coord);
  node_hosts hosts(g, plans, starter);
  hosts.spawn(rt.system(), plans);
  actors_ = hosts.actors();
  std::sort(edges.begin(), edges.end(),
            [](const edge& a, const edge& b) { return a.from.node > b.from.node; });
  auto place = place_chains(edges, plans, coord->num_fetches + coord->num_targets,
                            static_cast<size_t>(rt.options().scheduler_threads));
  for (size_t e = 0; e < edges.size(); ++e) {
    auto& ed = edges[e];
    if (!plans[static_cast<size_t>(ed.from.node)]) continue;  // from a node with no actor
    auto& producer = *plans[static_cast<size_t>(ed.from.node)];
    consumer c = ed.to_node < 0 ? consumer{coordinator_, ed.slot, place[e]}
                                : hosts.consumer_of(ed.to_node, ed.slot, place[e]);
    c.on_device = producer.accel && !ed.control && on_same_device(ed, node_device);
    if (ed.control)
      producer.control_consumers.push_back(c);
    else
      producer.output_consumers[static_cast<size_t>(ed.from.index)].push_back(c);
  }
  for (size_t uid = 0; uid < plans.size(); ++uid) {
    if (!plans[uid]) continue;
    const caf::actor& actor = hosts.actor_of(static_cast<int>(uid));
    if (g.at(static_cast<int>(uid)).def->role == op_role::recv) {
      recvs_.emplace(plans[uid]->name, actor);
    } else if (plans[uid]->kind == node_kind::placeholder) {
      for (auto& p : coord->placeholders)
        if (!p.target && p.feed_index == feed_index.at(static_cast<int>(uid))) p.target = actor;
    } else if (starter[uid]) {
      coord->starters.push_back(actor);
    }
  }
  if (coord->has_loops) {
    wire_loops(g, plans, hosts);
    coord->nodes = actors_;
  }
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
