// max_pool, avg_pool and their gradients. Loops run over windows with the
// channel dimension innermost (contiguous in NHWC, so it vectorizes); the
// forward ops split output rows across threads, the gradients split images
// (windows of one image may overlap, so their scatter stays on one thread).
#include "ops/pool.hpp"

#include <algorithm>

#include "ops/geometry/conv_window.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

using conv_detail::geometry;

// --- validation shared by the shape functions and the kernels ---

geometry pool_geometry(const std::string& op, const shape& in, const attr_map& attrs) {
  if (in.rank() != 4) fail(op, "input must be rank 4 [N,H,W,C], got " + in.to_string());
  auto k = conv_detail::spatial_pair(attrs, "ksize", op);
  return conv_detail::make_geometry(
      in, k[0], k[1], attrs, "strides", op,
      "ksize (" + std::to_string(k[0]) + "," + std::to_string(k[1]) + ")");
}

shape pool_output_shape(const geometry& g) { return shape{g.n, g.oh, g.ow, g.c}; }

void check_floating(const std::string& op, dtype t, const char* what) {
  if (t == dtype::bfloat16) fail_no_bfloat16_kernel(op);
  if (!is_floating(t))
    fail(op, std::string(what) + " must be float32 or float64, got " + dtype_name(t));
}

void check_same_type(const std::string& op, dtype a, dtype b, const char* an, const char* bn) {
  if (a != b)
    fail(op, std::string(an) + " and " + bn + " dtypes differ: " + dtype_name(a) + " vs " +
                 dtype_name(b));
}

void check_pooled_shape(const std::string& op, const geometry& g, const shape& s,
                        const char* what) {
  shape expect = pool_output_shape(g);
  if (s.rank() != 4 || !s.compatible_with(expect))
    fail(op, std::string(what) + " shape " + s.to_string() +
                 " does not match the pooled output shape " + expect.to_string());
}

// The input rows [hs, he) x cols [ws, we) of output (oy, ox); never empty
// (TF's padding never exceeds kernel - 1, see compute_axis).
struct window {
  int64_t hs, he, ws, we;
  int64_t count() const { return (he - hs) * (we - ws); }
};

window window_at(const geometry& g, int64_t oy, int64_t ox) {
  int64_t hs = oy * g.sh - g.pad_top, ws = ox * g.sw - g.pad_left;
  return {std::max<int64_t>(hs, 0), std::min(hs + g.kh, g.h), std::max<int64_t>(ws, 0),
          std::min(ws + g.kw, g.w)};
}

// Rows of output (n * OH + oy) per task so one task has about parallel_grain work.
int64_t row_grain(const geometry& g) {
  int64_t per_row = std::max<int64_t>(g.ow * g.c * g.kh * g.kw, 1);
  return std::max<int64_t>(parallel_grain / per_row, 1);
}

int64_t image_grain(const geometry& g) {
  int64_t per_image = std::max<int64_t>(g.oh * g.ow * g.c * g.kh * g.kw, 1);
  return std::max<int64_t>(parallel_grain / per_image, 1);
}

// --- kernels ---

template <class T, bool is_max>
void pool_forward(const geometry& g, const T* x, T* y) {
  const int64_t c = g.c;
  parallel_for(g.n * g.oh, row_grain(g), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t n = row / g.oh, oy = row % g.oh;
      const T* img = x + n * g.h * g.w * c;
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const window w = window_at(g, oy, ox);
        T* d = y + (row * g.ow + ox) * c;
        bool first = true;
        for (int64_t ih = w.hs; ih < w.he; ++ih)
          for (int64_t iw = w.ws; iw < w.we; ++iw) {
            const T* s = img + (ih * g.w + iw) * c;
            if (first) {
              std::copy(s, s + c, d);
              first = false;
            } else if constexpr (is_max) {
              for (int64_t j = 0; j < c; ++j) d[j] = s[j] > d[j] ? s[j] : d[j];
            } else {
              for (int64_t j = 0; j < c; ++j) d[j] += s[j];
            }
          }
        if constexpr (!is_max) {
          const T inv = T(1) / T(w.count());
          for (int64_t j = 0; j < c; ++j) d[j] *= inv;
        }
      }
    }
  });
}

// Channels go in blocks through stack arrays (which alias nothing, so the
// compare-and-select loops vectorize).
constexpr int64_t pool_channel_block = 64;

