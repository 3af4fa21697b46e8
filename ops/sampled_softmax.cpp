#include "ops/sampled_softmax.hpp"

#include <cfloat>
#include <cmath>
#include <functional>
#include <unordered_set>

#include "ops/array.hpp"
#include "ops/embedding.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"

namespace actorflow {

namespace {

constexpr const char* kSampler = "log_uniform_candidate_sampler";
constexpr const char* kLoss = "sampled_softmax_loss";

// ---------------------------------------------------------------------------------------------
// log_uniform_candidate_sampler

struct sampler_params {
  int64_t num_true = 1, num_sampled = 1, range_max = 1, seed = 0;
  bool unique = true;
};

sampler_params read_sampler_params(const attr_map& attrs, const std::string& op) {
  sampler_params p;
  p.num_true = get_attr<int64_t>(attrs, "num_true", op);
  p.num_sampled = get_attr<int64_t>(attrs, "num_sampled", op);
  p.range_max = get_attr<int64_t>(attrs, "range_max", op);
  p.unique = get_attr<bool>(attrs, "unique", op);
  p.seed = get_attr_or<int64_t>(attrs, "seed", op, 0);
  if (p.num_true < 1) fail(op, "num_true must be at least 1, got " + std::to_string(p.num_true));
  if (p.num_sampled < 1)
    fail(op, "num_sampled must be at least 1, got " + std::to_string(p.num_sampled));
  if (p.range_max < 1) fail(op, "range_max must be at least 1, got " + std::to_string(p.range_max));
  // Rejection sampling of distinct classes would never end.
  if (p.unique && p.num_sampled > p.range_max)
    fail(op, "cannot draw " + std::to_string(p.num_sampled) + " distinct classes from range_max " +
                 std::to_string(p.range_max) + " (unique = true)");
  return p;
}

void check_sampler_inputs(const tensor_spec& classes, const tensor_spec& counter,
                          const sampler_params& p, const std::string& op) {
  if (classes.type != dtype::int32 && classes.type != dtype::int64)
    fail(op, "true_classes must be int32 or int64, got " + classes.to_string());
  if (classes.dims.rank() != 2)
    fail(op, "true_classes must be [batch, num_true], got " + classes.to_string());
  if (classes.dims[1] >= 0 && classes.dims[1] != p.num_true)
    fail(op, "true_classes " + classes.dims.to_string() +
                 " must have num_true = " + std::to_string(p.num_true) + " columns");
  if (counter.type != dtype::int64 || counter.dims.rank() != 0)
    fail(op, "the counter must be an int64 scalar, got " + counter.to_string());
}

std::vector<tensor_spec> sampler_infer(const shape_context& c) {
  auto p = read_sampler_params(c.attrs, c.op);
  check_sampler_inputs(c.inputs[0], c.inputs[1], p, c.op);
  return {{dtype::int64, shape({p.num_sampled})},
          {dtype::float32, shape({c.inputs[0].dims[0], p.num_true})},
          {dtype::float32, shape({p.num_sampled})}};
}

// TensorFlow's LogUniformSampler (core/kernels/range_sampler.cc), so that a class's probability
// and its expected counts match tf.random.log_uniform_candidate_sampler's to the float.
class log_uniform {
 public:
  explicit log_uniform(int64_t range) : range_(range), log_range_(std::log1p(double(range))) {}
  // floor(exp(x * log(range + 1))) - 1 is in [0, range]; rounding can reach range, folded to 0.
  int64_t sample(double x) const { return (int64_t(std::exp(x * log_range_)) - 1) % range_; }
  float probability(int64_t k) const {
    return float(std::log((double(k) + 2.0) / (double(k) + 1.0)) / log_range_);
  }

 private:
  int64_t range_;
  double log_range_;
};

// TensorFlow's ExpectedCountHelper, in float as there: without rejections the count is the
// plain num_sampled * p; with them, the chance that `tries` draws picked the class at least once.
float expected_count(float p, int64_t num_sampled, int64_t tries) {
  if (tries == num_sampled) return p * float(num_sampled);
  return -std::expm1(float(tries) * std::log1p(-p));
}

// Uniform doubles in [0, 1): draw i is half of Philox block i / 2 at (i, counter), keyed by the
// seed, so a draw depends on nothing but (seed, counter, i).
class draw_stream {
 public:
  draw_stream(int64_t seed, int64_t counter) : counter_(uint64_t(counter)) {
    // Salted, so that a dropout and a sampler given the same seed draw unrelated bits.
    const uint64_t k = uint64_t(seed) ^ 0x5A3D1E0F7C6B4A29ull;
    key_ = {uint32_t(k), uint32_t(k >> 32)};
  }
  double next() {
    const uint64_t block = index_ / 2;
    if (index_ % 2 == 0)
      bits_ = philox4x32(
          {uint32_t(block), uint32_t(block >> 32), uint32_t(counter_), uint32_t(counter_ >> 32)},
          key_);
    const size_t half = size_t(index_ % 2) * 2;
    ++index_;
    return double(((uint64_t(bits_[half]) << 32) | bits_[half + 1]) >> 11) * 0x1p-53;
  }

