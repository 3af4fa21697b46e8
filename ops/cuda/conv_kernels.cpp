// conv2d and its backprops through cuDNN, float32.
//
// Layouts at the boundary: images stay NHWC (a cuDNN tensor format); the
// filter, [KH,KW,C,K] in TensorFlow, is permuted to cuDNN's NHWC filter layout
// [K,KH,KW,C] on the way in (and the filter gradient back on the way out).
// TensorFlow's SAME padding puts an odd padding row / column at the bottom /
// right, which cuDNN's symmetric padding cannot express: then the image is
// copied into one a row / column larger, zeros at the bottom / right (and the
// input gradient is cropped back), as TensorFlow's own cuDNN path does.
//
// Algorithms come from cuDNN's heuristics (no benchmarking, which would
// allocate), with workspaces from the device's caching allocator. Exact
// float32 arithmetic (CUDNN_FMA_MATH) unless the device allows TF32.
#include "ops/cuda/glue.hpp"
#include "ops/geometry/conv_window.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

// cuDNN descriptors, destroyed with their scope.
struct tensor_desc {
  cudnnTensorDescriptor_t d = nullptr;
  tensor_desc(const std::string& op, int64_t n, int64_t h, int64_t w, int64_t c) {
    check_cudnn(cudnnCreateTensorDescriptor(&d), op, "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                           as_int(n, op, "cuDNN"), as_int(c, op, "cuDNN"),
                                           as_int(h, op, "cuDNN"), as_int(w, op, "cuDNN")),
                op, "cudnnSetTensor4dDescriptor");
  }
  ~tensor_desc() { cudnnDestroyTensorDescriptor(d); }
  tensor_desc(const tensor_desc&) = delete;
  tensor_desc& operator=(const tensor_desc&) = delete;
};

struct filter_desc {
  cudnnFilterDescriptor_t d = nullptr;
  filter_desc(const std::string& op, int64_t k, int64_t c, int64_t kh, int64_t kw) {
    check_cudnn(cudnnCreateFilterDescriptor(&d), op, "cudnnCreateFilterDescriptor");
    check_cudnn(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC,
                                           as_int(k, op, "cuDNN"), as_int(c, op, "cuDNN"),
                                           as_int(kh, op, "cuDNN"), as_int(kw, op, "cuDNN")),
                op, "cudnnSetFilter4dDescriptor");
  }
  ~filter_desc() { cudnnDestroyFilterDescriptor(d); }
  filter_desc(const filter_desc&) = delete;
  filter_desc& operator=(const filter_desc&) = delete;
};