// The first maximum of each channel of window `w` (its positions in row-major
// order, `offset_of` their offsets in the image): `best` and its position
// `pos` for channels [c0, c0 + cn). Strict '>' keeps the first, as TF.
template <class T>
void window_argmax(const T* img, const int64_t* offset_of, int32_t count, int64_t c0, int64_t cn,
                   T* best, int32_t* pos) {
  const T* first = img + offset_of[0] + c0;
  for (int64_t j = 0; j < cn; ++j) {
    best[j] = first[j];
    pos[j] = 0;
  }
  for (int32_t p = 1; p < count; ++p) {
    const T* s = img + offset_of[p] + c0;
    for (int64_t j = 0; j < cn; ++j) {
      const bool more = s[j] > best[j];
      best[j] = more ? s[j] : best[j];
      pos[j] = more ? p : pos[j];
    }
  }
}

// Fills `offset_of` with window w's positions' offsets; returns their count.
int32_t window_offsets(const geometry& g, const window& w, int64_t* offset_of) {
  int32_t count = 0;
  for (int64_t ih = w.hs; ih < w.he; ++ih)
    for (int64_t iw = w.ws; iw < w.we; ++iw) offset_of[count++] = (ih * g.w + iw) * g.c;
  return count;
}

// Whether no two windows share an input position (stride >= ksize: the usual
// 2x2 windows at stride 2), and whether they also cover every position.
bool windows_disjoint(const geometry& g) { return g.sh >= g.kh && g.sw >= g.kw; }
bool windows_tile(const geometry& g) {
  const window last = window_at(g, g.oh - 1, g.ow - 1);
  return g.sh == g.kh && g.sw == g.kw && last.he == g.h && last.we == g.w;
}

// `relu`: the gradient through a relu before the pool as well (the optimizer's
// max_pool_relu_grad): a value goes only where orig_input > 0, and the
// maximum is the input there.
template <class T, bool relu>
void max_pool_backward_scatter(const geometry& g, const T* x, const T* dy, T* dx) {
  const int64_t c = g.c, image = g.h * g.w * c;
  parallel_for(g.n, image_grain(g), [&](int64_t b, int64_t e) {
    T best[pool_channel_block];
    int32_t pos[pool_channel_block];
    // A window never exceeds the image (SAME allows ksize > input).
    std::vector<int64_t> offset_of(static_cast<size_t>(std::min(g.kh, g.h) * std::min(g.kw, g.w)));
    for (int64_t n = b; n < e; ++n) {
      const T* img = x + n * image;
      T* dimg = dx + n * image;
      std::fill(dimg, dimg + image, T(0));  // per image, while it is about to be used
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int32_t count = window_offsets(g, window_at(g, oy, ox), offset_of.data());
          const T* gy = dy + ((n * g.oh + oy) * g.ow + ox) * c;
          for (int64_t c0 = 0; c0 < c; c0 += pool_channel_block) {
            const int64_t cn = std::min(pool_channel_block, c - c0);
            window_argmax(img, offset_of.data(), count, c0, cn, best, pos);
            for (int64_t j = 0; j < cn; ++j)
              if (!relu || best[j] > T(0)) dimg[offset_of[pos[j]] + c0 + j] += gy[c0 + j];
          }
        }
    }
  });
}

// Disjoint windows: each covered position is written once, by a select (the
// window's gradient where it is the maximum, else zero), so there is no
// zeroing pass where the windows tile the image and no scalar scatter; rows
// of windows split across threads.
template <class T, bool relu>
void max_pool_backward_disjoint(const geometry& g, const T* x, const T* dy, T* dx) {
  const int64_t c = g.c, image = g.h * g.w * c;
  if (!windows_tile(g))
    parallel_for(g.n, std::max<int64_t>(parallel_grain / image, 1),
                 [&](int64_t b, int64_t e) { std::fill(dx + b * image, dx + e * image, T(0)); });
  parallel_for(g.n * g.oh, row_grain(g), [&](int64_t b, int64_t e) {
    T best[pool_channel_block];
    int32_t pos[pool_channel_block];
    std::vector<int64_t> offset_of(static_cast<size_t>(std::min(g.kh, g.h) * std::min(g.kw, g.w)));
    for (int64_t row = b; row < e; ++row) {
      const int64_t n = row / g.oh, oy = row % g.oh;
      const T* img = x + n * image;
      T* dimg = dx + n * image;
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int32_t count = window_offsets(g, window_at(g, oy, ox), offset_of.data());
        const T* gy = dy + (row * g.ow + ox) * c;
        for (int64_t c0 = 0; c0 < c; c0 += pool_channel_block) {
          const int64_t cn = std::min(pool_channel_block, c - c0);
          window_argmax(img, offset_of.data(), count, c0, cn, best, pos);
          for (int32_t p = 0; p < count; ++p) {
            T* d = dimg + offset_of[p] + c0;
            for (int64_t j = 0; j < cn; ++j) {
              const bool takes = pos[j] == p && (!relu || best[j] > T(0));
              d[j] = takes ? gy[c0 + j] : T(0);
            }
          }
        }
      }
    }
  });
}

