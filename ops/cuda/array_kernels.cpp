// GPU kernels of the array ops a training step uses: the reshapes (which only
// relabel the buffer), fills, broadcasting copies and transpose.
#include "ops/cuda/glue.hpp"
#include "ops/geometry/dims.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

// The same elements, seen with the shape the op's shape function gave.
void relabel(gpu_kernel_context& ctx) {
  ctx.set_output(0, ctx.input(0).reshaped(ctx.output_specs[0].dims));
}

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

// broadcast_to / broadcast_like: the input broadcast against the output shape.
void broadcast_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const shape& to = ctx.output_specs[0].dims;
  if (x.dims() == to) return ctx.set_output(0, x);
  auto plan = geometry::make_plan<2>({&x.dims(), &to}, ctx.op);
  device_tensor& y = ctx.allocate_output(0);
  gather(dtype_size(x.type()), x.raw_data(), y.raw_mutable_data(), to_index_plan(plan, ctx.op),
         plan.num_elements, stream_of(ctx));
}

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

gpu_kernel_def def(const char* op, gpu_kernel_fn fn) {
  return {.op = op, .types = all_types, .kernel = std::move(fn)};
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(def("reshape", relabel)),
    gpu_kernel_registrar(def("reshape_like", relabel)),
    gpu_kernel_registrar(def("expand_dims", relabel)),
    gpu_kernel_registrar(def("squeeze", relabel)),
    gpu_kernel_registrar(def("identity", relabel)),
    gpu_kernel_registrar(def("stop_gradient", relabel)),
    gpu_kernel_registrar(def("zeros_like", fill_with(0))),
    gpu_kernel_registrar(def("ones_like", fill_with(1))),
    gpu_kernel_registrar(def("fill", fill_kernel)),
    gpu_kernel_registrar(def("size", size_kernel)),
    gpu_kernel_registrar(def("broadcast_to", broadcast_kernel)),
    gpu_kernel_registrar(def("broadcast_like", broadcast_kernel)),
    gpu_kernel_registrar(def("transpose", transpose_kernel)),
};

}  // namespace

}  // namespace actorflow::gpu
