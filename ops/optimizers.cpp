// Optimizer updates: ops the variable actor applies to its own tensor, with
// their slot state (moments, accumulators) kept beside it in variable_state.
// Inputs: (variable, gradient, learning rate[, gradient scale]); hyper-parameters
// are attrs. Each update is one fused pass over the variable, its gradient and
// slots; the optional scale (global-norm clipping's factor) multiplies the
// gradient within that pass.
//
// The formulas are PyTorch's (torch.optim) so that results can be checked
// against it; weight_decay adds weight_decay * w to the gradient (L2), as
// PyTorch's optimizers do.
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "ops/array_util.hpp"
#include "ops/linalg.hpp"
#include "ops/op_util.hpp"
#include "ops/train.hpp"

namespace actorflow {

namespace {

// The optional last input, clipping's gradient scale, at position `at`.
void check_grad_scale(const shape_context& c, size_t at) {
  if (c.inputs.size() > at + 1)
    c.fail("takes at most " + std::to_string(at + 1) + " inputs, got " +
           std::to_string(c.inputs.size()));
  if (c.inputs.size() == at + 1) {
    auto& scale = c.inputs[at];
    if ((scale.type != dtype::float32 && scale.type != dtype::float64) || scale.dims.rank() != 0)
      c.fail("gradient scale must be a float scalar, got " + scale.to_string());
  }
}

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
  check_grad_scale(c, 3);
  return {var};
}

// A float input of one element (the learning rate, clipping's scale); the
// error names it and what came instead.
double scalar_value(const tensor& t, kernel_context& ctx, const char* what) {
  if ((t.type() != dtype::float32 && t.type() != dtype::float64) || t.num_elements() != 1)
    ctx.fail(std::string(what) + " must be a float scalar, got " +
             tensor_spec{t.type(), t.dims()}.to_string());
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
  double grad_scale;  // 1 without the optional input
};

update_args read_args(variable_state& v, kernel_context& ctx) {
  if (!v.initialized())
    ctx.fail(error_code::failed_precondition,
             "variable is uninitialized (node '" + ctx.node_name + "')");
  const tensor& grad = ctx.inputs[0];
  if (grad.type() != v.value.type() || grad.dims() != v.value.dims())
    ctx.fail("gradient " + tensor_spec{grad.type(), grad.dims()}.to_string() +
             " does not match variable " + tensor_spec{v.value.type(), v.value.dims()}.to_string());
  double lr = scalar_value(ctx.inputs[1], ctx, "learning rate");
  if (!std::isfinite(lr)) ctx.fail("learning rate is not finite");
  double scale = ctx.inputs.size() > 2 ? scalar_value(ctx.inputs[2], ctx, "gradient scale") : 1.0;
  return {v.value.num_elements(), lr, ctx.attr_or<double>("weight_decay", 0.0), &grad, scale};
}

template <class T>
T* slot_data(variable_state& v, const std::string& name, double fill = 0.0) {
  return slot(v, name, fill).template mutable_data<T>();
}

// The element loops. Each takes restrict pointers and scalars by value, so that
// the compiler knows nothing aliases and vectorizes them (sqrt and division
// included); gs * g + wd * w folds in the gradient scale and the L2 penalty
// (gs * g is exactly g for gs = 1).

template <class T>
void sgd_loop(int64_t n, T* __restrict w, const T* __restrict g, T gs, T lr, T wd) {
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * (gs * g[i] + wd * w[i]);
}

template <class T>
void momentum_loop(int64_t n, T* __restrict w, const T* __restrict g, T gs, T* __restrict buf, T lr,
                   T wd, T mu, bool nesterov) {
  for (int64_t i = 0; i < n; ++i) {
    T gi = gs * g[i] + wd * w[i];
    buf[i] = mu * buf[i] + gi;
    w[i] -= lr * (nesterov ? gi + mu * buf[i] : buf[i]);
  }
}

// w -= lr * (m / c1) / (sqrt(v / c2) + eps), with step = lr / c1 and the
// division by c2 hoisted as inv_sqrt_c2.
template <class T>
void adam_loop(int64_t n, T* __restrict w, const T* __restrict g, T gs, T* __restrict m,
               T* __restrict v, T wd, T b1, T b2, T step, T inv_sqrt_c2, T eps) {
  for (int64_t i = 0; i < n; ++i) {
    T gi = gs * g[i] + wd * w[i];
    m[i] = b1 * m[i] + (T(1) - b1) * gi;
    v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
    w[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
  }
}

template <class T>
void rmsprop_loop(int64_t n, T* __restrict w, const T* __restrict g, T gs, T* __restrict ms,
                  T* __restrict mom, T lr, T wd, T rho, T eps, T mu) {
  for (int64_t i = 0; i < n; ++i) {
    T gi = gs * g[i] + wd * w[i];
    ms[i] = rho * ms[i] + (T(1) - rho) * gi * gi;
    T step = gi / (std::sqrt(ms[i]) + eps);
    if (mom) step = mom[i] = mu * mom[i] + step;
    w[i] -= lr * step;
  }
}

template <class T>
void adagrad_loop(int64_t n, T* __restrict w, const T* __restrict g, T gs, T* __restrict acc, T lr,
                  T wd, T eps) {
  for (int64_t i = 0; i < n; ++i) {
    T gi = gs * g[i] + wd * w[i];
    acc[i] += gi * gi;
    w[i] -= lr * gi / (std::sqrt(acc[i]) + eps);
  }
}

// Splits [0, n) across the pool for large variables; loop(begin, count).
template <class Loop>
void split(int64_t n, Loop loop) {
  parallel_for(n, [&](int64_t b, int64_t e) { loop(b, e - b); });
}

void apply_sgd(variable_state& v, kernel_context& ctx) {
  auto a = read_args(v, ctx);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T* w = v.mutable_value().template mutable_data<T>();
    const T* g = a.grad->template data<T>();
    split(a.n, [&](int64_t b, int64_t n) {
      sgd_loop<T>(n, w + b, g + b, T(a.grad_scale), T(a.lr), T(a.weight_decay));
    });
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
    T* w = v.mutable_value().template mutable_data<T>();
    const T* g = a.grad->template data<T>();
    split(a.n, [&](int64_t b, int64_t n) {
      momentum_loop<T>(n, w + b, g + b, T(a.grad_scale), buf + b, T(a.lr), T(a.weight_decay), T(mu),
                       nesterov);
    });
  });
  ctx.set_output(0, v.value);
}