 private:
  uint64_t counter_, index_ = 0;
  std::array<uint32_t, 2> key_{};
  std::array<uint32_t, 4> bits_{};
};

// Fills `out` with the candidates and returns the number of draws it took.
int64_t draw_candidates(const sampler_params& p, int64_t counter, int64_t* out) {
  const log_uniform dist(p.range_max);
  draw_stream draws(p.seed, counter);
  if (!p.unique) {
    for (int64_t i = 0; i < p.num_sampled; ++i) out[i] = dist.sample(draws.next());
    return p.num_sampled;
  }
  std::unordered_set<int64_t> seen;
  int64_t tries = 0;
  for (int64_t picked = 0; picked < p.num_sampled; ++tries) {
    const int64_t k = dist.sample(draws.next());
    if (seen.insert(k).second) out[picked++] = k;
  }
  return tries;
}

template <class I>
void true_counts(const tensor& classes, const sampler_params& p, int64_t tries, float* out,
                 const std::string& op) {
  const log_uniform dist(p.range_max);
  const I* c = classes.data<I>();
  for (int64_t i = 0; i < classes.num_elements(); ++i) {
    if (c[i] < 0 || c[i] >= p.range_max)
      fail(op, "true class " + std::to_string(c[i]) + " (element " + std::to_string(i) +
                   ") is outside [0, range_max = " + std::to_string(p.range_max) + ")");
    out[i] = expected_count(dist.probability(int64_t(c[i])), p.num_sampled, tries);
  }
}

void sampler_kernel(kernel_context& ctx) {
  const auto p = read_sampler_params(ctx.attrs, ctx.op);
  const tensor& classes = ctx.input(0);
  const tensor& counter = ctx.input(1);
  check_sampler_inputs({classes.type(), classes.dims()}, {counter.type(), counter.dims()}, p,
                       ctx.op);
  int64_t* sampled =
      ctx.allocate_output(0, dtype::int64, shape({p.num_sampled})).mutable_data<int64_t>();
  const int64_t tries = draw_candidates(p, counter.data<int64_t>()[0], sampled);
  float* true_out = ctx.allocate_output(1, dtype::float32, classes.dims()).mutable_data<float>();
  if (classes.type() == dtype::int32)
    true_counts<int32_t>(classes, p, tries, true_out, ctx.op);
  else
    true_counts<int64_t>(classes, p, tries, true_out, ctx.op);
  float* sampled_out =
      ctx.allocate_output(2, dtype::float32, shape({p.num_sampled})).mutable_data<float>();
  const log_uniform dist(p.range_max);
  for (int64_t i = 0; i < p.num_sampled; ++i)
    sampled_out[i] = expected_count(dist.probability(sampled[i]), p.num_sampled, tries);
}

const op_registrar registration({
    .name = kSampler,
    .num_inputs = 2,
    .infer = sampler_infer,
    .kernel = sampler_kernel,
    .summary = "log-uniform (Zipfian) candidates from (seed, counter), with expected counts",
    .not_differentiable = true,
    .host_kernel = true,  // draws without replacement, one after another
});

// ---------------------------------------------------------------------------------------------
// sampled_softmax_loss

void check_loss_inputs(const tensor_spec& weights, const tensor_spec& biases, const output& labels,
                       const output& inputs, const candidate_sample& s, int64_t num_classes,
                       const sampled_softmax_options& o) {
  const shape& w = weights.dims;
  if (weights.type == dtype::bfloat16) fail_no_bfloat16_kernel(kLoss);
  if (!is_floating(weights.type) || w.rank() != 2)
    fail(kLoss, "weights must be float [num_classes, dim], got " + weights.to_string());
  if (biases.type != weights.type || biases.dims.rank() != 1)
    fail(kLoss, "biases must be " + std::string(dtype_name(weights.type)) + " [num_classes], got " +
                    biases.to_string());
  if (inputs.type() != weights.type || inputs.dims().rank() != 2)
    fail(kLoss, "inputs must be " + std::string(dtype_name(weights.type)) + " [batch, dim], got " +
                    inputs.spec().to_string());
  if (w[1] >= 0 && inputs.dims()[1] >= 0 && w[1] != inputs.dims()[1])
    fail(kLoss, "inputs " + inputs.dims().to_string() + " and weights " + w.to_string() +
                    " disagree on dim");
  for (int64_t rows : {w[0], biases.dims[0]})
    if (rows >= 0 && rows != num_classes)
      fail(kLoss, "weights " + w.to_string() + " and biases " + biases.dims.to_string() +
                      " must have num_classes = " + std::to_string(num_classes) + " rows");
  if (labels.dims().rank() != 2 || (labels.dims()[1] >= 0 && labels.dims()[1] != o.num_true))
    fail(kLoss, "labels must be [batch, num_true = " + std::to_string(o.num_true) + "], got " +
                    labels.spec().to_string());
  const shape& c = s.sampled_candidates.dims();
  if (c.rank() != 1 || c[0] < 1)
    fail(kLoss, "sampled candidates must be a vector of known length >= 1, got " + c.to_string());
}

// The spec of the whole partitioned variable, as if it were one tensor.
tensor_spec spec_of(const partitioned_variable& v) {
  return {v.shards.front().value().type(), v.dims};
}

// Weights and biases partitioned alike, so that a class's row and bias are
// found the same way.
void check_partitioned_alike(const partitioned_variable& weights,
                             const partitioned_variable& biases) {
  if (weights.rows() != biases.rows())
    fail(kLoss, "partitioned weights " + weights.dims.to_string() + " and biases " +
                    biases.dims.to_string() + " must have the same rows");
  if (weights.strategy != biases.strategy)
    fail(kLoss, std::string("partitioned weights (split by ") +
                    partition_strategy_name(weights.strategy) + ") and biases (split by " +
                    partition_strategy_name(biases.strategy) + ") must share a partition strategy");
}

// [batch, num_true]: the dot product of each input row with the weights of its true classes.
output true_logits_of(output inputs, output true_w, output true_b, int64_t num_true, int64_t dim) {
  auto rows = reshape(true_w, {-1, num_true, dim});
  auto dots = reduce_sum(expand_dims(inputs, 1) * rows, {2});
  return dots + reshape(true_b, {-1, num_true});
}

// -FLT_MAX where a sampled class is one of the row's true classes, 0 elsewhere; TensorFlow adds
// the same weight (compute_accidental_hits), so such a logit leaves the softmax.
output accidental_hit_penalty(output labels, output sampled, dtype type) {
  auto hits = equal(expand_dims(cast(labels, dtype::int64), 2), reshape(sampled, {1, 1, -1}));
  auto any_hit = reduce_max(cast(hits, type), {1});
  return any_hit * double(-FLT_MAX);
}

// [1, num_true + num_sampled]: 1 / num_true on the true columns, 0 on the sampled ones.
output target_row(graph& g, int64_t num_true, int64_t num_sampled, dtype type) {
  std::vector<double> row(size_t(num_true + num_sampled), 0.0);
  for (int64_t j = 0; j < num_true; ++j) row[size_t(j)] = 1.0 / double(num_true);
  return cast(constant(g, tensor::from_vector<double>(row, shape({1, num_true + num_sampled}))),
              type);
}

// The loss, given how to read the weights' and biases' rows at int64 ids:
// [n, dim] and [n]. dim: the weights' (-1 when unknown: the inputs' then),
// which must be known when the graph is built.
output loss_of_rows(const std::function<std::pair<output, output>(output)>& rows_at, output labels,
                    output inputs, const candidate_sample& s, const sampled_softmax_options& o,
                    dtype type, int64_t dim) {
  graph& g = labels.owner();
  const int64_t num_sampled = s.sampled_candidates.dims()[0];
  if (dim < 0) dim = inputs.dims()[1];
  if (dim < 0) fail(kLoss, "needs the inputs' dim known when the graph is built");
  // Sampled rows first: both slices then have sizes known at build time.
  auto ids = concat({s.sampled_candidates, reshape(cast(labels, dtype::int64), {-1})}, 0);
  auto [all_w, all_b] = rows_at(ids);
  auto sampled_w = slice(all_w, {0, 0}, {num_sampled, -1});
  auto sampled_b = slice(all_b, {0}, {num_sampled});
  auto true_w = slice(all_w, {num_sampled, 0}, {-1, -1});
  auto true_b = slice(all_b, {num_sampled}, {-1});
  auto true_logits = true_logits_of(inputs, true_w, true_b, o.num_true, dim);
  // The correction for sampling: logits of log(exp(z) / Q(class)). The bias,
  // the correction and the accidental-hit penalty are summed before they meet
  // the product: none depends on the inputs, so they are ready when the
  // product is, and the inputs' path holds one add instead of three (TensorFlow
  // adds them to the product one by one: the same values up to rounding).
  true_logits = true_logits - log(cast(s.true_expected_count, type));
  auto sampled_offset = sampled_b - log(cast(s.sampled_expected_count, type));
  if (o.remove_accidental_hits)
    sampled_offset = accidental_hit_penalty(labels, s.sampled_candidates, type) + sampled_offset;
  auto sampled_logits = matmul(inputs, sampled_w, false, true) + sampled_offset;
  auto logits = concat({true_logits, sampled_logits}, 1);
  auto targets = broadcast_like(target_row(g, o.num_true, num_sampled, type), logits);
  return softmax_cross_entropy_with_logits(logits, targets).loss;
}

}  // namespace

candidate_sample log_uniform_candidate_sampler(output true_classes, int64_t num_true,
                                               int64_t num_sampled, bool unique, int64_t range_max,
                                               output counter, int64_t seed,
                                               const std::string& name) {
  auto outs = make_op_outputs(kSampler, {true_classes, counter},
                              {{"num_true", num_true},
                               {"num_sampled", num_sampled},
                               {"unique", unique},
                               {"range_max", range_max},
                               {"seed", seed}},
                              name.empty() ? kSampler : name);
  return {outs[0], outs[1], outs[2]};
}

output sampled_softmax_loss(output weights, output biases, output labels, output inputs,
                            int64_t num_sampled, int64_t num_classes, output counter,
                            const sampled_softmax_options& options, const std::string& name) {
  auto scope = labels.owner().name_scope(name);
  auto sampled = log_uniform_candidate_sampler(labels, options.num_true, num_sampled,
                                               /*unique=*/true, num_classes, counter, options.seed);
  return sampled_softmax_loss(weights, biases, labels, inputs, sampled, num_classes, options,
                              "loss");
}

output sampled_softmax_loss(output weights, output biases, output labels, output inputs,
                            const candidate_sample& s, int64_t num_classes,
                            const sampled_softmax_options& o, const std::string& name) {
  check_loss_inputs(weights.spec(), biases.spec(), labels, inputs, s, num_classes, o);
  auto scope = weights.owner().name_scope(name);
  // One gather per table, so that each gradient is a single scatter_add_like (row updates).
  auto rows_at = [&](output ids) { return std::pair{gather(weights, ids), gather(biases, ids)}; };
  return loss_of_rows(rows_at, labels, inputs, s, o, weights.type(), weights.dims()[1]);
}

output sampled_softmax_loss(const partitioned_variable& weights, const partitioned_variable& biases,
                            output labels, output inputs, int64_t num_sampled, int64_t num_classes,
                            output counter, const sampled_softmax_options& options,
                            const std::string& name) {
  auto scope = labels.owner().name_scope(name);
  auto sampled = log_uniform_candidate_sampler(labels, options.num_true, num_sampled,
                                               /*unique=*/true, num_classes, counter, options.seed);
  return sampled_softmax_loss(weights, biases, labels, inputs, sampled, num_classes, options,
                              "loss");
}

output sampled_softmax_loss(const partitioned_variable& weights, const partitioned_variable& biases,
                            output labels, output inputs, const candidate_sample& s,
                            int64_t num_classes, const sampled_softmax_options& o,
                            const std::string& name) {
  check_partitioned_alike(weights, biases);
  check_loss_inputs(spec_of(weights), spec_of(biases), labels, inputs, s, num_classes, o);
  auto scope = labels.owner().name_scope(name);
  // One lookup per table: each shard gathers its rows where it lives, so only
  // the true and sampled rows cross the network, and each shard's gradient is
  // one scatter_add_like (row updates), formed on the shard's device.
  auto rows_at = [&](output ids) {
    return std::pair{embedding_lookup(weights, ids, "weights_lookup"),
                     embedding_lookup(biases, ids, "biases_lookup")};
  };
  return loss_of_rows(rows_at, labels, inputs, s, o, spec_of(weights).type, weights.dims[1]);
}

}  // namespace actorflow
