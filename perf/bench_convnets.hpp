// The convnets group (`actorflow-bench --only convnets`): the paper's Table 1
// on this CPU. Each model of apps/lib/convnets.hpp at batch 16, one step =
// forward + backward + SGD update on random data, beside the same layers in
// PyTorch (perf/torch_convnets.py) in the same run; and ResNet-50 and
// Inception-v3 beside torchvision's.
#pragma once
#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

/// <model>_step_ms and torch_<model>_step_ms for alexnet, overfeat, vgg_a,
/// googlenet, then the image models' rows.
void add_convnet_rows(const add_row_fn& add_row, bool with_torch);

/// resnet50_step_ms and inception_v3_step_ms (apps/lib/image_models.hpp:
/// batch normalization, training mode) beside torchvision's models
/// (torch_resnet50_step_ms, torch_inception_v3_step_ms), at image sizes
/// that keep the group in minutes on 2 cores (bench_convnets.cpp says which).
void add_image_model_rows(const add_row_fn& add_row, bool with_torch);

}  // namespace actorflow::bench
