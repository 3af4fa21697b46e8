// GPU kernels of identity and stop_gradient (ops/state.cpp): the input itself,
// relabelled (glue.hpp's relabel).
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "identity", .types = all_types, .kernel = relabel}),
    gpu_kernel_registrar({.op = "stop_gradient", .types = all_types, .kernel = relabel}),
};

}  // namespace

}  // namespace actorflow::gpu
