#include "apps/lib/lstm_lm.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <random>

#include "core/error.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/sampled_softmax.hpp"
#include "ops/sharded_softmax.hpp"
#include "ops/softmax.hpp"
#include "ops/tensor_array.hpp"
#include "ops/train.hpp"

namespace actorflow::lm {

lstm_state lstm_recurrent_step(output projected_x, output h, output c, output recurrent_kernel) {
  auto gates = split(projected_x + matmul(h, recurrent_kernel), 4, 1);
  auto input_gate = sigmoid(gates[0]);
  auto forget_gate = sigmoid(gates[1]);
  auto candidate = tanh(gates[2]);
  auto output_gate = sigmoid(gates[3]);
  auto next_c = forget_gate * c + input_gate * candidate;
  return {output_gate * tanh(next_c), next_c};
}

namespace {

// The kernel's input rows [E, 4H] and recurrent rows [H, 4H].
std::vector<output> kernel_parts(output kernel, int64_t input_size) {
  const int64_t hidden = kernel.dims().dim(1) / 4;
  return split_sizes(kernel, {input_size, hidden}, 0);
}

}  // namespace

lstm_state lstm_cell(output x, output h, output c, output kernel, output bias) {
  auto w = kernel_parts(kernel, x.dims().dim(1));
  return lstm_recurrent_step(bias_add(matmul(x, w[0]), bias), h, c, w[1]);
}

// The recurrence unrolled over time by a while loop (frames and iterations
// in the runtime, not T copies of the cell in the graph): the input
// projection of all steps is one matmul before the loop (as Keras and cuDNN
// do; a larger product runs faster than T small ones), read one row per
// iteration from a tensor array; each step's h goes into another, stacked
// after the loop. The gradient is a backward loop over the same steps.
lstm_sequence lstm_over_time(output inputs, output h0, output c0, output kernel, output bias) {
  const int64_t steps = inputs.dims().dim(0), batch = inputs.dims().dim(1),
                input_size = inputs.dims().dim(2), gates = kernel.dims().dim(1);
  if (steps <= 0 || batch <= 0 || input_size <= 0)
    fail("lstm_over_time", "the inputs' dims (time, batch, features) must be known, not " +
                               inputs.dims().to_string());
  graph& g = inputs.owner();
  auto w = kernel_parts(kernel, input_size);
  auto projected = bias_add(matmul(reshape(inputs, {-1, input_size}), w[0]), bias);
  auto per_step = unstack_to_tensor_array(reshape(projected, {steps, batch, gates}), "lstm_inputs");
  auto hs = make_tensor_array(g, h0.type(), steps, shape{batch, gates / 4}, false, "lstm_outputs");
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], scalar<int32_t>(g, int32_t(steps))); },
      [&](const std::vector<output>& v) {
        auto t = v[0];
        auto next = lstm_recurrent_step(per_step.read(t), v[1], v[2], w[1]);
        auto written = hs.with(v[3], v[4]).write(t, next.h);
        return std::vector<output>{t + scalar<int32_t>(g, 1), next.h, next.c, written.data,
                                   written.written};
      },
      {scalar<int32_t>(g, 0), h0, c0, hs.data, hs.written}, {.name = "lstm"});
  return {hs.with(outs[3], outs[4]).stack(), outs[1], outs[2]};
}

namespace {

// Keras's Orthogonal initializer for a [rows, cols] matrix with rows <= cols:
// the transposed thin Q of a normal [cols, rows] matrix, signs fixed by R's
// diagonal, so that the rows are orthonormal. Computed here once, at build time.
tensor orthogonal_rows(int64_t rows, int64_t cols, int64_t seed) {
  std::mt19937_64 rng(uint64_t(seed) * 7919 + 17);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd a(cols, rows);
  for (int64_t i = 0; i < a.size(); ++i) a.data()[i] = normal(rng);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(cols, rows);
  for (int64_t j = 0; j < rows; ++j)
    if (qr.matrixQR()(j, j) < 0) q.col(j) *= -1;
  tensor t(dtype::float32, {rows, cols});
  float* out = t.mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = float(q(c, r));
  return t;
}

// Keras's LSTM bias with unit_forget_bias: zeros, except 1 for the forget gate.
tensor lstm_initial_bias(int64_t hidden) {
  std::vector<float> b(size_t(4 * hidden), 0.0f);
  std::fill(b.begin() + hidden, b.begin() + 2 * hidden, 1.0f);
  return tensor::from_vector<float>(b, {4 * hidden});
}

output uniform_init(graph& g, shape dims, int64_t seed, int64_t stream) {
  return random_uniform(g, std::move(dims), dtype::float32, -0.05, 0.05, seed, stream);
}

}  // namespace

