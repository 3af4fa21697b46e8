// A while loop's primitives (TensorFlow's design): an enter passes a value
// into the loop's frame, a merge takes it from the enter in iteration 0 and
// from the body after, a switch on the predicate sends it to the body or to
// the exit, and the exit passes the last value out to the enclosing frame.
// (A loop's next_iteration has no actor: its merge serves it.)
#include "actors/run/node_runner.hpp"

namespace actorflow {

namespace {

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

frame_tag parent_of(const frame_tag& tag) { return tag.parent ? *tag.parent : frame_tag{}; }

// Its input, in the child frame (iteration 0); an error or a dead value too.
class enter_node final : public node_behaviour {
 public:
  void fire(node_runner& r, firing& f) override {
    r.emit_carried(f.step, child_tag(r, f.tag), r.take_carried(0, f.slots, f.num_slots));
  }
  void fail(node_runner& r, firing& f, const std::string& error, error_code code) override {
    r.emit_error(f.step, child_tag(r, f.tag), error, code);
  }
  // A dead value opens a dead frame.
  void fire_dead(node_runner& r, firing& f, const step_value&, dead_kind why) override {
    r.emit_dead(f.step, child_tag(r, f.tag), why);
  }

 private:
  // A frame entered from the step's own frame keeps no parent (the root is
  // implied): no shared count to touch on every message of a plain loop.
  static frame_tag child_tag(node_runner& r, const frame_tag& parent) {
    return frame_tag{child_frame_id(parent, r.plan().frame_id), 0,
                     parent.is_root() ? nullptr : std::make_shared<const frame_tag>(parent)};
  }
};

// A live value leaves the loop with how many iterations it ran; an error
// leaves it too, so that the step fails. On an accelerator it takes the
// loop's value in device memory (device_edges.hpp) and copies it out for
// consumers off the device, once, rather than have every iteration do so.
class exit_node final : public node_behaviour {
 public:
  void fire(node_runner& r, firing& f) override {
    if (f.tag.is_root()) return emit_missing_parent(r, f.step);
    step_value v = r.take_carried(0, f.slots, f.num_slots);
    auto count = tensor::scalar<int64_t>(static_cast<int64_t>(f.tag.iteration));
    if (v.on_device && has_host_consumer(r.plan()))
      return copies_.start(r.host(), r.plan(), r.member(), f.step, parent_of(f.tag),
                           make_host_copy(r.plan(), std::move(v.on_device), copies_made_++),
                           {std::move(count)});
    r.emit_carried(f.step, parent_of(f.tag), std::move(v), count);
  }
  void launch_done(node_runner& r, uint64_t id, const std::string& error) override {
    copies_.finish(r.host(), r.plan(), id, error);
  }
  void drop(node_runner&, uint64_t step) override { copies_.drop(step); }
  void fail(node_runner& r, firing& f, const std::string& error, error_code code) override {
    if (f.tag.is_root()) return emit_missing_parent(r, f.step);
    r.emit_error(f.step, parent_of(f.tag), error, code);
  }
  // Only what leaves a dead frame passes on: an iteration that goes on
  // sends the exit a value it drops.
  void fire_dead(node_runner& r, firing& f, const step_value& first, dead_kind why) override {
    if (first.why_dead == dead_kind::not_exit) return;
    if (f.tag.is_root()) return emit_missing_parent(r, f.step);
    r.emit_dead(f.step, parent_of(f.tag), why);
  }

 private:
  static void emit_missing_parent(node_runner& r, uint64_t step) {
    r.emit_error(step, frame_tag{},
                 describe_failure(r.plan(), "got a value from outside any loop frame"),
                 error_code::invalid_argument);
  }

  accelerator_launches copies_;
  uint64_t copies_made_ = 0;
};

// A loop's switch: while the predicate holds, the value goes to the body
// and the exit hears that the loop goes on; once it is false (or the frame
// is dead, or the value failed) the exit gets the value and the body hears
// that this iteration is the frame's last.
class loop_switch_node final : public node_behaviour {
 public:
  bool sees_every_firing() const override { return true; }

