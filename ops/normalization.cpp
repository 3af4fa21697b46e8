// Batch and layer normalization (ops/normalization.hpp says what they compute
// and where they differ from TensorFlow). x is viewed as rows of C channels,
// contiguous: channels last. Per-channel sums are taken by blocks of rows in
// parallel, each block into its own partial sums, added in block order, so a
// result does not depend on how threads were scheduled; they accumulate in
// double, around a shift (the first row), which keeps the variance exact
// where the mean is large against the spread.
#include "ops/normalization.hpp"

#include <algorithm>
#include <cmath>

#include "ops/array.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

// ---------------------------------------------------------------------------------------------
// per-channel sums over rows

// Calls add_block(row_begin, row_end, acc) for blocks of rows, in parallel;
// acc holds `arrays` arrays of `channels` doubles, zeroed, one set per
// block. Returns their sum over blocks.
template <class F>
std::vector<double> channel_sums(int64_t rows, int64_t channels, int arrays, F&& add_block) {
  const int64_t width = arrays * channels;
  const int64_t per_block = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(1, channels));
  const int64_t blocks = std::clamp<int64_t>((rows + per_block - 1) / per_block, 1, 256);
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      add_block(rows * b / blocks, rows * (b + 1) / blocks, partial.data() + b * width);
  });
  std::vector<double> total(partial.begin(), partial.begin() + width);
  for (int64_t b = 1; b < blocks; ++b)
    for (int64_t k = 0; k < width; ++k) total[size_t(k)] += partial[size_t(b * width + k)];
  return total;
}

// Rows per task for a pass that touches each element once.
int64_t row_grain(int64_t channels) {
  return std::max<int64_t>(1, parallel_grain / std::max<int64_t>(1, channels));
}

void check_floating(const std::string& op, dtype t, const char* what) {
  if (t == dtype::bfloat16) fail_no_bfloat16_kernel(op);
  if (!is_floating(t))
    fail(op, std::string(what) + " must be float32 or float64, got " + dtype_name(t));
}

void check_same_dtype(const std::string& op, const tensor_spec& x, const tensor_spec& other,
                      const char* what) {
  if (other.type != x.type)
    fail(op, std::string(what) + " is " + other.to_string() + " but x is " + x.to_string() +
                 ": they must have one dtype");
}

// A [C] input against x's channel count (unknown dims pass).
void check_per_channel(const std::string& op, const tensor_spec& s, int64_t channels,
                       const char* what) {
  if (s.dims.rank() != 1 || (channels >= 0 && s.dims[0] >= 0 && s.dims[0] != channels))
    fail(op, std::string(what) + " has shape " + s.dims.to_string() + " but x has " +
                 (channels >= 0 ? std::to_string(channels) : std::string("?")) +
                 " channels (its last axis): it must be [" +
                 (channels >= 0 ? std::to_string(channels) : std::string("C")) + "]");
}

// ---------------------------------------------------------------------------------------------
// fused_batch_norm

struct batch_norm_attrs {
  double epsilon;
  bool training;
  double avg_factor;
  // Whether the mean and variance inputs are read.
  bool reads_moments() const { return !training || avg_factor != 1.0; }
};

batch_norm_attrs read_batch_norm_attrs(const std::string& op, const attr_map& attrs) {
  batch_norm_attrs a{get_attr_or<double>(attrs, "epsilon", op, 0.001),
                     get_attr_or<bool>(attrs, "is_training", op, true),
                     get_attr_or<double>(attrs, "exponential_avg_factor", op, 1.0)};
  if (!(a.epsilon >= 0) || !std::isfinite(a.epsilon))
    fail(op, "epsilon must be finite and >= 0, got " + std::to_string(a.epsilon));
  if (!(a.avg_factor >= 0 && a.avg_factor <= 1))
    fail(op, "exponential_avg_factor must be in [0, 1], got " + std::to_string(a.avg_factor));
  return a;
}

