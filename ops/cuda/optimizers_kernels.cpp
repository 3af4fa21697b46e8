// GPU kernels of the optimizer updates (ops/optimizers.cpp; device code in
// optimizers.cu): one fused kernel per variable and step, with the CPU's
// slots (same names, same first values).
#include <cmath>

#include "ops/array_util.hpp"
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

// The slot `name` of v, made as `fill` of v's shape on first use and never
// shared when written (a snapshot may hold the old one).
device_tensor& slot(gpu_variable_state& v, gpu_kernel_context& ctx, const std::string& name,
                    double fill = 0.0) {
  auto it = v.slots.find(name);
  if (it == v.slots.end()) {
    device_tensor t = ctx.allocate_temp(v.value.type(), v.value.dims());
    kernels::fill(t.type(), fill, t.raw_mutable_data(), t.num_elements(), stream_of(ctx));
    it = v.slots.emplace(name, std::move(t)).first;
  }
  if (!it->second.is_unique()) it->second = clone(ctx, it->second);
  return it->second;
}

// A float32 or float64 scalar read on the device (learning rate, gradient scale).
const device_tensor& device_scalar(gpu_kernel_context& ctx, size_t i, const char* what) {
  const device_tensor& t = ctx.input(i);
  if (t.num_elements() != 1 || (t.type() != dtype::float32 && t.type() != dtype::float64))
    ctx.fail(std::string(what) + " must be a float32 or float64 scalar, got " + t.describe());
  return t;
}

update_args read_args(gpu_variable_state& v, gpu_kernel_context& ctx) {
  if (!v.value.valid())
    fail(error_code::failed_precondition, ctx.op,
         "variable is uninitialized (node '" + ctx.node_name + "')");
  const device_tensor& grad = ctx.input(0);
  if (grad.type() != v.value.type() || grad.dims() != v.value.dims())
    ctx.fail("gradient " + grad.describe() + " does not match variable " + v.value.describe());
  const device_tensor& lr = device_scalar(ctx, 1, "learning rate");
  update_args a{v.value.type(), v.value.num_elements(), lr.raw_data(), lr.type(),
                ctx.attr_or<double>("weight_decay", 0.0)};
  if (ctx.inputs.size() > 2) {
    const device_tensor& scale = device_scalar(ctx, 2, "gradient scale");
    a.scale = scale.raw_data();
    a.scale_type = scale.type();
  }
  return a;
}

void apply_sgd_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  auto a = read_args(v, ctx);
  apply_sgd(a, writable_value(v, ctx), ctx.input(0).raw_data(), stream_of(ctx));
  ctx.set_output(0, v.value);
}

void apply_momentum_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  auto a = read_args(v, ctx);
  void* velocity = slot(v, ctx, "momentum/velocity").raw_mutable_data();
  apply_momentum(a, writable_value(v, ctx), ctx.input(0).raw_data(), velocity,
                 ctx.attr<double>("momentum"), ctx.attr_or<bool>("nesterov", false),
                 stream_of(ctx));
  ctx.set_output(0, v.value);
}

// One Adam step with gradient `g` (dense, or rows as `a` says): the step
// count is the variable's, one per apply (lazy Adam's too, as TensorFlow's).
void adam_step(gpu_variable_state& v, gpu_kernel_context& ctx, const update_args& a,
               const void* g) {
  const double b1 = ctx.attr<double>("beta1"), b2 = ctx.attr<double>("beta2");
  const double eps = ctx.attr<double>("epsilon");
  const int64_t t = ++v.counters["adam/t"];
  const double c1 = 1.0 - std::pow(b1, double(t)), c2 = 1.0 - std::pow(b2, double(t));
  void* m = slot(v, ctx, "adam/m").raw_mutable_data();
  void* s = slot(v, ctx, "adam/v").raw_mutable_data();
  apply_adam(a, writable_value(v, ctx), g, m, s, b1, b2, c1, c2, eps, stream_of(ctx));
  ctx.set_output(0, v.value);
}

void apply_adam_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  adam_step(v, ctx, read_args(v, ctx), ctx.input(0).raw_data());
}

void apply_rmsprop_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  auto a = read_args(v, ctx);
  const double rho = ctx.attr<double>("rho"), eps = ctx.attr<double>("epsilon");
  const double mu = ctx.attr_or<double>("momentum", 0.0);
  void* ms = slot(v, ctx, "rmsprop/mean_square").raw_mutable_data();
  void* mom = mu != 0.0 ? slot(v, ctx, "rmsprop/momentum").raw_mutable_data() : nullptr;
  apply_rmsprop(a, writable_value(v, ctx), ctx.input(0).raw_data(), ms, mom, rho, eps, mu,
                stream_of(ctx));
  ctx.set_output(0, v.value);
}