  void fire(node_runner& r, firing& f) override {
    const node_plan& plan = r.plan();
    step_value to_exit, to_body = step_value::dead_value(dead_kind::loop_end);
    dead_kind why = passed_on(f.slots, f.num_slots);
    const step_value* failed = nullptr;
    bool dead = false;
    for (size_t s = 0; s < f.num_slots; ++s) {
      if (!f.slots[s].ok() && !failed) failed = &f.slots[s];
      dead |= f.slots[s].dead;
    }
    tensor pred = dead || failed ? tensor() : r.take_input(1, f.slots, f.num_slots);
    if (failed && !dead) {
      to_exit = step_value::failure(failed->error, failed->code);
    } else if (dead) {
      to_exit = step_value::dead_value(why);
    } else if (!is_scalar_bool(pred)) {
      to_exit = step_value::failure(predicate_error(plan, pred), error_code::invalid_argument);
    } else if (*pred.data<bool>()) {
      to_exit = step_value::dead_value(dead_kind::not_exit);
      to_body = r.take_carried(0, f.slots, f.num_slots);
    } else {
      to_exit = r.take_carried(0, f.slots, f.num_slots);
    }
    // A frame entered as a loop's last iteration ends for them as for the
    // body, with dead values of that kind: they need no word then.
    bool told_by_values = dead && why == dead_kind::loop_end;
    if (to_body.dead && !told_by_values)
      for (auto& listener : plan.frame_end_listeners)
        r.host()->send(listener.target, frame_end_atom::value, f.step, f.tag.frame, f.tag.iteration,
                       listener.member);
    const step_value* outs[2] = {&to_exit, &to_body};
    for (size_t out = 0; out < plan.output_consumers.size() && out < 2; ++out) {
      // The exit would drop it: an iteration that goes on sends it nothing.
      if (outs[out]->dead && outs[out]->why_dead == dead_kind::not_exit) continue;
      for (auto& c : plan.output_consumers[out])
        deliver(r.host(), c, step_input{f.step, c.slot, carried_to(plan, c, *outs[out]), f.tag});
    }
    for (auto& c : plan.control_consumers)
      deliver(r.host(), c,
              step_input{f.step, c.slot, to_body.dead ? to_body : step_value{}, f.tag});
  }
};

// A loop's merge passes on each value as it comes: from the enter in
// iteration 0 (slot 0); from the body (slot 1, the next_iteration's input,
// which the merge serves itself) one iteration on, once the loop's gate
// lets it (slot 2: let through later) and within max_iterations. A dead
// value from the body ends the variable's loop.
class loop_merge_node final : public node_behaviour {
 public:
  bool accepts_extra_slot(int32_t slot) const override { return slot == 2; }

  bool take(node_runner& r, step_input& in) override {
    const node_plan& plan = r.plan();
    auto& v = in.value;
    if (in.slot == 0) {
      if (v.dead)
        r.emit_dead(in.step, in.tag, v.why_dead);
      else
        emit_merged(r, in.step, in.tag, std::move(v), 0);
      return true;
    }
    if (in.slot == 2) {
      emit_merged(r, in.step, in.tag, std::move(v), 1);
      return true;
    }
    if (v.dead) {
      if (plan.gate) plan.gate->finish(in.step, in.tag.frame, plan.gate_var);
      return true;
    }
    frame_tag next{in.tag.frame, in.tag.iteration + 1, std::move(in.tag.parent)};
    if (plan.max_iterations > 0 && next.iteration > static_cast<uint64_t>(plan.max_iterations) &&
        v.ok())
      v = step_value::failure("[while_loop] '" + plan.loop_name + "' ran past max_iterations=" +
                                  std::to_string(plan.max_iterations),
                              error_code::out_of_range);
    if (plan.gate) {
      bool now = plan.gate->admit(in.step, next.frame, plan.gate_var, next.iteration, [&] {
        auto self = caf::actor_cast<caf::actor>(r.host());
        auto later = std::make_shared<step_input>(step_input{in.step, 2, v, next, r.member()});
        return [self, later] { caf::anon_send(self, input_atom::value, std::move(*later)); };
      });
      if (!now) return true;
    }
    emit_merged(r, in.step, next, std::move(v), 1);
    return true;
  }

  void fire(node_runner&, firing&) override {}  // take() handles every value

  void drop(node_runner& r, uint64_t step) override {
    if (r.plan().gate) r.plan().gate->drop(step);
  }

 private:
  static void emit_merged(node_runner& r, uint64_t step, const frame_tag& tag, step_value&& v,
                          int32_t index) {
    const node_plan& plan = r.plan();
    // The index is rarely used: no tensor for it unless someone takes it.
    bool indexed = plan.output_consumers.size() > 1 && !plan.output_consumers[1].empty();
    r.emit_carried(step, tag, std::move(v), indexed ? tensor::scalar<int32_t>(index) : tensor());
  }
};

}  // namespace

std::unique_ptr<node_behaviour> make_enter_node() { return std::make_unique<enter_node>(); }
std::unique_ptr<node_behaviour> make_exit_node() { return std::make_unique<exit_node>(); }
std::unique_ptr<node_behaviour> make_loop_switch_node() {
  return std::make_unique<loop_switch_node>();
}
std::unique_ptr<node_behaviour> make_loop_merge_node() {
  return std::make_unique<loop_merge_node>();
}

}  // namespace actorflow
