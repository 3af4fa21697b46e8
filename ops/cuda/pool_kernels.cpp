// GPU kernels of the pooling ops (ops/pool.cpp): max_pool, avg_pool and their
// gradients, with the CPU's window geometry (ops/geometry/conv_window.hpp;
// device code in pool.cu).
#include "ops/cuda/glue.hpp"
#include "ops/geometry/conv_window.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

pool_geometry pool_geometry_of(const gpu_kernel_context& ctx, const shape& in) {
  auto k = conv_detail::spatial_pair(ctx.attrs, "ksize", ctx.op);
  auto g = conv_detail::make_geometry(in, k[0], k[1], ctx.attrs, "strides", ctx.op, "ksize");
  return {g.n, g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw, g.oh, g.ow, g.pad_top, g.pad_left};
}

template <bool is_max>
void pool_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  device_tensor& y = ctx.allocate_output(0);
  pool_forward(is_max, x.type(), x.raw_data(), y.raw_mutable_data(),
               pool_geometry_of(ctx, x.dims()), stream_of(ctx));
}

void max_pool_grad_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const device_tensor& dy = ctx.input(2);
  device_tensor& dx = ctx.allocate_output(0);
  max_pool_backward(x.type(), x.raw_data(), dy.raw_data(), dx.raw_mutable_data(),
                    pool_geometry_of(ctx, x.dims()), stream_of(ctx));
}

void avg_pool_grad_kernel(gpu_kernel_context& ctx) {
  const device_tensor& dy = ctx.input(1);
  device_tensor& dx = ctx.allocate_output(0);
  avg_pool_backward(dy.type(), dy.raw_data(), dx.raw_mutable_data(),
                    pool_geometry_of(ctx, dx.dims()), stream_of(ctx));
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "max_pool", .types = float_types, .kernel = pool_kernel<true>}),
    gpu_kernel_registrar({.op = "avg_pool", .types = float_types, .kernel = pool_kernel<false>}),
    gpu_kernel_registrar(
        {.op = "max_pool_grad", .types = float_types, .kernel = max_pool_grad_kernel}),
    gpu_kernel_registrar({.op = "avg_pool_grad",
                          .types = float_types,
                          .type_input = 1,
                          .kernel = avg_pool_grad_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
