// A node collects its inputs per step, runs its kernel (inline when cheap,
// on the device's pool when expensive) and sends each output on. Each node
// runs in an actor: most in one of their own, a loop's together in one host
// (spawn_node_host), where a value between two of its nodes is a call
// through the host's local queue instead of a CAF message.
#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <utility>

#include "actors/run/cancelled_steps.hpp"
#include "actors/run/messages.hpp"
#include "actors/run/node_output.hpp"
#include "actors/run/node_plan.hpp"
#include "devices/cpu/parallel.hpp"

namespace actorflow {

namespace {

// Kernels on fewer input elements than this run inline on the actor's thread:
// handing them to the pool would cost more than the work.
constexpr int64_t inline_element_limit = parallel_grain;
// Expensive kernels (matmul, conv) go to the pool unless their inputs are
// small: a 64x64 matmul takes a few microseconds, while the hop to the pool
// and back costs tens (two thread wake-ups), which a chain of small
// products would pay at every node. (A loop's kernels all run inline: see
// run_kernel_for.)
constexpr int64_t expensive_inline_limit = 16 * 1024;

// Values between the nodes of one host handled in one turn of the actor:
// a loop of many iterations runs in turns of this many, so that a drop of
// its step, or another step's values, get their turn in between.
constexpr size_t local_values_per_turn = 512;

using drain_atom = caf::atom_constant<caf::atom("drain")>;  // to itself: go on with local values

// What the dead values a node sends say: a loop's last iteration passes on
// as such, so that every node of the body learns where its frame ends.
dead_kind passed_on(const step_value* slots, size_t num_slots) {
  for (size_t s = 0; s < num_slots; ++s)
    if (slots[s].dead && slots[s].why_dead == dead_kind::loop_end) return dead_kind::loop_end;
  return dead_kind::plain;
}

// The frame id an enter opens: its loop's id mixed with where it is entered
// from (splitmix64's finalizer), so every enter of the loop agrees without
// a table; never 0, the step's own frame.
uint64_t child_frame_id(const frame_tag& parent, uint64_t loop_id) {
  uint64_t x = loop_id ^ (parent.frame * 0x9e3779b97f4a7c15ULL) ^
               (parent.iteration + 0x632be59bd9b4e019ULL) * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  return x == 0 ? 1 : x;
}

std::atomic<int64_t> loop_states{0};

// Where a node's pending inputs wait: one step, and inside a loop one
// iteration of one frame.
struct pending_key {
  uint64_t step, frame, iteration;
  bool operator==(const pending_key&) const = default;
};
struct pending_key_hash {
  size_t operator()(const pending_key& k) const {
    return std::hash<uint64_t>()(k.step * 0x9e3779b97f4a7c15ULL ^ k.frame ^ (k.iteration << 32));
  }
};
// Where a node's loop invariants wait: one frame of one step.
struct frame_key {
  uint64_t step, frame;
  bool operator==(const frame_key&) const = default;
};
struct frame_key_hash {
  size_t operator()(const frame_key& k) const {
    return std::hash<uint64_t>()(k.step * 0x9e3779b97f4a7c15ULL ^ k.frame);
  }
};

// Counts a map's entries in loop_states while they live in a loop's frame.
template <class Map, class Key>
void erase_counted(Map& map, const Key& key, bool counted) {
  if (map.erase(key) > 0 && counted) --loop_states;
}

// One node: its pending inputs per (step, frame, iteration), its loop
// invariants per frame, and how it fires. Its host actor runs it.
class node_runner {
 public:
  node_runner(node_host_base* host, node_plan_ptr plan, uint32_t member)
      : host_(host), plan_(std::move(plan)), member_(member) {}

  size_t batch_limit() const { return plan_ ? plan_->batch_limit : 0; }

  // Whether a message may fill `slot`: one of the node's input slots; -1,
  // a history read's saved value; 2, a loop merge's value let through by
  // its gate (see loop_merge_input).
  bool accepts_slot(int32_t slot) const {
    if (!plan_) return false;
    if (slot >= 0 && static_cast<size_t>(slot) < plan_->num_slots()) return true;
    if (slot == -1) return plan_->kind == node_kind::history_read;
    return slot == 2 && plan_->kind == node_kind::loop_merge;
  }

