// Training: optimizers whose updates the variable actors apply, the global
// step, learning-rate schedules, gradient clipping, initializers and dropout.
//
//   auto opt = make_optimizer("adam", 1e-3);
//   operation train = opt->minimize(loss);   // one op: every update, then global_step += 1
//   for (...) s.run({{x, batch}}, {loss}, {train});
#pragma once
#include <memory>
#include <utility>

#include "core/export.hpp"
#include "core/graph.hpp"
#include "ops/state.hpp"

namespace actorflow {

/// The graph's int64 scalar "global_step" variable (initialized to 0), made on first use.
/// minimize() increments it once per step, after every update.
ACTORFLOW_API variable global_step(graph& g);

/// A learning rate: a fixed number, or a float scalar computed in the graph (a schedule).
class ACTORFLOW_API learning_rate {
 public:
  learning_rate(double value) : value_(value) {}
  learning_rate(output value) : tensor_(value) {}
  /// The rate as a graph scalar (a new constant for a fixed number).
  output in(graph& g) const;

 private:
  double value_ = 0;
  output tensor_;
};

struct ACTORFLOW_API optimizer_options {
  /// L2 penalty: weight_decay * w is added to each gradient (as PyTorch does).
  double weight_decay = 0;
  /// When > 0, gradients are scaled together so their global norm is at most
  /// this. The norm is computed beside each gradient (a gathered one's from
  /// its rows), so that only scalars travel to the sum.
  double clip_global_norm = 0;
  /// A variable whose gradient is rows of a gather from it (an embedding, or
  /// one shard of a partitioned one) is updated in those rows only by the
  /// optimizers with a row update: sgd and adagrad, whose row update gives
  /// exactly the dense result, and lazy_adam, whose purpose it is. Clipping's
  /// scale folds into the row update; weight decay, which moves every row,
  /// makes the update dense. The others update every row.
  /// sync_replicas also accumulates such gradients as rows. False makes
  /// every update and accumulation dense.
  bool row_updates = true;
};

using grads_and_vars = std::vector<std::pair<output, variable>>;

/// The gradient rows and their indices when `grad` is the gradient of a
/// gather from `v` along axis 0 (a scatter_add_like into v's shape): an
/// embedding table's, or one shard's. Both empty otherwise.
ACTORFLOW_API std::pair<output, output> gathered_rows_of(const output& grad, const variable& v);

class ACTORFLOW_API optimizer {
 public:
  explicit optimizer(learning_rate lr, optimizer_options options = {})
      : lr_(std::move(lr)), options_(options) {}
  virtual ~optimizer() = default;

  /// d(loss)/d(v) for each of `vars`; by default every float variable the loss
  /// depends on. Throws when a listed variable does not affect the loss.
  grads_and_vars compute_gradients(output loss, std::vector<variable> vars = {}) const;
  /// Adds one update op per pair, then global_step += 1 after all of them;
  /// returns the op that does it all (clipping applies here).
  operation apply_gradients(const grads_and_vars& pairs, const std::string& name = "train");
  operation minimize(output loss, std::vector<variable> vars = {},
                     const std::string& name = "train");
  const optimizer_options& options() const { return options_; }

 protected:
  /// Adds the update of v by grad * grad_scale at rate lr (a float scalar).
  /// grad_scale is global-norm clipping's factor (a float scalar), or an
  /// empty output when there is none; the built-in updates fold it into
  /// their one pass over the variable instead of a pass that scales the
  /// gradient first.
  virtual output apply(const variable& v, output grad, output lr, output grad_scale) = 0;
  /// Adds the update of v's rows `indices` by gradient `rows` * grad_scale
  /// (repeats add up; grad_scale as for apply); an empty output where the
  /// optimizer has no row update.
  virtual output apply_rows(const variable&, output /*rows*/, output /*indices*/, output /*lr*/,
                            output /*grad_scale*/) {
    return output();
  }
  attr_map common_attrs() const { return {{"weight_decay", options_.weight_decay}}; }

 private:
  learning_rate lr_;
  optimizer_options options_;
};

/// w -= lr * g
class ACTORFLOW_API sgd : public optimizer {
 public:
  explicit sgd(learning_rate lr, optimizer_options o = {}) : optimizer(std::move(lr), o) {}

 protected:
  output apply(const variable& v, output grad, output lr, output grad_scale) override;
  output apply_rows(const variable& v, output rows, output indices, output lr,
                    output grad_scale) override;
};

/// v = mu * v + g; w -= lr * v (Nesterov: w -= lr * (g + mu * v)).
class ACTORFLOW_API momentum : public optimizer {
 public:
  momentum(learning_rate lr, double mu = 0.9, bool nesterov = false, optimizer_options o = {})
      : optimizer(std::move(lr), o), mu_(mu), nesterov_(nesterov) {}

 protected:
  output apply(const variable& v, output grad, output lr, output grad_scale) override;

 private:
  double mu_;
  bool nesterov_;
};

/// Adam with bias correction (Kingma and Ba), PyTorch's epsilon placement.
class ACTORFLOW_API adam : public optimizer {
 public:
  explicit adam(learning_rate lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                double epsilon = 1e-8, optimizer_options o = {})
      : optimizer(std::move(lr), o), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}

 protected:
  output apply(const variable& v, output grad, output lr, output grad_scale) override;
  attr_map adam_attrs() const;

 private:
  double beta1_, beta2_, epsilon_;
};

