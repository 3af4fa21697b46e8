// A loop gradient's saved forward values (ops/control_flow_grad.cpp): a push
// saves its input per iteration of the forward loop, a read gets the value
// of the iteration its index inputs name, from the store they share
// (actors/run/loop_history.hpp).
#include <algorithm>

#include "actors/run/node_runner.hpp"

namespace actorflow {

namespace {

loop_history::path iterations_of(const frame_tag& tag) {
  loop_history::path at;
  for (const frame_tag* t = &tag; t != nullptr && !t->is_root(); t = t->parent.get())
    at.push_back(t->iteration);  // a first-level frame's parent (the root) is implied
  std::reverse(at.begin(), at.end());
  return at;
}

class history_push_node final : public node_behaviour {
 public:
  void fire(node_runner& r, firing& f) override {
    step_value v = r.take_carried(0, f.slots, f.num_slots);
    r.plan().history->put(f.step, iterations_of(f.tag),
                          saved_value{std::move(v.value), std::move(v.on_device)});
    r.emit(f.step, f.tag, r.outputs());
  }
  // An untaken branch's value: its gradient reads a dead value back, so
  // that it does not wait. A loop's last iteration is never read.
  void fire_dead(node_runner& r, firing& f, const step_value&, dead_kind why) override {
    if (why != dead_kind::loop_end) r.plan().history->put(f.step, iterations_of(f.tag), {});
    r.emit_dead(f.step, f.tag, why);
  }
};

// Asks the store for the value of the iteration the index inputs name; it
// comes back as a message to this actor (slot -1), now or once saved.
class history_read_node final : public node_behaviour {
 public:
  bool accepts_extra_slot(int32_t slot) const override { return slot == -1; }

  bool take(node_runner& r, step_input& in) override {
    if (in.slot >= 0) return false;
    if (in.value.dead)
      r.emit_dead(in.step, in.tag, dead_kind::plain);
    else
      r.emit_carried(in.step, in.tag, std::move(in.value));
    return true;
  }

  void fire(node_runner& r, firing& f) override {
    const node_plan& plan = r.plan();
    loop_history::path at;
    for (int i = 0; i < static_cast<int>(plan.bound_inputs.size()); ++i) {
      tensor index = r.take_input(i, f.slots, f.num_slots);
      if (!index.valid() || index.type() != dtype::int64 || index.num_elements() != 1 ||
          index.item<int64_t>() < 0)
        return r.emit_error(f.step, f.tag,
                            describe_failure(plan, "iteration index " + std::to_string(i) +
                                                       " must be an int64 scalar >= 0"),
                            error_code::invalid_argument);
      at.push_back(static_cast<uint64_t>(index.item<int64_t>()));
    }
    auto self = caf::actor_cast<caf::actor>(r.host());
    plan.history->take(f.step, at, plan.history_pop,
                       [self, step = f.step, tag = f.tag, m = r.member()](saved_value value) {
                         step_input in{step, -1, {}, tag, m};
                         if (value.valid()) {
                           in.value.value = std::move(value.value);
                           in.value.on_device = std::move(value.on_device);
                         } else
                           in.value = step_value::dead_value();
                         caf::anon_send(self, input_atom::value, std::move(in));
                       });
  }
};

}  // namespace

std::unique_ptr<node_behaviour> make_history_push_node() {
  return std::make_unique<history_push_node>();
}
std::unique_ptr<node_behaviour> make_history_read_node() {
  return std::make_unique<history_read_node>();
}

}  // namespace actorflow