  // A loop's back edge makes its actors hold one another through their
  // plans: let go of the plan (and any state of unfinished steps) when the
  // actor exits, or none of them would ever be freed.
  void release() {
    for (auto& [key, p] : pending_)
      if (key.frame != 0) --loop_states;
    loop_states -= static_cast<int64_t>(frames_.size());
    pending_.clear();
    frames_.clear();
    plan_.reset();
  }

  // The device actor ran launch `id` (error: a fault of the device or its
  // stream); its outputs go on, or the error.
  void launch_done(uint64_t id, const std::string& error) {
    launches_.finish(host_, *plan_, id, error);
  }

  void frame_ended(uint64_t step, uint64_t frame, uint64_t last) {
    auto& f = frame_of(step, frame);
    f.last = static_cast<int64_t>(last);
    forget_if_done(step, frame, f);
  }

 private:
  friend class node_host;
  struct pending {
    std::vector<step_value> slots;  // empty for a merge, which keeps no values
    size_t remaining = 0;
    bool fired = false;  // a merge: it passed on a live value of the step
    frame_tag tag;
  };
  // A frame's loop invariants at this node, and the iterations waiting for them.
  struct frame_state {
    std::vector<step_value> invariants;  // by slot
    size_t missing = 0;
    std::vector<std::pair<frame_tag, std::vector<step_value>>> parked;
    uint64_t fired = 0;
    int64_t last = -1;  // the frame's last iteration, once known
  };

  void on_input(step_input& in) {
    const node_plan& plan = *plan_;
    if (in.traced) begin_step_trace(plan.executable_id, in.step);  // a recv, before its start
    if (plan.kind == node_kind::merge_values) return merge_input(in);
    if (plan.kind == node_kind::loop_merge) return loop_merge_input(in);
    if (plan.kind == node_kind::history_read && in.slot < 0) {  // the saved value came
      if (in.value.dead) return emit_dead(host_, plan, in.step, in.tag, dead_kind::plain);
      outputs_.push_back(std::move(in.value.value));
      emit(host_, plan, in.step, in.tag, outputs_, "");
      outputs_.clear();
      return;
    }
    auto slot = static_cast<size_t>(in.slot);
    if (plan.num_invariant_slots > 0 && plan.invariant_slot[slot])
      return invariant_input(in.step, in.tag, slot, std::move(in.value));
    auto n = plan.num_slots() - plan.num_invariant_slots;
    if (n == 1 && plan.num_invariant_slots == 0) {  // the common case: no per-step state
      fire(in.step, in.tag, &in.value, 1);
      return;
    }
    if (n == 1) {  // one value per iteration beside the invariants: nothing to wait for
      auto slots = spare_slots();
      slots.resize(plan.num_slots());
      slots[slot] = std::move(in.value);
      return fire_with_invariants(in.step, std::move(in.tag), std::move(slots));
    }
    pending_key key{in.step, in.tag.frame, in.tag.iteration};
    auto [it, fresh] = pending_.try_emplace(key);
    auto& p = it->second;
    if (fresh) {
      p.slots = spare_slots();
      p.slots.resize(plan.num_slots());
      p.remaining = n;
      p.tag = in.tag;
      if (key.frame != 0) ++loop_states;
    }
    p.slots[slot] = std::move(in.value);
    if (--p.remaining > 0) return;
    auto slots = std::move(p.slots);
    auto tag = std::move(p.tag);
    erase_counted(pending_, key, key.frame != 0);
    if (plan.num_invariant_slots > 0)
      return fire_with_invariants(in.step, std::move(tag), std::move(slots));
    fire(in.step, tag, slots.data(), slots.size());
    recycle(std::move(slots));
  }

  // A firing's slot vectors are kept for the next ones: a loop's node with
  // two inputs would otherwise allocate one per iteration.
  std::vector<step_value> spare_slots() {
    if (spare_slots_.empty()) return {};
    auto slots = std::move(spare_slots_.back());
    spare_slots_.pop_back();
    return slots;
  }
  void recycle(std::vector<step_value>&& slots) {
    if (spare_slots_.size() >= max_spare_slots) return;
    slots.clear();
    spare_slots_.push_back(std::move(slots));
  }

