// Index arithmetic on dims shared by the CPU kernels and the CUDA glue:
// row-major strides, negative axes, dim lists in error messages. Part of
// ops/geometry, which depends on core only, so that a GPU kernel computes
// exactly what the CPU kernel does without reaching into CPU code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace actorflow {

/// Normalizes axis (which may be negative) for a tensor of `rank`; throws naming op.
inline int normalize_axis(int64_t axis, int rank, const std::string& op) {
  if (axis < -rank || axis >= rank)
    fail(op, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

namespace detail {

/// Row-major strides (in elements) of a dense tensor with these dims.
std::vector<int64_t> dense_strides(const std::vector<int64_t>& dims);

/// "[1,2,3]" for error messages.
std::string list_to_string(const std::vector<int64_t>& v);

}  // namespace detail

}  // namespace actorflow
