// Optimizer updates: ops the variable actor applies to its own tensor, with
// their slot state (moments, accumulators) kept beside it in variable_state.
// Inputs: (variable, gradient, learning rate); hyper-parameters are attrs.
// Each update is one fused pass over the variable, its gradient and slots.
//
// The formulas are PyTorch's (torch.optim) so that results can be checked
// against it; weight_decay adds weight_decay * w to the gradient (L2), as
// PyTorch's optimizers do.
#include <cmath>

#include "ops/op_util.hpp"
#include "ops/train.hpp"

namespace actorflow {

namespace {

std::vector<tensor_spec> optimizer_spec(const shape_context& c) {
  auto& var = c.inputs[0];
  auto& grad = c.inputs[1];
  auto& lr = c.inputs[2];
  if (var.type != dtype::float32 && var.type != dtype::float64)
    c.fail("variable must be float32 or float64, got " + var.to_string());
  if (grad.type != var.type || !grad.dims.compatible_with(var.dims))
    c.fail("gradient " + grad.to_string() + " does not match variable " + var.to_string());
  if ((lr.type != dtype::float32 && lr.type != dtype::float64) || lr.dims.rank() != 0)
    c.fail("learning rate must be a float scalar, got " + lr.to_string());
  return {var};
}

double scalar_value(const tensor& t, kernel_context& ctx, const char* what) {
  if (t.num_elements() != 1) ctx.fail(std::string(what) + " must be a scalar");
  return visit_floating(t.type(), ctx.op.c_str(),
                        [&](auto tag) { return double(t.data<decltype(tag)>()[0]); });
}

// The slot `name` of v, created as `fill` of v's shape on first use.
tensor& slot(variable_state& v, const std::string& name, double fill) {
  auto it = v.slots.find(name);
  if (it == v.slots.end()) {
    tensor t(v.value.type(), v.value.dims());
    visit_floating(t.type(), "optimizer", [&](auto tag) {
      using T = decltype(tag);
      std::fill_n(t.mutable_data<T>(), t.num_elements(), T(fill));
    });
    it = v.slots.emplace(name, std::move(t)).first;
  }
  if (!it->second.is_unique()) it->second = it->second.clone();  // a snapshot may share it
  return it->second;
}

// Counts this variable's updates (Adam's bias correction needs t).
int64_t next_step(variable_state& v, const std::string& name) {
  auto it = v.slots.find(name);
  int64_t t = it == v.slots.end() ? 0 : it->second.data<int64_t>()[0];
  v.slots[name] = tensor::scalar<int64_t>(t + 1);
  return t + 1;
}

// Everything one update needs, read and checked once.
struct update_args {
  int64_t n;
  double lr;
  double weight_decay;
  const tensor* grad;
};

update_args read_args(variable_state& v, kernel_context& ctx) {
  if (!v.initialized()) ctx.fail("variable is uninitialized (node '" + ctx.node_name + "')");
  const tensor& grad = ctx.inputs[0];
  if (grad.type() != v.value.type() || grad.dims() != v.value.dims())
    ctx.fail("gradient " + tensor_spec{grad.type(), grad.dims()}.to_string() +
             " does not match variable " + tensor_spec{v.value.type(), v.value.dims()}.to_string());
  double lr = scalar_value(ctx.inputs[1], ctx, "learning rate");
  if (!std::isfinite(lr)) ctx.fail("learning rate is not finite");
  return {v.value.num_elements(), lr, ctx.attr_or<double>("weight_decay", 0.0), &grad};
}

// Runs body(i, w, g) over every element, in parallel for large variables.
template <class T, class Body>
void for_each_element(variable_state& v, const update_args& a, Body body) {
  T* w = v.mutable_value().template mutable_data<T>();
  const T* g = a.grad->template data<T>();
  const T wd = T(a.weight_decay);
  parallel_for(a.n, [&](int64_t b, int64_t e) {
    if (wd == T(0))
      for (int64_t i = b; i < e; ++i) body(i, w[i], g[i]);
    else
      for (int64_t i = b; i < e; ++i) body(i, w[i], g[i] + wd * w[i]);
  });
}

template <class T>
T* slot_data(variable_state& v, const std::string& name, double fill = 0.0) {
  return slot(v, name, fill).template mutable_data<T>();
}

void apply_sgd(variable_state& v, kernel_context& ctx) {
  auto a = read_args(v, ctx);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    for_each_element<T>(v, a, [&](int64_t, T& w, T g) { w -= T(a.lr) * g; });
  });
  ctx.set_output(0, v.value);
}

