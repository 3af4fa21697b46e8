// GPU kernels of the neural-network ops: softmax and log_softmax through
// cuDNN, softmax cross-entropy (xent.cu), bias_add, and pooling (pool.cu).
#include <cmath>
#include <limits>

#include "ops/cuda/glue.hpp"
#include "ops/geometry/conv_window.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

// ---- softmax, log_softmax (cuDNN) -----------------------------------------------------------

struct cudnn_tensor {
  cudnnTensorDescriptor_t desc = nullptr;
  explicit cudnn_tensor(const std::string& op) {
    check_cudnn(cudnnCreateTensorDescriptor(&desc), op, "cudnnCreateTensorDescriptor");
  }
  ~cudnn_tensor() { cudnnDestroyTensorDescriptor(desc); }
  cudnn_tensor(const cudnn_tensor&) = delete;
  cudnn_tensor& operator=(const cudnn_tensor&) = delete;
};

int as_int(int64_t v, const std::string& op, const char* what) {
  if (v > std::numeric_limits<int>::max())
    fail(op, std::string(what) + " " + std::to_string(v) + " is too large for cuDNN");
  return static_cast<int>(v);
}

// Rows of the last axis: an N x C x 1 x 1 tensor, softmax per instance over C.
template <cudnnSoftmaxAlgorithm_t Algorithm>
void softmax_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  device_tensor& y = ctx.allocate_output(0);
  const int64_t cols = x.dims().dim(-1);
  if (x.num_elements() == 0) return;
  const int64_t rows = x.num_elements() / cols;
  const bool is_double = x.type() == dtype::float64;
  cudnn_tensor desc(ctx.op);
  check_cudnn(cudnnSetTensor4dDescriptor(
                  desc.desc, CUDNN_TENSOR_NCHW, is_double ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT,
                  as_int(rows, ctx.op, "rows"), as_int(cols, ctx.op, "classes"), 1, 1),
              ctx.op, "cudnnSetTensor4dDescriptor");
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const void* one = is_double ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = is_double ? static_cast<const void*>(&zero_d) : &zero_f;
  check_cudnn(cudnnSoftmaxForward(ctx.stream.cudnn, Algorithm, CUDNN_SOFTMAX_MODE_INSTANCE, one,
                                  desc.desc, x.raw_data(), zero, desc.desc, y.raw_mutable_data()),
              ctx.op, "cudnnSoftmaxForward");
}

// ---- cross-entropy --------------------------------------------------------------------------

void xent_kernel(gpu_kernel_context& ctx) {
  const device_tensor& logits = ctx.input(0);
  const device_tensor& labels = ctx.input(1);
  ctx.allocate_output(0);
  ctx.allocate_output(1);
  xent(logits.type(), logits.raw_data(), labels.raw_data(), ctx.outputs[0].raw_mutable_data(),
       ctx.outputs[1].raw_mutable_data(), logits.dims()[0], logits.dims()[1], stream_of(ctx));
}

void sparse_xent_kernel(gpu_kernel_context& ctx) {
  const device_tensor& logits = ctx.input(0);
  const device_tensor& labels = ctx.input(1);
  ctx.allocate_output(0);
  ctx.allocate_output(1);
  sparse_xent(logits.type(), labels.type(), logits.raw_data(), labels.raw_data(),
              ctx.outputs[0].raw_mutable_data(), ctx.outputs[1].raw_mutable_data(),
              logits.dims()[0], logits.dims()[1], stream_of(ctx));
}

// ---- bias_add: a broadcasting add of a 1-D bias along the last dim ---------------------------

void bias_add_kernel(gpu_kernel_context& ctx) {
  const device_tensor& v = ctx.input(0);
  const device_tensor& bias = ctx.input(1);
  auto plan = geometry::make_plan<2>({&v.dims(), &bias.dims()}, ctx.op);
  device_tensor& out = ctx.allocate_output(0);
  binary(binary_op::add, v.type(), v.raw_data(), bias.raw_data(), out.raw_mutable_data(),
         to_index_plan(plan, ctx.op), plan.num_elements, stream_of(ctx));
}

// ---- pooling --------------------------------------------------------------------------------

pool_geometry pool_geometry_of(const gpu_kernel_context& ctx, const shape& in) {
  auto k = conv_detail::spatial_pair(ctx.attrs, "ksize", ctx.op);
  auto g = conv_detail::make_geometry(in, k[0], k[1], ctx.attrs, "strides", ctx.op, "ksize");
  return {g.n, g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw, g.oh, g.ow, g.pad_top, g.pad_left};
}

template <bool is_max>
void pool_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  device_tensor& y = ctx.allocate_output(0);
  pool_forward(is_max, x.type(), x.raw_data(), y.raw_mutable_data(),
               pool_geometry_of(ctx, x.dims()), stream_of(ctx));
}

void max_pool_grad_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const device_tensor& dy = ctx.input(2);
  device_tensor& dx = ctx.allocate_output(0);
  max_pool_backward(x.type(), x.raw_data(), dy.raw_data(), dx.raw_mutable_data(),
                    pool_geometry_of(ctx, x.dims()), stream_of(ctx));
}

void avg_pool_grad_kernel(gpu_kernel_context& ctx) {
  const device_tensor& dy = ctx.input(1);
  device_tensor& dx = ctx.allocate_output(0);
  avg_pool_backward(dy.type(), dy.raw_data(), dx.raw_mutable_data(),
                    pool_geometry_of(ctx, dx.dims()), stream_of(ctx));
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "softmax",
                          .types = float_types,
                          .kernel = softmax_kernel<CUDNN_SOFTMAX_ACCURATE>,
                          .note = "cuDNN"}),
    gpu_kernel_registrar({.op = "log_softmax",
                          .types = float_types,
                          .kernel = softmax_kernel<CUDNN_SOFTMAX_LOG>,
                          .note = "cuDNN"}),
    gpu_kernel_registrar(
        {.op = "softmax_cross_entropy_with_logits", .types = float_types, .kernel = xent_kernel}),
    gpu_kernel_registrar({.op = "sparse_softmax_cross_entropy_with_logits",
                          .types = float_types,
                          .kernel = sparse_xent_kernel,
                          .note = "a label out of range gives NaN loss and gradient for its row "
                                  "(as TensorFlow's GPU kernel) instead of an error"}),
    gpu_kernel_registrar({.op = "bias_add", .types = numeric_types, .kernel = bias_add_kernel}),
    gpu_kernel_registrar({.op = "max_pool", .types = float_types, .kernel = pool_kernel<true>}),
    gpu_kernel_registrar({.op = "avg_pool", .types = float_types, .kernel = pool_kernel<false>}),
    gpu_kernel_registrar(
        {.op = "max_pool_grad", .types = float_types, .kernel = max_pool_grad_kernel}),
    gpu_kernel_registrar({.op = "avg_pool_grad",
                          .types = float_types,
                          .type_input = 1,
                          .kernel = avg_pool_grad_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
