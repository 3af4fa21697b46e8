// The batch dims of a batched matmul, shared by the CPU kernel and the CUDA glue.
//
// As TensorFlow's BatchMatMulV2 (tf.linalg.matmul), all dims but the last two of
// each operand are batch dims and broadcast as NumPy does: right-aligned, a
// missing or size-1 dim repeating its matrices, e.g. (2,1,3,4) x (5,4,6) gives
// (2,5,3,6). Nothing is copied to broadcast: a plan says which matrix of each
// operand every output matrix reads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.hpp"

namespace actorflow::geometry {

/// The output's batch dims for operands a and b (rank >= 2; their last two dims are the
/// matrices), from partial shapes at build time: 1 vs ? gives ?, ? vs 5 gives 5. Throws
/// "[matmul] batch dimensions (2) and (3) do not broadcast: " + operands on a known conflict.
std::vector<int64_t> matmul_batch_dims(const shape& a, const shape& b, const std::string& operands);

/// Where the matrices of a batched product lie, for concrete shapes. The output's
/// matrices come in runs of `run` consecutive ones; within a run each operand
/// advances by a fixed step of 0 (broadcast) or 1 matrix, so a run is one
/// strided-batched product (cuBLAS), and the runs start at listed matrices.
struct matmul_batch_plan {
  std::vector<int64_t> batch;  // the output's batch dims
  int64_t count = 1;           // output matrices: the product of `batch`
  int64_t run = 1;             // output matrices per run; count / run runs
  int64_t a_step = 0, b_step = 0;
  std::vector<int64_t> a_start, b_start;  // per run, in matrices of each operand

  int64_t runs() const { return run == 0 ? 0 : count / run; }
  /// The matrix of a (of b) that output matrix i reads.
  int64_t a_index(int64_t i) const { return a_start[size_t(i / run)] + (i % run) * a_step; }
  int64_t b_index(int64_t i) const { return b_start[size_t(i / run)] + (i % run) * b_step; }
};

/// The plan for concrete shapes a and b (rank >= 2); throws like matmul_batch_dims.
matmul_batch_plan plan_matmul_batch(const shape& a, const shape& b, const std::string& operands);

}  // namespace actorflow::geometry
