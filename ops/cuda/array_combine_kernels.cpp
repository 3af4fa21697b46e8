// GPU kernels of the ops that cut and join tensors (ops/array_combine.cpp):
// concat, split, slice and pad, each a strided copy per input or output
// (array_util.cu), with the CPU kernel's shapes from the op's shape function.
#include "ops/cuda/glue.hpp"
#include "ops/geometry/dims.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

// A walk over `dims` reading with `from` strides and writing with `to` strides.
index_plan copy_plan(const std::vector<int64_t>& dims, const std::vector<int64_t>& from,
                     const std::vector<int64_t>& to, const std::string& op) {
  index_plan p = strided_plan(dims, from, op);
  for (size_t d = 0; d < dims.size(); ++d) p.strides[1][d] = to[d];
  return p;
}

int64_t num_elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

// Each input into its window of the output along the axis.
void concat_kernel(gpu_kernel_context& ctx) {
  if (ctx.inputs.size() == 1) return ctx.set_output(0, ctx.input(0));
  device_tensor& y = ctx.allocate_output(0);
  const auto& yd = y.dims().dims();
  int axis = normalize_axis(ctx.attr<int64_t>("axis"), y.rank(), ctx.op);
  const auto y_strides = detail::dense_strides(yd);
  const size_t elem = dtype_size(y.type());
  int64_t at = 0;  // the window's start along the axis
  for (auto& x : ctx.inputs) {
    const auto& xd = x.dims().dims();
    strided_copy(elem, x.raw_data(),
                 static_cast<std::byte*>(y.raw_mutable_data()) +
                     static_cast<size_t>(at * y_strides[static_cast<size_t>(axis)]) * elem,
                 copy_plan(xd, detail::dense_strides(xd), y_strides, ctx.op), x.num_elements(),
                 stream_of(ctx));
    at += xd[static_cast<size_t>(axis)];
  }
}

// Output i is the window of x along the axis its spec gives.
void split_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  int axis = normalize_axis(ctx.attr_or<int64_t>("axis", 0), x.rank(), ctx.op);
  const auto x_strides = detail::dense_strides(x.dims().dims());
  const size_t elem = dtype_size(x.type());
  int64_t at = 0;
  for (size_t i = 0; i < ctx.output_specs.size(); ++i) {
    device_tensor& y = ctx.allocate_output(i);
    const auto& yd = y.dims().dims();
    gather(elem,
           static_cast<const std::byte*>(x.raw_data()) +
               static_cast<size_t>(at * x_strides[static_cast<size_t>(axis)]) * elem,
           y.raw_mutable_data(), strided_plan(yd, x_strides, ctx.op), y.num_elements(),
           stream_of(ctx));
    at += yd[static_cast<size_t>(axis)];
  }
}

void slice_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  if (ctx.output_specs[0].dims == x.dims()) return ctx.set_output(0, x);
  device_tensor& y = ctx.allocate_output(0);
  auto begin = ctx.attr<std::vector<int64_t>>("begin");
  const auto x_strides = detail::dense_strides(x.dims().dims());
  int64_t offset = 0;
  for (size_t k = 0; k < x_strides.size(); ++k) offset += begin[k] * x_strides[k];
  const size_t elem = dtype_size(x.type());
  gather(elem, static_cast<const std::byte*>(x.raw_data()) + static_cast<size_t>(offset) * elem,
         y.raw_mutable_data(), strided_plan(y.dims().dims(), x_strides, ctx.op), y.num_elements(),
         stream_of(ctx));
}

// The padding value everywhere, then x into its window.
void pad_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  if (ctx.output_specs[0].dims == x.dims()) return ctx.set_output(0, x);
  device_tensor& y = ctx.allocate_output(0);
  auto p = ctx.attr<std::vector<int64_t>>("paddings");
  fill(y.type(), ctx.attr_or<double>("value", 0), y.raw_mutable_data(), y.num_elements(),
       stream_of(ctx));
  const auto& xd = x.dims().dims();
  if (num_elements(xd) == 0) return;
  const auto y_strides = detail::dense_strides(y.dims().dims());
  int64_t offset = 0;
  for (size_t k = 0; k < xd.size(); ++k) offset += p[2 * k] * y_strides[k];
  const size_t elem = dtype_size(x.type());
  strided_copy(elem, x.raw_data(),
               static_cast<std::byte*>(y.raw_mutable_data()) + static_cast<size_t>(offset) * elem,
               copy_plan(xd, detail::dense_strides(xd), y_strides, ctx.op), x.num_elements(),
               stream_of(ctx));
}

// The dtypes the op table has cases of (tests/ops); integer-only nodes run
// in host memory anyway.
const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "concat",
                          .types = {dtype::float32, dtype::float64, dtype::int32, dtype::boolean},
                          .kernel = concat_kernel}),
    gpu_kernel_registrar(
        {.op = "split", .types = {dtype::float32, dtype::int64}, .kernel = split_kernel}),
    gpu_kernel_registrar(
        {.op = "slice", .types = {dtype::float32, dtype::int32}, .kernel = slice_kernel}),
    gpu_kernel_registrar({.op = "pad",
                          .types = {dtype::float32, dtype::float64, dtype::int32, dtype::uint8},
                          .kernel = pad_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
