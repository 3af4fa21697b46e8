// Batch and layer normalization, fused: each op computes its statistics in one
// pass over memory and normalizes in a second; each gradient is one op of two
// passes (the per-channel sums, then the input's gradient).
//
// Ops: fused_batch_norm, fused_batch_norm_grad, layer_norm, layer_norm_grad.
//
// fused_batch_norm has the semantics of TensorFlow's FusedBatchNormV3
// (tf.compat.v1.nn.fused_batch_norm), channels last:
//  - training: y = (x - m) / sqrt(v + epsilon) * scale + offset with m, v the
//    batch's mean and (biased) variance per channel; the batch_variance output
//    is the unbiased one, v * n / (n - 1), as TensorFlow returns it for the
//    moving averages. With exponential_avg_factor f != 1 the outputs are
//    already averaged: (1 - f) * mean + f * m, and the same for the variance.
//  - inference: y uses the `mean` and `variance` inputs, and passes them on.
// Where actorflow deliberately differs from TensorFlow:
//  - x may have any rank >= 2 with channels last ([N, C] after a dense layer,
//    NHWC after a convolution); TensorFlow takes rank 4 or 5, NHWC or NCHW.
//    NCHW is not supported.
//  - training mode refuses a channel with a single value (a batch of one
//    [1, C], or one 1x1 image): its variance is undefined. TensorFlow returns
//    a variance of 0 and y = offset there; PyTorch refuses, as we do.
//  - inference mode refuses a negative or NaN variance (a moving variance
//    restored from a corrupted checkpoint) instead of computing NaNs.
//  - two saved outputs (the mean and 1 / sqrt(variance + epsilon) the
//    gradient needs) stand in for TensorFlow's three reserve spaces.
// Its gradient flows from y only, to x, scale and offset, and not to mean and
// variance: as TensorFlow's.
//
// layer_norm normalizes each row over the axes from begin_norm_axis on, with
// a scale and offset of those axes' shape: Keras's LayerNormalization over
// its default last axis (epsilon 1e-3), or tf.contrib's layer_norm with its
// begin_norm_axis. Its mean and inv_std outputs, which TensorFlow's layers do
// not return, are saved for the gradient, which flows from y only.
//
// batch_norm_layer is Keras's BatchNormalization (momentum 0.99, epsilon
// 1e-3): gamma and beta train; the moving mean and variance are non-trainable
// variables (the optimizers' default variable list leaves them out, since no
// loss depends on them), updated by assign_moving_average ops (ops/state.hpp)
// placed in the
// graph's update_ops collection, which a training step runs beside its train
// op (train_step_with_updates).
#pragma once
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"
#include "ops/state.hpp"

namespace actorflow {

struct ACTORFLOW_API batch_norm_options {
  double epsilon = 0.001;
  bool is_training = true;
  /// Training only: 1 gives the batch's statistics; below 1, their moving
  /// averages with the `mean` and `variance` inputs.
  double exponential_avg_factor = 1.0;
};

/// The outputs of fused_batch_norm.
struct ACTORFLOW_API batch_norm_outputs {
  output y;               ///< x's shape
  output batch_mean;      ///< [C]: the batch's mean (training) or `mean` (inference)
  output batch_variance;  ///< [C]: the batch's unbiased variance, or `variance`
  output saved_mean;      ///< [C]: the mean y was normalized with
  output saved_inv_std;   ///< [C]: 1 / sqrt(variance + epsilon) y was normalized with
};

/// x [..., C] float32 or float64; scale, offset [C] of x's dtype. mean and
/// variance [C] are read in inference mode and by training with
/// exponential_avg_factor < 1; otherwise they may be empty ([0]).
ACTORFLOW_API batch_norm_outputs fused_batch_norm(output x, output scale, output offset,
                                                  output mean, output variance,
                                                  const batch_norm_options& options = {},
                                                  const std::string& name = "");

/// The gradient of fused_batch_norm's y: dx, dscale, doffset from dy, x, scale
/// and the forward's saved_mean and saved_inv_std.
ACTORFLOW_API std::vector<output> fused_batch_norm_grad(output dy, output x, output scale,
                                                        output saved_mean, output saved_inv_std,
                                                        bool is_training,
                                                        const std::string& name = "");

/// The outputs of layer_norm.
struct ACTORFLOW_API layer_norm_outputs {
  output y;        ///< x's shape
  output mean;     ///< x's leading axes (those before begin_norm_axis)
  output inv_std;  ///< the same: 1 / sqrt(variance + epsilon) per row
};

/// x float32 or float64 of rank >= 1; scale and offset have the shape of x's
/// axes from begin_norm_axis (negative counts from the end) on.
ACTORFLOW_API layer_norm_outputs layer_norm(output x, output scale, output offset,
                                            double epsilon = 0.001, int64_t begin_norm_axis = -1,
                                            const std::string& name = "");

/// A convolution's filter [KH, KW, C, K] and bias [K] that compute what the
/// convolution followed by an inference-mode batch norm computes (the graph
/// optimizer's fold, for constant filters and statistics):
/// filter * s and offset - mean * s, with s = scale / sqrt(variance + epsilon)
/// per output channel. Throws for shapes or dtypes that do not match, or a
/// negative variance.
struct ACTORFLOW_API folded_filter {
  tensor filter, bias;
};
ACTORFLOW_API folded_filter fold_batch_norm_into_filter(const tensor& filter, const tensor& scale,
                                                        const tensor& offset, const tensor& mean,
                                                        const tensor& variance, double epsilon);

/// The graph collection a training step runs beside its train op.
inline constexpr const char* update_ops_collection = "update_ops";

/// The variables of one batch normalization layer.
struct ACTORFLOW_API batch_norm_layer_params {
  variable gamma, beta;                     ///< [C], trained; ones and zeros
  variable moving_mean, moving_variance;    ///< [C], not trained; zeros and ones
  double momentum = 0.99, epsilon = 0.001;  ///< Keras's defaults
  /// The variables an optimizer trains.
  std::vector<variable> trainable() const { return {gamma, beta}; }
  std::vector<variable> all() const { return {gamma, beta, moving_mean, moving_variance}; }
};

/// Makes a layer's variables, named <name>/gamma, <name>/beta,
/// <name>/moving_mean and <name>/moving_variance.
ACTORFLOW_API batch_norm_layer_params make_batch_norm_layer(graph& g, int64_t channels,
                                                            const std::string& name,
                                                            double momentum = 0.99,
                                                            double epsilon = 0.001,
                                                            dtype type = dtype::float32);

/// Applies the layer to x [..., C]. training: normalizes with the batch's
/// statistics and adds the moving averages' updates to the graph's
/// update_ops collection; otherwise normalizes with the moving averages. One
/// set of params may be applied in both modes (a training graph and an
/// evaluation graph over the same variables).
ACTORFLOW_API output batch_norm_layer(output x, const batch_norm_layer_params& params,
                                      bool training, const std::string& name = "");

/// The ops in the graph's update_ops collection and `train` grouped into one
/// op: a training step that also updates the moving averages. `train` alone
/// when the collection is empty.
ACTORFLOW_API operation train_step_with_updates(graph& g, operation train,
                                                const std::string& name = "train_with_updates");

}  // namespace actorflow
