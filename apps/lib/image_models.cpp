#include "apps/lib/image_models.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ops/array.hpp"
#include "ops/conv.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/normalization.hpp"
#include "ops/pool.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/train.hpp"

namespace actorflow::models {

// The layers one apply of a model adds: variables made on the first apply
// and taken in the same order by later ones, batch norm in the apply's
// mode, and the records of the first apply's blocks.
class image_layers {
 public:
  image_layers(image_model& m, graph& g, bool training) : m_(m), g_(g), training_(training) {}

  bool training() const { return training_; }
  graph& g() { return g_; }

  struct conv_spec {
    int64_t out, kh, kw;
    int64_t stride = 1;
    int64_t pad_h = -1, pad_w = -1;  // symmetric padding; -1: SAME (stride 1) or none
    double bn_epsilon = 1e-3;
    bool relu = true;
  };

  // Convolution without bias, batch norm, ReLU (torchvision's BasicConv2d).
  output conv_bn(output x, const conv_spec& s, const std::string& name) {
    const int64_t in = x.dims()[3];
    auto w = take_variable(
        [&] {
          return he_normal(g_, {s.kh, s.kw, in, s.out}, m_.options().seed + counter_);
        },
        name + "/weight", true);
    std::string padding = "SAME";
    if (s.pad_h >= 0) {
      padding = "VALID";
      if (s.pad_h > 0 || s.pad_w > 0) x = pad(x, {0, 0, s.pad_h, s.pad_h, s.pad_w, s.pad_w, 0, 0});
    } else if (s.stride != 1) {
      padding = "VALID";
    }
    auto y = conv2d(x, w, {s.stride, s.stride}, padding, name + "/conv");
    y = batch_norm(y, s.bn_epsilon, name + "/bn");
    return s.relu ? relu(y) : y;
  }

  output batch_norm(output x, double epsilon, const std::string& name) {
    batch_norm_layer_params p;
    const int64_t c = x.dims()[3];
    p.gamma = take_variable([&] { return fill(g_, {c}, 1.0); }, name + "/gamma", true);
    p.beta = take_variable([&] { return fill(g_, {c}, 0.0); }, name + "/beta", true);
    p.moving_mean = take_variable([&] { return fill(g_, {c}, 0.0); }, name + "/moving_mean", false);
    p.moving_variance =
        take_variable([&] { return fill(g_, {c}, 1.0); }, name + "/moving_variance", false);
    p.momentum = 0.9;
    p.epsilon = epsilon;
    return batch_norm_layer(x, p, training_, name);
  }

  // A fully connected layer [in] -> [out] with PyTorch's initialization.
  output dense(output x, int64_t out, const std::string& name) {
    const int64_t in = x.dims()[1];
    auto w = take_variable(
        [&] {
          return he_uniform(g_, {in, out}, m_.options().seed + counter_);
        },
        name + "/weight", true);
    auto b = take_variable([&] { return fill(g_, {out}, 0.0); }, name + "/bias", true);
    return bias_add(matmul(x, w), b, name);
  }

  // Global average pooling to [N, 1, 1, C], as torchvision's avgpool.
  output global_avg_pool(output x) { return reduce_mean(x, {1, 2}, true); }

  output max_pool_valid(output x, int64_t k, int64_t stride, int64_t pad_hw = 0) {
    if (pad_hw > 0) x = pad(x, {0, 0, pad_hw, pad_hw, pad_hw, pad_hw, 0, 0});
    return max_pool(x, {k, k}, {stride, stride}, "VALID");
  }

  // Records block `name` ending in `y`, with the parameters made since `mark`.
  void record(const std::string& name, output y, int64_t mark) {
    if (!m_.built_) m_.layers_.push_back({name, y.dims(), params_made() - mark});
  }
  int64_t params_made() const { return params_; }

 private:
  template <class F>
  variable take_variable(F&& initial, const std::string& name, bool trainable) {
    ++counter_;
    if (m_.built_) {
      if (m_.next_variable_ >= m_.variables_.size())
        fail("image_model", "a later apply made more variables than the first");
      return m_.variables_[m_.next_variable_++];
    }
    auto v = make_variable(initial(), name);
    m_.variables_.push_back(v);
    if (trainable) {
      m_.trainable_.push_back(v);
      params_ += v.dims().num_elements();
    }
    return v;
  }