namespace {

// Rows of the vocabulary: plain with one shard, else partitioned (mod) over
// the shard devices; either way initialized from the whole `initial`, so that
// every shard count starts from the same values.
bool sharded(const lm_config& c) { return c.vocab_shards > 1 || !c.shard_devices.empty(); }

partitioned_variable vocab_rows(output initial, const lm_config& c, const std::string& name) {
  if (!sharded(c)) {
    partitioned_variable v;
    v.shards = {make_variable(initial, name)};
    v.dims = initial.dims();
    v.row_offsets = {0, v.dims[0]};
    return v;
  }
  std::vector<std::string> devices;
  for (int64_t k = 0; k < c.vocab_shards && !c.shard_devices.empty(); ++k)
    devices.push_back(c.shard_devices[size_t(k) % c.shard_devices.size()]);
  return make_partitioned_variable(initial, int(c.vocab_shards), name, devices,
                                   partition_strategy::mod);
}

// The rows of `ids` (any shape): a plain gather of a whole table (no Part and
// Stitch to pay for), embedding_lookup of a sharded one.
output lookup(const lm_variables& v, output ids) {
  if (!v.sharded) return gather(v.embedding.shards[0].value(), ids);
  return embedding_lookup(v.embedding, ids);
}

}  // namespace

std::vector<variable> lm_variables::all() const {
  std::vector<variable> vars;
  for (auto* p : {&embedding, &softmax_w, &softmax_b})
    vars.insert(vars.end(), p->shards.begin(), p->shards.end());
  vars.push_back(kernel);
  vars.push_back(bias);
  return vars;
}

std::vector<int64_t> model_sizes(const lm_config& c) {
  return {c.vocab, c.embedding, c.hidden, c.vocab_shards};
}

std::string describe_sizes(const std::vector<int64_t>& s) {
  if (s.size() != 4) return fmt::format("{} sizes", s.size());
  return fmt::format("vocab {}, embedding {}, hidden {}, {} vocabulary shard{}", s[0], s[1], s[2],
                     s[3], s[3] == 1 ? "" : "s");
}

lm_variables make_lm_variables(graph& g, const lm_config& c) {
  const int64_t e = c.embedding, h = c.hidden, s = c.seed;
  if (c.vocab < 1 || e < 1 || h < 1)
    fail("lstm_lm",
         fmt::format("the model's sizes must be positive: {}", describe_sizes(model_sizes(c))));
  if (c.vocab_shards < 1 || c.vocab_shards > c.vocab)
    fail("lstm_lm", fmt::format("{} vocabulary shards cannot split {} words: choose 1 to {}",
                                c.vocab_shards, c.vocab, c.vocab));
  // Keras: Embedding and the reference's softmax_w uniform in +-0.05; the
  // LSTM's input kernel Glorot-uniform, its recurrent kernel orthogonal.
  auto input_kernel = glorot_uniform(g, {e, 4 * h}, s * 4 + 1);
  auto recurrent_kernel = constant(g, orthogonal_rows(h, 4 * h, s));
  return {vocab_rows(uniform_init(g, {c.vocab, e}, s, 2), c, "embedding"),
          make_variable(concat({input_kernel, recurrent_kernel}, 0), "lstm_kernel"),
          make_variable(constant(g, lstm_initial_bias(h)), "lstm_bias"),
          vocab_rows(uniform_init(g, {c.vocab, h}, s, 3), c, "softmax_w"),
          vocab_rows(fill(g, {c.vocab}, 0.0), c, "softmax_b"),
          sharded(c)};
}

lstm_state read_prefix(const lm_variables& v, output ids, lstm_state initial) {
  const int64_t steps = ids.dims().dim(1);
  if (steps <= 0)
    fail("read_prefix", "the prefix's length must be known, not " + ids.dims().to_string());
  lstm_state state = initial;
  for (int64_t t = 0; t < steps; ++t) {
    auto words = squeeze(slice(ids, {0, t}, {-1, 1}), {1});
    state = lstm_cell(lookup(v, words), state.h, state.c, v.kernel.value(), v.bias.value());
  }
  return state;
}

lm_forward run_lm(const lm_variables& v, output ids, output targets, lstm_state initial) {
  // Time-major, as the unroll slices it: [steps, streams].
  auto embedded = lookup(v, transpose(ids, {1, 0}));
  auto seq = lstm_over_time(embedded, initial.h, initial.c, v.kernel.value(), v.bias.value());
  const int64_t hidden = v.kernel.dims().dim(1) / 4;
  return {reshape(seq.outputs, {-1, hidden}),
          reshape(transpose(targets, {1, 0}), {-1}),
          {seq.h, seq.c}};
}

