#include "actors/run/node_output.hpp"

#include <algorithm>

#include "actors/caf_ext/mailbox.hpp"
#include "ops/transfer.hpp"

namespace actorflow {

// No sender goes along (nothing answers these messages): a
// sender reference would cost two atomic updates of the sending actor's count
// per message.
//
// A chain link (placement::same_worker) puts the consumer this wakes at the
// front of the worker's own queue, to run next: that saves a hop to another
// core and often a wake-up. It never wakes another worker, though, so a
// fan-out handed to it all stays on one core (the 1000 branches of a wide
// graph ran one after another), and a consumer that gathers many inputs
// would be run once per input, each time as soon as one arrives. A fan-out
// goes through the scheduler, whose round robin spreads consumers over the
// workers and wakes sleeping ones. A consumer of several inputs
// (placement::after_queued) goes to the back of the producer's worker's
// queue: its other inputs often come from jobs queued there (a step's feeds
// all start on the coordinator's worker), so it runs once, after them, and
// no worker is woken for it; an idle one that is awake may steal it. Through
// the round robin, its first input would wake another worker for it, or
// leave it to one napping (CAF's naps cannot be cut short), which the step
// then waits for. A long chain runs in segments pinned to different workers,
// but only while steps queue up in it: a lone step would pay a wake-up at
// each hand-over and gain nothing.
//
// A value for another node of the same host goes into the host's local
// queue: no message at all.
void deliver(node_host_base* self, const consumer& to, step_input&& in) {
  auto* target = caf::actor_cast<caf::abstract_actor*>(to.target);
  in.member = to.member;
  if (self != nullptr && target == self) return self->queue_local(std::move(in));
  auto message = make_direct_message(input_atom::value, std::move(in));
  switch (to.place) {
    case placement::scheduler:
      return enqueue_direct(target, std::move(message), nullptr);
    case placement::same_worker:
      return enqueue_direct(target, std::move(message),
                            self != nullptr ? self->context() : nullptr);
    case placement::pinned:
      return enqueue_pinned(target, std::move(message));
    case placement::next_segment:
      if (self != nullptr && !self->mailbox().empty())
        return enqueue_pinned_to_next_worker(target, std::move(message));
      return enqueue_pinned(target, std::move(message));
    case placement::after_queued:
      return enqueue_after_queued(target, std::move(message));
  }
}

void emit(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
          std::vector<tensor>& outputs, const std::string& error, error_code code) {
  for (size_t i = 0; i < plan.output_consumers.size(); ++i) {
    auto& consumers = plan.output_consumers[i];
    for (size_t c = 0; c < consumers.size(); ++c) {
      step_input in{step, consumers[c].slot, {}, tag};
      if (!error.empty())
        in.value = step_value::failure(error, code);
      else if (c + 1 == consumers.size())
        in.value.value = std::move(outputs[i]);  // last one takes it
      else
        in.value.value = outputs[i];
      deliver(self, consumers[c], std::move(in));
    }
  }
  for (auto& c : plan.control_consumers)
    deliver(self, c, step_input{step, c.slot, step_value::failure(error, code), tag});
}

void emit_carried(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                  step_value first, const tensor& second) {
  if (!first.ok()) {
    std::vector<tensor> none;
    return emit(self, plan, step, tag, none, first.error, first.code);
  }
  first.dead = false;
  for (size_t i = 0; i < plan.output_consumers.size() && i < 2; ++i) {
    auto& consumers = plan.output_consumers[i];
    for (size_t c = 0; c < consumers.size(); ++c) {
      step_input in{step, consumers[c].slot, {}, tag};
      if (i == 1)
        in.value.value = second;
      else if (c + 1 == consumers.size())  // the last one takes it
        in.value = carried_to(plan, consumers[c], std::move(first));
      else
        in.value = carried_to(plan, consumers[c], first);
      deliver(self, consumers[c], std::move(in));
    }
  }
  for (auto& c : plan.control_consumers) deliver(self, c, step_input{step, c.slot, {}, tag});
}

step_value carried_to(const node_plan& plan, const consumer& c, step_value v) {
  if (!v.on_device || c.on_device) return v;
  return step_value::failure(
      describe_failure(plan, "got a value in device memory for a consumer off its device"),
      error_code::internal);
}

std::shared_ptr<accelerator_launch> make_launch(const node_plan& plan, step_value* slots,
                                                size_t num_slots, uint64_t invocation) {
  auto launch = std::make_shared<accelerator_launch>();
  launch->def = plan.def;
  launch->node_name = plan.name;
  launch->attrs = &plan.attrs;
  launch->invocation = invocation;
  launch->variable = plan.device_variable;
  launch->host_inputs = plan.bound_inputs;
  launch->device_inputs.resize(plan.bound_inputs.size());
  launch->constants = plan.constants_on_device;
  for (size_t s = 0; s < num_slots; ++s)
    if (int i = plan.slot_input[s]; i >= 0) {
      launch->host_inputs[static_cast<size_t>(i)] = std::move(slots[s].value);
      launch->device_inputs[static_cast<size_t>(i)] = std::move(slots[s].on_device);
    }
  size_t outputs = plan.output_consumers.size();
  launch->to_host.assign(outputs, 0);
  launch->on_device.assign(outputs, 0);
  for (size_t i = 0; i < outputs; ++i)
    for (auto& c : plan.output_consumers[i])
      (c.on_device ? launch->on_device : launch->to_host)[i] = 1;
  return launch;
}

void accelerator_launches::start(node_host_base* self, const node_plan& plan, uint32_t member,
                                 uint64_t step, const frame_tag& tag,
                                 std::shared_ptr<accelerator_launch> launch,
                                 std::vector<tensor> trailing) {
  uint64_t id = (uint64_t{member} << member_shift) | next_++;
  pending_.emplace(id, launched{step, tag, launch, now_if_tracing(), std::move(trailing)});
  accelerator* accel = plan.accel;
  // Outputs that all stay on the device are ready for their consumers there
  // once enqueued: their launches come later on the same stream. Only a
  // copy to the host waits for the stream (no node waits for a kernel), not
  // an output the kernel gives in host memory as it enqueues.
  bool stays_on_device = true;
  const auto& on_host = plan.def->host_memory_outputs;
  for (size_t i = 0; i < launch->to_host.size(); ++i)
    stays_on_device &=
        !launch->to_host[i] || (accel->host_outputs_on_enqueue() &&
                                std::find(on_host.begin(), on_host.end(), int(i)) != on_host.end());
  gpu::gpu_task task{0, [accel, launch] { accel->enqueue(0, *launch); }, id};
  task.answer_on_enqueue = stays_on_device;
  self->send(plan.device, run_atom::value, std::move(task));
}

void accelerator_launches::finish(node_host_base* self, const node_plan& plan, uint64_t id,
                                  const std::string& error) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // its step was dropped
  launched done = std::move(it->second);
  pending_.erase(it);
  const accelerator_launch& launch = *done.launch;
  const std::string& failure = error.empty() ? launch.error : error;
  if (done.started_ns != 0)
    if (auto trace = find_step_trace(plan.executable_id, done.step)) {
      auto t = trace_record(plan, done.tag, trace_kind::device);
      t.ready_ns = t.start_ns = done.started_ns;
      t.end_ns = trace_now_ns();
      t.output_bytes = bytes_of(launch.host_outputs);
      for (auto& v : launch.device_outputs)
        if (v) t.output_bytes += static_cast<int64_t>(v->tensor.size_bytes());
      trace->add(std::move(t));
    }
  if (!failure.empty()) {
    std::vector<tensor> none;
    return emit(self, plan, done.step, done.tag, none, describe_failure(plan, failure),
                error.empty() ? launch.failure_code : error_code::internal);
  }
  const size_t own = launch.host_outputs.size();
  for (size_t i = 0; i < plan.output_consumers.size(); ++i)
    for (auto& c : plan.output_consumers[i]) {
      step_input in{done.step, c.slot, {}, done.tag};
      if (i >= own)
        in.value.value = i - own < done.trailing.size() ? done.trailing[i - own] : tensor();
      else if (c.on_device && launch.device_outputs[i])
        in.value.on_device = launch.device_outputs[i];
      else  // a host copy, or an output the kernel gave in host memory
        in.value.value = launch.host_outputs[i];
      deliver(self, c, std::move(in));
    }
  for (auto& c : plan.control_consumers)
    deliver(self, c, step_input{done.step, c.slot, {}, done.tag});
}

