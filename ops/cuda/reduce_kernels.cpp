// GPU kernels of the reductions (ops/reduce.cpp; device code in reduce.cu):
// sum, mean, max, min, prod over axes, argmax / argmin, sum_to_shape_of.
// Every reduction is brought to a dense (O, R, I) block by
// ops/geometry/reduce_plan.hpp, as on the CPU.
#include "ops/cuda/glue.hpp"
#include "ops/geometry/dims.hpp"
#include "ops/geometry/reduce_plan.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

void fill_output(gpu_kernel_context& ctx, double value) {
  device_tensor& y = ctx.allocate_output(0);
  kernels::fill(y.type(), value, y.raw_mutable_data(), y.num_elements(), stream_of(ctx));
}

void l2_loss_kernel(gpu_kernel_context& ctx) { l2_loss_into(ctx, ctx.input(0)); }

// The l2_loss of the rows scatter-added at the indices (repeats summed in
// order, as the CPU's sum_repeated_rows), without the dense tensor.
void l2_loss_rows_kernel(gpu_kernel_context& ctx) {
  const device_tensor& rows = ctx.input(0);
  auto index = host_indices(ctx, 1);
  const int64_t n = static_cast<int64_t>(index.size());
  const int64_t row_size = n > 0 ? rows.num_elements() / n : 0;
  l2_loss_into(ctx, sum_repeated_rows(ctx, rows, group_rows(ctx, index), n, row_size));
}

}  // namespace

void kernels::l2_loss_into(gpu_kernel_context& ctx, const device_tensor& x) {
  if (x.num_elements() == 0) return fill_output(ctx, 0);
  device_tensor halves = ctx.allocate_temp(x.type(), shape{x.num_elements()});
  half_squares(x.type(), x.raw_data(), halves.raw_mutable_data(), x.num_elements(), stream_of(ctx));
  reduce_into(ctx, reduce_op::sum, halves, {true});
}

void kernels::reduce_into(gpu_kernel_context& ctx, reduce_op kind, const device_tensor& x,
                          const std::vector<bool>& red) {
  const shape& out_dims = ctx.output_specs[0].dims;
  auto p = plan_reduction(x.dims().dims(), red);
  if (p.reduced_count == 0 && p.kept_count > 0) {
    // The CPU kernel's rules for empty reductions.
    const std::string what = "input " + x.dims().to_string() + " reduced over a zero-size dim";
    if (kind == reduce_op::max || kind == reduce_op::min)
      ctx.fail(std::string("cannot take the ") + (kind == reduce_op::max ? "max" : "min") +
               " of no elements: " + what);
    if (kind == reduce_op::mean && !is_floating(x.type()))
      ctx.fail("integer mean of no elements: " + what);
    return fill_output(ctx, kind == reduce_op::prod  ? 1.0
                            : kind == reduce_op::sum ? 0.0
                                                     : std::nan(""));
  }
  if (!p.reduces || x.num_elements() == 0) {
    if (x.num_elements() == out_dims.num_elements()) return ctx.set_output(0, x.reshaped(out_dims));
    ctx.allocate_output(0);
    return;
  }
  device_tensor src = x;
  if (!p.copy_dims.empty()) {
    src = ctx.allocate_temp(x.type(), shape{x.num_elements()});
    gather(dtype_size(x.type()), x.raw_data(), src.raw_mutable_data(),
           strided_plan(p.copy_dims, p.copy_strides, ctx.op), x.num_elements(), stream_of(ctx));
  }
  const int64_t O = p.outer, R = p.reduced, I = p.inner;
  device_tensor& out = ctx.allocate_output(0);
  const int64_t parts = reduce_parts(O, R, I);
  device_tensor partial;
  if (parts > 1) partial = ctx.allocate_temp(x.type(), shape{O * parts * I});
  kernels::reduce(kind, x.type(), src.raw_data(), out.raw_mutable_data(),
                  parts > 1 ? partial.raw_mutable_data() : nullptr, O, R, I, stream_of(ctx));
}

namespace {

gpu_kernel_fn reduction(reduce_op kind) {
  return [kind](gpu_kernel_context& ctx) {
    const device_tensor& x = ctx.input(0);
    reduce_into(ctx, kind, x,
                reduced_dims(x.dims(), ctx.attr_or<std::vector<int64_t>>("axes", {}), ctx.op));
  };
}

template <bool is_max>
void arg_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const int axis = normalize_axis(ctx.attr_or<int64_t>("axis", 0), x.rank(), ctx.op);
  const auto& d = x.dims().dims();
  int64_t O = 1, R = d[static_cast<size_t>(axis)], I = 1;
  for (int k = 0; k < axis; ++k) O *= d[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < d.size(); ++k) I *= d[k];
  device_tensor& out = ctx.allocate_output(0);
  if (out.num_elements() == 0) return;
  if (R == 0)
    ctx.fail("cannot take the " + ctx.op + " of no elements: axis " + std::to_string(axis) +
             " of " + x.dims().to_string() + " has size 0");
  arg_reduce(is_max, x.type(), x.raw_data(), out.mutable_data<int64_t>(), O, R, I, stream_of(ctx));
}

// The dims of x that summing to `to` removes or shrinks to 1 (ops/reduce.cpp's
// sum_to_dims; the shape function has checked that `to` broadcasts to x).
void sum_to_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const shape& to = ctx.input(1).dims();
  const int lead = x.rank() - to.rank();
  std::vector<bool> red(static_cast<size_t>(x.rank()), true);
  for (int k = 0; k < to.rank(); ++k)
    red[static_cast<size_t>(lead + k)] = to[k] == 1 && x.dims()[lead + k] != 1;
  reduce_into(ctx, reduce_op::sum, x, red);
}

gpu_kernel_def def(const char* op, gpu_kernel_fn fn) {
  return {.op = op, .types = numeric_types, .kernel = std::move(fn)};
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(def("sum", reduction(reduce_op::sum))),
    gpu_kernel_registrar(def("mean", reduction(reduce_op::mean))),
    gpu_kernel_registrar(def("max", reduction(reduce_op::max))),
    gpu_kernel_registrar(def("min", reduction(reduce_op::min))),
    gpu_kernel_registrar(def("prod", reduction(reduce_op::prod))),
    gpu_kernel_registrar({.op = "l2_loss", .types = float_types, .kernel = l2_loss_kernel}),
    gpu_kernel_registrar(
        {.op = "l2_loss_rows", .types = float_types, .kernel = l2_loss_rows_kernel}),
    gpu_kernel_registrar(def("argmax", arg_kernel<true>)),
    gpu_kernel_registrar(def("argmin", arg_kernel<false>)),
    gpu_kernel_registrar(def("sum_to_shape_of", sum_to_kernel)),
};

}  // namespace

}  // namespace actorflow::gpu