// Adam's hyper-parameters and this apply's bias corrections (1 - beta^t),
// t counted per variable in the slot adam/t: shared by dense and lazy Adam.
struct adam_step {
  double b1, b2, eps, c1, c2;
};

adam_step next_adam_step(variable_state& v, kernel_context& ctx) {
  double b1 = ctx.attr<double>("beta1"), b2 = ctx.attr<double>("beta2");
  int64_t t = next_step(v, "adam/t");
  return {b1, b2, ctx.attr<double>("epsilon"), 1.0 - std::pow(b1, double(t)),
          1.0 - std::pow(b2, double(t))};
}

void apply_adam(variable_state& v, kernel_context& ctx) {
  auto a = read_args(v, ctx);
  auto [b1, b2, eps, c1, c2] = next_adam_step(v, ctx);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T* m = slot_data<T>(v, "adam/m");
    T* s = slot_data<T>(v, "adam/v");
    T* w = v.mutable_value().template mutable_data<T>();
    const T* g = a.grad->template data<T>();
    split(a.n, [&](int64_t b, int64_t n) {
      adam_loop<T>(n, w + b, g + b, T(a.grad_scale), m + b, s + b, T(a.weight_decay), T(b1), T(b2),
                   T(a.lr / c1), T(1.0 / std::sqrt(c2)), T(eps));
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
    T* w = v.mutable_value().template mutable_data<T>();
    const T* g = a.grad->template data<T>();
    split(a.n, [&](int64_t b, int64_t n) {
      rmsprop_loop<T>(n, w + b, g + b, T(a.grad_scale), ms + b, mom ? mom + b : nullptr, T(a.lr),
                      T(a.weight_decay), T(rho), T(eps), T(mu));
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
    T* w = v.mutable_value().template mutable_data<T>();
    const T* g = a.grad->template data<T>();
    split(a.n, [&](int64_t b, int64_t n) {
      adagrad_loop<T>(n, w + b, g + b, T(a.grad_scale), acc + b, T(a.lr), T(a.weight_decay),
                      T(eps));
    });
  });
  ctx.set_output(0, v.value);
}

// ---- row updates ----------------------------------------------------------
// A gradient that is rows of a gather from the variable (an embedding
// shard's) arrives as those rows and their indices, and only those rows of
// the variable and its slots are touched: the cost follows the batch, not
// the variable. Inputs: (variable, rows, indices, lr[, gradient scale]).
// Repeated indices are summed first, as the dense gradient sums them; the
// scale (global-norm clipping's) multiplies the summed rows in the update's
// pass. sgd and adagrad give exactly the dense update (rows the batch did not
// name would not have moved); Adam's rows (lazy_adam) do not: the moments of
// unnamed rows do not decay.

std::vector<tensor_spec> row_optimizer_spec(const shape_context& c) {
  auto& var = c.inputs[0];
  auto& rows = c.inputs[1];
  auto& indices = c.inputs[2];
  auto& lr = c.inputs[3];
  if (var.type != dtype::float32 && var.type != dtype::float64)
    c.fail("variable must be float32 or float64, got " + var.to_string());
  if (var.dims.rank() < 1) c.fail("variable must have rows (rank >= 1), got " + var.to_string());
  detail::check_index_type(indices.type, c.op);
  if (rows.type != var.type ||
      !rows.dims.compatible_with(detail::gathered_rows_shape(indices.dims, var.dims)))
    c.fail("gradient rows " + rows.to_string() + " do not match indices " + indices.to_string() +
           " into variable " + var.to_string());
  if ((lr.type != dtype::float32 && lr.type != dtype::float64) || lr.dims.rank() != 0)
    c.fail("learning rate must be a float scalar, got " + lr.to_string());
  check_grad_scale(c, 4);
  return {var};
}

struct row_update_args {
  double lr;
  double grad_scale;  // 1 without the optional input
  const tensor* rows;
  std::vector<int64_t> index;  // variable row of each gradient row, checked
  int64_t row_size;            // elements per variable row
};

row_update_args read_row_args(variable_state& v, kernel_context& ctx) {
  if (!v.initialized())
    ctx.fail(error_code::failed_precondition,
             "variable is uninitialized (node '" + ctx.node_name + "')");
  const tensor& rows = ctx.inputs[0];
  const tensor& indices = ctx.inputs[1];
  detail::check_index_type(indices.type(), ctx.op);
  const auto& vd = v.value.dims().dims();
  if (vd.empty()) ctx.fail("variable must have rows (rank >= 1), got a scalar");
  tensor_spec var_spec{v.value.type(), v.value.dims()};
  if (rows.type() != v.value.type() ||
      rows.dims() != detail::gathered_rows_shape(indices.dims(), v.value.dims()))
    ctx.fail("gradient rows " + tensor_spec{rows.type(), rows.dims()}.to_string() +
             " do not match indices " + indices.dims().to_string() + " into variable " +
             var_spec.to_string());
  double lr = scalar_value(ctx.inputs[2], ctx, "learning rate");
  if (!std::isfinite(lr)) ctx.fail("learning rate is not finite");
  double scale = ctx.inputs.size() > 3 ? scalar_value(ctx.inputs[3], ctx, "gradient scale") : 1.0;
  int64_t row_size = 1;
  for (size_t k = 1; k < vd.size(); ++k) row_size *= vd[k];
  return {lr, scale, &rows,
          detail::checked_indices(ctx, indices, 0, vd[0], "variable " + var_spec.to_string()),
          row_size};
}

// Calls update(row, gradient row) for each distinct row, split across the pool
// for large updates; distinct rows never share memory.
template <class T, class Update>
void for_each_row(const detail::summed_rows<T>& s, int64_t row_size, Update update) {
  auto n = static_cast<int64_t>(s.index.size());
  parallel_for(n, std::max<int64_t>(1, parallel_grain / std::max<int64_t>(1, row_size)),
               [&](int64_t b, int64_t e) {
                 for (int64_t k = b; k < e; ++k)
                   update(s.index[static_cast<size_t>(k)], s.values.data() + k * row_size);
               });
}

void apply_sgd_rows(variable_state& v, kernel_context& ctx) {
  auto a = read_row_args(v, ctx);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    auto summed = detail::sum_repeated_rows<T>(*a.rows, a.index, a.row_size);
    T* w = v.mutable_value().template mutable_data<T>();
    for_each_row(summed, a.row_size, [&](int64_t r, const T* g) {
      sgd_loop<T>(a.row_size, w + r * a.row_size, g, T(a.grad_scale), T(a.lr), T(0));
    });
  });
  ctx.set_output(0, v.value);
}