  frame_state& frame_of(uint64_t step, uint64_t frame) {
    auto [it, fresh] = frames_.try_emplace(frame_key{step, frame});
    if (fresh) {
      it->second.invariants.resize(plan_->num_slots());
      it->second.missing = plan_->num_invariant_slots;
      ++loop_states;
    }
    return it->second;
  }

  void invariant_input(uint64_t step, const frame_tag& tag, size_t slot, step_value&& v) {
    auto& f = frame_of(step, tag.frame);
    f.invariants[slot] = std::move(v);
    if (--f.missing > 0) return;
    auto parked = std::move(f.parked);
    for (auto& [t, slots] : parked) fire_with_invariants(step, std::move(t), std::move(slots));
  }

  // Fires one iteration with its frame's invariants, or parks it until they
  // came; forgets the frame once its last iteration fired here.
  void fire_with_invariants(uint64_t step, frame_tag tag, std::vector<step_value> slots) {
    auto& f = frame_of(step, tag.frame);
    if (f.missing > 0) {
      f.parked.emplace_back(std::move(tag), std::move(slots));
      return;
    }
    for (size_t s = 0; s < slots.size(); ++s)
      if (plan_->invariant_slot[s]) slots[s] = f.invariants[s];
    ++f.fired;
    if (passed_on(slots.data(), slots.size()) == dead_kind::loop_end)
      f.last = static_cast<int64_t>(tag.iteration);
    forget_if_done(step, tag.frame, f);
    fire(step, tag, slots.data(), slots.size());
    recycle(std::move(slots));
  }

  void forget_if_done(uint64_t step, uint64_t frame, const frame_state& f) {
    if (f.last >= 0 && f.fired == static_cast<uint64_t>(f.last) + 1)
      erase_counted(frames_, frame_key{step, frame}, true);
  }

  void fire(uint64_t step, const frame_tag& tag, step_value* slots, size_t num_slots) {
    const node_plan& plan = *plan_;
    if (plan.kind == node_kind::send) return send_to_peer(host_, plan, step, tag, slots, num_slots);
    if (plan.kind == node_kind::switch_value && plan.loop_switch)
      return loop_switch(step, tag, slots, num_slots);
    // A loop's last iteration wins over an error, so that the loop ends; an
    // error wins over other dead values: the step fails either way.
    dead_kind why = passed_on(slots, num_slots);
    bool dead = why == dead_kind::loop_end;
    for (size_t s = 0; s < num_slots && !dead; ++s) {
      if (!slots[s].ok()) {
        std::string error = std::move(slots[s].error);
        const error_code code = slots[s].code;
        if (plan.kind == node_kind::exit_frame) return exit_frame(step, tag, nullptr, error, code);
        emit(host_, plan, step, plan.kind == node_kind::enter_frame ? child_tag(tag) : tag,
             outputs_, error, code);
        return;
      }
      dead |= slots[s].dead;
    }
    if (dead) return fire_dead(step, tag, slots[0], why);
    switch (plan.kind) {
      case node_kind::switch_value:
        return switch_to_branch(step, tag, slots, num_slots);
      case node_kind::placeholder:
        if (plan.def && plan.def->name == "recv")
          trace_transfer(plan, step, tag, trace_kind::recv, slots[0].value);
        outputs_.push_back(std::move(slots[0].value));
        emit(host_, plan, step, tag, outputs_, "");
        outputs_.clear();
        return;
      case node_kind::enter_frame:
        outputs_.push_back(take_input(0, slots, num_slots));
        emit(host_, plan, step, child_tag(tag), outputs_, "");
        outputs_.clear();
        return;
      case node_kind::exit_frame: {
        tensor value = take_input(0, slots, num_slots);
        return exit_frame(step, tag, &value, "", error_code::ok);
      }
      case node_kind::variable_read:
        return read_variable(step, tag);
      case node_kind::history_push:
        plan.history->put(step, iterations_of(tag), take_input(0, slots, num_slots));
        return emit(host_, plan, step, tag, outputs_, "");
      case node_kind::history_read:
        return read_history(step, tag, slots, num_slots);
      case node_kind::variable_update:
        fill_inputs(slots, num_slots);
        return ask_resource(
            step, tag,
            variable_update{plan.def, plan.name, &plan.attrs, std::exchange(inputs_, {}),
                            step_key{plan.executable_id, step}});
      case node_kind::kernel:
        // On an accelerator, each firing goes to the device actor, which
        // answers with gpu_done once the device has run it.
        if (plan.accel)
          return launches_.start(host_, plan, member_, step, tag,
                                 make_launch(plan, slots, num_slots, invocations_++));
        fill_inputs(slots, num_slots);
        return run_kernel_for(step, tag);
      case node_kind::send:
      case node_kind::merge_values:
      case node_kind::loop_merge:
        return;  // handled before
    }
  }

