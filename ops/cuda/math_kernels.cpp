// GPU kernels of the math family: unary ops, their derivative helpers, binary
// ops with NumPy broadcasting, select and cast (elementwise.cu).
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

// Broadcasting binary ops, and the same-shape derivative helpers (whose plan is one run).
gpu_kernel_fn binary(binary_op op) {
  return [op](gpu_kernel_context& ctx) {
    const device_tensor& a = ctx.input(0);
    const device_tensor& b = ctx.input(1);
    auto plan = geometry::make_plan<2>({&a.dims(), &b.dims()}, ctx.op);
    device_tensor& out = ctx.allocate_output(0);
    kernels::binary(op, a.type(), a.raw_data(), b.raw_data(), out.raw_mutable_data(),
                    to_index_plan(plan, ctx.op), plan.num_elements, stream_of(ctx));
  };
}

void select_kernel(gpu_kernel_context& ctx) {
  const device_tensor& cond = ctx.input(0);
  const device_tensor& a = ctx.input(1);
  const device_tensor& b = ctx.input(2);
  auto plan = geometry::make_plan<3>({&cond.dims(), &a.dims(), &b.dims()}, ctx.op);
  device_tensor& out = ctx.allocate_output(0);
  kernels::select(a.type(), cond.data<bool>(), a.raw_data(), b.raw_data(), out.raw_mutable_data(),
                  to_index_plan(plan, ctx.op), plan.num_elements, stream_of(ctx));
}

void cast_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const dtype to = ctx.output_specs[0].type;
  if (x.type() == to) return ctx.set_output(0, x);  // immutable: the input is the result
  if (to == dtype::bfloat16) fail_no_bfloat16_kernel("cast on a GPU");
  device_tensor& y = ctx.allocate_output(0);
  kernels::cast(x.type(), to, x.raw_data(), y.raw_mutable_data(), x.num_elements(), stream_of(ctx));
}

gpu_kernel_def def(const char* op, std::vector<dtype> types, gpu_kernel_fn fn,
                   std::string note = "") {
  return {.op = op, .types = std::move(types), .kernel = std::move(fn), .note = std::move(note)};
}

const std::vector<dtype> bool_type{dtype::boolean};

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(def("neg", signed_types, unary(unary_op::neg))),
    gpu_kernel_registrar(def("abs", signed_types, unary(unary_op::abs))),
    gpu_kernel_registrar(def("exp", float_types, unary(unary_op::exp))),
    gpu_kernel_registrar(def("log", float_types, unary(unary_op::log))),
    gpu_kernel_registrar(def("sqrt", float_types, unary(unary_op::sqrt))),
    gpu_kernel_registrar(def("rsqrt", float_types, unary(unary_op::rsqrt))),
    gpu_kernel_registrar(def("square", signed_types, unary(unary_op::square))),
    gpu_kernel_registrar(def("sign", signed_types, unary(unary_op::sign))),
    gpu_kernel_registrar(def("reciprocal", float_types, unary(unary_op::reciprocal))),
    gpu_kernel_registrar(def("relu", numeric_types, unary(unary_op::relu))),
    gpu_kernel_registrar(def("sigmoid", float_types, unary(unary_op::sigmoid))),
    gpu_kernel_registrar(def("tanh", float_types, unary(unary_op::tanh))),
    gpu_kernel_registrar(def("logical_not", bool_type, unary(unary_op::logical_not))),
    gpu_kernel_registrar(def("cast", all_types, cast_kernel)),

    gpu_kernel_registrar(def("relu_grad", numeric_types, binary(binary_op::relu_grad))),
    gpu_kernel_registrar(def("sigmoid_grad", float_types, binary(binary_op::sigmoid_grad))),
    gpu_kernel_registrar(def("tanh_grad", float_types, binary(binary_op::tanh_grad))),
    gpu_kernel_registrar(def("sqrt_grad", float_types, binary(binary_op::sqrt_grad))),
    gpu_kernel_registrar(def("rsqrt_grad", float_types, binary(binary_op::rsqrt_grad))),
    gpu_kernel_registrar(def("reciprocal_grad", float_types, binary(binary_op::reciprocal_grad))),

    gpu_kernel_registrar(def("add", numeric_types, binary(binary_op::add))),
    gpu_kernel_registrar(def("sub", numeric_types, binary(binary_op::sub))),
    gpu_kernel_registrar(def("mul", numeric_types, binary(binary_op::mul))),
    gpu_kernel_registrar(def("div", float_types, binary(binary_op::div),
                             "integer division stays on the CPU, which checks for zero divisors")),
    gpu_kernel_registrar(def("maximum", numeric_types, binary(binary_op::maximum))),
    gpu_kernel_registrar(def("minimum", numeric_types, binary(binary_op::minimum))),
    gpu_kernel_registrar(
        def("pow", float_types, binary(binary_op::pow),
            "integer powers stay on the CPU, which checks for negative exponents")),
    gpu_kernel_registrar(def("equal", all_types, binary(binary_op::equal))),
    gpu_kernel_registrar(def("not_equal", all_types, binary(binary_op::not_equal))),
    gpu_kernel_registrar(def("less", numeric_types, binary(binary_op::less))),
    gpu_kernel_registrar(def("less_equal", numeric_types, binary(binary_op::less_equal))),
    gpu_kernel_registrar(def("greater", numeric_types, binary(binary_op::greater))),
    gpu_kernel_registrar(def("greater_equal", numeric_types, binary(binary_op::greater_equal))),
    gpu_kernel_registrar(def("logical_and", bool_type, binary(binary_op::logical_and))),
    gpu_kernel_registrar(def("logical_or", bool_type, binary(binary_op::logical_or))),
    gpu_kernel_registrar(
        {.op = "select", .types = all_types, .type_input = 1, .kernel = select_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