// The checks shared by the shape function and the kernel; unknown dims pass.
void check_batch_norm_inputs(const std::string& op, const std::vector<tensor_spec>& in,
                             const batch_norm_attrs& a) {
  const tensor_spec& x = in[0];
  check_floating(op, x.type, "x");
  if (x.dims.rank() < 2)
    fail(op, "x must have rank >= 2 with channels last ([N, C] or [N, H, W, C]), got " +
                 x.dims.to_string());
  const int64_t channels = x.dims[x.dims.rank() - 1];
  const char* names[] = {"x", "scale", "offset", "mean", "variance"};
  for (size_t i = 1; i < 5; ++i) {
    check_same_dtype(op, x, in[i], names[i]);
    const bool may_be_empty = i >= 3 && !a.reads_moments();
    if (may_be_empty && in[i].dims.rank() == 1 && in[i].dims[0] == 0) continue;
    check_per_channel(op, in[i], channels, names[i]);
  }
}

std::vector<tensor_spec> batch_norm_infer(const shape_context& c) {
  auto a = read_batch_norm_attrs(c.op, c.attrs);
  check_batch_norm_inputs(c.op, c.inputs, a);
  const tensor_spec& x = c.inputs[0];
  const tensor_spec per_channel{x.type, shape{x.dims[x.dims.rank() - 1]}};
  return {x, per_channel, per_channel, per_channel, per_channel};
}

std::vector<tensor_spec> specs_of(const std::vector<tensor>& inputs) {
  std::vector<tensor_spec> specs;
  for (auto& t : inputs) specs.push_back({t.type(), t.dims()});
  return specs;
}

// mean and biased variance per channel of x [rows, C].
template <class T>
void batch_moments(const T* x, int64_t rows, int64_t c, std::vector<double>& mean,
                   std::vector<double>& variance) {
  const T* shift = x;  // the first row
  auto sums = channel_sums(rows, c, 2, [&](int64_t r0, int64_t r1, double* acc) {
    double* s1 = acc;
    double* s2 = acc + c;
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * c;
      for (int64_t j = 0; j < c; ++j) {
        const double d = double(row[j]) - double(shift[j]);
        s1[j] += d;
        s2[j] += d * d;
      }
    }
  });
  mean.resize(size_t(c));
  variance.resize(size_t(c));
  const double n = double(rows);
  for (int64_t j = 0; j < c; ++j) {
    const double m = sums[size_t(j)] / n;
    mean[size_t(j)] = double(shift[j]) + m;
    variance[size_t(j)] = std::max(0.0, sums[size_t(c + j)] / n - m * m);
  }
}

// y = (x - m) * a + b per channel, a pass over rows in parallel. The mean is
// subtracted first: folded into b, it would cancel against x * a in float
// where the mean is large against the spread.
template <class T>
void normalize_rows(const T* x, T* y, int64_t rows, int64_t c, const std::vector<T>& m,
                    const std::vector<T>& a, const std::vector<T>& b) {
  parallel_for(rows, row_grain(c), [&](int64_t r0, int64_t r1) {
    const T* pm = m.data();
    const T* pa = a.data();
    const T* pb = b.data();
    for (int64_t r = r0; r < r1; ++r) {
      const T* in = x + r * c;
      T* out = y + r * c;
      for (int64_t j = 0; j < c; ++j) out[j] = (in[j] - pm[j]) * pa[j] + pb[j];
    }
  });
}

