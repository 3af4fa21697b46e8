#include "apps/lib/convnets.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ops/array.hpp"
#include "ops/conv.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/pool.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/train.hpp"

namespace actorflow::models {

namespace {

constexpr int64_t classes = 1000;

// Adds layers to one model: parameters with He initialization (each from its
// own seed), biases at zero.
class layer_builder {
 public:
  layer_builder(graph& g, int64_t seed, convnet& net) : g_(g), seed_(seed), net_(net) {}

  output conv(output x, int64_t k, int64_t out, int64_t stride = 1,
              const std::string& padding = "SAME") {
    const int64_t in = x.spec().dims[3];
    auto w = param(he_normal(g_, {k, k, in, out}, ++seed_), "w");
    auto b = param(fill(g_, {out}, 0.0), "b");
    return relu(bias_add(conv2d(x, w, {stride, stride}, padding), b));
  }
  output dense(output x, int64_t out, bool with_relu = true) {
    const int64_t in = x.spec().dims[1];
    auto w = param(he_normal(g_, {in, out}, ++seed_), "w");
    auto b = param(fill(g_, {out}, 0.0), "b");
    auto y = bias_add(matmul(x, w), b);
    return with_relu ? relu(y) : y;
  }
  output flatten(output x) {
    const auto& d = x.spec().dims;
    return reshape(x, {-1, d[1] * d[2] * d[3]});
  }

 private:
  output param(output initial, const std::string& what) {
    auto v =
        make_variable(initial, "layer" + std::to_string(net_.variables.size() / 2) + "/" + what);
    net_.variables.push_back(v);
    return v.value();
  }
  graph& g_;
  int64_t seed_;
  convnet& net_;
};

output pool(output x, int64_t k, int64_t s, const std::string& padding = "VALID") {
  return max_pool(x, {k, k}, {s, s}, padding);
}

output alexnet(layer_builder& l, output x) {
  x = pool(l.conv(x, 11, 64, 4), 3, 2);
  x = pool(l.conv(x, 5, 192), 3, 2);
  x = l.conv(l.conv(l.conv(x, 3, 384), 3, 256), 3, 256);
  x = l.flatten(pool(x, 3, 2));
  return l.dense(l.dense(l.dense(x, 4096), 4096), classes, false);
}

output overfeat(layer_builder& l, output x) {
  x = pool(l.conv(x, 11, 96, 4, "VALID"), 2, 2);
  x = pool(l.conv(x, 5, 256, 1, "VALID"), 2, 2);
  x = l.conv(l.conv(l.conv(x, 3, 512), 3, 1024), 3, 1024);
  x = l.flatten(pool(x, 2, 2));
  return l.dense(l.dense(l.dense(x, 3072), 4096), classes, false);
}

output vgg_a(layer_builder& l, output x) {
  for (auto [channels, convs] : {std::pair{64, 1}, {128, 1}, {256, 2}, {512, 2}, {512, 2}}) {
    for (int i = 0; i < convs; ++i) x = l.conv(x, 3, channels);
    x = pool(x, 2, 2);
  }
  x = l.flatten(x);
  return l.dense(l.dense(l.dense(x, 4096), 4096), classes, false);
}

struct inception_sizes {
  int64_t one, three_reduce, three, five_reduce, five, pool_proj;
};

output inception(layer_builder& l, output x, const inception_sizes& s) {
  auto b1 = l.conv(x, 1, s.one);
  auto b3 = l.conv(l.conv(x, 1, s.three_reduce), 3, s.three);
  auto b5 = l.conv(l.conv(x, 1, s.five_reduce), 5, s.five);
  auto bp = l.conv(pool(x, 3, 1, "SAME"), 1, s.pool_proj);
  return concat({b1, b3, b5, bp}, 3);
}

output googlenet(layer_builder& l, output x) {
  x = pool(l.conv(x, 7, 64, 2), 3, 2, "SAME");
  x = pool(l.conv(l.conv(x, 1, 64), 3, 192), 3, 2, "SAME");
  x = inception(l, x, {64, 96, 128, 16, 32, 32});
  x = inception(l, x, {128, 128, 192, 32, 96, 64});
  x = pool(x, 3, 2, "SAME");
  x = inception(l, x, {192, 96, 208, 16, 48, 64});
  x = inception(l, x, {160, 112, 224, 24, 64, 64});
  x = inception(l, x, {128, 128, 256, 24, 64, 64});
  x = inception(l, x, {112, 144, 288, 32, 64, 64});
  x = inception(l, x, {256, 160, 320, 32, 128, 128});
  x = pool(x, 3, 2, "SAME");
  x = inception(l, x, {256, 160, 320, 32, 128, 128});
  x = inception(l, x, {384, 192, 384, 48, 128, 128});
  x = l.flatten(avg_pool(x, {7, 7}, {1, 1}, "VALID"));
  return l.dense(x, classes, false);
}

}  // namespace

const std::vector<std::string>& convnet_names() {
  static const std::vector<std::string> names{"alexnet", "overfeat", "vgg_a", "googlenet"};
  return names;
}

convnet make_convnet(graph& g, const std::string& name, int64_t batch, int64_t seed) {
  convnet net;
  net.image_size = name == "overfeat" ? 231 : 224;
  if (std::find(convnet_names().begin(), convnet_names().end(), name) == convnet_names().end())
    fail(error_code::invalid_argument, "make_convnet",
         "unknown model '" + name + "': alexnet, overfeat, vgg_a or googlenet");
  net.images = placeholder(g, dtype::float32, {batch, net.image_size, net.image_size, 3}, "images");
  net.labels = placeholder(g, dtype::int32, {batch}, "labels");
  layer_builder l(g, seed, net);
  output logits = name == "alexnet"    ? alexnet(l, net.images)
                  : name == "overfeat" ? overfeat(l, net.images)
                  : name == "vgg_a"    ? vgg_a(l, net.images)
                                       : googlenet(l, net.images);
  net.loss = reduce_mean(sparse_softmax_cross_entropy_with_logits(logits, net.labels).loss, {},
                         false, "loss");
  return net;
}

}  // namespace actorflow::models
