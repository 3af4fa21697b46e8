#include "ops/sync_replicas.hpp"

#include "ops/accumulator.hpp"
#include "ops/array.hpp"
#include "ops/queue.hpp"

namespace actorflow {

namespace {

operation op_of(output x) { return operation(&x.owner(), x.node().id); }

// The token queue never fills in practice (one token per worker and step,
// one taken per worker step), but a worker that died leaves its tokens there.
constexpr int64_t token_capacity = int64_t{1} << 40;

}  // namespace

sync_replicas_ops sync_replicas(optimizer& opt, output loss, int replicas_to_aggregate,
                                int total_replicas, const std::string& worker_device,
                                std::vector<variable> vars) {
  if (total_replicas < 1 || replicas_to_aggregate < 1 || replicas_to_aggregate > total_replicas)
    fail("sync_replicas", "needs 1 <= replicas_to_aggregate (" +
                              std::to_string(replicas_to_aggregate) + ") <= total_replicas (" +
                              std::to_string(total_replicas) + ")");
  graph& g = loss.owner();
  sync_replicas_ops ops;
  ops.global_step = global_step(g);
  auto pairs = opt.compute_gradients(loss, std::move(vars));
  const std::string& step_device = ops.global_step.value().node().device;
  {
    auto on_worker = g.device_scope(worker_device);
    ops.local_step = make_variable(g, dtype::int64, shape{}, "sync_replicas/local_step");
  }
  output tokens;
  {
    auto on_step_task = g.device_scope(step_device);
    tokens = fifo_queue(g, {dtype::int64}, {shape{}}, token_capacity, "sync_replicas/tokens");
  }

  std::vector<output> accumulators;
  std::vector<operation> applies;
  grads_and_vars averaged;
  auto required = scalar(g, int32_t(replicas_to_aggregate), "sync_replicas/required");
  for (auto& [grad, var] : pairs) {
    auto on_var_task = g.device_scope(var.value().node().device);
    std::string acc_name = "sync_replicas/acc/" + var.name();
    auto [rows, indices] = gathered_rows_of(grad, var);
    if (rows.valid() && opt.options().row_updates) {
      // An embedding's gradient: only its rows are accumulated. The average
      // goes back into the form apply_gradients knows as rows (gathered_rows_of),
      // so that a row update and clipping's norm read the averaged rows alone.
      auto acc = sparse_conditional_accumulator(g, grad.type(), var.dims(), acc_name);
      accumulators.push_back(acc);
      applies.push_back(
          sparse_accumulator_apply_gradient(acc, ops.local_step.value(), rows, indices));
      auto mean = sparse_accumulator_take_gradient(acc, required);
      averaged.emplace_back(scatter_add_like(mean.rows, mean.indices, var.value()), var);
      continue;
    }
    auto acc = conditional_accumulator(g, grad.type(), var.dims(), acc_name);
    accumulators.push_back(acc);
    applies.push_back(accumulator_apply_gradient(acc, ops.local_step.value(), grad));
    averaged.emplace_back(accumulator_take_gradient(acc, required), var);
  }
  {
    auto after_applies = g.control_dependencies(applies);
    auto token = queue_dequeue(tokens, "sync_replicas/next_token")[0];
    ops.worker_train = op_of(assign(ops.local_step, token, "sync_replicas/worker_train"));
  }

  auto update = opt.apply_gradients(averaged, "sync_replicas/update");
  std::vector<operation> after_update;
  {
    auto deps = g.control_dependencies({update});
    ops.chief_step = ops.global_step.read("sync_replicas/step_after_update");
  }
  for (auto& acc : accumulators)
    after_update.push_back(accumulator_set_global_step(acc, ops.chief_step));
  for (int i = 0; i < total_replicas; ++i)
    after_update.push_back(queue_enqueue(tokens, {ops.chief_step}));
  ops.chief_update = group(g, after_update, "sync_replicas/chief_update");
  ops.local_step_init =
      op_of(assign(ops.local_step, ops.global_step.value(), "sync_replicas/local_step_init"));
  ops.close_tokens = queue_close(tokens, false, "sync_replicas/close_tokens");
  // The accumulators move to the global step first: a chief that died
  // mid-update can leave them a step ahead of it, dropping every gradient
  // computed at the tokens handed out here.
  auto current = ops.global_step.read("sync_replicas/step_for_init_tokens");
  std::vector<operation> resynced;
  for (auto& acc : accumulators) resynced.push_back(accumulator_set_global_step(acc, current));
  std::vector<operation> init_tokens;
  {
    auto after_resync = g.control_dependencies(resynced);
    for (int i = 0; i < total_replicas; ++i)
      init_tokens.push_back(queue_enqueue(tokens, {current}));
  }
  ops.chief_init_tokens = group(g, init_tokens, "sync_replicas/chief_init_tokens");
  return ops;
}

}  // namespace actorflow