template <class T, bool relu>
void max_pool_backward(const geometry& g, const T* x, const T* dy, T* dx) {
  if (windows_disjoint(g))
    max_pool_backward_disjoint<T, relu>(g, x, dy, dx);
  else
    max_pool_backward_scatter<T, relu>(g, x, dy, dx);
}

template <class T>
void avg_pool_backward(const geometry& g, const T* dy, T* dx) {
  const int64_t c = g.c, image = g.h * g.w * c;
  parallel_for(g.n, image_grain(g), [&](int64_t b, int64_t e) {
    std::vector<T> share(static_cast<size_t>(c));
    for (int64_t n = b; n < e; ++n) {
      T* dimg = dx + n * image;
      std::fill(dimg, dimg + image, T(0));
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const window w = window_at(g, oy, ox);
          const T inv = T(1) / T(w.count());
          const T* gy = dy + ((n * g.oh + oy) * g.ow + ox) * c;
          for (int64_t j = 0; j < c; ++j) share[j] = gy[j] * inv;
          for (int64_t ih = w.hs; ih < w.he; ++ih)
            for (int64_t iw = w.ws; iw < w.we; ++iw) {
              T* d = dimg + (ih * g.w + iw) * c;
              for (int64_t j = 0; j < c; ++j) d[j] += share[j];
            }
        }
    }
  });
}

// --- registration ---

std::vector<tensor_spec> infer_pool(const shape_context& c) {
  auto& x = c.inputs[0];
  check_floating(c.op, x.type, "input");
  return {{x.type, pool_output_shape(pool_geometry(c.op, x.dims, c.attrs))}};
}

std::vector<tensor_spec> infer_max_pool_grad(const shape_context& c) {
  auto& x = c.inputs[0];
  check_floating(c.op, x.type, "orig_input");
  check_same_type(c.op, x.type, c.inputs[1].type, "orig_input", "orig_output");
  check_same_type(c.op, x.type, c.inputs[2].type, "orig_input", "grad");
  auto g = pool_geometry(c.op, x.dims, c.attrs);
  check_pooled_shape(c.op, g, c.inputs[1].dims, "orig_output");
  check_pooled_shape(c.op, g, c.inputs[2].dims, "grad");
  return {x};
}

std::vector<tensor_spec> infer_avg_pool_grad(const shape_context& c) {
  auto& like = c.inputs[0];
  auto& dy = c.inputs[1];
  check_floating(c.op, dy.type, "grad");
  auto g = pool_geometry(c.op, like.dims, c.attrs);
  check_pooled_shape(c.op, g, dy.dims, "grad");
  shape out = like.dims;
  if (out[0] < 0) out[0] = dy.dims[0];
  if (out[3] < 0) out[3] = dy.dims[3];
  return {{dy.type, out}};
}

template <bool is_max>
void pool_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  check_floating(ctx.op, x.type(), "input");
  auto g = pool_geometry(ctx.op, x.dims(), ctx.attrs);
  tensor& y = ctx.allocate_output(0, x.type(), pool_output_shape(g));
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    pool_forward<T, is_max>(g, x.data<T>(), y.mutable_data<T>());
  });
}

template <bool relu>
void max_pool_grad_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  const tensor& dy = ctx.input(2);
  check_floating(ctx.op, x.type(), "orig_input");
  check_same_type(ctx.op, x.type(), ctx.input(1).type(), "orig_input", "orig_output");
  check_same_type(ctx.op, x.type(), dy.type(), "orig_input", "grad");
  auto g = pool_geometry(ctx.op, x.dims(), ctx.attrs);
  check_pooled_shape(ctx.op, g, ctx.input(1).dims(), "orig_output");
  check_pooled_shape(ctx.op, g, dy.dims(), "grad");
  tensor& dx = ctx.allocate_output(0, x.type(), x.dims());
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    max_pool_backward<T, relu>(g, x.data<T>(), dy.data<T>(), dx.mutable_data<T>());
  });
}

