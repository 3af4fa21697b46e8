#include "ops/queue.hpp"

#include "ops/op_util.hpp"

namespace actorflow {

namespace {

// Component i's attributes; "components" holds the count, "capacity" the size.
std::string dtype_key(size_t i) { return "dtype_" + std::to_string(i); }
std::string shape_key(size_t i) { return "shape_" + std::to_string(i); }

attr_map attrs_of(const queue_spec& spec) {
  attr_map attrs{{"components", static_cast<int64_t>(spec.components.size())},
                 {"capacity", spec.capacity}};
  for (size_t i = 0; i < spec.components.size(); ++i) {
    attrs[dtype_key(i)] = spec.components[i].type;
    attrs[shape_key(i)] = spec.components[i].dims.dims();
  }
  return attrs;
}

// The queue reference: a scalar that is never computed (the session serves
// queue nodes with a queue actor; a fetch reaches this kernel and fails).
const tensor_spec handle_spec{dtype::int32, shape{}};

void queue_reference_only(kernel_context& ctx) {
  ctx.fail("node '" + ctx.node_name +
           "' is a queue reference, not a value: run queue ops on it (queue_size, queue_dequeue)");
}

// Queue ops run in the queue actor, never as kernels.
void served_by_queue_actor(kernel_context& ctx) {
  ctx.fail("node '" + ctx.node_name + "' is served by its queue's actor, not by a kernel");
}

std::vector<tensor_spec> fifo_queue_spec(const shape_context& c) {
  queue_spec_of(c.attrs, c.op);  // validates
  return {handle_spec};
}

void check_component_specs(const queue_spec& spec, const std::vector<tensor_spec>& given,
                           const std::string& op, const std::string& prefix) {
  if (given.size() != spec.components.size())
    fail(op, prefix + "an element has " + std::to_string(spec.components.size()) +
                 " components, got " + std::to_string(given.size()));
  for (size_t i = 0; i < given.size(); ++i) {
    auto& want = spec.components[i];
    if (given[i].type != want.type || !given[i].dims.compatible_with(want.dims))
      fail(op, prefix + "component " + std::to_string(i) + " is " + given[i].to_string() +
                   ", the queue holds " + want.to_string());
  }
}

std::vector<tensor_spec> enqueue_spec(const shape_context& c) {
  std::vector<tensor_spec> given(c.inputs.begin() + 1, c.inputs.end());
  check_component_specs(queue_spec_of(c.attrs, c.op), given, c.op, "");
  return {};
}

std::vector<tensor_spec> dequeue_spec(const shape_context& c) {
  return queue_spec_of(c.attrs, c.op).components;
}

const op_registrar registrations[] = {
    op_registrar({.name = "fifo_queue",
                  .role = op_role::resource,
                  .num_inputs = 0,
                  .infer = fifo_queue_spec,
                  .kernel = queue_reference_only,
                  .stateful = true,
                  .summary = "a FIFO queue of tensor tuples, served by a queue actor",
                  .not_differentiable = true}),
    op_registrar({.name = "queue_enqueue",
                  .num_inputs = -1,
                  .min_inputs = 2,
                  .infer = enqueue_spec,
                  .kernel = served_by_queue_actor,
                  .resource = "fifo_queue",
                  .may_wait = true,
                  .stateful = true,
                  .summary = "appends an element to a queue; waits while it is full",
                  .not_differentiable = true}),
    op_registrar({.name = "queue_dequeue",
                  .num_inputs = 1,
                  .infer = dequeue_spec,
                  .kernel = served_by_queue_actor,
                  .resource = "fifo_queue",
                  .may_wait = true,
                  .stateful = true,
                  .summary = "removes the oldest element of a queue; waits while it is empty",
                  .not_differentiable = true}),
    op_registrar({.name = "queue_close",
                  .num_inputs = 1,
                  .infer = [](const shape_context&) { return std::vector<tensor_spec>{}; },
                  .kernel = served_by_queue_actor,
                  .resource = "fifo_queue",
                  .stateful = true,
                  .summary = "closes a queue: enqueues fail, dequeues drain it and then fail",
                  .not_differentiable = true}),
    op_registrar(
        {.name = "queue_size",
         .num_inputs = 1,
         .infer = [](const shape_context&) { return std::vector<tensor_spec>{handle_spec}; },
         .kernel = served_by_queue_actor,
         .resource = "fifo_queue",
         .stateful = true,
         .summary = "the number of elements in a queue",
         .not_differentiable = true}),
};

const node& queue_node(const output& queue, const std::string& op) {
  auto& n = queue.node();
  if (n.op != "fifo_queue") fail(op, "'" + queue.name() + "' is a " + n.op + ", not a queue");
  return n;
}

// Nodes of queue ops carry the queue's spec, so that their shape functions
// can check and infer without seeing the queue node.
attr_map spec_attrs_of(const output& queue, const std::string& op) {
  return attrs_of(queue_spec_of(queue_node(queue, op).attrs, op));
}

}  // namespace

queue_spec queue_spec_of(const attr_map& attrs, const std::string& op) {
  queue_spec spec;
  spec.capacity = get_attr<int64_t>(attrs, "capacity", op);
  if (spec.capacity < 1)
    fail(op, "capacity must be at least 1, got " + std::to_string(spec.capacity));
  auto n = get_attr<int64_t>(attrs, "components", op);
  if (n < 1) fail(op, "a queue needs at least one component, got " + std::to_string(n));
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    spec.components.push_back({get_attr<dtype>(attrs, dtype_key(i), op),
                               shape(get_attr<std::vector<int64_t>>(attrs, shape_key(i), op))});
  return spec;
}

void check_queue_element(const queue_spec& spec, const std::vector<tensor>& components,
                         const std::string& queue_name) {
  std::string where = "queue '" + queue_name + "'";
  std::vector<tensor_spec> given;
  for (size_t i = 0; i < components.size(); ++i) {
    if (!components[i].valid())
      fail(where, "component " + std::to_string(i) + " is an empty tensor");
    given.push_back({components[i].type(), components[i].dims()});
  }
  check_component_specs(spec, given, where, "");
}

output fifo_queue(graph& g, const std::vector<dtype>& types, const std::vector<shape>& shapes,
                  int64_t capacity, const std::string& name) {
  if (types.size() != shapes.size())
    fail("fifo_queue",
         std::to_string(types.size()) + " dtypes but " + std::to_string(shapes.size()) + " shapes");
  queue_spec spec;
  spec.capacity = capacity;
  for (size_t i = 0; i < types.size(); ++i) spec.components.push_back({types[i], shapes[i]});
  auto& n = g.add_node("fifo_queue", {}, attrs_of(spec), name.empty() ? "fifo_queue" : name);
  return output(&g, {n.id, 0});
}

operation queue_enqueue(output queue, const std::vector<output>& components,
                        const std::string& name) {
  // Checked here too, where the error can name the queue; the shape function
  // checks graphs that are loaded rather than built.
  auto spec = queue_spec_of(queue_node(queue, "queue_enqueue").attrs, "queue_enqueue");
  std::vector<tensor_spec> given;
  for (auto& c : components) given.push_back(c.spec());
  check_component_specs(spec, given, "queue_enqueue", "queue '" + queue.name() + "': ");
  std::vector<output> inputs{queue};
  inputs.insert(inputs.end(), components.begin(), components.end());
  graph& g = queue.owner();
  auto& n =
      g.add_node("queue_enqueue", std::move(inputs), spec_attrs_of(queue, "queue_enqueue"), name);
  return operation(&g, n.id);
}

std::vector<output> queue_dequeue(output queue, const std::string& name) {
  return make_op_outputs("queue_dequeue", {queue}, spec_attrs_of(queue, "queue_dequeue"), name);
}

operation queue_close(output queue, bool cancel_pending_enqueues, const std::string& name) {
  queue_node(queue, "queue_close");
  graph& g = queue.owner();
  auto& n = g.add_node("queue_close", {queue},
                       {{"cancel_pending_enqueues", cancel_pending_enqueues}}, name);
  return operation(&g, n.id);
}

output queue_size(output queue, const std::string& name) {
  queue_node(queue, "queue_size");
  return make_op("queue_size", {queue}, {}, name);
}

}  // namespace actorflow