void apply_adagrad_rows(variable_state& v, kernel_context& ctx) {
  auto a = read_row_args(v, ctx);
  double eps = ctx.attr<double>("epsilon");
  double initial = ctx.attr_or<double>("initial_accumulator", 0.0);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    auto summed = detail::sum_repeated_rows<T>(*a.rows, a.index, a.row_size);
    T* acc = slot_data<T>(v, "adagrad/accumulator", initial);
    T* w = v.mutable_value().template mutable_data<T>();
    for_each_row(summed, a.row_size, [&](int64_t r, const T* g) {
      int64_t at = r * a.row_size;
      adagrad_loop<T>(a.row_size, w + at, g, T(a.grad_scale), acc + at, T(a.lr), T(0), T(eps));
    });
  });
  ctx.set_output(0, v.value);
}

// Lazy Adam: each named row moves as apply_adam moves it (adam_loop, the same
// slots), so a row named in every step gets dense Adam's bits. The step count
// adam/t is the variable's, one per apply, as TensorFlow's LazyAdam takes the
// optimizer's iterations: a row's bias correction does not count its own updates.
void apply_adam_rows(variable_state& v, kernel_context& ctx) {
  auto a = read_row_args(v, ctx);
  auto [b1, b2, eps, c1, c2] = next_adam_step(v, ctx);
  visit_floating(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    auto summed = detail::sum_repeated_rows<T>(*a.rows, a.index, a.row_size);
    T* m = slot_data<T>(v, "adam/m");
    T* s = slot_data<T>(v, "adam/v");
    T* w = v.mutable_value().template mutable_data<T>();
    for_each_row(summed, a.row_size, [&](int64_t r, const T* g) {
      int64_t at = r * a.row_size;
      adam_loop<T>(a.row_size, w + at, g, T(a.grad_scale), m + at, s + at, T(0), T(b1), T(b2),
                   T(a.lr / c1), T(1.0 / std::sqrt(c2)), T(eps));
    });
  });
  ctx.set_output(0, v.value);
}

