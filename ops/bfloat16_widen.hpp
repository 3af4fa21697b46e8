// bfloat16 kernels by way of float32, for the few ops on the gradient paths
// of matmul and conv2d that have no bfloat16 code of their own (the gradient
// driver's sum of several gradients, the sum over broadcast batch dims): the
// inputs widen to float32 (exact), the float32 kernel runs, and each float32
// output rounds to bfloat16 once, as TensorFlow's CPU kernels compute.
#pragma once
#include <cstdint>

#include "core/op_registry.hpp"

namespace actorflow {

/// Runs `float_kernel` with ctx's bfloat16 inputs widened to float32 (the
/// first `widen` of them: inputs read only for their shape stay as they are),
/// then rounds its float32 outputs to bfloat16.
void run_widened_to_float32(kernel_context& ctx, const kernel_fn& float_kernel,
                            size_t widen = SIZE_MAX);

}  // namespace actorflow
