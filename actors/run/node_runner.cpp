#include "actors/run/node_runner.hpp"

namespace actorflow {

std::atomic<int64_t> loop_states{0};

dead_kind passed_on(const step_value* slots, size_t num_slots) {
  for (size_t s = 0; s < num_slots; ++s)
    if (slots[s].dead && slots[s].why_dead == dead_kind::loop_end) return dead_kind::loop_end;
  return dead_kind::plain;
}

node_runner::node_runner(node_host_base* host, node_plan_ptr plan, uint32_t member)
    : host_(host),
      plan_(std::move(plan)),
      member_(member),
      behaviour_(plan_ ? make_node_behaviour(*plan_) : nullptr) {}

bool node_runner::accepts_slot(int32_t slot) const {
  if (!plan_) return false;
  if (slot >= 0 && static_cast<size_t>(slot) < plan_->num_slots()) return true;
  return behaviour_->accepts_extra_slot(slot);
}

void node_runner::on_input(step_input& in) {
  const node_plan& plan = *plan_;
  if (in.traced) begin_step_trace(plan.executable_id, in.step);  // a recv, before its start
  if (behaviour_->take(*this, in)) return;
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
std::vector<step_value> node_runner::spare_slots() {
  if (spare_slots_.empty()) return {};
  auto slots = std::move(spare_slots_.back());
  spare_slots_.pop_back();
  return slots;
}

void node_runner::recycle(std::vector<step_value>&& slots) {
  if (spare_slots_.size() >= max_spare_slots) return;
  slots.clear();
  spare_slots_.push_back(std::move(slots));
}

node_runner::frame_state& node_runner::frame_of(uint64_t step, uint64_t frame) {
  auto [it, fresh] = frames_.try_emplace(frame_key{step, frame});
  if (fresh) {
    it->second.invariants.resize(plan_->num_slots());
    it->second.missing = plan_->num_invariant_slots;
    ++loop_states;
  }
  return it->second;
}

void node_runner::invariant_input(uint64_t step, const frame_tag& tag, size_t slot,
                                  step_value&& v) {
  auto& f = frame_of(step, tag.frame);
  f.invariants[slot] = std::move(v);
  if (--f.missing > 0) return;
  auto parked = std::move(f.parked);
  for (auto& [t, slots] : parked) fire_with_invariants(step, std::move(t), std::move(slots));
}

// Fires one iteration with its frame's invariants, or parks it until they
// came; forgets the frame once its last iteration fired here.
void node_runner::fire_with_invariants(uint64_t step, frame_tag tag,
                                       std::vector<step_value> slots) {
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

void node_runner::forget_if_done(uint64_t step, uint64_t frame, const frame_state& f) {
  if (f.last >= 0 && f.fired == static_cast<uint64_t>(f.last) + 1)
    erase_counted(frames_, frame_key{step, frame}, true);
}

void node_runner::frame_ended(uint64_t step, uint64_t frame, uint64_t last) {
  auto& f = frame_of(step, frame);
  f.last = static_cast<int64_t>(last);
  forget_if_done(step, frame, f);
}

// A loop's last iteration wins over an error, so that the loop ends; an
// error wins over other dead values: the step fails either way.
void node_runner::fire(uint64_t step, const frame_tag& tag, step_value* slots, size_t num_slots) {
  firing f{step, tag, slots, num_slots};
  if (behaviour_->sees_every_firing()) return behaviour_->fire(*this, f);
  dead_kind why = passed_on(slots, num_slots);
  bool dead = why == dead_kind::loop_end;
  for (size_t s = 0; s < num_slots && !dead; ++s) {
    if (!slots[s].ok()) {
      std::string error = std::move(slots[s].error);
      return behaviour_->fail(*this, f, error, slots[s].code);
    }
    dead |= slots[s].dead;
  }
  if (dead) return behaviour_->fire_dead(*this, f, slots[0], why);
  behaviour_->fire(*this, f);
}

void node_runner::launch_done(uint64_t id, const std::string& error) {
  behaviour_->launch_done(*this, id, error);
}

void node_runner::drop(uint64_t step) {
  std::erase_if(pending_, [step](const auto& entry) {
    if (entry.first.step != step) return false;
    if (entry.first.frame != 0) --loop_states;
    return true;
  });
  std::erase_if(frames_, [step](const auto& entry) {
    if (entry.first.step != step) return false;
    --loop_states;
    return true;
  });
  behaviour_->drop(*this, step);
}

void node_runner::release() {
  for (auto& [key, p] : pending_)
    if (key.frame != 0) --loop_states;
  loop_states -= static_cast<int64_t>(frames_.size());
  pending_.clear();
  frames_.clear();
  if (behaviour_) behaviour_->release();
  plan_.reset();
}

void node_runner::emit_value(uint64_t step, const frame_tag& tag, tensor value) {
  outputs_.push_back(std::move(value));
  emit(step, tag, outputs_);
  outputs_.clear();
}

void node_runner::emit_error(uint64_t step, const frame_tag& tag, const std::string& error,
                             error_code code) {
  emit(step, tag, outputs_, error, code);
}

tensor node_runner::take_input(int i, step_value* slots, size_t num_slots) const {
  const tensor& bound = plan_->bound_inputs[static_cast<size_t>(i)];
  if (bound.valid()) return bound;
  for (size_t s = 0; s < num_slots; ++s)
    if (plan_->slot_input[s] == i) return std::move(slots[s].value);
  return tensor();
}

step_value node_runner::take_carried(int i, step_value* slots, size_t num_slots) const {
  const tensor& bound = plan_->bound_inputs[static_cast<size_t>(i)];
  if (bound.valid()) return step_value{bound};
  for (size_t s = 0; s < num_slots; ++s)
    if (plan_->slot_input[s] == i) return std::move(slots[s]);
  return step_value{};
}

std::vector<tensor>& node_runner::fill_inputs(step_value* slots, size_t num_slots) {
  const node_plan& plan = *plan_;
  if (inputs_.size() != plan.bound_inputs.size())  // the first firing, or handed away
    inputs_.assign(plan.bound_inputs.begin(), plan.bound_inputs.end());
  for (size_t s = 0; s < num_slots; ++s)
    if (int i = plan.slot_input[s]; i >= 0)
      inputs_[static_cast<size_t>(i)] = std::move(slots[s].value);
  return inputs_;
}

// ---- what every behaviour does unless it says otherwise ----

void node_behaviour::fail(node_runner& r, firing& f, const std::string& error, error_code code) {
  r.emit_error(f.step, f.tag, error, code);
}

void node_behaviour::fire_dead(node_runner& r, firing& f, const step_value&, dead_kind why) {
  r.emit_dead(f.step, f.tag, why);
}

std::unique_ptr<node_behaviour> make_node_behaviour(const node_plan& plan) {
  switch (plan.kind) {
    case node_kind::kernel:
      return make_kernel_node();
    case node_kind::placeholder:
      return make_feed_node(false);
    case node_kind::recv:
      return make_feed_node(true);
    case node_kind::send:
      return make_send_node();
    case node_kind::variable_read:
      return make_variable_read_node();
    case node_kind::variable_update:
      return make_resource_update_node();
    case node_kind::switch_value:
      return plan.loop_switch ? make_loop_switch_node() : make_switch_node();
    case node_kind::merge_values:
      return make_merge_node();
    case node_kind::enter_frame:
      return make_enter_node();
    case node_kind::exit_frame:
      return make_exit_node();
    case node_kind::loop_merge:
      return make_loop_merge_node();
    case node_kind::history_push:
      return make_history_push_node();
    case node_kind::history_read:
      return make_history_read_node();
  }
  return make_kernel_node();
}

}  // namespace actorflow