void avg_pool_grad_kernel(kernel_context& ctx) {
  const tensor& like = ctx.input(0);
  const tensor& dy = ctx.input(1);
  check_floating(ctx.op, dy.type(), "grad");
  auto g = pool_geometry(ctx.op, like.dims(), ctx.attrs);
  check_pooled_shape(ctx.op, g, dy.dims(), "grad");
  tensor& dx = ctx.allocate_output(0, dy.type(), like.dims());
  visit_floating(dy.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward<T>(g, dy.data<T>(), dx.mutable_data<T>());
  });
}

// ---- gradients -------------------------------------------------------------
// The attributes pass through unchanged. avg_pool is linear and avg_pool_grad is
// its adjoint, so each is the other's gradient.

void max_pool_grad_fn(grad_context& c) {
  c.input_grads = {make_op("max_pool_grad", {c.input(0), c.outputs[0], c.grad()}, c.attrs)};
}

void avg_pool_grad_fn(grad_context& c) {
  c.input_grads = {make_op("avg_pool_grad", {c.input(0), c.grad()}, c.attrs)};
}

const op_registrar registrations[] = {
    op_registrar({.name = "max_pool",
                  .num_inputs = 1,
                  .infer = infer_pool,
                  .kernel = pool_kernel<true>,
                  .summary = "maximum over 2-D windows of NHWC input",
                  .gradient = max_pool_grad_fn}),
    op_registrar({.name = "avg_pool",
                  .num_inputs = 1,
                  .infer = infer_pool,
                  .kernel = pool_kernel<false>,
                  .summary = "mean over 2-D windows of NHWC input (padding not counted)",
                  .gradient = avg_pool_grad_fn}),
    op_registrar({.name = "max_pool_grad",
                  .num_inputs = 3,
                  .infer = infer_max_pool_grad,
                  .kernel = max_pool_grad_kernel<false>,
                  .summary = "gradient of max_pool (to the first maximum of each window)",
                  // TensorFlow's MaxPoolGradGrad has no counterpart here yet.
                  .not_differentiable = true}),
    op_registrar({.name = "max_pool_relu_grad",
                  .num_inputs = 3,
                  .infer = infer_max_pool_grad,
                  .kernel = max_pool_grad_kernel<true>,
                  .summary = "relu_grad(max_pool_grad(x, y, grad), x) in one pass (the graph "
                             "optimizer's fusion)",
                  .not_differentiable = true}),
    op_registrar({.name = "avg_pool_grad",
                  .num_inputs = 2,
                  .infer = infer_avg_pool_grad,
                  .kernel = avg_pool_grad_kernel,
                  .summary = "gradient of avg_pool",
                  .gradient =
                      [](grad_context& c) {
                        c.input_grads = {output(), make_op("avg_pool", {c.grad()}, c.attrs)};
                      }}),
};

attr_map pool_attrs(std::vector<int64_t> ksize, std::vector<int64_t> strides,
                    const std::string& padding) {
  return {{"ksize", std::move(ksize)},
          {"strides", std::move(strides)},
          {"padding", std::string(padding)}};
}

}  // namespace

output max_pool(output x, std::vector<int64_t> ksize, std::vector<int64_t> strides,
                const std::string& padding, const std::string& name) {
  return make_op("max_pool", {x}, pool_attrs(std::move(ksize), std::move(strides), padding), name);
}

output avg_pool(output x, std::vector<int64_t> ksize, std::vector<int64_t> strides,
                const std::string& padding, const std::string& name) {
  return make_op("avg_pool", {x}, pool_attrs(std::move(ksize), std::move(strides), padding), name);
}

output max_pool_grad(output orig_input, output orig_output, output grad, std::vector<int64_t> ksize,
                     std::vector<int64_t> strides, const std::string& padding,
                     const std::string& name) {
  return make_op("max_pool_grad", {orig_input, orig_output, grad},
                 pool_attrs(std::move(ksize), std::move(strides), padding), name);
}

output max_pool_relu_grad(output orig_input, output orig_output, output grad,
                          std::vector<int64_t> ksize, std::vector<int64_t> strides,
                          const std::string& padding, const std::string& name) {
  return make_op("max_pool_relu_grad", {orig_input, orig_output, grad},
                 pool_attrs(std::move(ksize), std::move(strides), padding), name);
}

output avg_pool_grad(output orig_input_like, output grad, std::vector<int64_t> ksize,
                     std::vector<int64_t> strides, const std::string& padding,
                     const std::string& name) {
  return make_op("avg_pool_grad", {orig_input_like, grad},
                 pool_attrs(std::move(ksize), std::move(strides), padding), name);
}

}  // namespace actorflow
