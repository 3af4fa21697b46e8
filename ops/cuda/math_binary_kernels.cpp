// GPU kernels of the binary math ops with NumPy broadcasting, and select
// (ops/math_binary.cpp; device code in math_binary.cu).
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

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

gpu_kernel_def def(const char* op, std::vector<dtype> types, binary_op kind,
                   std::string note = "") {
  return {.op = op, .types = std::move(types), .kernel = binary(kind), .note = std::move(note)};
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(def("add", numeric_types, binary_op::add)),
    gpu_kernel_registrar(def("sub", numeric_types, binary_op::sub)),
    gpu_kernel_registrar(def("mul", numeric_types, binary_op::mul)),
    gpu_kernel_registrar(def("div", float_types, binary_op::div,
                             "integer division stays on the CPU, which checks for zero divisors")),
    gpu_kernel_registrar(def("maximum", numeric_types, binary_op::maximum)),
    gpu_kernel_registrar(def("minimum", numeric_types, binary_op::minimum)),
    gpu_kernel_registrar(
        def("pow", float_types, binary_op::pow,
            "integer powers stay on the CPU, which checks for negative exponents")),
    gpu_kernel_registrar(def("equal", all_types, binary_op::equal)),
    gpu_kernel_registrar(def("not_equal", all_types, binary_op::not_equal)),
    gpu_kernel_registrar(def("less", numeric_types, binary_op::less)),
    gpu_kernel_registrar(def("less_equal", numeric_types, binary_op::less_equal)),
    gpu_kernel_registrar(def("greater", numeric_types, binary_op::greater)),
    gpu_kernel_registrar(def("greater_equal", numeric_types, binary_op::greater_equal)),
    gpu_kernel_registrar(def("logical_and", {dtype::boolean}, binary_op::logical_and)),
    gpu_kernel_registrar(def("logical_or", {dtype::boolean}, binary_op::logical_or)),
    gpu_kernel_registrar(
        {.op = "select", .types = all_types, .type_input = 1, .kernel = select_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
