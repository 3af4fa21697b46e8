// The paper's Table 1 convnets, as the convnet benchmarks it cites define
// them (NHWC, float32, SAME/VALID as there, ReLU after every convolution and
// hidden dense layer, softmax cross-entropy over 1000 classes):
//   alexnet:   224x224x3; conv 11x11/4 64 SAME, pool 3/2, conv 5x5 192, pool 3/2,
//              conv 3x3 384, 3x3 256, 3x3 256, pool 3/2, fc 4096, 4096, 1000;
//   overfeat:  231x231x3 (the fast model); conv 11x11/4 96 VALID, pool 2/2,
//              conv 5x5 256 VALID, pool 2/2, conv 3x3 512, 1024, 1024, pool 2/2,
//              fc 3072, 4096, 1000;
//   vgg_a:     224x224x3, VGG's model A (11 layers): conv 3x3 64, pool, 128, pool,
//              256, 256, pool, 512, 512, pool, 512, 512, pool, fc 4096, 4096, 1000;
//   googlenet: 224x224x3, GoogLeNet v1: conv 7x7/2 64, pool 3/2, conv 1x1 64,
//              3x3 192, pool 3/2, inception 3a 3b, pool, 4a-4e, pool, 5a 5b, avg
//              pool 7x7, fc 1000; an inception module concatenates 1x1, 1x1->3x3,
//              1x1->5x5 and pool 3x3/1 -> 1x1 branches along channels.
// Pools are max pools with VALID padding (SAME in GoogLeNet). Built with the
// public API only; perf/torch_convnets.py holds the same layers in PyTorch.
#pragma once
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "ops/state.hpp"

namespace actorflow::models {

struct convnet {
  output images;  // [batch, size, size, 3] float32 placeholder
  output labels;  // [batch] int32 placeholder, classes in [0, 1000)
  output loss;    // mean cross-entropy
  std::vector<variable> variables;
  int64_t image_size = 0;
};

/// "alexnet", "overfeat", "vgg_a" or "googlenet"; throws naming the choices otherwise.
convnet make_convnet(graph& g, const std::string& name, int64_t batch, int64_t seed = 1);

/// The names make_convnet takes.
const std::vector<std::string>& convnet_names();

}  // namespace actorflow::models
