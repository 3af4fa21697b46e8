// The convnets group (`actorflow-bench --only convnets`): the paper's Table 1
// on this CPU. Each model of apps/lib/convnets.hpp at batch 16, one step =
// forward + backward + SGD update on random data, beside the same layers in
// PyTorch (perf/torch_convnets.py) in the same run.
#pragma once
#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

/// <model>_step_ms and torch_<model>_step_ms for alexnet, overfeat, vgg_a, googlenet.
void add_convnet_rows(const add_row_fn& add_row, bool with_torch);

}  // namespace actorflow::bench