// --- apply_sgd_matmul and apply_adam_matmul: an update by matmul(a, b) ---
// Made by the graph optimizer from apply_sgd or apply_adam of a matmul's
// product that nothing else reads (a fully connected layer's weight gradient,
// x^T dy). The product is computed a block of rows at a time into a buffer
// that stays in cache, and applied from there, instead of being written out
// whole and read back: Overfeat's first such gradient is 453 MB, the CNN's
// 12.8 MB gradient is a fifth of its Adam update's memory traffic. Each block
// is matmul's own block product (gemm_rows) and is applied by apply_sgd's or
// apply_adam's loop, so the variable gets their bits.

struct product_dims {
  int64_t m, n, k;
};

// The product's dims for operands of dims a, b (rank 2, unknown allowed) and
// the transposes; fails naming what does not fit.
product_dims product_shape(const shape& a, const shape& b, bool ta, bool tb,
                           const std::function<void(const std::string&)>& fail_with) {
  if (a.rank() != 2 || b.rank() != 2)
    fail_with("operands must be rank 2, got " + a.to_string() + " and " + b.to_string());
  const int64_t ka = ta ? a[0] : a[1], kb = tb ? b[1] : b[0];
  if (ka >= 0 && kb >= 0 && ka != kb)
    fail_with("inner dimensions differ: " + a.to_string() + " and " + b.to_string());
  return {ta ? a[1] : a[0], tb ? b[0] : b[1], ka >= 0 ? ka : kb};
}

