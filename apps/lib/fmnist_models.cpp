#include "apps/lib/fmnist_models.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "apps/lib/image_models.hpp"
#include "ops/array.hpp"
#include "ops/conv.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/pool.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"

namespace actorflow::models {

namespace {

// The operands of a product in the model's precision, and its result back in float32.
output lowered(output x, precision p) {
  return p == precision::bf16 ? cast(x, dtype::bfloat16) : x;
}
output raised(output y) { return y.spec().type == dtype::float32 ? y : cast(y, dtype::float32); }

output dense(output x, const std::pair<variable, variable>& w, precision p) {
  return bias_add(raised(matmul(lowered(x, p), lowered(w.first.value(), p))), w.second.value());
}

// Multiply-adds per example of each layer, for splitting a model over devices.
constexpr int64_t mlp_layer_macs[] = {784 * 512, 512 * 512, 512 * 10};
constexpr int64_t cnn_layer_macs[] = {28 * 28 * 25 * 32, 14 * 14 * 25 * 32 * 64, 3136 * 1024,
                                      1024 * 10};

class mlp final : public classifier {
 public:
  mlp(graph& g, int64_t seed, const std::vector<std::string>& devices, precision p) {
    seed_ = seed;
    precision_ = p;
    split_layers(devices, mlp_layer_macs);
    auto layer = [&](int i, int64_t in, int64_t out) {
      auto on = on_layer_device(g, i);
      return dense_params(g, in, out, "fc" + std::to_string(i + 1));
    };
    l1_ = layer(0, 784, 512);
    l2_ = layer(1, 512, 512);
    l3_ = layer(2, 512, 10);
  }
  output logits(output images) const override {
    graph& g = images.owner();
    output x;
    {
      auto on = on_layer_device(g, 0);
      x = relu(dense(reshape(images, {-1, 784}), l1_, precision_));
    }
    {
      auto on = on_layer_device(g, 1);
      x = relu(dense(x, l2_, precision_));
    }
    auto on = on_layer_device(g, 2);
    return dense(x, l3_, precision_);
  }

 private:
  std::pair<variable, variable> l1_, l2_, l3_;
};

class cnn final : public classifier {
 public:
  cnn(graph& g, int64_t seed, const std::vector<std::string>& devices, precision p) {
    seed_ = seed;
    precision_ = p;
    split_layers(devices, cnn_layer_macs);
    {
      auto on = on_layer_device(g, 0);
      c1_ = conv_params(g, 5, 1, 32, "conv1");
    }
    {
      auto on = on_layer_device(g, 1);
      c2_ = conv_params(g, 5, 32, 64, "conv2");
    }
    {
      auto on = on_layer_device(g, 2);
      f1_ = dense_params(g, 7 * 7 * 64, 1024, "fc1");
    }
    auto on = on_layer_device(g, 3);
    f2_ = dense_params(g, 1024, 10, "fc2");
  }
  output logits(output images) const override {
    graph& g = images.owner();
    output x;
    {
      auto on = on_layer_device(g, 0);
      x = conv_block(images, c1_, precision_);
    }
    {
      auto on = on_layer_device(g, 1);
      x = conv_block(x, c2_, precision_);
    }
    {
      auto on = on_layer_device(g, 2);
      x = relu(dense(reshape(x, {-1, 7 * 7 * 64}), f1_, precision_));
    }
    auto on = on_layer_device(g, 3);
    return dense(x, f2_, precision_);
  }

 private:
  static output conv_block(output x, const std::pair<variable, variable>& w, precision p) {
    auto conv = raised(conv2d(lowered(x, p), lowered(w.first.value(), p), {1, 1}, "SAME"));
    auto y = relu(bias_add(conv, w.second.value()));
    return max_pool(y, {2, 2}, {2, 2}, "VALID");
  }
  std::pair<variable, variable> c1_, c2_, f1_, f2_;
};

// ResNet-50 or Inception-v3 on Fashion-MNIST (see make_classifier).
class image_classifier final : public classifier {
 public:
  image_classifier(graph& g, const std::string& kind, int64_t seed,
                   const std::vector<std::string>& devices, precision p)
      : factor_(kind == "resnet50" ? 2 : 3) {
    if (p != precision::fp32)
      fail("model", "precision bf16 is for the mlp and the cnn, not " + kind);
    if (!devices.empty()) device_ = devices[0];
    model_ = make_image_model(kind, {.image_size = 28 * factor_,
                                     .channels = 1,
                                     .classes = 10,
                                     .seed = seed,
                                     .aux_logits = false});
    // The variables are made now, as the other classifiers make theirs (an
    // export or a checkpoint may ask for them before any logits): by an
    // inference pass over a placeholder, which no step runs.
    auto probe = placeholder(g, dtype::float32, {-1, 28, 28, 1}, "image_model_variables");
    apply(probe, false);
    variables_ = model_->variables();
  }
  output logits(output images) const override { return apply(images, false); }
  output training_logits(output images) const override { return apply(images, true); }