std::shared_ptr<accelerator_launch> make_host_copy(const node_plan& plan, device_value_ptr value,
                                                   uint64_t invocation) {
  static const op_def& identity = op_registry::global().get("identity");
  auto launch = std::make_shared<accelerator_launch>();
  launch->def = &identity;
  launch->node_name = plan.name;
  launch->attrs = &plan.attrs;
  launch->invocation = invocation;
  launch->host_inputs.resize(1);
  launch->device_inputs.push_back(std::move(value));
  launch->to_host.assign(1, 1);
  launch->on_device.assign(1, 0);
  for (auto& c : plan.output_consumers.at(0)) launch->on_device[0] |= c.on_device ? 1 : 0;
  return launch;
}

bool has_host_consumer(const node_plan& plan) {
  for (auto& c : plan.output_consumers.at(0))
    if (!c.on_device) return true;
  return false;
}

void accelerator_launches::drop(uint64_t step) {
  std::erase_if(pending_, [step](const auto& l) { return l.second.step == step; });
}

void emit_dead(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
               dead_kind why) {
  for (auto& consumers : plan.output_consumers)
    for (auto& c : consumers)
      deliver(self, c, step_input{step, c.slot, step_value::dead_value(why), tag});
  for (auto& c : plan.control_consumers)
    deliver(self, c, step_input{step, c.slot, step_value::dead_value(why), tag});
}