  image_model& m_;
  graph& g_;
  bool training_;
  int64_t counter_ = 0;
  int64_t params_ = 0;
};

image_heads image_model::apply(output images, bool training) {
  auto& d = images.dims();
  if (d.rank() != 4 || d[1] != options_.image_size || d[2] != options_.image_size ||
      d[3] != options_.channels)
    fail(error_code::invalid_argument, "image_model",
         "expects images [batch, " + std::to_string(options_.image_size) + ", " +
             std::to_string(options_.image_size) + ", " + std::to_string(options_.channels) +
             "], got " + d.to_string());
  image_layers l(*this, images.owner(), training);
  next_variable_ = 0;
  auto heads = build(l, images);
  built_ = true;
  return heads;
}

namespace {

using conv_spec = image_layers::conv_spec;

// ---------------------------------------------------------------------------------------------
// ResNet-50 v1.5

constexpr double resnet_bn_epsilon = 1e-5;

conv_spec resnet_conv(int64_t out, int64_t k, int64_t stride = 1, bool relu = true) {
  conv_spec s{out, k, k, stride};
  // torchvision pads k / 2 on each side: SAME at stride 1, explicit at 2.
  if (stride != 1) s.pad_h = s.pad_w = k / 2;
  s.bn_epsilon = resnet_bn_epsilon;
  s.relu = relu;
  return s;
}

output bottleneck(image_layers& l, output x, int64_t planes, int64_t stride,
                  const std::string& name) {
  const int64_t mark = l.params_made();
  const int64_t out = planes * 4;
  auto y = l.conv_bn(x, resnet_conv(planes, 1), name + "/conv1");
  y = l.conv_bn(y, resnet_conv(planes, 3, stride), name + "/conv2");
  y = l.conv_bn(y, resnet_conv(out, 1, 1, false), name + "/conv3");
  output identity = x;
  if (stride != 1 || x.dims()[3] != out)
    identity = l.conv_bn(x, resnet_conv(out, 1, stride, false), name + "/downsample");
  y = relu(add(y, identity));
  l.record(name, y, mark);
  return y;
}

class resnet50 : public image_model {
 public:
  explicit resnet50(const image_model_options& o) : image_model(o) {}