/// TensorFlow's LazyAdamOptimizer (tf-addons) for embeddings: a gradient that
/// is rows of a gather from the variable (gathered_rows_of) updates only the
/// rows the batch named (apply_adam_rows; repeated indices summed first); a
/// dense gradient gets adam's update exactly (apply_adam). A named row's w, m
/// and v move by adam's formula (PyTorch's epsilon placement, not TF's
/// epsilon-hat), with adam's slots adam/m, adam/v and adam/t. It differs from
/// dense Adam in two ways, both TF's LazyAdam's:
/// - the moments of rows not in the batch do not decay, and those rows do not
///   move (dense Adam decays m and v with a zero gradient and moves every row
///   whose m is not zero);
/// - the bias correction 1 - beta^t takes t from the variable's apply count
///   (adam/t, one per apply whichever rows it names), as TF's takes the
///   optimizer's iterations, not from how often the row itself was updated.
/// So a row named in every step moves exactly (bit for bit) as dense Adam
/// moves it. Weight decay or row_updates = false make every update dense Adam.
class ACTORFLOW_API lazy_adam : public adam {
 public:
  explicit lazy_adam(learning_rate lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                     double epsilon = 1e-8, optimizer_options o = {})
      : adam(std::move(lr), beta1, beta2, epsilon, o) {}

 protected:
  output apply_rows(const variable& v, output rows, output indices, output lr,
                    output grad_scale) override;
};

/// ms = rho * ms + (1 - rho) g^2; w -= lr * g / (sqrt(ms) + eps), with optional momentum.
class ACTORFLOW_API rmsprop : public optimizer {
 public:
  explicit rmsprop(learning_rate lr = 1e-3, double rho = 0.9, double epsilon = 1e-8,
                   double mu = 0.0, optimizer_options o = {})
      : optimizer(std::move(lr), o), rho_(rho), epsilon_(epsilon), mu_(mu) {}

 protected:
  output apply(const variable& v, output grad, output lr, output grad_scale) override;

 private:
  double rho_, epsilon_, mu_;
};

/// acc += g^2; w -= lr * g / (sqrt(acc) + eps); acc starts at initial_accumulator.
class ACTORFLOW_API adagrad : public optimizer {
 public:
  explicit adagrad(learning_rate lr = 0.01, double initial_accumulator = 0.1,
                   double epsilon = 1e-10, optimizer_options o = {})
      : optimizer(std::move(lr), o), initial_(initial_accumulator), epsilon_(epsilon) {}

 protected:
  output apply(const variable& v, output grad, output lr, output grad_scale) override;
  output apply_rows(const variable& v, output rows, output indices, output lr,
                    output grad_scale) override;

 private:
  double initial_, epsilon_;
};

/// "sgd", "momentum", "nesterov", "adam", "lazy_adam", "rmsprop" or "adagrad"
/// with default hyper-parameters; throws naming the choices for any other name.
ACTORFLOW_API std::unique_ptr<optimizer> make_optimizer(const std::string& name, learning_rate lr,
                                                        optimizer_options options = {});

/// The global norm of some gradients (TensorFlow's global_norm) and the factor
/// clip_norm / max(global_norm, clip_norm) that clips them. Each gradient's
/// share (its l2_loss; a gathered gradient's from its rows, l2_loss_rows) is
/// computed on its producer's device, so that with variables on parameter
/// servers only scalars cross the network. The sum, the norm and the factor
/// are built in the caller's device scope.
struct ACTORFLOW_API global_norm_clip {
  output global_norm;
  output scale;
};
ACTORFLOW_API global_norm_clip global_norm_clip_scale(const std::vector<output>& grads,
                                                      double clip_norm);

/// The gradients scaled by that factor, and the norm.
struct ACTORFLOW_API clipped_gradients {
  std::vector<output> grads;
  output global_norm;
};
ACTORFLOW_API clipped_gradients clip_by_global_norm(const std::vector<output>& grads,
                                                    double clip_norm);

// ---- learning-rate schedules: float32 scalars computed from the global step ----

/// lr0 * rate^(step / decay_steps) (the exponent floored when staircase).
ACTORFLOW_API output exponential_decay(const variable& step, double lr0, int64_t decay_steps,
                                       double rate, bool staircase = false);
/// values[i] while step < boundaries[i] (boundaries ascending; one more value than boundaries).
ACTORFLOW_API output piecewise_constant(const variable& step, std::vector<int64_t> boundaries,
                                        std::vector<double> values);
/// lr0 * ((1 - alpha) * (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2 + alpha).
ACTORFLOW_API output cosine_decay(const variable& step, double lr0, int64_t decay_steps,
                                  double alpha = 0.0);

// ---- initializers: random tensors scaled by fan-in and fan-out ----
// For a matrix [in, out] the fans are its dims; for a conv filter [h, w, in, out]
// they are h*w*in and h*w*out.

/// Uniform in +-sqrt(6 / (fan_in + fan_out)).
ACTORFLOW_API output glorot_uniform(graph& g, shape dims, int64_t seed,
                                    dtype type = dtype::float32);
/// Truncated normal with stddev sqrt(2 / (fan_in + fan_out)).
ACTORFLOW_API output glorot_normal(graph& g, shape dims, int64_t seed, dtype type = dtype::float32);
/// Uniform in +-sqrt(6 / fan_in).
ACTORFLOW_API output he_uniform(graph& g, shape dims, int64_t seed, dtype type = dtype::float32);
/// Truncated normal with stddev sqrt(2 / fan_in).
ACTORFLOW_API output he_normal(graph& g, shape dims, int64_t seed, dtype type = dtype::float32);

/// Inverted dropout: each element is zeroed with probability `rate` and the
/// rest scaled by 1 / (1 - rate). The mask depends only on (seed, counter,
/// element index), so feeding the global step as `counter` makes training
/// reproducible across a checkpoint restore. Build it into the training graph
/// only; evaluation graphs leave it out.
ACTORFLOW_API output dropout(output x, double rate, output counter, int64_t seed);

}  // namespace actorflow
