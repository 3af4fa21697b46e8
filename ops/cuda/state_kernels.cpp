// GPU kernels of ops/state.cpp: identity and stop_gradient (the input itself,
// relabelled: glue.hpp's relabel), and the ops on a variable whose value lives
// on the GPU (devices/accelerator.hpp's device_variable): reads, assignments
// and in-place additions, run on the device's stream in the order the
// variable's launches came.
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

void require_initialized(const gpu_variable_state& v, const gpu_kernel_context& ctx) {
  if (!v.value.valid())
    fail(error_code::failed_precondition, ctx.op,
         "variable is uninitialized (node '" + ctx.node_name + "')");
}

void check_same_spec(const gpu_variable_state& v, const device_tensor& value,
                     const gpu_kernel_context& ctx) {
  if (value.type() != v.value.type() || value.dims() != v.value.dims())
    ctx.fail("variable '" + ctx.node_name + "' is " + v.value.describe() + ", value is " +
             value.describe());
}

void read_variable(gpu_variable_state& v, gpu_kernel_context& ctx) {
  require_initialized(v, ctx);
  ctx.set_output(0, v.value);
}

// A bool scalar on the device, written by a fill.
void is_initialized(gpu_variable_state& v, gpu_kernel_context& ctx) {
  device_tensor& out = ctx.allocate_output(0);
  fill(dtype::boolean, v.value.valid() ? 1.0 : 0.0, out.raw_mutable_data(), 1, stream_of(ctx));
}

// Shares the incoming buffer, as the CPU's assign does: values in flight are
// never written, and a later in-place update copies a shared value first.
void assign(gpu_variable_state& v, gpu_kernel_context& ctx) {
  const device_tensor& value = ctx.input(0);
  if (v.value.valid()) check_same_spec(v, value, ctx);
  v.value = value;
  ctx.set_output(0, v.value);
}

void update_in_place(gpu_variable_state& v, gpu_kernel_context& ctx, binary_op op) {
  require_initialized(v, ctx);
  const device_tensor& delta = ctx.input(0);
  check_same_spec(v, delta, ctx);
  const int64_t n = v.value.num_elements();
  void* w = writable_value(v, ctx);
  if (n > 0) {
    index_plan plan;  // one flat dim, every operand walked element by element
    plan.rank = 1;
    plan.dims[0] = n;
    for (auto& stride : plan.strides) stride[0] = 1;
    binary(op, v.value.type(), w, delta.raw_data(), w, plan, n, stream_of(ctx));
  }
  ctx.set_output(0, v.value);
}

gpu_kernel_def update(const char* op, const std::vector<dtype>& types, gpu_update_fn fn) {
  return {.op = op, .types = types, .update = std::move(fn)};
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "identity", .types = all_types, .kernel = relabel}),
    gpu_kernel_registrar({.op = "stop_gradient", .types = all_types, .kernel = relabel}),
    gpu_kernel_registrar(update("read_variable", all_types, read_variable)),
    gpu_kernel_registrar(update("is_variable_initialized", all_types, is_initialized)),
    gpu_kernel_registrar(update("assign", all_types, assign)),
    gpu_kernel_registrar(update("assign_add", numeric_types,
                                [](gpu_variable_state& v, gpu_kernel_context& ctx) {
                                  update_in_place(v, ctx, binary_op::add);
                                })),
    gpu_kernel_registrar(update("assign_sub", numeric_types,
                                [](gpu_variable_state& v, gpu_kernel_context& ctx) {
                                  update_in_place(v, ctx, binary_op::sub);
                                })),
};

}  // namespace

}  // namespace actorflow::gpu