  // A node with a dead input: it does not run. An enter opens a dead frame,
  // and an exit passes on only what leaves a dead frame.
  void fire_dead(uint64_t step, const frame_tag& tag, const step_value& first, dead_kind why) {
    switch (plan_->kind) {
      case node_kind::enter_frame:
        return emit_dead(host_, *plan_, step, child_tag(tag), why);
      case node_kind::exit_frame:
        if (first.why_dead == dead_kind::not_exit) return;
        if (tag.is_root()) return emit_missing_parent(step, tag);
        return emit_dead(host_, *plan_, step, parent_of(tag), why);
      case node_kind::history_push:
        // An untaken branch's value: its gradient reads a dead value back,
        // so that it does not wait. A loop's last iteration is never read.
        if (why != dead_kind::loop_end) plan_->history->put(step, iterations_of(tag), tensor());
        return emit_dead(host_, *plan_, step, tag, why);
      default:
        return emit_dead(host_, *plan_, step, tag, why);
    }
  }

  // Data input `i` of the op: its folded constant, or the value that came.
  tensor take_input(int i, step_value* slots, size_t num_slots) const {
    const tensor& bound = plan_->bound_inputs[static_cast<size_t>(i)];
    if (bound.valid()) return bound;
    for (size_t s = 0; s < num_slots; ++s)
      if (plan_->slot_input[s] == i) return std::move(slots[s].value);
    return tensor();
  }

  // A frame entered from the step's own frame keeps no parent (the root is
  // implied): no shared count to touch on every message of a plain loop.
  frame_tag child_tag(const frame_tag& parent) const {
    return frame_tag{child_frame_id(parent, plan_->frame_id), 0,
                     parent.is_root() ? nullptr : std::make_shared<const frame_tag>(parent)};
  }
  static frame_tag parent_of(const frame_tag& tag) {
    return tag.parent ? *tag.parent : frame_tag{};
  }

  // A live value leaves the loop with how many iterations it ran; an error
  // leaves it too, so that the step fails.
  void exit_frame(uint64_t step, const frame_tag& tag, tensor* value, const std::string& error,
                  error_code code) {
    if (tag.is_root()) return emit_missing_parent(step, tag);
    if (value) {
      outputs_.push_back(std::move(*value));
      outputs_.push_back(tensor::scalar<int64_t>(static_cast<int64_t>(tag.iteration)));
    }
    emit(host_, *plan_, step, parent_of(tag), outputs_, error, code);
    outputs_.clear();
  }

  void emit_missing_parent(uint64_t step, const frame_tag& tag) {
    frame_tag root;
    emit(host_, *plan_, step, root, outputs_,
         describe_failure(*plan_, "got a value from outside any loop frame"),
         error_code::invalid_argument);
  }

  static loop_history::path iterations_of(const frame_tag& tag) {
    loop_history::path at;
    for (const frame_tag* t = &tag; t != nullptr && !t->is_root(); t = t->parent.get())
      at.push_back(t->iteration);  // a first-level frame's parent (the root) is implied
    std::reverse(at.begin(), at.end());
    return at;
  }

  // Asks the store for the value of the iteration the index inputs name; it
  // comes back as a message to this actor (slot -1), now or once saved.
  void read_history(uint64_t step, const frame_tag& tag, step_value* slots, size_t num_slots) {
    loop_history::path at;
    for (int i = 0; i < static_cast<int>(plan_->bound_inputs.size()); ++i) {
      tensor index = take_input(i, slots, num_slots);
      if (!index.valid() || index.type() != dtype::int64 || index.num_elements() != 1 ||
          index.item<int64_t>() < 0) {
        emit(host_, *plan_, step, tag, outputs_,
             describe_failure(
                 *plan_, "iteration index " + std::to_string(i) + " must be an int64 scalar >= 0"),
             error_code::invalid_argument);
        return;
      }
      at.push_back(static_cast<uint64_t>(index.item<int64_t>()));
    }
    auto self = caf::actor_cast<caf::actor>(host_);
    plan_->history->take(step, at, plan_->history_pop,
                         [self, step, tag, m = member_](tensor value) {
                           step_input in{step, -1, {}, tag, m};
                           if (value.valid())
                             in.value.value = std::move(value);
                           else
                             in.value = step_value::dead_value();
                           caf::anon_send(self, input_atom::value, std::move(in));
                         });
  }