void apply_adagrad_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  auto a = read_args(v, ctx);
  const double eps = ctx.attr<double>("epsilon");
  const double initial = ctx.attr_or<double>("initial_accumulator", 0.0);
  void* acc = slot(v, ctx, "adagrad/accumulator", initial).raw_mutable_data();
  apply_adagrad(a, writable_value(v, ctx), ctx.input(0).raw_data(), acc, eps, stream_of(ctx));
  ctx.set_output(0, v.value);
}

// ---- row updates: the gradient's rows, repeats summed in order (the CPU's
// sum_repeated_rows), applied by the dense update's kernel to just those rows
// of the variable and its slots; no weight decay, as on the CPU.

struct row_update {
  update_args args;
  device_tensor summed;  // [rows named, row_size]
  device_tensor rows;    // the variable's rows, int64 on the device
};

row_update read_row_args(gpu_variable_state& v, gpu_kernel_context& ctx) {
  if (!v.value.valid())
    fail(error_code::failed_precondition, ctx.op,
         "variable is uninitialized (node '" + ctx.node_name + "')");
  if (v.value.rank() == 0) ctx.fail("variable must have rows (rank >= 1), got a scalar");
  const device_tensor& grad_rows = ctx.input(0);
  const tensor& indices = ctx.host_value(1);
  const auto& vd = v.value.dims().dims();
  if (grad_rows.type() != v.value.type() ||
      grad_rows.dims() != detail::gathered_rows_shape(indices.dims(), v.value.dims()))
    ctx.fail("gradient rows " + grad_rows.describe() + " do not match indices " +
             indices.dims().to_string() + " into variable " + v.value.describe());
  auto idx = detail::checked_indices(indices, 0, vd[0], "variable " + v.value.describe(), ctx.op);
  int64_t row_size = 1;
  for (size_t k = 1; k < vd.size(); ++k) row_size *= vd[k];
  auto groups = group_rows(ctx, idx);
  row_update u;
  u.summed = sum_repeated_rows(ctx, grad_rows, groups, static_cast<int64_t>(idx.size()), row_size);
  u.rows = groups.targets;
  const device_tensor& lr = device_scalar(ctx, 2, "learning rate");
  u.args = update_args{v.value.type(), groups.rows * row_size, lr.raw_data(), lr.type(), 0.0};
  if (ctx.inputs.size() > 3) {
    const device_tensor& scale = device_scalar(ctx, 3, "gradient scale");
    u.args.scale = scale.raw_data();
    u.args.scale_type = scale.type();
  }
  u.args.rows = u.rows.data<int64_t>();
  u.args.row_size = row_size;
  return u;
}

void apply_sgd_rows_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  auto u = read_row_args(v, ctx);
  apply_sgd(u.args, writable_value(v, ctx), u.summed.raw_data(), stream_of(ctx));
  ctx.set_output(0, v.value);
}

void apply_adam_rows_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  auto u = read_row_args(v, ctx);
  adam_step(v, ctx, u.args, u.summed.raw_data());
}

void apply_adagrad_rows_update(gpu_variable_state& v, gpu_kernel_context& ctx) {
  auto u = read_row_args(v, ctx);
  const double eps = ctx.attr<double>("epsilon");
  const double initial = ctx.attr_or<double>("initial_accumulator", 0.0);
  void* acc = slot(v, ctx, "adagrad/accumulator", initial).raw_mutable_data();
  apply_adagrad(u.args, writable_value(v, ctx), u.summed.raw_data(), acc, eps, stream_of(ctx));
  ctx.set_output(0, v.value);
}

const char* const note =
    "the learning rate is read on the GPU, so a non-finite rate is not reported as an error";

gpu_kernel_def update(const char* op, gpu_update_fn fn) {
  return {.op = op, .types = float_types, .update = std::move(fn), .note = note};
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(update("apply_sgd", apply_sgd_update)),
    gpu_kernel_registrar(update("apply_momentum", apply_momentum_update)),
    gpu_kernel_registrar(update("apply_adam", apply_adam_update)),
    gpu_kernel_registrar(update("apply_rmsprop", apply_rmsprop_update)),
    gpu_kernel_registrar(update("apply_adagrad", apply_adagrad_update)),
    gpu_kernel_registrar(update("apply_sgd_rows", apply_sgd_rows_update)),
    gpu_kernel_registrar(update("apply_adam_rows", apply_adam_rows_update)),
    gpu_kernel_registrar(update("apply_adagrad_rows", apply_adagrad_rows_update)),
};

}  // namespace

}  // namespace actorflow::gpu
