// A node actor collects its inputs per step, runs its kernel (inline when
// cheap, on the device's pool when expensive) and sends each output on.
#include <unordered_map>
#include <utility>

#include "actors/messages.hpp"
#include "actors/node_plan.hpp"
#include "actors/scheduler.hpp"
#include "devices/cpu/parallel.hpp"

namespace actorflow {

namespace {

// Kernels on fewer input elements than this run inline on the actor's thread:
// handing them to the pool would cost more than the work.
constexpr int64_t inline_element_limit = parallel_grain;

// Delivers one value to a consumer. `self` is the node's actor, or null on a
// pool thread. No sender goes along (nothing answers these messages): a
// sender reference would cost two atomic updates of the sending actor's count
// per message.
//
// A chain link (placement::same_worker) puts the consumer this wakes at the
// front of the worker's own queue, to run next: that saves a hop to another
// core and often a wake-up. It never wakes another worker, though, so a
// fan-out handed to it all stays on one core (the 1000 branches of a wide
// graph ran one after another), and a consumer that gathers many inputs
// would be run once per input, each time as soon as one arrives. Those edges
// go through the scheduler, whose round robin spreads consumers over the
// workers and wakes sleeping ones. A long chain runs in segments pinned to
// different workers, but only while steps queue up in it: a lone step would
// pay a wake-up at each hand-over and gain nothing.
void deliver(caf::scheduled_actor* self, const consumer& to, step_input&& in) {
  auto message = caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, input_atom::value,
                                           std::move(in));
  auto* target = caf::actor_cast<caf::abstract_actor*>(to.target);
  switch (to.place) {
    case placement::scheduler:
      return target->enqueue(std::move(message), nullptr);
    case placement::same_worker:
      return target->enqueue(std::move(message), self != nullptr ? self->context() : nullptr);
    case placement::pinned:
      return enqueue_pinned(target, std::move(message));
    case placement::next_segment:
      if (self != nullptr && !self->mailbox().empty())
        return enqueue_pinned_to_next_worker(target, std::move(message));
      return enqueue_pinned(target, std::move(message));
  }
}

// Sends a step's outputs (or its error) to every consumer.
void emit(caf::scheduled_actor* self, const node_plan& plan, uint64_t step,
          std::vector<tensor>& outputs, const std::string& error) {
  for (size_t i = 0; i < plan.output_consumers.size(); ++i) {
    auto& consumers = plan.output_consumers[i];
    for (size_t c = 0; c < consumers.size(); ++c) {
      step_input in{step, consumers[c].slot, {}};
      if (!error.empty())
        in.value.error = error;
      else if (c + 1 == consumers.size())
        in.value.value = std::move(outputs[i]);  // last one takes it
      else
        in.value.value = outputs[i];
      deliver(self, consumers[c], std::move(in));
    }
  }
  for (auto& c : plan.control_consumers)
    deliver(self, c, step_input{step, c.slot, step_value{tensor(), error}});
}

// Sends a dead value to every consumer: this node did not run in the step.
void emit_dead(caf::scheduled_actor* self, const node_plan& plan, uint64_t step) {
  for (auto& consumers : plan.output_consumers)
    for (auto& c : consumers) deliver(self, c, step_input{step, c.slot, step_value::dead_value()});
  for (auto& c : plan.control_consumers)
    deliver(self, c, step_input{step, c.slot, step_value::dead_value()});
}

std::string describe_failure(const node_plan& plan, const std::string& what) {
  std::string where = plan.task.empty() ? "" : " on " + plan.task;
  return "node '" + plan.name + "' (" + plan.def->name + ")" + where + ": " + what;
}

// Empties the inputs that arrived in messages, so that no step's tensor
// stays referenced, and keeps the folded constants for the next firing: a
// firing then neither copies them nor bumps their reference counts, which
// all consumers of one constant share. Kernels only read their inputs; one
// that replaced a constant anyway gets the plan's copy back.
void release_arrived_inputs(const node_plan& plan, std::vector<tensor>& inputs) {
  if (inputs.size() != plan.bound_inputs.size()) return inputs.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const tensor& bound = plan.bound_inputs[i];
    if (!bound.valid())
      inputs[i] = tensor();
    else if (!inputs[i].shares_buffer_with(bound))
      inputs[i] = bound;
  }
}