  // Inputs (data, pred): the data goes to output 1 when pred is true, else
  // to output 0; the other output gets a dead value.
  void switch_to_branch(uint64_t step, const frame_tag& tag, step_value* slots, size_t num_slots) {
    const node_plan& plan = *plan_;
    tensor data = take_input(0, slots, num_slots);
    tensor pred = take_input(1, slots, num_slots);
    if (!is_scalar_bool(pred)) {
      emit(host_, plan, step, tag, outputs_, predicate_error(pred), error_code::invalid_argument);
      return;
    }
    size_t taken = *pred.data<bool>() ? 1 : 0;
    for (size_t out = 0; out < plan.output_consumers.size(); ++out) {
      auto& consumers = plan.output_consumers[out];
      for (size_t c = 0; c < consumers.size(); ++c) {
        step_input in{step, consumers[c].slot, step_value::dead_value(), tag};
        if (out == taken) in.value = step_value{data, "", false};
        deliver(host_, consumers[c], std::move(in));
      }
    }
    for (auto& c : plan.control_consumers)
      deliver(host_, c, step_input{step, c.slot, step_value{}, tag});
  }

  static bool is_scalar_bool(const tensor& pred) {
    return pred.type() == dtype::boolean && pred.num_elements() == 1;
  }
  std::string predicate_error(const tensor& pred) const {
    return describe_failure(*plan_, "the predicate must be a scalar bool, not " +
                                        std::string(dtype_name(pred.type())) +
                                        pred.dims().to_string());
  }

  // A loop's switch: while the predicate holds, the value goes to the body
  // and the exit hears that the loop goes on; once it is false (or the frame
  // is dead, or the value failed) the exit gets the value and the body hears
  // that this iteration is the frame's last.
  void loop_switch(uint64_t step, const frame_tag& tag, step_value* slots, size_t num_slots) {
    const node_plan& plan = *plan_;
    step_value to_exit, to_body = step_value::dead_value(dead_kind::loop_end);
    dead_kind why = passed_on(slots, num_slots);
    const step_value* failed = nullptr;
    bool dead = false;
    for (size_t s = 0; s < num_slots; ++s) {
      if (!slots[s].ok() && !failed) failed = &slots[s];
      dead |= slots[s].dead;
    }
    tensor pred = dead || failed ? tensor() : take_input(1, slots, num_slots);
    if (failed && !dead) {
      to_exit = step_value::failure(failed->error, failed->code);
    } else if (dead) {
      to_exit = step_value::dead_value(why);
    } else if (!is_scalar_bool(pred)) {
      to_exit = step_value::failure(predicate_error(pred), error_code::invalid_argument);
    } else if (*pred.data<bool>()) {
      to_exit = step_value::dead_value(dead_kind::not_exit);
      to_body = step_value{take_input(0, slots, num_slots), "", false};
    } else {
      to_exit.value = take_input(0, slots, num_slots);
    }
    // A frame entered as a loop's last iteration ends for them as for the
    // body, with dead values of that kind: they need no word then.
    bool told_by_values = dead && why == dead_kind::loop_end;
    if (to_body.dead && !told_by_values)
      for (auto& listener : plan.frame_end_listeners)
        host_->send(listener.target, frame_end_atom::value, step, tag.frame, tag.iteration,
                    listener.member);
    const step_value* outs[2] = {&to_exit, &to_body};
    for (size_t out = 0; out < plan.output_consumers.size() && out < 2; ++out) {
      // The exit would drop it: an iteration that goes on sends it nothing.
      if (outs[out]->dead && outs[out]->why_dead == dead_kind::not_exit) continue;
      for (auto& c : plan.output_consumers[out])
        deliver(host_, c, step_input{step, c.slot, *outs[out], tag});
    }
    for (auto& c : plan.control_consumers)
      deliver(host_, c, step_input{step, c.slot, to_body.dead ? to_body : step_value{}, tag});
  }

