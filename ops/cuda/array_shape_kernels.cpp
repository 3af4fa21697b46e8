// GPU kernels of the shape ops (ops/array_shape.cpp): the reshapes, which only
// relabel the buffer, and transpose, a strided copy (array_util.cu's gather).
#include "ops/cuda/glue.hpp"
#include "ops/geometry/dims.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

void transpose_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  auto perm = ctx.attr_or<std::vector<int64_t>>("perm", {});
  if (perm.empty())
    for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  const auto in_strides = detail::dense_strides(x.dims().dims());
  std::vector<int64_t> strides;
  for (auto p : perm) strides.push_back(in_strides[static_cast<size_t>(p)]);
  device_tensor& y = ctx.allocate_output(0);
  gather(dtype_size(x.type()), x.raw_data(), y.raw_mutable_data(),
         strided_plan(y.dims().dims(), strides, ctx.op), y.num_elements(), stream_of(ctx));
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "reshape", .types = all_types, .kernel = relabel}),
    gpu_kernel_registrar({.op = "reshape_like", .types = all_types, .kernel = relabel}),
    gpu_kernel_registrar({.op = "expand_dims", .types = all_types, .kernel = relabel}),
    gpu_kernel_registrar({.op = "squeeze", .types = all_types, .kernel = relabel}),
    gpu_kernel_registrar({.op = "transpose", .types = all_types, .kernel = transpose_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