template <class T>
void batch_norm_compute(kernel_context& ctx, const batch_norm_attrs& a) {
  const tensor& x = ctx.input(0);
  const int64_t c = x.dims().dim(-1);
  const int64_t rows = c == 0 ? 0 : x.num_elements() / c;
  const T* scale = ctx.input(1).data<T>();
  const T* offset = ctx.input(2).data<T>();
  std::vector<double> mean(static_cast<size_t>(c)), variance(static_cast<size_t>(c));
  std::vector<double> out_mean(static_cast<size_t>(c)), out_variance(static_cast<size_t>(c));
  if (a.training) {
    if (rows == 1)
      ctx.fail(error_code::invalid_argument,
               "training mode needs more than one value per channel to compute a variance, but "
               "x " +
                   x.dims().to_string() + " has one (a batch of one); use inference mode");
    if (rows > 1) batch_moments(x.data<T>(), rows, c, mean, variance);
    const double bessel = rows > 1 ? double(rows) / double(rows - 1) : 1.0;
    const double f = a.avg_factor;
    for (int64_t j = 0; j < c; ++j) {
      out_mean[size_t(j)] = mean[size_t(j)];
      out_variance[size_t(j)] = variance[size_t(j)] * bessel;
      if (f != 1.0) {
        out_mean[size_t(j)] = (1 - f) * double(ctx.input(3).data<T>()[j]) + f * out_mean[size_t(j)];
        out_variance[size_t(j)] =
            (1 - f) * double(ctx.input(4).data<T>()[j]) + f * out_variance[size_t(j)];
      }
    }
  } else {
    for (int64_t j = 0; j < c; ++j) {
      const double v = double(ctx.input(4).data<T>()[j]);
      if (!(v >= 0))
        ctx.fail(error_code::invalid_argument,
                 "variance[" + std::to_string(j) + "] is " + std::to_string(v) +
                     ": a variance must be >= 0 (a moving variance restored from a corrupted "
                     "checkpoint?)");
      mean[size_t(j)] = out_mean[size_t(j)] = double(ctx.input(3).data<T>()[j]);
      variance[size_t(j)] = out_variance[size_t(j)] = v;
    }
  }
  std::vector<T> centre(static_cast<size_t>(c)), mul(static_cast<size_t>(c)),
      add(static_cast<size_t>(c));
  tensor& saved_mean = ctx.allocate_output(3, x.type(), shape{c});
  tensor& saved_inv_std = ctx.allocate_output(4, x.type(), shape{c});
  for (int64_t j = 0; j < c; ++j) {
    const double inv_std = 1.0 / std::sqrt(variance[size_t(j)] + a.epsilon);
    saved_mean.mutable_data<T>()[j] = T(mean[size_t(j)]);
    saved_inv_std.mutable_data<T>()[j] = T(inv_std);
    centre[size_t(j)] = T(mean[size_t(j)]);
    mul[size_t(j)] = T(double(scale[j]) * inv_std);
    add[size_t(j)] = offset[j];
  }
  tensor& batch_mean = ctx.allocate_output(1, x.type(), shape{c});
  tensor& batch_variance = ctx.allocate_output(2, x.type(), shape{c});
  for (int64_t j = 0; j < c; ++j) {
    batch_mean.mutable_data<T>()[j] = T(out_mean[size_t(j)]);
    batch_variance.mutable_data<T>()[j] = T(out_variance[size_t(j)]);
  }
  tensor& y = ctx.allocate_output(0, x.type(), x.dims());
  normalize_rows(x.data<T>(), y.mutable_data<T>(), rows, c, centre, mul, add);
}

void batch_norm_kernel(kernel_context& ctx) {
  auto a = read_batch_norm_attrs(ctx.op, ctx.attrs);
  ctx.outputs.resize(5);
  check_batch_norm_inputs(ctx.op, specs_of(ctx.inputs), a);
  visit_floating(ctx.input(0).type(), ctx.op.c_str(),
                 [&](auto tag) { batch_norm_compute<decltype(tag)>(ctx, a); });
}

// ---------------------------------------------------------------------------------------------
// fused_batch_norm_grad: inputs dy, x, scale, saved_mean, saved_inv_std

void check_grad_inputs(const std::string& op, const std::vector<tensor_spec>& in) {
  const tensor_spec& x = in[1];
  check_floating(op, x.type, "x");
  if (x.dims.rank() < 1) fail(op, "x must have rank >= 1, got a scalar ()");
  check_same_dtype(op, x, in[0], "dy");
  if (!in[0].dims.compatible_with(x.dims))
    fail(op, "dy " + in[0].dims.to_string() + " and x " + x.dims.to_string() + " differ in shape");
  const char* names[] = {"dy", "x", "scale", "the saved mean", "the saved inverse std"};
  for (size_t i = 2; i < 5; ++i) check_same_dtype(op, x, in[i], names[i]);
}

