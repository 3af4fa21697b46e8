// The image models users reach for first, with batch normalization after
// every convolution (ops/normalization.hpp), NHWC, float32, built from the
// public API:
//   resnet50:     ResNet-50 v1.5 as torchvision defines it: a 7x7/2 stem,
//                 a 3x3/2 max pool, bottleneck stages of 3, 4, 6 and 3
//                 blocks (64, 128, 256, 512 wide, 4x expansion; the stride
//                 on the 3x3 convolution: v1.5), global average pool, fc.
//                 Batch norm epsilon 1e-5, momentum 0.9 (PyTorch's 0.1).
//   inception_v3: Inception-v3 as in "Rethinking the Inception Architecture"
//                 (Szegedy et al. 2016), torchvision's layers and names:
//                 the stem, Mixed_5b-5d (A), 6a (B), 6b-6e (C, factorized
//                 7x7), 7a (D), 7b-7c (E), global average pool, dropout 0.5,
//                 fc; and the auxiliary head on Mixed_6e's output, trained
//                 with weight 0.4 (as TF-slim trains it) and not part of
//                 inference. Batch norm epsilon 1e-3, momentum 0.9.
// Padding follows torchvision's symmetric padding: a stride-2 convolution or
// pool with padding pads explicitly and runs VALID; stride 1 uses SAME,
// which is the same for odd kernels. One deliberate difference: the average
// pools of Inception's branches (3x3, stride 1, padding 1) use TensorFlow's
// avg_pool, which leaves the padding out of each window's count where
// torchvision counts it.
//
// Each model records its layers (torchvision's module names, NHWC output
// shapes and trainable parameter counts) as it builds, for the checks
// against torchvision (tests/test_image_models.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "ops/state.hpp"

namespace actorflow::models {

struct image_model_options {
  int64_t image_size = 224;  ///< square images
  int64_t channels = 3;      ///< the images' channels
  int64_t classes = 1000;
  int64_t seed = 1;
  /// Inception-v3's auxiliary head in training; it needs 299-pixel images.
  bool aux_logits = true;
};

/// One recorded layer: torchvision's module name, its output's NHWC shape,
/// and its trainable parameters (weights, batch norm's gamma and beta).
struct layer_record {
  std::string name;
  shape output;
  int64_t params = 0;
};

/// An image model's heads for one batch of images.
struct image_heads {
  output logits;      ///< [batch, classes]
  output aux_logits;  ///< Inception-v3 in training with its auxiliary head; else invalid
};

class image_model {
 public:
  virtual ~image_model() = default;
  /// The model on images [batch, size, size, channels]. Training mode
  /// normalizes with each batch's statistics and adds the moving averages'
  /// updates to the graph's update_ops collection (run them with
  /// train_step_with_updates); inference uses the moving averages. The
  /// first call makes the variables; later calls share them.
  image_heads apply(output images, bool training);
  /// Every variable: the trained ones and batch norm's moving averages.
  const std::vector<variable>& variables() const { return variables_; }
  /// The variables an optimizer trains (not the moving averages).
  const std::vector<variable>& trainable_variables() const { return trainable_; }
  /// The layers of the first apply.
  const std::vector<layer_record>& layers() const { return layers_; }
  const image_model_options& options() const { return options_; }

 protected:
  explicit image_model(image_model_options o) : options_(o) {}
  friend class image_layers;
  virtual image_heads build(class image_layers& l, output images) = 0;

 private:
  image_model_options options_;
  std::vector<variable> variables_, trainable_;
  std::vector<layer_record> layers_;
  size_t next_variable_ = 0;  // the next variable a later apply takes
  bool built_ = false;
};

/// "resnet50" or "inception_v3"; throws naming the choices otherwise.
std::unique_ptr<image_model> make_image_model(const std::string& name,
                                              const image_model_options& options = {});

/// The names make_image_model takes.
const std::vector<std::string>& image_model_names();

/// The training loss: the mean cross-entropy of the logits against int32
/// labels [batch], plus 0.4 times the auxiliary head's where there is one.
output image_model_loss(const image_heads& heads, output labels);

}  // namespace actorflow::models
