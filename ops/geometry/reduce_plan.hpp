// How a reduction reads its input, shared by the CPU kernels (ops/reduce.cpp)
// and the CUDA glue (ops/cuda/reduce_kernels.cpp): as a dense
// (outer, reduced, inner) block reduced over its middle dim. Size-1 dims are
// dropped and neighbouring kept or reduced dims merged; the rare pattern with
// reduced dims apart ([K R K R ...]) is copied first into [kept..., reduced...].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.hpp"

namespace actorflow {

/// Which dims of `in` are reduced: the named axes, or all when none are
/// named. A bad or repeated axis fails, naming `op`.
std::vector<bool> reduced_dims(const shape& in, const std::vector<int64_t>& axes,
                               const std::string& op);

struct reduce_plan {
  int64_t kept_count = 1;     // elements of the output
  int64_t reduced_count = 1;  // input elements combined into each output element
  bool reduces = false;       // a dim larger than 1 is reduced
  int64_t outer = 1, reduced = 1, inner = 1;
  /// When not empty, the input must first be copied, dense, in this order:
  /// these dims, read at these strides of the input (inner is then 1).
  std::vector<int64_t> copy_dims, copy_strides;
};

reduce_plan plan_reduction(const std::vector<int64_t>& dims, const std::vector<bool>& reduced);

}  // namespace actorflow