struct conv_desc {
  cudnnConvolutionDescriptor_t d = nullptr;
  conv_desc(const std::string& op, const conv_detail::geometry& g, gpu_math math) {
    check_cudnn(cudnnCreateConvolutionDescriptor(&d), op, "cudnnCreateConvolutionDescriptor");
    check_cudnn(cudnnSetConvolution2dDescriptor(
                    d, as_int(g.pad_top, op, "cuDNN"), as_int(g.pad_left, op, "cuDNN"),
                    as_int(g.sh, op, "cuDNN"), as_int(g.sw, op, "cuDNN"), 1, 1,
                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                op, "cudnnSetConvolution2dDescriptor");
    check_cudnn(cudnnSetConvolutionMathType(
                    d, math == gpu_math::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
                op, "cudnnSetConvolutionMathType");
  }
  ~conv_desc() { cudnnDestroyConvolutionDescriptor(d); }
  conv_desc(const conv_desc&) = delete;
  conv_desc& operator=(const conv_desc&) = delete;
};

// The geometry of a conv2d of `in` [N,H,W,C] with `filter` [KH,KW,C,K] (validated by the
// op's shape function), and the extra bottom / right rows TF's SAME padding needs.
struct conv_plan {
  conv_detail::geometry g;
  int64_t k;
  int64_t extra_h, extra_w;  // 0 or 1: padding after minus padding before
  int64_t h() const { return g.h + extra_h; }
  int64_t w() const { return g.w + extra_w; }
  bool padded() const { return extra_h || extra_w; }
};

conv_plan plan_conv(const gpu_kernel_context& ctx, const shape& in, const shape& filter) {
  conv_plan p;
  p.g =
      conv_detail::make_geometry(in, filter[0], filter[1], ctx.attrs, "strides", ctx.op, "filter");
  p.k = filter[3];
  const int64_t needed_h = std::max<int64_t>((p.g.oh - 1) * p.g.sh + p.g.kh - p.g.h, 0);
  const int64_t needed_w = std::max<int64_t>((p.g.ow - 1) * p.g.sw + p.g.kw - p.g.w, 0);
  const bool same = conv_detail::same_padding(ctx.attrs, ctx.op);
  p.extra_h = same ? needed_h - 2 * p.g.pad_top : 0;
  p.extra_w = same ? needed_w - 2 * p.g.pad_left : 0;
  return p;
}

// [KH,KW,C,K] -> [K,KH,KW,C] (to_cudnn) or back.
device_tensor permute_filter(gpu_kernel_context& ctx, const device_tensor& f, const conv_plan& p,
                             bool to_cudnn, device_tensor* into = nullptr) {
  const int64_t kh = p.g.kh, kw = p.g.kw, c = p.g.c, k = p.k;
  std::vector<int64_t> dims, strides;
  if (to_cudnn) {  // read [KH,KW,C,K] in [K,KH,KW,C] order
    dims = {k, kh, kw, c};
    strides = {1, kw * c * k, c * k, k};
  } else {  // read [K,KH,KW,C] in [KH,KW,C,K] order
    dims = {kh, kw, c, k};
    strides = {kw * c, c, 1, kh * kw * c};
  }
  device_tensor out = into ? *into : ctx.allocate_temp(dtype::float32, shape(dims));
  gather(sizeof(float), f.raw_data(), out.raw_mutable_data(), strided_plan(dims, strides, ctx.op),
         f.num_elements(), stream_of(ctx));
  return out;
}

// The image with TF's extra bottom / right padding made explicit.
device_tensor pad_image(gpu_kernel_context& ctx, const device_tensor& x, const conv_plan& p) {
  if (!p.padded()) return x;
  auto out = ctx.allocate_temp(dtype::float32, shape{p.g.n, p.h(), p.w(), p.g.c});
  copy_window(sizeof(float), x.raw_data(), out.raw_mutable_data(), p.g.n, p.g.h, p.g.w, p.g.c,
              p.h(), p.w(), 0, 0, stream_of(ctx));
  return out;
}

device_tensor workspace(gpu_kernel_context& ctx, size_t bytes) {
  if (bytes == 0) return {};
  return ctx.allocate_temp(dtype::uint8, shape{static_cast<int64_t>(bytes)});
}

// The first algorithm cuDNN's heuristics rank that works here, preferring one
// without tensor-core math when exact float32 is asked for.
template <class Perf>
const Perf& pick(const Perf* perf, int count, gpu_math math, const std::string& op) {
  if (math == gpu_math::fp32)
    for (int i = 0; i < count; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH)
        return perf[i];
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i];
  fail(op, "cuDNN offers no algorithm for this convolution");
}

const float one = 1.0f, zero = 0.0f;

// Output elements exist but an operand is empty: the sums are empty, so zeros.
bool degenerate(gpu_kernel_context& ctx, device_tensor& out,
                std::initializer_list<const device_tensor*> operands) {
  bool empty = false;
  for (auto* t : operands) empty = empty || t->num_elements() == 0;
  if (!empty && out.num_elements() > 0) return false;
  kernels::fill(dtype::float32, 0, out.raw_mutable_data(), out.num_elements(), stream_of(ctx));
  return true;
}

void conv2d_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const device_tensor& f = ctx.input(1);
  device_tensor& y = ctx.allocate_output(0);
  if (degenerate(ctx, y, {&x, &f})) return;
  const conv_plan p = plan_conv(ctx, x.dims(), f.dims());
  device_tensor xp = pad_image(ctx, x, p);
  device_tensor fk = permute_filter(ctx, f, p, true);
  tensor_desc xd(ctx.op, p.g.n, p.h(), p.w(), p.g.c), yd(ctx.op, p.g.n, p.g.oh, p.g.ow, p.k);
  filter_desc fd(ctx.op, p.k, p.g.c, p.g.kh, p.g.kw);
  conv_desc cd(ctx.op, p.g, ctx.math);
  int n = 0, c = 0, h = 0, w = 0;
  check_cudnn(cudnnGetConvolution2dForwardOutputDim(cd.d, xd.d, fd.d, &n, &c, &h, &w), ctx.op,
              "cudnnGetConvolution2dForwardOutputDim");
  if (n != p.g.n || c != p.k || h != p.g.oh || w != p.g.ow)
    ctx.fail("cuDNN computes an output of (" + std::to_string(n) + "," + std::to_string(h) + "," +
             std::to_string(w) + "," + std::to_string(c) + "), not " + y.dims().to_string());
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  cudnnHandle_t h_ = ctx.stream.cudnn;
  check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(
                  h_, xd.d, fd.d, cd.d, yd.d, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
              ctx.op, "cudnnGetConvolutionForwardAlgorithm_v7");
  const auto& algo = pick(perf, count, ctx.math, ctx.op);
  device_tensor ws = workspace(ctx, algo.memory);
  check_cudnn(cudnnConvolutionForward(h_, &one, xd.d, xp.raw_data(), fd.d, fk.raw_data(), cd.d,
                                      algo.algo, ws.raw_mutable_data(), algo.memory, &zero, yd.d,
                                      y.raw_mutable_data()),
              ctx.op, "cudnnConvolutionForward");
}