 private:
  output apply(output images, bool training) const {
    graph& g = images.owner();
    std::optional<graph::scope_guard> on;
    if (!device_.empty()) on.emplace(g.device_scope(device_));
    return model_->apply(enlarged(images), training).logits;
  }
  // Each pixel repeated factor x factor times.
  output enlarged(output images) const {
    const int64_t f = factor_;
    auto x = tile(reshape(images, {-1, 28, 1, 28, 1, 1}), {1, 1, f, 1, f, 1});
    return reshape(x, {-1, 28 * f, 28 * f, 1});
  }
  int64_t factor_;
  std::string device_;
  std::unique_ptr<image_model> model_;
};

}  // namespace

int64_t classifier::next_stream() { return ++stream_; }

void classifier::split_layers(const std::vector<std::string>& devices,
                              std::span<const int64_t> layer_macs) {
  layer_devices_.assign(layer_macs.size(), "");
  if (devices.empty()) return;
  int64_t total = 0;
  for (int64_t m : layer_macs) total += m;
  // A layer goes to the device whose equal share of the work its first
  // multiply-add falls in.
  int64_t before = 0;
  for (size_t i = 0; i < layer_macs.size(); ++i) {
    size_t d = static_cast<size_t>(before * int64_t(devices.size()) / total);
    layer_devices_[i] = devices[std::min(d, devices.size() - 1)];
    before += layer_macs[i];
  }
}

graph::scope_guard classifier::on_layer_device(graph& g, size_t layer) const {
  const std::string& device = layer < layer_devices_.size() ? layer_devices_[layer] : "";
  if (device.empty()) return graph::scope_guard(std::function<void()>());
  return g.device_scope(device);
}

std::pair<variable, variable> classifier::layer_params(graph& g, shape weight_dims, int64_t fan_in,
                                                       const std::string& name) {
  double bound = 1.0 / std::sqrt(double(fan_in));
  int64_t out = weight_dims[weight_dims.rank() - 1];
  auto w = make_variable(
      random_uniform(g, weight_dims, dtype::float32, -bound, bound, seed_, next_stream()),
      name + "/w");
  auto b = make_variable(
      random_uniform(g, {out}, dtype::float32, -bound, bound, seed_, next_stream()), name + "/b");
  variables_.push_back(w);
  variables_.push_back(b);
  return {w, b};
}

std::pair<variable, variable> classifier::dense_params(graph& g, int64_t in, int64_t out,
                                                       const std::string& name) {
  return layer_params(g, {in, out}, in, name);
}

std::pair<variable, variable> classifier::conv_params(graph& g, int64_t k, int64_t in, int64_t out,
                                                      const std::string& name) {
  return layer_params(g, {k, k, in, out}, k * k * in, name);
}

precision parse_precision(const std::string& name) {
  if (name == "fp32") return precision::fp32;
  if (name == "bf16") return precision::bf16;
  fail("model", "unknown precision '" + name + "' (choose fp32 or bf16)");
}

std::unique_ptr<classifier> make_classifier(graph& g, const std::string& kind, int64_t seed,
                                            const std::vector<std::string>& devices, precision p) {
  if (kind == "mlp") return std::make_unique<mlp>(g, seed, devices, p);
  if (kind == "cnn") return std::make_unique<cnn>(g, seed, devices, p);
  if (kind == "resnet50" || kind == "inception_v3")
    return std::make_unique<image_classifier>(g, kind, seed, devices, p);
  fail("model", "unknown model '" + kind + "' (choose mlp, cnn, resnet50 or inception_v3)");
}

output mean_cross_entropy(output logits, output labels) {
  return reduce_mean(sparse_softmax_cross_entropy_with_logits(logits, labels).loss, {}, false,
                     "loss");
}

double test_accuracy(session& s, output predictions, output images, const dataset& test) {
  int64_t correct = 0;
  for (int64_t b = 0; b < test.batches_per_epoch(); ++b) {
    auto batch = test.batch({0, b});
    auto pred = s.eval(predictions, {{images, batch[0]}});
    const int64_t* p = pred.data<int64_t>();
    const int32_t* labels = batch[1].data<int32_t>();
    for (int64_t i = 0; i < batch[1].num_elements(); ++i) correct += p[i] == labels[i];
  }
  return double(correct) / double(test.num_examples());
}

}  // namespace actorflow::models