// Runs the kernel and emits its outputs or the error it threw (`self` as in
// deliver). `inputs` and `outputs` are the caller's to reuse: `inputs` comes
// back holding just the folded constants, `outputs` empty.
void run_and_emit(caf::scheduled_actor* self, const node_plan& plan, uint64_t step,
                  std::vector<tensor>& inputs, std::vector<tensor>& outputs, uint64_t invocation) {
  std::string error;
  kernel_context ctx{plan.def->name,    plan.name,          plan.attrs,
                     std::move(inputs), std::move(outputs), invocation};
  try {
    plan.def->kernel(ctx);
    if (ctx.outputs.size() < plan.output_consumers.size())
      error = describe_failure(plan, "kernel produced too few outputs");
  } catch (const std::exception& e) {
    error = describe_failure(plan, e.what());
  }
  inputs = std::move(ctx.inputs);
  release_arrived_inputs(plan, inputs);  // before emit: consumers may find buffers unshared
  outputs = std::move(ctx.outputs);
  emit(self, plan, step, outputs, error);
  outputs.clear();
}

class node_actor : public caf::event_based_actor {
 public:
  node_actor(caf::actor_config& cfg, node_plan_ptr plan)
      : caf::event_based_actor(cfg), plan_(std::move(plan)) {}