// (input_like, filter, out_backprop) -> d input.
void backprop_input_kernel(gpu_kernel_context& ctx) {
  const device_tensor& like = ctx.input(0);
  const device_tensor& f = ctx.input(1);
  const device_tensor& dy = ctx.input(2);
  device_tensor& dx = ctx.allocate_output(0);
  if (degenerate(ctx, dx, {&f, &dy})) return;
  const conv_plan p = plan_conv(ctx, like.dims(), f.dims());
  device_tensor fk = permute_filter(ctx, f, p, true);
  device_tensor dxp =
      p.padded() ? ctx.allocate_temp(dtype::float32, shape{p.g.n, p.h(), p.w(), p.g.c}) : dx;
  tensor_desc xd(ctx.op, p.g.n, p.h(), p.w(), p.g.c), yd(ctx.op, p.g.n, p.g.oh, p.g.ow, p.k);
  filter_desc fd(ctx.op, p.k, p.g.c, p.g.kh, p.g.kw);
  conv_desc cd(ctx.op, p.g, ctx.math);
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  cudnnHandle_t h_ = ctx.stream.cudnn;
  check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                  h_, fd.d, yd.d, cd.d, xd.d, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
              ctx.op, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  const auto& algo = pick(perf, count, ctx.math, ctx.op);
  device_tensor ws = workspace(ctx, algo.memory);
  check_cudnn(cudnnConvolutionBackwardData(h_, &one, fd.d, fk.raw_data(), yd.d, dy.raw_data(), cd.d,
                                           algo.algo, ws.raw_mutable_data(), algo.memory, &zero,
                                           xd.d, dxp.raw_mutable_data()),
              ctx.op, "cudnnConvolutionBackwardData");
  if (p.padded())  // the gradient of the explicit padding is dropped
    copy_window(sizeof(float), dxp.raw_data(), dx.raw_mutable_data(), p.g.n, p.h(), p.w(), p.g.c,
                p.g.h, p.g.w, 0, 0, stream_of(ctx));
}

// (input, filter_like, out_backprop) -> d filter.
void backprop_filter_kernel(gpu_kernel_context& ctx) {
  const device_tensor& x = ctx.input(0);
  const device_tensor& like = ctx.input(1);
  const device_tensor& dy = ctx.input(2);
  device_tensor& df = ctx.allocate_output(0);
  if (degenerate(ctx, df, {&x, &dy})) return;
  const conv_plan p = plan_conv(ctx, x.dims(), like.dims());
  device_tensor xp = pad_image(ctx, x, p);
  device_tensor dfk = ctx.allocate_temp(dtype::float32, shape{p.k, p.g.kh, p.g.kw, p.g.c});
  tensor_desc xd(ctx.op, p.g.n, p.h(), p.w(), p.g.c), yd(ctx.op, p.g.n, p.g.oh, p.g.ow, p.k);
  filter_desc fd(ctx.op, p.k, p.g.c, p.g.kh, p.g.kw);
  conv_desc cd(ctx.op, p.g, ctx.math);
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  cudnnHandle_t h_ = ctx.stream.cudnn;
  check_cudnn(
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h_, xd.d, yd.d, cd.d, fd.d, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
      ctx.op, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  const auto& algo = pick(perf, count, ctx.math, ctx.op);
  device_tensor ws = workspace(ctx, algo.memory);
  check_cudnn(cudnnConvolutionBackwardFilter(h_, &one, xd.d, xp.raw_data(), yd.d, dy.raw_data(),
                                             cd.d, algo.algo, ws.raw_mutable_data(), algo.memory,
                                             &zero, fd.d, dfk.raw_mutable_data()),
              ctx.op, "cudnnConvolutionBackwardFilter");
  permute_filter(ctx, dfk, p, false, &df);
}

const char* const note =
    "cuDNN, float32 only (NHWC float64 convolutions are not a cuDNN strength: they stay on the "
    "CPU); TF32 when the device's gpu_math allows it";

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(
        {.op = "conv2d", .types = {dtype::float32}, .kernel = conv2d_kernel, .note = note}),
    gpu_kernel_registrar({.op = "conv2d_backprop_input",
                          .types = {dtype::float32},
                          .type_input = 1,
                          .kernel = backprop_input_kernel,
                          .note = note}),
    gpu_kernel_registrar({.op = "conv2d_backprop_filter",
                          .types = {dtype::float32},
                          .kernel = backprop_filter_kernel,
                          .note = note}),
};

}  // namespace

}  // namespace actorflow::gpu
