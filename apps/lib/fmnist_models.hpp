// The two Fashion-MNIST models of the PyTorch reference
// (../shared/perf-ref/torch_fmnist.py), built as actorflow graphs:
//   mlp: 784-512-512-10 with ReLU;
//   cnn: conv5x5x32-pool-conv5x5x64-pool-fc1024-fc10 with ReLU, SAME padding.
// Used by actorflow-train and by the benchmarks.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actors/input/dataset.hpp"
#include "actors/session.hpp"
#include "core/graph.hpp"
#include "ops/state.hpp"

namespace actorflow::models {

/// The dtype of a model's products (matmul and conv2d). bf16 is mixed precision: the
/// weights, biases and optimizer slots stay float32 (master weights); each product casts its
/// two operands to bfloat16 and its result back to float32, so every other op, and the
/// gradients that reach the weights (through cast's gradient), are float32.
enum class precision { fp32, bf16 };

/// "fp32" or "bf16"; throws naming the choices otherwise.
precision parse_precision(const std::string& name);

/// A model's variables and the function from images to logits.
class classifier {
 public:
  virtual ~classifier() = default;
  /// Logits [batch, 10] for images [batch, 28, 28, 1] (float32 in [0, 1]),
  /// for inference (batch normalization on its moving averages).
  virtual output logits(output images) const = 0;
  /// The logits a training step computes: logits() but where batch
  /// normalization trains (the batch's statistics; the moving averages'
  /// updates go to the graph's update_ops collection, which
  /// train_step_with_updates runs with the step).
  virtual output training_logits(output images) const { return logits(images); }
  const std::vector<variable>& variables() const { return variables_; }

 protected:
  /// A [in, out] weight and [out] bias with PyTorch's default initialization
  /// (uniform in +-1/sqrt(fan_in)), so both systems start from the same distribution.
  std::pair<variable, variable> dense_params(graph& g, int64_t in, int64_t out,
                                             const std::string& name);
  std::pair<variable, variable> conv_params(graph& g, int64_t k, int64_t in, int64_t out,
                                            const std::string& name);
  /// A weight of `weight_dims` and a bias of its last dim, uniform in +-1/sqrt(fan_in).
  std::pair<variable, variable> layer_params(graph& g, shape weight_dims, int64_t fan_in,
                                             const std::string& name);
  /// Each initializer draws from its own stream of the model's seed.
  int64_t next_stream();
  /// Spreads the layers over `devices` in order, each device an about equal
  /// share of the multiply-adds (model parallelism); none: no device hints.
  void split_layers(const std::vector<std::string>& devices, std::span<const int64_t> layer_macs);
  /// A device scope for layer i's parameters and ops (none when unsplit).
  graph::scope_guard on_layer_device(graph& g, size_t layer) const;
  std::vector<std::string> layer_devices_;
  std::vector<variable> variables_;
  int64_t seed_ = 0;
  int64_t stream_ = 0;
  precision precision_ = precision::fp32;
};

/// "mlp", "cnn", "resnet50" or "inception_v3"; throws naming the choices
/// otherwise. The seed fixes the initial weights; `p` the products' dtype
/// (bf16: the MLP and the CNN only). With `devices` ("/cpu:0", "/cpu:1"),
/// the MLP's and the CNN's consecutive layers are placed on them, about
/// equal work each (the MLP: fc1 | fc2, fc3); an image model runs whole on
/// the first.
///
/// ResNet-50 and Inception-v3 (apps/lib/image_models.hpp) take the
/// Fashion-MNIST images enlarged in the graph by repeating each pixel
/// (nearest neighbour): 2x to 56x56 for ResNet-50 (its last stage then sees
/// 2x2), 3x to 84x84 for Inception-v3 (its smallest input is 75); one
/// channel, 10 classes, and no auxiliary head (it needs 299 pixels). Real
/// data at sizes two cores train in minutes, where random images would say
/// nothing of whether the model learns.
std::unique_ptr<classifier> make_classifier(graph& g, const std::string& kind, int64_t seed,
                                            const std::vector<std::string>& devices = {},
                                            precision p = precision::fp32);

/// Mean sparse softmax cross-entropy of logits against int32 labels [batch].
output mean_cross_entropy(output logits, output labels);

/// The share of `test`'s examples (images, int32 labels) whose `predictions`
/// (int64 argmax, computed from placeholder `images`) match the label.
double test_accuracy(session& s, output predictions, output images, const dataset& test);

}  // namespace actorflow::models