std::vector<tensor_spec> batch_norm_grad_infer(const shape_context& c) {
  check_grad_inputs(c.op, c.inputs);
  const tensor_spec& x = c.inputs[1];
  if (x.dims.rank() < 2)
    c.fail("x must have rank >= 2 with channels last, got " + x.dims.to_string());
  const int64_t channels = x.dims[x.dims.rank() - 1];
  const char* names[] = {"dy", "x", "scale", "saved_mean", "saved_inv_std"};
  for (size_t i = 2; i < 5; ++i) check_per_channel(c.op, c.inputs[i], channels, names[i]);
  const tensor_spec per_channel{x.type, shape{channels}};
  return {x, per_channel, per_channel};
}

template <class T>
void batch_norm_grad_compute(kernel_context& ctx, bool training) {
  const tensor& dy_t = ctx.input(0);
  const tensor& x_t = ctx.input(1);
  const int64_t c = x_t.dims().dim(-1);
  const int64_t rows = c == 0 ? 0 : x_t.num_elements() / c;
  const T* dy = dy_t.data<T>();
  const T* x = x_t.data<T>();
  const T* scale = ctx.input(2).data<T>();
  const T* mean = ctx.input(3).data<T>();
  const T* inv_std = ctx.input(4).data<T>();
  // sum(dy) and sum(dy * (x - mean)) per channel.
  auto sums = channel_sums(rows, c, 2, [&](int64_t r0, int64_t r1, double* acc) {
    double* s_dy = acc;
    double* s_dyx = acc + c;
    for (int64_t r = r0; r < r1; ++r) {
      const T* g = dy + r * c;
      const T* in = x + r * c;
      for (int64_t j = 0; j < c; ++j) {
        s_dy[j] += double(g[j]);
        s_dyx[j] += double(g[j]) * (double(in[j]) - double(mean[j]));
      }
    }
  });
  tensor& dscale = ctx.allocate_output(1, x_t.type(), shape{c});
  tensor& doffset = ctx.allocate_output(2, x_t.type(), shape{c});
  // dx = k_dy * dy + k_x * (x - mean) + k_1 per channel.
  std::vector<T> k_dy(static_cast<size_t>(c)), k_x(static_cast<size_t>(c)),
      k_1(static_cast<size_t>(c));
  const double n = double(std::max<int64_t>(rows, 1));
  for (int64_t j = 0; j < c; ++j) {
    const double s = double(inv_std[j]), g = double(scale[j]) * s;
    const double sum_dy = sums[size_t(j)], sum_dyx = sums[size_t(c + j)];
    dscale.mutable_data<T>()[j] = T(sum_dyx * s);
    doffset.mutable_data<T>()[j] = T(sum_dy);
    k_dy[size_t(j)] = T(g);
    if (training) {
      // dx = g * (dy - mean(dy) - x_hat * mean(dy * x_hat)), x_hat = (x - mean) * s.
      const double kx = -g * s * s * sum_dyx / n;
      k_x[size_t(j)] = T(kx);
      k_1[size_t(j)] = T(-g * sum_dy / n);
    }
  }
  tensor& dx_t = ctx.allocate_output(0, x_t.type(), x_t.dims());
  T* dx = dx_t.mutable_data<T>();
  parallel_for(rows, row_grain(c), [&](int64_t r0, int64_t r1) {
    const T* a = k_dy.data();
    const T* b = k_x.data();
    const T* d = k_1.data();
    for (int64_t r = r0; r < r1; ++r) {
      const T* g = dy + r * c;
      const T* in = x + r * c;
      T* out = dx + r * c;
      if (training)
        for (int64_t j = 0; j < c; ++j) out[j] = a[j] * g[j] + b[j] * (in[j] - mean[j]) + d[j];
      else
        for (int64_t j = 0; j < c; ++j) out[j] = a[j] * g[j];
    }
  });
}