  // A merge fires on the first live (or failed) input of a step, with the
  // value and the index of its input; it forgets the step once every input
  // came, and sends a dead value then if none was live.
  void merge_input(step_input& in) {
    const node_plan& plan = *plan_;
    pending_key key{in.step, in.tag.frame, in.tag.iteration};
    auto [it, fresh] = pending_.try_emplace(key);
    auto& p = it->second;
    if (fresh) {
      p.remaining = plan.num_slots();
      if (key.frame != 0) ++loop_states;
    }
    auto& v = in.value;
    int input = plan.slot_input[static_cast<size_t>(in.slot)];
    if (v.dead && v.why_dead == dead_kind::loop_end) p.slots.push_back(std::move(v));  // remembered
    // An error on any input fails the step; a control input's value is not one to pass on.
    if (!p.fired && (!v.ok() || (input >= 0 && !v.dead))) {
      p.fired = true;
      if (v.ok()) {
        outputs_.push_back(std::move(v.value));
        outputs_.push_back(tensor::scalar<int32_t>(input));
      }
      emit(host_, plan, in.step, in.tag, outputs_, v.error, v.code);
      outputs_.clear();
    }
    if (--p.remaining > 0) return;
    bool fired = p.fired;
    dead_kind why = p.slots.empty() ? dead_kind::plain : dead_kind::loop_end;
    erase_counted(pending_, key, key.frame != 0);
    if (!fired) emit_dead(host_, plan, in.step, in.tag, why);
  }

  // A loop's merge passes on each value as it comes: from the enter in
  // iteration 0 (slot 0); from the body (slot 1, the next_iteration's input,
  // which the merge serves itself) one iteration on, once the loop's gate
  // lets it (slot 2: let through later) and within max_iterations. A dead
  // value from the body ends the variable's loop.
  void loop_merge_input(step_input& in) {
    const node_plan& plan = *plan_;
    auto& v = in.value;
    if (in.slot == 0) {
      if (v.dead) return emit_dead(host_, plan, in.step, in.tag, v.why_dead);
      return emit_merged(in.step, in.tag, std::move(v), 0);
    }
    if (in.slot == 2) return emit_merged(in.step, in.tag, std::move(v), 1);
    if (v.dead) {
      if (plan.gate) plan.gate->finish(in.step, in.tag.frame, plan.gate_var);
      return;
    }
    frame_tag next{in.tag.frame, in.tag.iteration + 1, std::move(in.tag.parent)};
    if (plan.max_iterations > 0 && next.iteration > static_cast<uint64_t>(plan.max_iterations) &&
        v.ok())
      v = step_value::failure("[while_loop] '" + plan.loop_name + "' ran past max_iterations=" +
                                  std::to_string(plan.max_iterations),
                              error_code::out_of_range);
    if (plan.gate) {
      bool now = plan.gate->admit(in.step, next.frame, plan.gate_var, next.iteration, [&] {
        auto self = caf::actor_cast<caf::actor>(host_);
        auto later = std::make_shared<step_input>(step_input{in.step, 2, v, next, member_});
        return [self, later] { caf::anon_send(self, input_atom::value, std::move(*later)); };
      });
      if (!now) return;
    }
    emit_merged(in.step, next, std::move(v), 1);
  }

  void emit_merged(uint64_t step, const frame_tag& tag, step_value&& v, int32_t index) {
    if (v.ok()) {
      outputs_.push_back(std::move(v.value));
      // The index is rarely used: no tensor for it unless someone takes it.
      if (plan_->output_consumers.size() > 1 && !plan_->output_consumers[1].empty())
        outputs_.push_back(tensor::scalar<int32_t>(index));
      else
        outputs_.emplace_back();
    }
    emit(host_, *plan_, step, tag, outputs_, v.error, v.code);
    outputs_.clear();
  }