void apply_momentum(variable_state& v, kernel_context& ctx) {
  auto a = read_args(v, ctx);
  double mu = ctx.attr<double>("momentum");
  bool nesterov = ctx.attr_or<bool>("nesterov", false);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T* buf = slot_data<T>(v, "momentum/velocity");
    for_each_element<T>(v, a, [&](int64_t i, T& w, T g) {
      buf[i] = T(mu) * buf[i] + g;
      w -= T(a.lr) * (nesterov ? g + T(mu) * buf[i] : buf[i]);
    });
  });
  ctx.set_output(0, v.value);
}

void apply_adam(variable_state& v, kernel_context& ctx) {
  auto a = read_args(v, ctx);
  double b1 = ctx.attr<double>("beta1"), b2 = ctx.attr<double>("beta2");
  double eps = ctx.attr<double>("epsilon");
  int64_t t = next_step(v, "adam/t");
  double c1 = 1.0 - std::pow(b1, double(t)), c2 = 1.0 - std::pow(b2, double(t));
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T* m = slot_data<T>(v, "adam/m");
    T* s = slot_data<T>(v, "adam/v");
    // w -= lr * (m / c1) / (sqrt(s / c2) + eps), with the divisions hoisted.
    const T step = T(a.lr / c1), inv_sqrt_c2 = T(1.0 / std::sqrt(c2));
    for_each_element<T>(v, a, [&](int64_t i, T& w, T g) {
      m[i] = T(b1) * m[i] + T(1 - b1) * g;
      s[i] = T(b2) * s[i] + T(1 - b2) * g * g;
      w -= step * m[i] / (std::sqrt(s[i]) * inv_sqrt_c2 + T(eps));
    });
  });
  ctx.set_output(0, v.value);
}

void apply_rmsprop(variable_state& v, kernel_context& ctx) {
  auto a = read_args(v, ctx);
  double rho = ctx.attr<double>("rho"), eps = ctx.attr<double>("epsilon");
  double mu = ctx.attr_or<double>("momentum", 0.0);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T* ms = slot_data<T>(v, "rmsprop/mean_square");
    T* mom = mu != 0.0 ? slot_data<T>(v, "rmsprop/momentum") : nullptr;
    for_each_element<T>(v, a, [&](int64_t i, T& w, T g) {
      ms[i] = T(rho) * ms[i] + T(1 - rho) * g * g;
      T step = g / (std::sqrt(ms[i]) + T(eps));
      if (mom) step = mom[i] = T(mu) * mom[i] + step;
      w -= T(a.lr) * step;
    });
  });
  ctx.set_output(0, v.value);
}

void apply_adagrad(variable_state& v, kernel_context& ctx) {
  auto a = read_args(v, ctx);
  double eps = ctx.attr<double>("epsilon");
  double initial = ctx.attr_or<double>("initial_accumulator", 0.0);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T* acc = slot_data<T>(v, "adagrad/accumulator", initial);
    for_each_element<T>(v, a, [&](int64_t i, T& w, T g) {
      acc[i] += g * g;
      w -= T(a.lr) * g / (std::sqrt(acc[i]) + T(eps));
    });
  });
  ctx.set_output(0, v.value);
}

op_def optimizer_op(const char* name, update_fn fn, const char* summary) {
  return {.name = name,
          .num_inputs = 3,
          .infer = optimizer_spec,
          .update = std::move(fn),
          .stateful = true,
          .summary = summary,
          .not_differentiable = true};
}

const op_registrar registrations[] = {
    op_registrar(optimizer_op("apply_sgd", apply_sgd, "w -= lr * g")),
    op_registrar(optimizer_op("apply_momentum", apply_momentum,
                              "heavy-ball or Nesterov momentum (slot momentum/velocity)")),
    op_registrar(optimizer_op("apply_adam", apply_adam,
                              "Adam with bias correction (slots adam/m, adam/v, adam/t)")),
    op_registrar(optimizer_op("apply_rmsprop", apply_rmsprop,
                              "RMSProp, optional momentum (slots rmsprop/*)")),
    op_registrar(
        optimizer_op("apply_adagrad", apply_adagrad, "AdaGrad (slot adagrad/accumulator)")),
};

}  // namespace

}  // namespace actorflow