void batch_norm_grad_kernel(kernel_context& ctx) {
  const bool training = ctx.attr_or<bool>("is_training", true);
  auto specs = specs_of(ctx.inputs);
  check_grad_inputs(ctx.op, specs);
  if (ctx.input(0).dims() != ctx.input(1).dims())
    ctx.fail("dy " + ctx.input(0).dims().to_string() + " and x " + ctx.input(1).dims().to_string() +
             " differ in shape");
  if (ctx.input(1).rank() < 2) ctx.fail("x must have rank >= 2 with channels last");
  const int64_t c = ctx.input(1).dims().dim(-1);
  const char* names[] = {"dy", "x", "scale", "saved_mean", "saved_inv_std"};
  for (size_t i = 2; i < 5; ++i) check_per_channel(ctx.op, specs[i], c, names[i]);
  ctx.outputs.resize(3);
  visit_floating(ctx.input(1).type(), ctx.op.c_str(),
                 [&](auto tag) { batch_norm_grad_compute<decltype(tag)>(ctx, training); });
}

void batch_norm_grad_fn(grad_context& c) {
  auto d = fused_batch_norm_grad(c.grad(0), c.input(0), c.input(1), c.outputs[3], c.outputs[4],
                                 c.attr_or<bool>("is_training", true));
  c.input_grads = {d[0], d[1], d[2], output(), output()};
}

// ---------------------------------------------------------------------------------------------
// layer_norm: rows of x over the axes from begin_norm_axis on

struct row_split {
  int64_t axis;  // begin_norm_axis, normalized
  shape leading, trailing;
};

row_split split_rows(const std::string& op, const shape& x, int64_t begin_norm_axis) {
  const int64_t rank = x.rank();
  if (rank < 1) fail(op, "x must have rank >= 1, got a scalar ()");
  const int64_t axis = begin_norm_axis < 0 ? begin_norm_axis + rank : begin_norm_axis;
  if (axis < 0 || axis >= rank)
    fail(op, "begin_norm_axis " + std::to_string(begin_norm_axis) + " is out of range for x " +
                 x.to_string() + " (valid: [" + std::to_string(-rank) + ", " +
                 std::to_string(rank) + "))");
  std::vector<int64_t> lead, trail;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? lead : trail).push_back(x[i]);
  return {axis, shape(lead), shape(trail)};
}

void check_layer_norm_params(const std::string& op, const tensor_spec& x, const row_split& s,
                             const tensor_spec& param, const char* what) {
  check_same_dtype(op, x, param, what);
  if (!param.dims.compatible_with(s.trailing))
    fail(op, std::string(what) + " has shape " + param.dims.to_string() + " but x " +
                 x.dims.to_string() + " is normalized over axes of shape " +
                 s.trailing.to_string() + " (begin_norm_axis " + std::to_string(s.axis) + ")");
}

std::vector<tensor_spec> layer_norm_infer(const shape_context& c) {
  const tensor_spec& x = c.inputs[0];
  check_floating(c.op, x.type, "x");
  auto s = split_rows(c.op, x.dims, c.attr_or<int64_t>("begin_norm_axis", -1));
  check_layer_norm_params(c.op, x, s, c.inputs[1], "scale");
  check_layer_norm_params(c.op, x, s, c.inputs[2], "offset");
  const double epsilon = c.attr_or<double>("epsilon", 0.001);
  if (!(epsilon >= 0) || !std::isfinite(epsilon))
    c.fail("epsilon must be finite and >= 0, got " + std::to_string(epsilon));
  const tensor_spec per_row{x.type, s.leading};
  return {x, per_row, per_row};
}

template <class T>
void layer_norm_compute(kernel_context& ctx, int64_t rows, int64_t cols, double epsilon) {
  const tensor& x_t = ctx.input(0);
  const T* x = x_t.data<T>();
  const T* scale = ctx.input(1).data<T>();
  const T* offset = ctx.input(2).data<T>();
  T* mean = ctx.outputs[1].mutable_data<T>();
  T* inv_std = ctx.outputs[2].mutable_data<T>();
  T* y = ctx.outputs[0].mutable_data<T>();
  // A row is read twice from cache: its mean, then the squares about it.
  parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* in = x + r * cols;
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += double(in[j]);
      const double m = sum / double(cols);
      double sq = 0;
      for (int64_t j = 0; j < cols; ++j) sq += (double(in[j]) - m) * (double(in[j]) - m);
      const double s = 1.0 / std::sqrt(sq / double(cols) + epsilon);
      mean[r] = T(m);
      inv_std[r] = T(s);
      const T tm = T(m), ts = T(s);
      T* out = y + r * cols;
      for (int64_t j = 0; j < cols; ++j) out[j] = (in[j] - tm) * ts * scale[j] + offset[j];
    }
  });
}

