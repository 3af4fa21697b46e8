// GPU kernels of the softmax family (ops/softmax.cpp): softmax and
// log_softmax through cuDNN, and the softmax cross-entropies (device code in
// softmax.cu).
#include "ops/cuda/glue.hpp"

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
  check_cudnn(cudnnSetTensor4dDescriptor(desc.desc, CUDNN_TENSOR_NCHW,
                                         is_double ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT,
                                         as_int(rows, ctx.op, "cuDNN", "rows"),
                                         as_int(cols, ctx.op, "cuDNN", "classes"), 1, 1),
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
};

}  // namespace

}  // namespace actorflow::gpu