  // Forgets a failed step (its host drops its late messages).
  void drop(uint64_t step) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->first.step != step) {
        ++it;
        continue;
      }
      if (it->first.frame != 0) --loop_states;
      it = pending_.erase(it);
    }
    for (auto it = frames_.begin(); it != frames_.end();) {
      if (it->first.step != step) {
        ++it;
        continue;
      }
      --loop_states;
      it = frames_.erase(it);
    }
    if (plan_->gate) plan_->gate->drop(step);
    launches_.drop(step);
  }

  // Sets inputs_ to the op's inputs in order: the folded constants (kept
  // from the last firing, see release_arrived_inputs) and the values that
  // arrived.
  void fill_inputs(step_value* slots, size_t num_slots) {
    const node_plan& plan = *plan_;
    if (inputs_.size() != plan.bound_inputs.size())  // the first firing, or handed away
      inputs_.assign(plan.bound_inputs.begin(), plan.bound_inputs.end());
    for (size_t s = 0; s < num_slots; ++s)
      if (int i = plan.slot_input[s]; i >= 0)
        inputs_[static_cast<size_t>(i)] = std::move(slots[s].value);
  }

  // Runs the kernel on inputs_: inline when cheap, reusing this actor's
  // vectors; otherwise on the device's pool, which gets its own. A loop's
  // kernels run inline whatever their size: its nodes run one after another
  // on its actor anyway, and a hop to the pool and back costs two thread
  // wake-ups per node and iteration (an LSTM trained 1.3x faster without
  // them). A large kernel still spreads its work over the pool's threads
  // (parallel_for, within the runtime's thread limit): the actor's thread
  // joins the device's arena for it, where those threads are, and splits
  // finer than elsewhere (fine_grain_scope) so that they stay awake between
  // the loop's products.
  void run_kernel_for(uint64_t step, const frame_tag& tag) {
    uint64_t invocation = invocations_++;
    int64_t elements = 0;
    for (auto& t : inputs_) elements += t.num_elements();
    int64_t limit = plan_->def->expensive ? expensive_inline_limit : inline_element_limit;
    if (plan_->in_loop) {
      fine_grain_scope keep_pool_awake;
      auto run = [&] { run_and_emit(host_, *plan_, step, tag, inputs_, outputs_, invocation); };
      // Joining costs about 0.1 us: only for kernels large enough to split.
      if (plan_->arena && (plan_->def->expensive || elements > fine_grain))
        plan_->arena->execute(run);
      else
        run();
      return;
    }
    if (elements < limit) {
      run_and_emit(host_, *plan_, step, tag, inputs_, outputs_, invocation);
      return;
    }
    auto plan = plan_;
    host_->send(plan->device, run_atom::value,
                device_task{[plan, step, tag, inputs = std::exchange(inputs_, {}), invocation,
                             ready = now_if_tracing()]() mutable {
                  std::vector<tensor> outputs;
                  run_and_emit(nullptr, *plan, step, tag, inputs, outputs, invocation, ready);
                }});
  }

  void read_variable(uint64_t step, const frame_tag& tag) {
    host_->request(plan_->variable, caf::infinite, read_atom::value)
        .then(
            [this, step, tag, asked = now_if_tracing()](step_value& v) {
              std::vector<tensor> outs{std::move(v.value)};
              trace_resource(*plan_, step, tag, asked, outs);
              emit(host_, *plan_, step, tag, outs, v.error, v.code);
              host_->drain_local();
            },
            [this, step, tag](caf::error& e) { emit_actor_failure(step, tag, e); });
  }

  // The resource actor may answer much later (a dequeue waits for an
  // element); `then` keeps this actor free for other steps meanwhile.
  void ask_resource(uint64_t step, const frame_tag& tag, variable_update&& u) {
    host_->request(plan_->variable, caf::infinite, update_atom::value, std::move(u))
        .then(
            [this, step, tag, asked = now_if_tracing()](update_result& r) {
              if (r.ok() && r.values.size() < plan_->output_consumers.size())
                r = update_result::failure(
                    describe_failure(*plan_, "update produced too few outputs"),
                    error_code::internal);
              trace_resource(*plan_, step, tag, asked, r.values);
              emit(host_, *plan_, step, tag, r.values, r.error, r.code);
              host_->drain_local();
            },
            [this, step, tag](caf::error& e) { emit_actor_failure(step, tag, e); });
  }

  void emit_actor_failure(uint64_t step, const frame_tag& tag, const caf::error& e) {
    std::vector<tensor> none;
    emit(host_, *plan_, step, tag, none,
         describe_failure(*plan_, "resource actor failed: " + caf::to_string(e)),
         error_code::unavailable);
    host_->drain_local();
  }

  node_host_base* host_;
  node_plan_ptr plan_;
  uint32_t member_;
  // Reused by every firing (an actor handles one message at a time), so that
  // a cheap node allocates no vectors per step. Between messages outputs_ is
  // empty and inputs_ holds only the folded constants.
  std::vector<tensor> inputs_;
  std::vector<tensor> outputs_;
  std::unordered_map<pending_key, pending, pending_key_hash> pending_;
  std::unordered_map<frame_key, frame_state, frame_key_hash> frames_;
  static constexpr size_t max_spare_slots = 8;
  std::vector<std::vector<step_value>> spare_slots_;
  uint64_t invocations_ = 0;
  accelerator_launches launches_;
};

