// What the GPU kernels' C++ side shares (CUDA builds only): index plans from
// broadcasting plans, and the context's stream.
//
// The glue takes its shape logic from ops/geometry (broadcasting and reduction
// plans, window geometry), as the CPU kernels do, so that the GPU computes
// exactly what the CPU does.
#pragma once
#include <string>
#include <vector>

#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/cuda_stream.hpp"
#include "ops/cuda/launch.hpp"
#include "ops/geometry/broadcast.hpp"

namespace actorflow::gpu::kernels {

/// The launchers' form of a broadcasting plan; throws past max_dims dims.
template <size_t N>
index_plan to_index_plan(const geometry::broadcast_plan<N>& p, const std::string& op) {
  if (p.dims.size() > static_cast<size_t>(max_dims))
    fail(op, "the GPU kernel handles at most " + std::to_string(max_dims) +
                 " dims after merging, got " + std::to_string(p.dims.size()));
  index_plan ip;
  ip.rank = static_cast<int>(p.dims.size());
  for (size_t d = 0; d < p.dims.size(); ++d) {
    ip.dims[d] = p.dims[d];
    for (size_t k = 0; k < N; ++k) ip.strides[k][d] = p.strides[k][d];
  }
  return ip;
}

/// A plan over output dims `dims` reading operand 0 with `strides` (a transpose, a permute).
inline index_plan strided_plan(const std::vector<int64_t>& dims,
                               const std::vector<int64_t>& strides, const std::string& op) {
  if (dims.size() > static_cast<size_t>(max_dims))
    fail(op, "the GPU kernel handles at most " + std::to_string(max_dims) + " dims, got " +
                 std::to_string(dims.size()));
  index_plan ip;
  ip.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    ip.dims[d] = dims[d];
    ip.strides[0][d] = strides[d];
  }
  if (ip.rank == 0) {  // a scalar: one element at offset 0
    ip.rank = 1;
    ip.dims[0] = 1;
  }
  return ip;
}

}  // namespace actorflow::gpu::kernels
