// oneDNN's convolution primitives on the conv group's layer shapes, beside
// actorflow's own kernels (perf/bench_conv.cpp), where the build has oneDNN.
#pragma once
#include <cstdint>
#include <optional>

namespace actorflow::bench {

/// A convolution layer: NHWC input, [KH,KW,C,K] filter, SAME padding (VALID where !same).
struct conv_layer_shape {
  int64_t n, h, w, c, k, kh, kw, stride;
  bool same = true;

  /// Output size along an axis of size `in` with window `k` (TensorFlow's arithmetic).
  int64_t out(int64_t in, int64_t window) const {
    return same ? (in + stride - 1) / stride : (in - window) / stride + 1;
  }
};

/// Which convolution: 0 forward, 1 the input's gradient, 2 the filter's.
enum class conv_pass { forward, backprop_input, backprop_filter };

/// Seconds per call (median) of oneDNN's primitive for `pass` on OpenMP's
/// `threads` threads: with `blocked`, in the layouts it picks for itself
/// (tag::any), the reorders of the NHWC/HWIO operands into them and of the
/// result back timed with it; otherwise on NHWC/HWIO memory directly.
/// Nothing without oneDNN.
std::optional<double> onednn_conv_seconds(const conv_layer_shape& l, conv_pass pass, bool blocked,
                                          int threads, int repeats);

}  // namespace actorflow::bench