// The actor of one or more nodes (see spawn_node_host). A value between
// two of its nodes waits in the local queue and is handled in the same
// turn, in turns of local_values_per_turn.
class node_host : public node_host_base {
 public:
  node_host(caf::actor_config& cfg, std::vector<node_plan_ptr> members) : node_host_base(cfg) {
    runners_.reserve(members.size());  // runners stay put: callbacks hold them
    for (size_t i = 0; i < members.size(); ++i)
      runners_.emplace_back(this, std::move(members[i]), static_cast<uint32_t>(i));
  }

  void on_exit() override {
    for (auto& r : runners_) r.release();
    local_.clear();
    caf::event_based_actor::on_exit();
  }

  resume_result resume(caf::execution_unit* worker, size_t max_throughput) override {
    size_t limit = runners_.size() == 1 ? runners_[0].batch_limit() : 0;
    return caf::event_based_actor::resume(
        worker, limit > 0 ? std::min(limit, max_throughput) : max_throughput);
  }

  caf::behavior make_behavior() override {
    return {
        // Nothing answers an edge message. A handler returning void makes CAF
        // build a response promise for every message only to find no one to
        // answer (~150 instructions, 6% of a pipelined firing); `delegated`
        // tells it that there is no response to make here.
        [this](input_atom, step_input& in) -> caf::delegated<void> {
          handle(in);
          drain_local();
          return {};
        },
        [this](drain_atom) {
          drain_scheduled_ = false;
          drain_local();
        },
        [this](drop_atom, uint64_t step) {
          dropped_.add(step);
          for (auto& r : runners_) r.drop(step);
        },
        [this](gpu::gpu_done_atom, uint64_t id, const std::string& error) {
          uint32_t member = accelerator_launches::member_of(id);
          if (member < runners_.size()) runners_[member].launch_done(id, error);
          drain_local();
        },
        [this](frame_end_atom, uint64_t step, uint64_t frame, uint64_t last, uint32_t member) {
          if ((dropped_.size() != 0 && dropped_.contains(step)) || member >= runners_.size())
            return;
          runners_[member].frame_ended(step, frame, last);
        },
    };
  }

  void drain_local() override {
    for (size_t n = 0; n < local_values_per_turn && !local_.empty(); ++n) {
      step_input in = std::move(local_.front());
      local_.pop_front();
      handle(in);
    }
    if (!local_.empty() && !drain_scheduled_) {
      drain_scheduled_ = true;
      send(this, drain_atom::value);
    }
  }

 private:
  // A value for one of its nodes. Values from another process reach only a
  // recv's host: one that names no node or slot of this host is dropped.
  void handle(step_input& in) {
    if (dropped_.size() != 0 && dropped_.contains(in.step)) return;
    if (in.member >= runners_.size()) return;
    auto& runner = runners_[in.member];
    if (runner.accepts_slot(in.slot)) runner.on_input(in);
  }

  std::vector<node_runner> runners_;
  aborted_steps dropped_;
  bool drain_scheduled_ = false;
};

}  // namespace

int64_t loop_states_held() { return loop_states.load() + loop_history::entries_held_in_process(); }

caf::actor spawn_node_host(caf::actor_system& system, std::vector<node_plan_ptr> members) {
  return system.spawn<node_host>(std::move(members));
}

}  // namespace actorflow