node_trace trace_record(const node_plan& plan, const frame_tag& tag, trace_kind kind) {
  node_trace t;
  t.node = plan.name;
  t.op = plan.def ? plan.def->name : "";
  t.device = plan.device_name;
  t.task = plan.task;
  t.kind = kind;
  t.inputs = plan.producers;
  t.frame = tag.frame;
  t.iteration = tag.iteration;
  return t;
}

int64_t bytes_of(const std::vector<tensor>& values) {
  int64_t bytes = 0;
  for (auto& v : values)
    if (v.valid()) bytes += static_cast<int64_t>(v.size_bytes());
  return bytes;
}

int64_t now_if_tracing() { return any_step_traced() ? trace_now_ns() : 0; }

bool trace_transfer(const node_plan& plan, uint64_t step, const frame_tag& tag, trace_kind kind,
                    const tensor& value) {
  auto trace = find_step_trace(plan.executable_id, step);
  if (!trace) return false;
  auto t = trace_record(plan, tag, kind);
  t.thread = trace_thread_id();
  t.ready_ns = t.start_ns = t.end_ns = trace_now_ns();
  t.output_bytes = value.valid() ? static_cast<int64_t>(value.size_bytes()) : 0;
  t.peer_task = get_attr_or<std::string>(plan.attrs, transfer_peer_task_attr, t.op, "");
  trace->add(std::move(t));
  return true;
}

void send_to_peer(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                  step_value* slots, size_t num_slots) {
  step_value out = std::move(slots[0]);
  for (size_t s = 1; s < num_slots && out.ok(); ++s)
    if (!slots[s].ok()) out = step_value::failure(std::move(slots[s].error), slots[s].code);
  auto peer = plan.route ? plan.route->get() : caf::actor();
  // The recv's partition traces the step from this value on (its start may come later).
  const bool traced = trace_transfer(plan, step, tag, trace_kind::send, out.value);
  if (!peer)
    out = step_value::failure(describe_failure(plan, "its recv is not connected"),
                              error_code::failed_precondition);
  else
    self->send(peer, input_atom::value, step_input{step, 0, out, tag, 0, traced});
  for (auto& c : plan.control_consumers)
    deliver(self, c, step_input{step, c.slot, step_value::failure(out.error, out.code), tag});
}

void trace_resource(const node_plan& plan, uint64_t step, const frame_tag& tag, int64_t asked,
                    const std::vector<tensor>& values) {
  if (asked == 0) return;
  auto trace = find_step_trace(plan.executable_id, step);
  if (!trace) return;
  auto t = trace_record(plan, tag, trace_kind::resource);
  t.ready_ns = t.start_ns = asked;
  t.end_ns = trace_now_ns();
  t.output_bytes = bytes_of(values);
  trace->add(std::move(t));
}

std::string describe_failure(const node_plan& plan, const std::string& what) {
  std::string where = plan.task.empty() ? "" : " on " + plan.task;
  return "node '" + plan.name + "' (" + plan.def->name + ")" + where + ": " + what;
}

namespace {

// Empties the inputs that arrived in messages, so that no step's tensor
// stays referenced, and keeps the folded constants for the next firing: a
// firing then neither copies them nor bumps their reference counts, which
// all consumers of one constant share. Kernels only read their inputs; one
// that replaced a constant anyway, or moved it out (a tensor array's write),
// gets the plan's copy back.
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

}  // namespace

void run_and_emit(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                  std::vector<tensor>& inputs, std::vector<tensor>& outputs, uint64_t invocation,
                  int64_t ready_ns) {
  std::string error;
  error_code code = error_code::unknown;
  kernel_context ctx{plan.def->name,    plan.name,          plan.attrs,
                     std::move(inputs), std::move(outputs), invocation};
  auto trace = find_step_trace(plan.executable_id, step);
  const int64_t start = trace ? trace_now_ns() : 0;
  try {
    plan.kernel(ctx);
    if (ctx.outputs.size() < plan.output_consumers.size())
      error = describe_failure(plan, "kernel produced too few outputs"),
      code = error_code::internal;
  } catch (const std::exception& e) {
    error = describe_failure(plan, e.what());
    code = code_of(e);
  }
  if (trace) {  // before its outputs go on: the step cannot end without it
    auto t = trace_record(plan, tag, trace_kind::kernel);
    t.thread = trace_thread_id();
    t.on_pool = self == nullptr;
    t.ready_ns = ready_ns != 0 ? ready_ns : start;
    t.start_ns = start;
    t.end_ns = trace_now_ns();
    t.output_bytes = bytes_of(ctx.outputs);
    trace->add(std::move(t));
  }
  inputs = std::move(ctx.inputs);
  release_arrived_inputs(plan, inputs);  // before emit: consumers may find buffers unshared
  outputs = std::move(ctx.outputs);
  emit(self, plan, step, tag, outputs, error, code);
  outputs.clear();
}

}  // namespace actorflow
