#include "ops/transfer.hpp"

#include "ops/op_util.hpp"

namespace actorflow {

namespace {

// The runtime moves the values: a send node actor forwards to its remote recv
// actor, which forwards to its consumers. Reaching a kernel is a bug.
void runtime_only(kernel_context& ctx) {
  ctx.fail("is a transfer served by the runtime, not by a kernel (node '" + ctx.node_name + "')");
}

std::vector<tensor_spec> send_spec(const shape_context& c) {
  c.attr<std::string>(transfer_peer_attr);
  c.attr<std::string>(transfer_peer_task_attr);
  return {};
}

std::vector<tensor_spec> recv_spec(const shape_context& c) {
  c.attr<std::string>(transfer_peer_attr);
  c.attr<std::string>(transfer_peer_task_attr);
  return {{c.attr<dtype>("dtype"), shape(c.attr<std::vector<int64_t>>("shape"))}};
}

const op_registrar registrations[] = {
    op_registrar({.name = "send",
                  .role = op_role::send,
                  .num_inputs = -1,
                  .min_inputs = 0,
                  .infer = send_spec,
                  .kernel = runtime_only,
                  .stateful = true,
                  .summary = "sends its input to the recv of a cut edge in another partition",
                  .not_differentiable = true}),
    op_registrar({.name = "recv",
                  .role = op_role::recv,
                  .num_inputs = 0,
                  .infer = recv_spec,
                  .kernel = runtime_only,
                  .stateful = true,
                  .summary = "receives the value of a cut edge from another partition",
                  .not_differentiable = true}),
};

}  // namespace

}  // namespace actorflow
