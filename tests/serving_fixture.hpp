// A small trained model and its export, shared by the serving tests
// (test_serving: exports; test_serve: the server and its HTTP front end;
// test_serve_grpc: its gRPC front end).
#pragma once
#include <memory>
#include <string>

#include "actors/serving/export.hpp"
#include "actors/session.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"

namespace actorflow::testing {

// A softmax classifier of 4 features into 3 classes, trained a few steps
// (so its weights are not their initial values), with its serving outputs.
struct trained_classifier {
  graph g;
  output features, labels, logits, probabilities, classes;
  variable w, b;
  std::unique_ptr<session> s;

  explicit trained_classifier(const std::string& device = "", int steps = 5) {
    auto scope = g.device_scope(device);
    features = placeholder(g, dtype::float32, {-1, 4}, "features");
    labels = placeholder(g, dtype::int32, {-1}, "labels");
    w = make_variable(constant(g, tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -0.1f,
                                                              0.2f, 0.2f, -0.3f, 0.4f, 0.1f, -0.5f},
                                                             {4, 3})),
                      "w");
    b = make_variable(constant(g, tensor::from_vector<float>({0.f, 0.1f, -0.1f}, {3})), "b");
    logits = add(matmul(features, w), b, "logits");
    probabilities = softmax(logits, "probabilities");
    classes = argmax(logits, 1, "classes");
    auto loss = reduce_mean(sparse_softmax_cross_entropy_with_logits(logits, labels).loss);
    auto train = sgd(0.5).minimize(loss);
    s = std::make_unique<session>(g);
    s->run({global_variables_initializer(g)});
    for (int i = 0; i < steps; ++i)
      s->run({{features, batch()}, {labels, batch_labels()}}, {}, {train});
  }

  static tensor batch() {
    return tensor::from_vector<float>({1, 0, 0, 1, 0, 1, 1, 0, 0.5f, 0.5f, 0, 1}, {3, 4});
  }
  static tensor batch_labels() { return tensor::from_vector<int32_t>({0, 1, 2}, {3}); }

  export_signature signature() {
    return {.inputs = {{"features", features}},
            .outputs = {{"probabilities", probabilities}, {"classes", classes}}};
  }
};

/// Exports a classifier trained `steps` steps into `dir`; different step
/// counts give different weights (versions that answer differently).
inline void export_trained(const std::string& dir, int steps = 5) {
  trained_classifier m("", steps);
  export_model(*m.s, dir, {m.signature()});
}

}  // namespace actorflow::testing
