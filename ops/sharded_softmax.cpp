#include "ops/sharded_softmax.hpp"

#include "ops/array.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"

namespace actorflow {

namespace {

constexpr const char* kOp = "sharded_softmax_cross_entropy";

dtype type_of(const partitioned_variable& v) { return v.shards.front().value().type(); }

std::string spec_string(const partitioned_variable& v) {
  return std::string(dtype_name(type_of(v))) + v.dims.to_string();
}

void check_tables(const partitioned_variable& weights, const partitioned_variable& biases) {
  const dtype type = type_of(weights);
  if ((type != dtype::float32 && type != dtype::float64) || weights.dims.rank() != 2)
    fail(kOp, "weights must be float32 or float64 [classes, dim], got " + spec_string(weights));
  if (type_of(biases) != type || biases.dims.rank() != 1)
    fail(kOp, "biases must be " + std::string(dtype_name(type)) + " [classes], got " +
                  spec_string(biases));
  if (weights.rows() != biases.rows())
    fail(kOp, "weights " + weights.dims.to_string() + " and biases " + biases.dims.to_string() +
                  " must have the same rows");
  // Shard k of the biases must hold the classes shard k of the weights does.
  if (weights.row_offsets != biases.row_offsets || weights.strategy != biases.strategy)
    fail(kOp, "weights (" + std::to_string(weights.num_shards()) + " shards, split by " +
                  partition_strategy_name(weights.strategy) + ") and biases (" +
                  std::to_string(biases.num_shards()) + " shards, split by " +
                  partition_strategy_name(biases.strategy) + ") must be split alike");
}

void check_batch(const partitioned_variable& weights, const output& inputs, const output& labels) {
  const dtype type = type_of(weights);
  const shape& x = inputs.dims();
  if (inputs.type() != type || x.rank() != 2)
    fail(kOp, "inputs must be " + std::string(dtype_name(type)) + " [batch, dim], got " +
                  inputs.spec().to_string());
  if (x[1] >= 0 && x[1] != weights.dims[1])
    fail(kOp, "inputs " + x.to_string() + " and weights " + weights.dims.to_string() +
                  " disagree on dim");
  const shape& l = labels.dims();
  if ((labels.type() != dtype::int32 && labels.type() != dtype::int64) || l.rank() != 1)
    fail(kOp, "labels must be int32 or int64 [batch], got " + labels.spec().to_string());
  if (l[0] >= 0 && x[0] >= 0 && l[0] != x[0])
    fail(kOp, "labels " + l.to_string() + " and inputs " + x.to_string() + " disagree on batch");
}

// log(sum(exp(x))) along axis 1 of [batch, n]. The row maximum is subtracted first, so that
// large logits stay finite; its gradient is stopped, which leaves the gradient exact (the
// result does not depend on the value subtracted), softmax(x).
output log_sum_exp_rows(output x) {
  auto top = stop_gradient(reduce_max(x, {1}, /*keep_dims=*/true));
  return squeeze(top, {1}) + log(reduce_sum(exp(x - top), {1}));
}

// The same across the shards' [batch] log-sum-exps, element by element.
output log_sum_exp_of(const std::vector<output>& parts) {
  output top = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) top = maximum(top, parts[k]);
  top = stop_gradient(top);
  output sum = exp(parts[0] - top);
  for (size_t k = 1; k < parts.size(); ++k) sum = sum + exp(parts[k] - top);
  return top + log(sum);
}

// What shard k sends back: per example, its log-sum-exp and the true class's logit (0 where
// the label is on another shard). Both [batch].
struct shard_terms {
  output log_sum_exp, true_logit;
};

// `label_shard` and `label_row`: each label's shard and its row there (row_shard_ids).
shard_terms shard_part(const partitioned_variable& weights, const partitioned_variable& biases,
                       int k, output inputs, output label_shard, output label_row) {
  graph& g = inputs.owner();
  const auto& w = weights.shards[static_cast<size_t>(k)];
  const auto& b = biases.shards[static_cast<size_t>(k)];
  auto on = g.device_scope(w.value().node().device);
  auto scope = g.name_scope("shard_" + std::to_string(k));
  const dtype type = w.value().type();
  auto logits = matmul(inputs, w.value(), false, true) + b.value();  // [batch, rows_k]
  // A label on another shard picks nothing here: its row's one_hot is masked out.
  auto picked = reduce_sum(one_hot(label_row, w.dims()[0], 1, 0, type) * logits, {1});
  auto here = cast(equal(label_shard, scalar<int32_t>(g, k)), type);
  return {log_sum_exp_rows(logits), picked * here};
}

}  // namespace

output sharded_softmax_cross_entropy(const partitioned_variable& weights,
                                     const partitioned_variable& biases, output inputs,
                                     output labels, const std::string& name) {
  check_tables(weights, biases);
  check_batch(weights, inputs, labels);
  graph& g = inputs.owner();
  auto scope = g.name_scope(name);
  auto where = row_shard_ids(labels, weights.row_offsets, weights.strategy);
  std::vector<output> log_sum_exps;
  output true_logit;
  for (int k = 0; k < weights.num_shards(); ++k) {
    auto part = shard_part(weights, biases, k, inputs, where[0], where[1]);
    log_sum_exps.push_back(part.log_sum_exp);
    true_logit = k == 0 ? part.true_logit : true_logit + part.true_logit;
  }
  // -log softmax at the label: log(sum over all classes of exp(logit)) - the label's logit.
  return log_sum_exp_of(log_sum_exps) - true_logit;
}

}  // namespace actorflow