std::vector<tensor_spec> matmul_update_spec(const shape_context& c) {
  auto& var = c.inputs[0];
  auto& a = c.inputs[1];
  auto& b = c.inputs[2];
  auto& lr = c.inputs[3];
  if (var.type != dtype::float32 || a.type != dtype::float32 || b.type != dtype::float32)
    c.fail("variable and operands must be float32, got " + var.to_string() + ", " + a.to_string() +
           ", " + b.to_string());
  auto d = product_shape(a.dims, b.dims, c.attr_or<bool>("transpose_a", false),
                         c.attr_or<bool>("transpose_b", false),
                         [&](const std::string& why) { c.fail(why); });
  if (!shape{d.m, d.n}.compatible_with(var.dims))
    c.fail("product [" + std::to_string(d.m) + "," + std::to_string(d.n) +
           "] does not match variable " + var.to_string());
  if ((lr.type != dtype::float32 && lr.type != dtype::float64) || lr.dims.rank() != 0)
    c.fail("learning rate must be a float scalar, got " + lr.to_string());
  return {var};
}

// A matmul update's operands (inputs a, b, lr), checked against the variable.
struct matmul_update {
  const float *a, *b;
  bool ta, tb;
  product_dims d;
  double lr;
};

matmul_update read_matmul_update(variable_state& v, kernel_context& ctx) {
  if (!v.initialized())
    ctx.fail(error_code::failed_precondition,
             "variable is uninitialized (node '" + ctx.node_name + "')");
  const tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  const bool ta = ctx.attr_or<bool>("transpose_a", false);
  const bool tb = ctx.attr_or<bool>("transpose_b", false);
  if (v.value.type() != dtype::float32 || a.type() != dtype::float32 || b.type() != dtype::float32)
    ctx.fail("variable and operands must be float32");
  const auto d =
      product_shape(a.dims(), b.dims(), ta, tb, [&](const std::string& why) { ctx.fail(why); });
  if (v.value.dims() != shape{d.m, d.n})
    ctx.fail("product [" + std::to_string(d.m) + "," + std::to_string(d.n) +
             "] does not match variable " + v.value.dims().to_string());
  const double lr = scalar_value(ctx.inputs[2], ctx, "learning rate");
  if (!std::isfinite(lr)) ctx.fail("learning rate is not finite");
  return {a.data<float>(), b.data<float>(), ta, tb, d, lr};
}

// apply(offset, count, product) for each block of rows of the product, in
// parallel: `product` holds its `count` elements, which start at element
// `offset` of the variable.
template <class F>
void for_product_blocks(const matmul_update& u, F&& apply) {
  const auto& d = u.d;
  if (d.m == 0 || d.n == 0) return;
  auto block = [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> rows;  // no TBB call below: not reentered meanwhile
    rows.resize(static_cast<size_t>((r1 - r0) * d.n));
    gemm_rows(u.a, u.b, rows.data(), d.m, d.n, d.k, u.ta, u.tb, r0, r1);
    apply(r0 * d.n, (r1 - r0) * d.n, rows.data());
  };
  // matmul's own blocks where it splits the product by rows (a weight
  // gradient: fan-in by fan-out, taller than wide), so that each element is
  // the same library call's, with matmul's bits on any CPU.
  if (auto bounds = gemm_row_blocks(d.m, d.n, d.k); !bounds.empty()) {
    parallel_for(int64_t(bounds.size()) - 1, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) block(bounds[size_t(i)], bounds[size_t(i + 1)]);
    });
    return;
  }
  // Otherwise blocks of at most about 1 MiB of the product, in cache between
  // the two passes, and at least two per thread.
  const int64_t threads = std::max(
      1, std::min(tbb::this_task_arena::max_concurrency(), tbb::info::default_concurrency()));
  int64_t rows = std::max<int64_t>(8, (int64_t{1} << 18) / std::max<int64_t>(d.n, 1));
  rows = std::min(rows, std::max<int64_t>(8, (d.m + 2 * threads - 1) / (2 * threads)));
  parallel_for(d.m, rows, block);
}