  resume_result resume(caf::execution_unit* worker, size_t max_throughput) override {
    size_t limit = plan_->batch_limit;
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
          on_input(in.step, in.slot, std::move(in.value));
          return {};
        },
    };
  }

 private:
  struct pending {
    std::vector<step_value> slots;  // empty for a merge, which keeps no values
    size_t remaining = 0;
    bool fired = false;  // a merge: it passed on a live value of the step
  };

  void on_input(uint64_t step, int32_t slot, step_value&& v) {
    if (plan_->kind == node_kind::merge_values) return merge_input(step, slot, std::move(v));
    auto n = plan_->num_slots();
    if (n == 1) {  // the common case: fire at once, no per-step state
      fire(step, &v, 1);
      return;
    }
    auto& p = pending_[step];
    if (p.slots.empty()) {
      p.slots.resize(n);
      p.remaining = n;
    }
    p.slots[static_cast<size_t>(slot)] = std::move(v);
    if (--p.remaining > 0) return;
    auto slots = std::move(p.slots);
    pending_.erase(step);
    fire(step, slots.data(), slots.size());
  }

  void fire(uint64_t step, step_value* slots, size_t num_slots) {
    const node_plan& plan = *plan_;
    if (plan.kind == node_kind::send) return send_to_peer(step, slots, num_slots);
    // An error wins over a dead value: the step fails either way.
    bool dead = false;
    for (size_t s = 0; s < num_slots; ++s) {
      if (!slots[s].ok()) {
        std::string error = std::move(slots[s].error);
        emit(this, plan, step, outputs_, error);
        return;
      }
      dead |= slots[s].dead;
    }
    if (dead) return emit_dead(this, plan, step);
    switch (plan.kind) {
      case node_kind::switch_value:
        return switch_to_branch(step, slots);
      case node_kind::placeholder:
        outputs_.push_back(std::move(slots[0].value));
        emit(this, plan, step, outputs_, "");
        outputs_.clear();
        return;
      case node_kind::variable_read:
        return read_variable(step);
      case node_kind::variable_update:
        fill_inputs(slots, num_slots);
        return ask_resource(
            step, variable_update{plan.def, plan.name, &plan.attrs, std::exchange(inputs_, {}),
                                  step_key{plan.executable_id, step}});
      case node_kind::kernel:
        fill_inputs(slots, num_slots);
        return run_kernel_for(step);
      case node_kind::send:
      case node_kind::merge_values:
        return;  // handled before
    }
  }

  // Inputs (data, pred): the data goes to output 1 when pred is true, else
  // to output 0; the other output gets a dead value.
  void switch_to_branch(uint64_t step, step_value* slots) {
    const node_plan& plan = *plan_;
    const tensor& pred = slots[1].value;
    if (pred.type() != dtype::boolean || pred.num_elements() != 1) {
      emit(this, plan, step, outputs_,
           describe_failure(plan, "the predicate must be a scalar bool, not " +
                                      std::string(dtype_name(pred.type())) +
                                      pred.dims().to_string()));
      return;
    }
    size_t taken = *pred.data<bool>() ? 1 : 0;
    for (size_t out = 0; out < plan.output_consumers.size(); ++out) {
      auto& consumers = plan.output_consumers[out];
      for (size_t c = 0; c < consumers.size(); ++c) {
        step_input in{step, consumers[c].slot, step_value::dead_value()};
        if (out == taken) in.value = step_value{slots[0].value, "", false};
        deliver(this, consumers[c], std::move(in));
      }
    }
    for (auto& c : plan.control_consumers) deliver(this, c, step_input{step, c.slot, step_value{}});
  }

  // A merge fires on the first live (or failed) input of a step, with the
  // value and the index of its input; it forgets the step once every input
  // came, and sends a dead value then if none was live.
  void merge_input(uint64_t step, int32_t slot, step_value&& v) {
    const node_plan& plan = *plan_;
    auto& p = pending_[step];
    if (p.remaining == 0) p.remaining = plan.num_slots();
    int input = plan.slot_input[static_cast<size_t>(slot)];
    // An error on any input fails the step; a control input's value is not one to pass on.
    if (!p.fired && (!v.ok() || (input >= 0 && !v.dead))) {
      p.fired = true;
      if (v.ok()) {
        outputs_.push_back(std::move(v.value));
        outputs_.push_back(tensor::scalar<int32_t>(input));
      }
      emit(this, plan, step, outputs_, v.error);
      outputs_.clear();
    }
    if (--p.remaining > 0) return;
    bool fired = p.fired;
    pending_.erase(step);
    if (!fired) emit_dead(this, plan, step);
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

  // A send forwards its value, or the error that reached it, so the peer's
  // step fails too instead of waiting; then it reports to its coordinator.
  void send_to_peer(uint64_t step, step_value* slots, size_t num_slots) {
    const node_plan& plan = *plan_;
    step_value out = std::move(slots[0]);
    for (size_t s = 1; s < num_slots && out.ok(); ++s)
      if (!slots[s].ok()) out.error = std::move(slots[s].error);
    auto peer = plan.route ? plan.route->get() : caf::actor();
    if (!peer)
      out = step_value{tensor(), describe_failure(plan, "its recv is not connected")};
    else
      send(peer, input_atom::value, step_input{step, 0, out});
    for (auto& c : plan.control_consumers)
      send(c.target, input_atom::value, step_input{step, c.slot, step_value{tensor(), out.error}});
  }

  // Runs the kernel on inputs_: inline when cheap, reusing this actor's
  // vectors; otherwise on the device's pool, which gets its own.
  void run_kernel_for(uint64_t step) {
    uint64_t invocation = invocations_++;
    int64_t elements = 0;
    for (auto& t : inputs_) elements += t.num_elements();
    if (!plan_->def->expensive && elements < inline_element_limit) {
      run_and_emit(this, *plan_, step, inputs_, outputs_, invocation);
      return;
    }
    auto plan = plan_;
    send(plan->device, run_atom::value,
         device_task{[plan, step, inputs = std::exchange(inputs_, {}), invocation]() mutable {
           std::vector<tensor> outputs;
           run_and_emit(nullptr, *plan, step, inputs, outputs, invocation);
         }});
  }

  void read_variable(uint64_t step) {
    request(plan_->variable, caf::infinite, read_atom::value)
        .then(
            [this, step](step_value& v) {
              std::vector<tensor> outs{std::move(v.value)};
              emit(this, *plan_, step, outs, v.error);
            },
            [this, step](caf::error& e) { emit_actor_failure(step, e); });
  }

  // The resource actor may answer much later (a dequeue waits for an
  // element); `then` keeps this actor free for other steps meanwhile.
  void ask_resource(uint64_t step, variable_update&& u) {
    request(plan_->variable, caf::infinite, update_atom::value, std::move(u))
        .then(
            [this, step](update_result& r) {
              if (r.ok() && r.values.size() < plan_->output_consumers.size())
                r.error = describe_failure(*plan_, "update produced too few outputs");
              emit(this, *plan_, step, r.values, r.error);
            },
            [this, step](caf::error& e) { emit_actor_failure(step, e); });
  }

  void emit_actor_failure(uint64_t step, const caf::error& e) {
    std::vector<tensor> none;
    emit(this, *plan_, step, none,
         describe_failure(*plan_, "resource actor failed: " + caf::to_string(e)));
  }

  node_plan_ptr plan_;
  // Reused by every firing (an actor handles one message at a time), so that
  // a cheap node allocates no vectors per step. Between messages outputs_ is
  // empty and inputs_ holds only the folded constants.
  std::vector<tensor> inputs_;
  std::vector<tensor> outputs_;
  std::unordered_map<uint64_t, pending> pending_;
  uint64_t invocations_ = 0;
};

}  // namespace

caf::actor spawn_node_actor(caf::actor_system& system, node_plan_ptr plan) {
  return system.spawn<node_actor>(std::move(plan));
}

}  // namespace actorflow
