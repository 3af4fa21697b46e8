// 2-D convolution and its two backprops (NHWC, TensorFlow semantics), float32
// and float64.
//
// Ops:
//   conv2d(input [N,H,W,C], filter [KH,KW,C,K]) -> [N,OH,OW,K]
//   conv2d_backprop_input(input_like, filter, out_backprop) -> d input, shaped like input_like
//   conv2d_backprop_filter(input, filter_like, out_backprop) -> d filter, shaped like filter_like
// Attributes: "strides" = [sh, sw] (or TF's [1, sh, sw, 1]); "padding" = "SAME" or "VALID".
// VALID: OH = ceil((H - KH + 1) / sh). SAME: OH = ceil(H / sh), padded with
// max((OH - 1) * sh + KH - H, 0) zeros, the odd one on the bottom (right for W).
//
// Unlike TensorFlow, the backprops take no static "input_sizes"/"filter_sizes":
// `input_like` / `filter_like` are tensors whose shape (only; their values and
// dtype are ignored) gives the shape of the result. The gradient of conv2d
// passes the forward's own input / filter there, which also works when the
// batch dimension is unknown (-1) at graph-build time.
//
// Also unlike TensorFlow's CPU kernels (direct sums), float32 3x3 filters at
// unit strides with 16 channels or more on each side are computed by
// Winograd's F(2x2, 3x3) (ops/conv_winograd.hpp), as cuDNN often does on
// GPUs: 2.25 times fewer multiplications. The results differ from direct
// sums by rounding only: about 1e-6 of the largest value at ResNet-50's
// widths, of the order of the direct kernels' own error (test_ops checks
// both against float64: under 4e-6, and under 8x the direct kernels'). One more difference, as with
// cuDNN's Winograd: the transforms mix each 4x4 input tile, so a NaN or infinite value reaches
// every output of the 2x2 output tiles it is read by (one pixel further than
// its 3x3 window in a direct sum), and an infinite one can make NaN where a
// direct sum makes +-inf. ACTORFLOW_CPU_CONV_WINOGRAD=0 turns it off.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// Convolves input [N,H,W,C] with filter [KH,KW,C,K] (cross-correlation, as TF).
ACTORFLOW_API output conv2d(output input, output filter, std::vector<int64_t> strides,
                            const std::string& padding, const std::string& name = "");

/// Gradient of conv2d with respect to its input; the result has input_like's shape.
ACTORFLOW_API output conv2d_backprop_input(output input_like, output filter, output out_backprop,
                                           std::vector<int64_t> strides, const std::string& padding,
                                           const std::string& name = "");

/// Gradient of conv2d with respect to its filter; the result has filter_like's shape.
ACTORFLOW_API output conv2d_backprop_filter(output input, output filter_like, output out_backprop,
                                            std::vector<int64_t> strides,
                                            const std::string& padding,
                                            const std::string& name = "");

}  // namespace actorflow
