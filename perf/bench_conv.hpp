// The conv group (`actorflow-bench --only conv`): conv2d and its two
// backprops per layer shape of the Fashion-MNIST CNN and of the paper's
// Table 1 convnets, each kernel alone (run_kernel on this thread, its work
// split across the default TBB arena), and beside each oneDNN's convolution
// primitive where the build has oneDNN (perf/bench_conv_onednn.hpp).
#pragma once
#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

/// conv_<layer>_<fwd|bwd_input|bwd_filter>_gflops for each layer shape.
void add_conv_rows(const add_row_fn& add_row);

}  // namespace actorflow::bench