void layer_norm_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  auto specs = specs_of(ctx.inputs);
  check_floating(ctx.op, x.type(), "x");
  auto s = split_rows(ctx.op, x.dims(), ctx.attr_or<int64_t>("begin_norm_axis", -1));
  check_layer_norm_params(ctx.op, specs[0], s, specs[1], "scale");
  check_layer_norm_params(ctx.op, specs[0], s, specs[2], "offset");
  const int64_t cols = s.trailing.num_elements();
  const int64_t rows = s.leading.num_elements();
  ctx.outputs.resize(3);
  ctx.allocate_output(0, x.type(), x.dims());
  ctx.allocate_output(1, x.type(), s.leading);
  ctx.allocate_output(2, x.type(), s.leading);
  if (cols == 0 || rows == 0) return;
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    layer_norm_compute<decltype(tag)>(ctx, rows, cols, ctx.attr_or<double>("epsilon", 0.001));
  });
}

// ---------------------------------------------------------------------------------------------
// layer_norm_grad: inputs dy, x, scale, mean, inv_std

std::vector<tensor_spec> layer_norm_grad_infer(const shape_context& c) {
  check_grad_inputs(c.op, c.inputs);
  const tensor_spec& x = c.inputs[1];
  auto s = split_rows(c.op, x.dims, c.attr_or<int64_t>("begin_norm_axis", -1));
  check_layer_norm_params(c.op, x, s, c.inputs[2], "scale");
  for (size_t i : {3, 4})
    if (!c.inputs[i].dims.compatible_with(s.leading))
      c.fail(std::string(i == 3 ? "mean" : "inv_std") + " has shape " +
             c.inputs[i].dims.to_string() + " but x's rows are " + s.leading.to_string());
  return {x, c.inputs[2], c.inputs[2]};
}

template <class T>
void layer_norm_grad_compute(kernel_context& ctx, int64_t rows, int64_t cols) {
  const T* dy = ctx.input(0).data<T>();
  const T* x = ctx.input(1).data<T>();
  const T* scale = ctx.input(2).data<T>();
  const T* mean = ctx.input(3).data<T>();
  const T* inv_std = ctx.input(4).data<T>();
  T* dx = ctx.outputs[0].mutable_data<T>();
  // dx per row: g = dy * scale, x_hat = (x - mean) * s,
  // dx = s * (g - mean(g) - x_hat * mean(g * x_hat)); dscale and doffset are
  // sums over rows, taken in the same pass.
  auto sums = channel_sums(rows, cols, 2, [&](int64_t r0, int64_t r1, double* acc) {
    double* s_dyx = acc;
    double* s_dy = acc + cols;
    for (int64_t r = r0; r < r1; ++r) {
      const T* g = dy + r * cols;
      const T* in = x + r * cols;
      const double m = double(mean[r]), s = double(inv_std[r]);
      double sum_g = 0, sum_gx = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (double(in[j]) - m) * s;
        const double gs = double(g[j]) * double(scale[j]);
        sum_g += gs;
        sum_gx += gs * xh;
        s_dyx[j] += double(g[j]) * xh;
        s_dy[j] += double(g[j]);
      }
      const double mg = sum_g / double(cols), mgx = sum_gx / double(cols);
      T* out = dx + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (double(in[j]) - m) * s;
        out[j] = T(s * (double(g[j]) * double(scale[j]) - mg - xh * mgx));
      }
    }
  });
  T* dscale = ctx.outputs[1].mutable_data<T>();
  T* doffset = ctx.outputs[2].mutable_data<T>();
  for (int64_t j = 0; j < cols; ++j) {
    dscale[j] = T(sums[size_t(j)]);
    doffset[j] = T(sums[size_t(cols + j)]);
  }
}

