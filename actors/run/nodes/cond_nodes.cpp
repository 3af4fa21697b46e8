// A cond's two primitives (TensorFlow's design): a switch sends its data to
// the branch its predicate picks and a dead value to the other; a merge
// passes on the first live value that reaches it.
#include <unordered_map>

#include "actors/run/node_runner.hpp"

namespace actorflow {

namespace {

// Inputs (data, pred): the data goes to output 1 when pred is true, else
// to output 0; the other output gets a dead value.
class switch_node final : public node_behaviour {
 public:
  void fire(node_runner& r, firing& f) override {
    const node_plan& plan = r.plan();
    step_value data = r.take_carried(0, f.slots, f.num_slots);
    tensor pred = r.take_input(1, f.slots, f.num_slots);
    if (!is_scalar_bool(pred))
      return r.emit_error(f.step, f.tag, predicate_error(plan, pred), error_code::invalid_argument);
    size_t taken = *pred.data<bool>() ? 1 : 0;
    for (size_t out = 0; out < plan.output_consumers.size(); ++out) {
      auto& consumers = plan.output_consumers[out];
      for (size_t c = 0; c < consumers.size(); ++c) {
        step_input in{f.step, consumers[c].slot, step_value::dead_value(), f.tag};
        if (out == taken) in.value = carried_to(plan, consumers[c], data);
        deliver(r.host(), consumers[c], std::move(in));
      }
    }
    for (auto& c : plan.control_consumers)
      deliver(r.host(), c, step_input{f.step, c.slot, step_value{}, f.tag});
  }
};

// A merge fires on the first live (or failed) input of a step, with the
// value and the index of its input; it forgets the step once every input
// came, and sends a dead value then if none was live.
class merge_node final : public node_behaviour {
 public:
  bool take(node_runner& r, step_input& in) override {
    const node_plan& plan = r.plan();
    pending_key key{in.step, in.tag.frame, in.tag.iteration};
    auto [it, fresh] = pending_.try_emplace(key);
    auto& p = it->second;
    if (fresh) {
      p.remaining = plan.num_slots();
      if (key.frame != 0) ++loop_states;
    }
    auto& v = in.value;
    int input = plan.slot_input[static_cast<size_t>(in.slot)];
    if (v.dead && v.why_dead == dead_kind::loop_end) p.loop_end = true;  // remembered
    // An error on any input fails the step; a control input's value is not one to pass on.
    if (!p.fired && (!v.ok() || (input >= 0 && !v.dead))) {
      p.fired = true;
      r.emit_carried(in.step, in.tag, std::move(v), tensor::scalar<int32_t>(input));
    }
    if (--p.remaining > 0) return true;
    bool fired = p.fired;
    dead_kind why = p.loop_end ? dead_kind::loop_end : dead_kind::plain;
    erase_counted(pending_, key, key.frame != 0);
    if (!fired) r.emit_dead(in.step, in.tag, why);
    return true;
  }

  void fire(node_runner&, firing&) override {}  // take() handles every value

  void drop(node_runner&, uint64_t step) override {
    std::erase_if(pending_, [step](const auto& entry) {
      if (entry.first.step != step) return false;
      if (entry.first.frame != 0) --loop_states;
      return true;
    });
  }
  void release() override {
    for (auto& [key, p] : pending_)
      if (key.frame != 0) --loop_states;
    pending_.clear();
  }

 private:
  struct pending {
    size_t remaining = 0;
    bool fired = false;     // it passed on a live value of the step
    bool loop_end = false;  // an input said the loop's last iteration was dead
  };
  std::unordered_map<pending_key, pending, pending_key_hash> pending_;
};

}  // namespace

bool is_scalar_bool(const tensor& pred) {
  return pred.type() == dtype::boolean && pred.num_elements() == 1;
}

std::string predicate_error(const node_plan& plan, const tensor& pred) {
  return describe_failure(plan, "the predicate must be a scalar bool, not " +
                                    std::string(dtype_name(pred.type())) + pred.dims().to_string());
}

std::unique_ptr<node_behaviour> make_switch_node() { return std::make_unique<switch_node>(); }
std::unique_ptr<node_behaviour> make_merge_node() { return std::make_unique<merge_node>(); }

}  // namespace actorflow
