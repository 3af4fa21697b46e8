// GPU kernels of the unary math ops' derivative helpers (ops/math_grad.cpp;
// device code in math_grad.cu): two tensors of one shape, no broadcasting, as
// on the CPU.
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

gpu_kernel_fn derivative(derivative_op op) {
  return [op](gpu_kernel_context& ctx) {
    const device_tensor& a = ctx.input(0);
    const device_tensor& b = ctx.input(1);
    // The shape function allows dims unknown until the step: the CPU kernel's check.
    if (a.dims() != b.dims())
      ctx.fail("shapes " + a.dims().to_string() + " and " + b.dims().to_string() + " differ");
    device_tensor& out = ctx.allocate_output(0);
    kernels::derivative(op, a.type(), a.raw_data(), b.raw_data(), out.raw_mutable_data(),
                        a.num_elements(), stream_of(ctx));
  };
}

gpu_kernel_def def(const char* op, std::vector<dtype> types, derivative_op kind) {
  return {.op = op, .types = std::move(types), .kernel = derivative(kind)};
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(def("relu_grad", numeric_types, derivative_op::relu)),
    gpu_kernel_registrar(def("sigmoid_grad", float_types, derivative_op::sigmoid)),
    gpu_kernel_registrar(def("tanh_grad", float_types, derivative_op::tanh)),
    gpu_kernel_registrar(def("sqrt_grad", float_types, derivative_op::sqrt)),
    gpu_kernel_registrar(def("rsqrt_grad", float_types, derivative_op::rsqrt)),
    gpu_kernel_registrar(def("reciprocal_grad", float_types, derivative_op::reciprocal)),
};

}  // namespace

}  // namespace actorflow::gpu
