// GPU kernels of broadcast_to and broadcast_like (ops/array_broadcast.cpp):
// the input broadcast against the output shape by array_util.cu's gather.
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

void broadcast_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const shape& to = ctx.output_specs[0].dims;
  if (x.dims() == to) return ctx.set_output(0, x);
  auto plan = geometry::make_plan<2>({&x.dims(), &to}, ctx.op);
  device_tensor& y = ctx.allocate_output(0);
  gather(dtype_size(x.type()), x.raw_data(), y.raw_mutable_data(), to_index_plan(plan, ctx.op),
         plan.num_elements, stream_of(ctx));
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "broadcast_to", .types = all_types, .kernel = broadcast_kernel}),
    gpu_kernel_registrar({.op = "broadcast_like", .types = all_types, .kernel = broadcast_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