void layer_norm_grad_kernel(kernel_context& ctx) {
  auto specs = specs_of(ctx.inputs);
  check_grad_inputs(ctx.op, specs);
  const tensor& x = ctx.input(1);
  if (ctx.input(0).dims() != x.dims())
    ctx.fail("dy " + ctx.input(0).dims().to_string() + " and x " + x.dims().to_string() +
             " differ in shape");
  auto s = split_rows(ctx.op, x.dims(), ctx.attr_or<int64_t>("begin_norm_axis", -1));
  check_layer_norm_params(ctx.op, specs[1], s, specs[2], "scale");
  for (size_t i : {3, 4})
    if (ctx.input(i).dims() != s.leading)
      ctx.fail(std::string(i == 3 ? "mean" : "inv_std") + " has shape " +
               ctx.input(i).dims().to_string() + " but x's rows are " + s.leading.to_string());
  const int64_t cols = s.trailing.num_elements(), rows = s.leading.num_elements();
  ctx.outputs.resize(3);
  ctx.allocate_output(0, x.type(), x.dims());
  ctx.allocate_output(1, x.type(), ctx.input(2).dims());
  ctx.allocate_output(2, x.type(), ctx.input(2).dims());
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    if (rows == 0 || cols == 0) {
      for (size_t i : {1, 2})
        std::fill_n(ctx.outputs[i].mutable_data<T>(), ctx.outputs[i].num_elements(), T(0));
      return;
    }
    layer_norm_grad_compute<T>(ctx, rows, cols);
  });
}

void layer_norm_grad_fn(grad_context& c) {
  auto outs = make_op_outputs("layer_norm_grad",
                              {c.grad(0), c.input(0), c.input(1), c.outputs[1], c.outputs[2]},
                              {{"begin_norm_axis", c.attr_or<int64_t>("begin_norm_axis", -1)}});
  c.input_grads = {outs[0], outs[1], outs[2]};
}

const op_registrar registrations[] = {
    op_registrar({.name = "fused_batch_norm",
                  .num_inputs = 5,
                  .infer = batch_norm_infer,
                  .kernel = batch_norm_kernel,
                  .summary = "batch normalization, channels last: the batch's statistics "
                             "(training) or the given ones (inference)",
                  .gradient = batch_norm_grad_fn}),
    op_registrar({.name = "fused_batch_norm_grad",
                  .num_inputs = 5,
                  .infer = batch_norm_grad_infer,
                  .kernel = batch_norm_grad_kernel,
                  .summary = "gradient of fused_batch_norm's y for x, scale and offset",
                  // TensorFlow's FusedBatchNormGradGrad has no counterpart here yet.
                  .not_differentiable = true}),
    op_registrar({.name = "layer_norm",
                  .num_inputs = 3,
                  .infer = layer_norm_infer,
                  .kernel = layer_norm_kernel,
                  .summary = "normalization of each row over the axes from begin_norm_axis on",
                  .gradient = layer_norm_grad_fn}),
    op_registrar({.name = "layer_norm_grad",
                  .num_inputs = 5,
                  .infer = layer_norm_grad_infer,
                  .kernel = layer_norm_grad_kernel,
                  .summary = "gradient of layer_norm's y for x, scale and offset",
                  .not_differentiable = true}),

};

output empty_per_channel(const output& like) {
  return constant(like.owner(), tensor(like.type(), shape{0}));
}

}  // namespace

batch_norm_outputs fused_batch_norm(output x, output scale, output offset, output mean,
                                    output variance, const batch_norm_options& o,
                                    const std::string& name) {
  if (!mean.valid()) mean = empty_per_channel(x);
  if (!variance.valid()) variance = empty_per_channel(x);
  auto outs = make_op_outputs("fused_batch_norm", {x, scale, offset, mean, variance},
                              {{"epsilon", o.epsilon},
                               {"is_training", o.is_training},
                               {"exponential_avg_factor", o.exponential_avg_factor}},
                              name);
  return {outs[0], outs[1], outs[2], outs[3], outs[4]};
}

