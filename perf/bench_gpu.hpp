// The GPU group (`actorflow-bench --only gpu`): actorflow on /gpu:0 beside
// PyTorch on the same GPU in the same run (the Python that holds PyTorch
// with CUDA: $ACTORFLOW_TORCH_PYTHON). The Fashion-MNIST MLP and CNN
// (batch 128), the LSTM language model (words/s, sampled and full softmax),
// and the paper's Table 1 convnets at its batch sizes, with TensorFlow's
// Titan X figures from the paper for context. Without a GPU each row is a
// failure that says why.
#pragma once
#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

using add_failure_fn = std::function<void(const std::string& key, const std::string& why)>;

void add_gpu_rows(const add_row_fn& add_row, const add_failure_fn& add_failure, bool with_torch);

}  // namespace actorflow::bench