 protected:
  image_heads build(image_layers& l, output x) override {
    int64_t mark = l.params_made();
    x = l.conv_bn(x, resnet_conv(64, 7, 2), "conv1");
    l.record("conv1", x, mark);
    x = l.max_pool_valid(x, 3, 2, 1);
    l.record("maxpool", x, l.params_made());
    const int64_t blocks[] = {3, 4, 6, 3};
    for (int stage = 0; stage < 4; ++stage)
      for (int64_t b = 0; b < blocks[stage]; ++b)
        x = bottleneck(l, x, 64 << stage, b == 0 && stage > 0 ? 2 : 1,
                       "layer" + std::to_string(stage + 1) + "." + std::to_string(b));
    x = l.global_avg_pool(x);
    l.record("avgpool", x, l.params_made());
    mark = l.params_made();
    auto logits = l.dense(reshape(x, {-1, x.dims()[3]}), options().classes, "fc");
    l.record("fc", logits, mark);
    return {logits, output()};
  }
};

// ---------------------------------------------------------------------------------------------
// Inception-v3

conv_spec basic(int64_t out, int64_t kh, int64_t kw, int64_t stride = 1) {
  return conv_spec{out, kh, kw, stride};
}
// Unpadded (torchvision's padding 0).
conv_spec valid(int64_t out, int64_t k, int64_t stride = 1) {
  conv_spec s{out, k, k, stride};
  s.pad_h = s.pad_w = 0;
  return s;
}

output avg_pool_3x3(output x) { return avg_pool(x, {3, 3}, {1, 1}, "SAME"); }

// A block whose branches are concatenated along channels, recorded under `name`.
template <class F>
output mixed(image_layers& l, const std::string& name, F&& branches) {
  const int64_t mark = l.params_made();
  auto y = concat(branches(), 3, name);
  l.record(name, y, mark);
  return y;
}

output inception_a(image_layers& l, output x, int64_t pool_features, const std::string& n) {
  return mixed(l, n, [&] {
    auto b1 = l.conv_bn(x, basic(64, 1, 1), n + "/branch1x1");
    auto b5 = l.conv_bn(l.conv_bn(x, basic(48, 1, 1), n + "/branch5x5_1"), basic(64, 5, 5),
                        n + "/branch5x5_2");
    auto b3 = l.conv_bn(x, basic(64, 1, 1), n + "/branch3x3dbl_1");
    b3 = l.conv_bn(b3, basic(96, 3, 3), n + "/branch3x3dbl_2");
    b3 = l.conv_bn(b3, basic(96, 3, 3), n + "/branch3x3dbl_3");
    auto bp = l.conv_bn(avg_pool_3x3(x), basic(pool_features, 1, 1), n + "/branch_pool");
    return std::vector<output>{b1, b5, b3, bp};
  });
}

output inception_b(image_layers& l, output x, const std::string& n) {
  return mixed(l, n, [&] {
    auto b3 = l.conv_bn(x, valid(384, 3, 2), n + "/branch3x3");
    auto bd = l.conv_bn(x, basic(64, 1, 1), n + "/branch3x3dbl_1");
    bd = l.conv_bn(bd, basic(96, 3, 3), n + "/branch3x3dbl_2");
    bd = l.conv_bn(bd, valid(96, 3, 2), n + "/branch3x3dbl_3");
    auto bp = l.max_pool_valid(x, 3, 2);
    return std::vector<output>{b3, bd, bp};
  });
}

output inception_c(image_layers& l, output x, int64_t c7, const std::string& n) {
  return mixed(l, n, [&] {
    auto b1 = l.conv_bn(x, basic(192, 1, 1), n + "/branch1x1");
    auto b7 = l.conv_bn(x, basic(c7, 1, 1), n + "/branch7x7_1");
    b7 = l.conv_bn(b7, basic(c7, 1, 7), n + "/branch7x7_2");
    b7 = l.conv_bn(b7, basic(192, 7, 1), n + "/branch7x7_3");
    auto bd = l.conv_bn(x, basic(c7, 1, 1), n + "/branch7x7dbl_1");
    bd = l.conv_bn(bd, basic(c7, 7, 1), n + "/branch7x7dbl_2");
    bd = l.conv_bn(bd, basic(c7, 1, 7), n + "/branch7x7dbl_3");
    bd = l.conv_bn(bd, basic(c7, 7, 1), n + "/branch7x7dbl_4");
    bd = l.conv_bn(bd, basic(192, 1, 7), n + "/branch7x7dbl_5");
    auto bp = l.conv_bn(avg_pool_3x3(x), basic(192, 1, 1), n + "/branch_pool");
    return std::vector<output>{b1, b7, bd, bp};
  });
}

output inception_d(image_layers& l, output x, const std::string& n) {
  return mixed(l, n, [&] {
    auto b3 = l.conv_bn(x, basic(192, 1, 1), n + "/branch3x3_1");
    b3 = l.conv_bn(b3, valid(320, 3, 2), n + "/branch3x3_2");
    auto b7 = l.conv_bn(x, basic(192, 1, 1), n + "/branch7x7x3_1");
    b7 = l.conv_bn(b7, basic(192, 1, 7), n + "/branch7x7x3_2");
    b7 = l.conv_bn(b7, basic(192, 7, 1), n + "/branch7x7x3_3");
    b7 = l.conv_bn(b7, valid(192, 3, 2), n + "/branch7x7x3_4");
    auto bp = l.max_pool_valid(x, 3, 2);
    return std::vector<output>{b3, b7, bp};
  });
}

output inception_e(image_layers& l, output x, const std::string& n) {
  return mixed(l, n, [&] {
    auto b1 = l.conv_bn(x, basic(320, 1, 1), n + "/branch1x1");
    auto b3 = l.conv_bn(x, basic(384, 1, 1), n + "/branch3x3_1");
    b3 = concat({l.conv_bn(b3, basic(384, 1, 3), n + "/branch3x3_2a"),
                 l.conv_bn(b3, basic(384, 3, 1), n + "/branch3x3_2b")},
                3);
    auto bd = l.conv_bn(x, basic(448, 1, 1), n + "/branch3x3dbl_1");
    bd = l.conv_bn(bd, basic(384, 3, 3), n + "/branch3x3dbl_2");
    bd = concat({l.conv_bn(bd, basic(384, 1, 3), n + "/branch3x3dbl_3a"),
                 l.conv_bn(bd, basic(384, 3, 1), n + "/branch3x3dbl_3b")},
                3);
    auto bp = l.conv_bn(avg_pool_3x3(x), basic(192, 1, 1), n + "/branch_pool");
    return std::vector<output>{b1, b3, bd, bp};
  });
}

// The auxiliary head: 5x5/3 average pool, 1x1 128, 5x5 768 (unpadded, to
// 1x1 at 299), global average pool, fc.
output inception_aux(image_layers& l, output x, int64_t classes) {
  const int64_t mark = l.params_made();
  auto y = avg_pool(x, {5, 5}, {3, 3}, "VALID");
  y = l.conv_bn(y, basic(128, 1, 1), "AuxLogits/conv0");
  y = l.conv_bn(y, valid(768, 5), "AuxLogits/conv1");
  y = l.global_avg_pool(y);
  auto logits = l.dense(reshape(y, {-1, 768}), classes, "AuxLogits/fc");
  l.record("AuxLogits", logits, mark);
  return logits;
}

class inception_v3 : public image_model {
 public:
  explicit inception_v3(const image_model_options& o) : image_model(o) {}