std::vector<output> fused_batch_norm_grad(output dy, output x, output scale, output saved_mean,
                                          output saved_inv_std, bool is_training,
                                          const std::string& name) {
  return make_op_outputs("fused_batch_norm_grad", {dy, x, scale, saved_mean, saved_inv_std},
                         {{"is_training", is_training}}, name);
}

layer_norm_outputs layer_norm(output x, output scale, output offset, double epsilon,
                              int64_t begin_norm_axis, const std::string& name) {
  auto outs = make_op_outputs("layer_norm", {x, scale, offset},
                              {{"epsilon", epsilon}, {"begin_norm_axis", begin_norm_axis}}, name);
  return {outs[0], outs[1], outs[2]};
}

folded_filter fold_batch_norm_into_filter(const tensor& filter, const tensor& scale,
                                          const tensor& offset, const tensor& mean,
                                          const tensor& variance, double epsilon) {
  const char* op = "fold_batch_norm_into_filter";
  if (filter.rank() != 4)
    fail(op, "the filter must be [KH, KW, C, K], got " + filter.dims().to_string());
  const int64_t k = filter.dims()[3];
  for (const tensor* t : {&scale, &offset, &mean, &variance})
    if (t->type() != filter.type() || t->dims() != shape{k})
      fail(op, "batch norm parameters must be [" + std::to_string(k) +
                   "] of the filter's dtype, got " + tensor_spec{t->type(), t->dims()}.to_string());
  folded_filter out{filter.clone(), tensor(filter.type(), shape{k})};
  visit_floating(filter.type(), op, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> s(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const double v = double(variance.data<T>()[j]);
      if (!(v >= 0)) fail(op, "variance[" + std::to_string(j) + "] is " + std::to_string(v));
      const double sj = double(scale.data<T>()[j]) / std::sqrt(v + epsilon);
      s[size_t(j)] = T(sj);
      out.bias.mutable_data<T>()[j] =
          T(double(offset.data<T>()[j]) - double(mean.data<T>()[j]) * sj);
    }
    T* w = out.filter.mutable_data<T>();
    for (int64_t i = 0; i < out.filter.num_elements(); ++i) w[i] *= s[size_t(i % k)];
  });
  return out;
}

batch_norm_layer_params make_batch_norm_layer(graph& g, int64_t channels, const std::string& name,
                                              double momentum, double epsilon, dtype type) {
  if (channels < 1)
    fail("batch_norm_layer",
         "'" + name + "' needs a known channel count, got " + std::to_string(channels));
  batch_norm_layer_params p;
  p.gamma = make_variable(fill(g, {channels}, 1.0, type), name + "/gamma");
  p.beta = make_variable(fill(g, {channels}, 0.0, type), name + "/beta");
  p.moving_mean = make_variable(fill(g, {channels}, 0.0, type), name + "/moving_mean");
  p.moving_variance = make_variable(fill(g, {channels}, 1.0, type), name + "/moving_variance");
  p.momentum = momentum;
  p.epsilon = epsilon;
  return p;
}

output batch_norm_layer(output x, const batch_norm_layer_params& p, bool training,
                        const std::string& name) {
  graph& g = x.owner();
  batch_norm_options o;
  o.epsilon = p.epsilon;
  o.is_training = training;
  if (!training)
    return fused_batch_norm(x, p.gamma.value(), p.beta.value(), p.moving_mean.value(),
                            p.moving_variance.value(), o, name)
        .y;
  auto bn = fused_batch_norm(x, p.gamma.value(), p.beta.value(), output(), output(), o, name);
  for (auto [v, value] :
       {std::pair{p.moving_mean, bn.batch_mean}, std::pair{p.moving_variance, bn.batch_variance}})
    g.add_to_collection(update_ops_collection,
                        operation(&g, assign_moving_average(v, value, p.momentum).ref().node));
  return bn.y;
}

operation train_step_with_updates(graph& g, operation train, const std::string& name) {
  auto updates = g.collection(update_ops_collection);
  if (updates.empty()) return train;
  updates.push_back(train);
  return group(g, updates, name);
}

}  // namespace actorflow
