// The paper's Table 1 convnets (apps/lib/convnets.hpp): each builds with the
// layers its benchmark defines and trains: one SGD step from the same batch
// lowers the loss.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "actors/session.hpp"
#include "apps/lib/convnets.hpp"
#include "core/error.hpp"
#include "ops/train.hpp"

namespace actorflow::models {

namespace {

int64_t parameter_count(const convnet& net) {
  int64_t n = 0;
  for (const auto& v : net.variables) n += v.value().dims().num_elements();
  return n;
}

}  // namespace

TEST_CASE("each Table 1 convnet has its benchmark's layers and learns from a batch") {
  // Weights and biases per layer, and the parameter counts of the benchmark
  // definitions (AlexNet without LRN or groups: 61.1M; VGG-A: 132.9M).
  struct expected {
    const char* name;
    size_t variables;
    int64_t parameters;
  };
  for (auto e : {expected{"alexnet", 16, 61100840}, expected{"overfeat", 16, 145920872},
                 expected{"vgg_a", 22, 132863336}, expected{"googlenet", 116, 6998552}}) {
    CAPTURE(e.name);
    graph g;
    auto net = make_convnet(g, e.name, 2);
    CHECK(net.variables.size() == e.variables);
    CHECK(parameter_count(net) == e.parameters);
    operation train = sgd(0.001).minimize(net.loss);
    session s(g);
    s.run({global_variables_initializer(g)});
    tensor images(dtype::float32, {2, net.image_size, net.image_size, 3});
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> pixel(0, 1);
    for (int64_t i = 0; i < images.num_elements(); ++i)
      images.mutable_data<float>()[i] = pixel(rng);
    tensor labels(dtype::int32, {2});
    labels.mutable_data<int32_t>()[0] = 7;
    labels.mutable_data<int32_t>()[1] = 993;
    feed_list feeds{{net.images, images}, {net.labels, labels}};
    float before = s.run(feeds, {net.loss}, {train})[0].item<float>();
    float after = s.run(feeds, {net.loss})[0].item<float>();
    CHECK(std::isfinite(before));
    CHECK(after < before);
  }
}

TEST_CASE("make_convnet names the models it knows") {
  graph g;
  try {
    make_convnet(g, "resnet", 1);
    FAIL("no error");
  } catch (const error& e) {
    CHECK(e.code() == error_code::invalid_argument);
    CHECK(std::string(e.what()).find("alexnet, overfeat, vgg_a or googlenet") != std::string::npos);
  }
}

}  // namespace actorflow::models