 protected:
  image_heads build(image_layers& l, output x) override {
    auto stem = [&](const std::string& name, const conv_spec& s) {
      const int64_t mark = l.params_made();
      x = l.conv_bn(x, s, name);
      l.record(name, x, mark);
    };
    auto pool = [&](const std::string& name) {
      x = l.max_pool_valid(x, 3, 2);
      l.record(name, x, l.params_made());
    };
    stem("Conv2d_1a_3x3", valid(32, 3, 2));
    stem("Conv2d_2a_3x3", valid(32, 3));
    stem("Conv2d_2b_3x3", basic(64, 3, 3));
    pool("maxpool1");
    stem("Conv2d_3b_1x1", basic(80, 1, 1));
    stem("Conv2d_4a_3x3", valid(192, 3));
    pool("maxpool2");
    x = inception_a(l, x, 32, "Mixed_5b");
    x = inception_a(l, x, 64, "Mixed_5c");
    x = inception_a(l, x, 64, "Mixed_5d");
    x = inception_b(l, x, "Mixed_6a");
    x = inception_c(l, x, 128, "Mixed_6b");
    x = inception_c(l, x, 160, "Mixed_6c");
    x = inception_c(l, x, 160, "Mixed_6d");
    x = inception_c(l, x, 192, "Mixed_6e");
    image_heads heads;
    // The head's variables are made on every first apply, so that a
    // training graph and an inference graph built in either order share
    // them; only training uses its output.
    if (options().aux_logits) {
      if (x.dims()[1] < 17)
        fail(error_code::invalid_argument, "inception_v3",
             "the auxiliary head needs images of at least 299 pixels (Mixed_6e's output at least "
             "17x17, as torchvision's), got " +
                 std::to_string(options().image_size) + "; or build without it (aux_logits false)");
      auto aux = inception_aux(l, x, options().classes);
      if (l.training()) heads.aux_logits = aux;
    }
    x = inception_d(l, x, "Mixed_7a");
    x = inception_e(l, x, "Mixed_7b");
    x = inception_e(l, x, "Mixed_7c");
    x = l.global_avg_pool(x);
    l.record("avgpool", x, l.params_made());
    x = reshape(x, {-1, 2048});
    if (l.training()) x = dropout(x, 0.5, global_step(l.g()).value(), options().seed);
    const int64_t mark = l.params_made();
    heads.logits = l.dense(x, options().classes, "fc");
    l.record("fc", heads.logits, mark);
    return heads;
  }
};

}  // namespace

const std::vector<std::string>& image_model_names() {
  static const std::vector<std::string> names{"resnet50", "inception_v3"};
  return names;
}

std::unique_ptr<image_model> make_image_model(const std::string& name,
                                              const image_model_options& options) {
  if (name == "resnet50") return std::make_unique<resnet50>(options);
  if (name == "inception_v3") return std::make_unique<inception_v3>(options);
  fail(error_code::invalid_argument, "make_image_model",
       "unknown model '" + name + "': resnet50 or inception_v3");
}

output image_model_loss(const image_heads& heads, output labels) {
  auto xent = [&](output logits) {
    return reduce_mean(sparse_softmax_cross_entropy_with_logits(logits, labels).loss);
  };
  auto loss = xent(heads.logits);
  if (heads.aux_logits.valid())
    loss = add(loss, mul(xent(heads.aux_logits), scalar<float>(labels.owner(), 0.4f)));
  return identity(loss, "loss");
}

}  // namespace actorflow::models