void apply_sgd_matmul(variable_state& v, kernel_context& ctx) {
  const auto u = read_matmul_update(v, ctx);
  float* w = v.mutable_value().mutable_data<float>();
  for_product_blocks(u, [&](int64_t at, int64_t n, const float* g) {
    sgd_loop<float>(n, w + at, g, 1.0f, float(u.lr), 0.0f);
  });
  ctx.set_output(0, v.value);
}

void apply_adam_matmul(variable_state& v, kernel_context& ctx) {
  const auto u = read_matmul_update(v, ctx);
  auto [b1, b2, eps, c1, c2] = next_adam_step(v, ctx);
  float* m = slot_data<float>(v, "adam/m");
  float* s = slot_data<float>(v, "adam/v");
  float* w = v.mutable_value().mutable_data<float>();
  for_product_blocks(u, [&](int64_t at, int64_t n, const float* g) {
    adam_loop<float>(n, w + at, g, 1.0f, m + at, s + at, 0.0f, float(b1), float(b2),
                     float(u.lr / c1), float(1.0 / std::sqrt(c2)), float(eps));
  });
  ctx.set_output(0, v.value);
}

op_def row_optimizer_op(const char* name, update_fn fn, const char* summary) {
  return {.name = name,
          .num_inputs = -1,  // (variable, rows, indices, lr[, gradient scale])
          .min_inputs = 4,
          .infer = row_optimizer_spec,
          .update = std::move(fn),
          .stateful = true,
          .summary = summary,
          .not_differentiable = true,
          .host_memory_inputs = {1}};  // the indices
}

op_def optimizer_op(const char* name, update_fn fn, const char* summary) {
  return {.name = name,
          .num_inputs = -1,  // (variable, gradient, lr[, gradient scale])
          .min_inputs = 3,
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
    op_registrar({.name = "apply_sgd_matmul",
                  .num_inputs = 4,  // (variable, a, b, lr)
                  .infer = matmul_update_spec,
                  .update = apply_sgd_matmul,
                  .stateful = true,
                  .summary = "w -= lr * matmul(a, b) (transpose_a, transpose_b), made by the graph "
                             "optimizer from apply_sgd of a matmul's product",
                  .not_differentiable = true}),
    op_registrar({.name = "apply_adam_matmul",
                  .num_inputs = 4,  // (variable, a, b, lr)
                  .infer = matmul_update_spec,
                  .update = apply_adam_matmul,
                  .stateful = true,
                  .summary = "apply_adam with gradient matmul(a, b) (transpose_a, transpose_b), "
                             "made by the graph optimizer from apply_adam of a matmul's product",
                  .not_differentiable = true}),
    op_registrar(row_optimizer_op("apply_sgd_rows", apply_sgd_rows,
                                  "w[i] -= lr * g for the rows i named (repeats summed)")),
    op_registrar(row_optimizer_op("apply_adagrad_rows", apply_adagrad_rows,
                                  "AdaGrad on the rows named (slot adagrad/accumulator)")),
    op_registrar(row_optimizer_op("apply_adam_rows", apply_adam_rows,
                                  "lazy Adam: Adam on the rows named, other rows' moments kept "
                                  "(slots adam/m, adam/v, adam/t)")),
};

}  // namespace

}  // namespace actorflow
