// Reductions (TensorFlow semantics): sum, mean, max, min, prod over attr "axes"
// (empty = all; negative counts from the end) with attr "keep_dims"; argmax and
// argmin over one attr "axis" (int64 output); and sum_to_shape_of, which undoes
// broadcasting at run time (for gradients of broadcasting ops).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// Sum over `axes` (all when empty); keep_dims keeps reduced dims as size 1.
/// A zero-size reduction gives 0.
ACTORFLOW_API output reduce_sum(output x, std::vector<int64_t> axes = {}, bool keep_dims = false,
                                const std::string& name = "");
/// Mean over `axes`; NaN for a zero-size reduction of floats (an error for integers,
/// whose mean divides with truncation).
ACTORFLOW_API output reduce_mean(output x, std::vector<int64_t> axes = {}, bool keep_dims = false,
                                 const std::string& name = "");
/// Maximum over `axes`; NaN propagates; reducing a zero-size dim is an error.
ACTORFLOW_API output reduce_max(output x, std::vector<int64_t> axes = {}, bool keep_dims = false,
                                const std::string& name = "");
/// Minimum over `axes`; NaN propagates; reducing a zero-size dim is an error.
ACTORFLOW_API output reduce_min(output x, std::vector<int64_t> axes = {}, bool keep_dims = false,
                                const std::string& name = "");
/// Product over `axes`; a zero-size reduction gives 1.
ACTORFLOW_API output reduce_prod(output x, std::vector<int64_t> axes = {}, bool keep_dims = false,
                                 const std::string& name = "");
/// Index (int64) of the largest value along `axis`; the first one on ties or NaN.
ACTORFLOW_API output argmax(output x, int64_t axis = 0, const std::string& name = "");
/// Index (int64) of the smallest value along `axis`; the first one on ties or NaN.
ACTORFLOW_API output argmin(output x, int64_t axis = 0, const std::string& name = "");
/// sum(x^2 / 2) over all elements of a float tensor, as a scalar (TensorFlow's
/// tf.nn.l2_loss, which halves each square before the sum, so that it stays
/// finite where the plain sum of squares would overflow): one pass over x, no
/// squared copy; the gradient is x * dy.
ACTORFLOW_API output l2_loss(output x, const std::string& name = "");
/// l2_loss of the tensor that scatter-adding `rows` at `indices` (along axis
/// 0; rows' dims start with indices') would make, without making it: rows at
/// repeated indices are summed before they are squared. A gathered gradient's
/// half squared norm (global_norm_clip_scale uses it). Not differentiable.
ACTORFLOW_API output l2_loss_rows(output rows, output indices, const std::string& name = "");
/// Sums x over the dims that broadcasting `like`'s shape to x's shape added or
/// stretched, so the result has like's shape (read at run time: -1 dims work).
ACTORFLOW_API output sum_to_shape_of(output x, output like, const std::string& name = "");
/// Alias of sum_to_shape_of, for gradient code.
inline output reduce_sum_to(output x, output like, const std::string& name = "") {
  return sum_to_shape_of(x, like, name);
}

}  // namespace actorflow
