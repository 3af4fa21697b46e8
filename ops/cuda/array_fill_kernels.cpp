// GPU kernels of the fills (ops/array_fill.cpp): zeros_like, ones_like, fill
// and size, all array_util.cu's fill.
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

gpu_kernel_fn fill_with(double value) {
  return [value](gpu_kernel_context& ctx) {
    device_tensor& y = ctx.allocate_output(0);
    kernels::fill(y.type(), value, y.raw_mutable_data(), y.num_elements(), stream_of(ctx));
  };
}

void fill_kernel(gpu_kernel_context& ctx) {
  device_tensor& y = ctx.allocate_output(0);
  kernels::fill(y.type(), ctx.attr<double>("value"), y.raw_mutable_data(), y.num_elements(),
                stream_of(ctx));
}

void size_kernel(gpu_kernel_context& ctx) {
  device_tensor& y = ctx.allocate_output(0);
  kernels::fill(dtype::int64, static_cast<double>(ctx.input(0).num_elements()),
                y.raw_mutable_data(), 1, stream_of(ctx));
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "zeros_like", .types = all_types, .kernel = fill_with(0)}),
    gpu_kernel_registrar({.op = "ones_like", .types = all_types, .kernel = fill_with(1)}),
    gpu_kernel_registrar({.op = "fill", .types = all_types, .kernel = fill_kernel}),
    gpu_kernel_registrar({.op = "size", .types = all_types, .kernel = size_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