namespace {

// The full softmax's loss per word: computed where the shards live when the
// softmax is partitioned.
output full_softmax_loss(const lm_variables& v, const lm_forward& f) {
  if (v.sharded) return sharded_softmax_cross_entropy(v.softmax_w, v.softmax_b, f.hidden, f.labels);
  auto logits = bias_add(matmul(f.hidden, v.softmax_w.shards[0].value(), false, true),
                         v.softmax_b.shards[0].value());
  return sparse_softmax_cross_entropy_with_logits(logits, f.labels).loss;
}

output training_loss(graph& g, const lm_variables& v, const lm_forward& f, const lm_config& c) {
  if (c.full_softmax) return reduce_mean(full_softmax_loss(v, f));
  // The global step draws the candidates, so a resumed run draws the same ones.
  auto counter = global_step(g).value();
  auto labels = expand_dims(f.labels, 1);
  const sampled_softmax_options options{.seed = c.seed};
  if (v.sharded)
    return reduce_mean(sampled_softmax_loss(v.softmax_w, v.softmax_b, labels, f.hidden, c.sampled,
                                            c.vocab, counter, options));
  return reduce_mean(sampled_softmax_loss(v.softmax_w.shards[0].value(),
                                          v.softmax_b.shards[0].value(), labels, f.hidden,
                                          c.sampled, c.vocab, counter, options));
}

operation op_of(const output& o) { return operation(&o.owner(), o.ref().node); }

// The carried state: in one process an ordinary variable; in a cluster this
// worker's own, set by reset_state rather than by the chief's initializer.
variable state_variable(graph& g, const lm_config& c, const std::string& name) {
  if (c.state_prefix.empty()) return make_variable(fill(g, {c.streams, c.hidden}, 0.0), name);
  return make_variable(g, dtype::float32, {c.streams, c.hidden}, c.state_prefix + "/" + name);
}

}  // namespace

output full_softmax_nll_sum(const lm_variables& v, const lm_forward& f) {
  return reduce_sum(full_softmax_loss(v, f));
}

std::unique_ptr<optimizer> make_lm_optimizer(const lm_config& c) {
  // Keras's Adam: epsilon 1e-7; global_clipnorm 5.
  const optimizer_options o{.clip_global_norm = c.clip_norm};
  if (c.optimizer == "adam") return std::make_unique<adam>(c.lr, 0.9, 0.999, 1e-7, o);
  if (c.optimizer == "lazy_adam") return std::make_unique<lazy_adam>(c.lr, 0.9, 0.999, 1e-7, o);
  return make_optimizer(c.optimizer, c.lr, o);
}

lm_training_graph make_training_graph(graph& g, const lm_variables& v, const lm_config& c,
                                      const lm_update& make_update) {
  lm_training_graph t;
  t.inputs = placeholder(g, dtype::int64, {c.streams, c.steps}, "inputs");
  t.targets = placeholder(g, dtype::int64, {c.streams, c.steps}, "targets");
  t.state_h = state_variable(g, c, "state_h");
  t.state_c = state_variable(g, c, "state_c");
  auto f = run_lm(v, t.inputs, t.targets, {t.state_h.value(), t.state_c.value()});
  t.loss = training_loss(g, v, f, c);
  auto opt = make_lm_optimizer(c);
  auto update = make_update ? make_update(*opt, t.loss, v.all()) : opt->minimize(t.loss, v.all());
  t.train = group(g,
                  {update, op_of(assign(t.state_h, f.final_state.h)),
                   op_of(assign(t.state_c, f.final_state.c))},
                  "train_step");
  auto zeros = fill(g, {c.streams, c.hidden}, 0.0);
  t.reset_state =
      group(g, {op_of(assign(t.state_h, zeros)), op_of(assign(t.state_c, zeros))}, "reset_state");
  return t;
}

lm_eval_graph make_eval_graph(graph& g, const lm_variables& v, const lm_config& c) {
  lm_eval_graph e;
  e.inputs = placeholder(g, dtype::int64, {c.streams, c.steps}, "eval_inputs");
  e.targets = placeholder(g, dtype::int64, {c.streams, c.steps}, "eval_targets");
  e.h0 = placeholder(g, dtype::float32, {c.streams, c.hidden}, "eval_h0");
  e.c0 = placeholder(g, dtype::float32, {c.streams, c.hidden}, "eval_c0");
  auto f = run_lm(v, e.inputs, e.targets, {e.h0, e.c0});
  e.nll_sum = full_softmax_nll_sum(v, f);
  e.final_state = f.final_state;
  return e;
}

}  // namespace actorflow::lm
