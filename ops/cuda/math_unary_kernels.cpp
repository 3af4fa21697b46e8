// GPU kernels of the unary math ops and cast (ops/math_unary.cpp; device code
// in math_unary.cu).
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

gpu_kernel_fn unary(unary_op op) {
  return [op](gpu_kernel_context& ctx) {
    const device_tensor& x = ctx.input(0);
    device_tensor& y = ctx.allocate_output(0);
    kernels::unary(op, x.type(), x.raw_data(), y.raw_mutable_data(), x.num_elements(),
                   stream_of(ctx));
  };
}

void cast_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const dtype to = ctx.output_specs[0].type;
  if (x.type() == to) return ctx.set_output(0, x);  // immutable: the input is the result
  const bool bfloat16 = x.type() == dtype::bfloat16 || to == dtype::bfloat16;
  if (bfloat16 && (x.type() != dtype::float32 && to != dtype::float32))
    fail_no_bfloat16_kernel("cast on a GPU (float32 <-> bfloat16 only)");
  device_tensor& y = ctx.allocate_output(0);
  if (bfloat16)
    return cast_bfloat16(x.type(), to, x.raw_data(), y.raw_mutable_data(), x.num_elements(),
                         stream_of(ctx));
  kernels::cast(x.type(), to, x.raw_data(), y.raw_mutable_data(), x.num_elements(), stream_of(ctx));
}

gpu_kernel_def def(const char* op, std::vector<dtype> types, unary_op kind) {
  return {.op = op, .types = std::move(types), .kernel = unary(kind)};
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(def("neg", signed_types, unary_op::neg)),
    gpu_kernel_registrar(def("abs", signed_types, unary_op::abs)),
    gpu_kernel_registrar(def("exp", float_types, unary_op::exp)),
    gpu_kernel_registrar(def("log", float_types, unary_op::log)),
    gpu_kernel_registrar(def("sqrt", float_types, unary_op::sqrt)),
    gpu_kernel_registrar(def("rsqrt", float_types, unary_op::rsqrt)),
    gpu_kernel_registrar(def("square", signed_types, unary_op::square)),
    gpu_kernel_registrar(def("sign", signed_types, unary_op::sign)),
    gpu_kernel_registrar(def("reciprocal", float_types, unary_op::reciprocal)),
    gpu_kernel_registrar(def("relu", numeric_types, unary_op::relu)),
    gpu_kernel_registrar(def("sigmoid", float_types, unary_op::sigmoid)),
    gpu_kernel_registrar(def("tanh", float_types, unary_op::tanh)),
    gpu_kernel_registrar(def("logical_not", {dtype::boolean}, unary_op::logical_not)),
    gpu_kernel_registrar({.op = "cast",
                          .types = with_bfloat16(all_types),
                          .kernel = cast_kernel,
                          .bfloat16 = true,
                          .note = "bfloat16 to and from float32 only"}),
};

}  // namespace

}  // namespace actorflow::gpu
