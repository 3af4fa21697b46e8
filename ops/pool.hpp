// 2-D max and average pooling and their gradients (NHWC, TensorFlow semantics),
// float32 and float64.
//
// Ops:
//   max_pool(x [N,H,W,C]) -> [N,OH,OW,C]
//   avg_pool(x [N,H,W,C]) -> [N,OH,OW,C]; with SAME padding each output divides by
//     the number of input elements its window covers (padding is not counted), as TF
//   max_pool_grad(orig_input, orig_output, grad) -> d orig_input: each grad value goes to
//     the window's maximum in orig_input, the first one in row-major window order on ties
//     (orig_output's shape is checked; the argmax is recomputed from orig_input)
//   max_pool_relu_grad(orig_input, orig_output, grad) -> relu_grad(max_pool_grad(...),
//     orig_input): the gradient through a relu and the pool after it, in one pass (the
//     graph optimizer makes it where a relu_grad reads a max_pool_grad of the same input;
//     not one of TensorFlow's ops)
//   avg_pool_grad(orig_input_like, grad) -> d input, shaped like orig_input_like (only its
//     shape is used, as conv2d_backprop_input does): grad / count over each window
// Attributes: "ksize" = [kh, kw] (or [1, kh, kw, 1]), "strides" likewise, "padding" =
// "SAME" or "VALID" with conv2d's output-size arithmetic.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// Maximum over kh x kw windows of x [N,H,W,C].
ACTORFLOW_API output max_pool(output x, std::vector<int64_t> ksize, std::vector<int64_t> strides,
                              const std::string& padding, const std::string& name = "");

/// Mean over kh x kw windows of x [N,H,W,C] (padding excluded from the count).
ACTORFLOW_API output avg_pool(output x, std::vector<int64_t> ksize, std::vector<int64_t> strides,
                              const std::string& padding, const std::string& name = "");

/// Gradient of max_pool: grad routed to each window's (first) maximum in orig_input.
ACTORFLOW_API output max_pool_grad(output orig_input, output orig_output, output grad,
                                   std::vector<int64_t> ksize, std::vector<int64_t> strides,
                                   const std::string& padding, const std::string& name = "");

/// relu_grad(max_pool_grad(orig_input, orig_output, grad, ...), orig_input) in one pass:
/// grad routed to each window's first maximum where that maximum is above zero.
ACTORFLOW_API output max_pool_relu_grad(output orig_input, output orig_output, output grad,
                                        std::vector<int64_t> ksize, std::vector<int64_t> strides,
                                        const std::string& padding, const std::string& name = "");

/// Gradient of avg_pool; the result has orig_input_like's shape.
ACTORFLOW_API output avg_pool_grad(output orig_input_like, output grad, std::vector<int64_t> ksize,
                                   std::vector<int64_t> strides, const std::string& padding,
                                   const std::string& name = "");

}  // namespace actorflow
