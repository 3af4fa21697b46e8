// What the GPU kernels' C++ side shares (CUDA builds only): index plans from
// broadcasting plans, the context's stream, sizes for cuBLAS and cuDNN, and
// the kernels more than one family registers or calls (relabel, reduce_into).
//
// The glue takes its shape logic from ops/geometry (broadcasting and reduction
// plans, window geometry), as the CPU kernels do, so that the GPU computes
// exactly what the CPU does.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
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

/// v as the int cuBLAS and cuDNN take; fails naming `op` when it does not fit:
/// "<what> <v> is too large for <library>".
inline int as_int(int64_t v, const std::string& op, const char* library,
                  const char* what = "dimension") {
  if (v > std::numeric_limits<int>::max())
    fail(op, std::string(what) + " " + std::to_string(v) + " is too large for " + library);
  return static_cast<int>(v);
}

/// The same elements, seen with the shape the op's shape function gave: the
/// GPU kernel of the reshapes (ops/array_shape.cpp) and of identity and
/// stop_gradient (ops/state.cpp).
inline void relabel(gpu_kernel_context& ctx) {
  ctx.set_output(0, ctx.input(0).reshaped(ctx.output_specs[0].dims));
}

/// A device copy of t on the context's stream (copy-on-write of shared buffers).
inline device_tensor clone(gpu_kernel_context& ctx, const device_tensor& t) {
  device_tensor c = ctx.allocate_temp(t.type(), t.dims());
  if (t.size_bytes() > 0)
    check_cuda(cudaMemcpyAsync(c.raw_mutable_data(), t.raw_data(), t.size_bytes(),
                               cudaMemcpyDeviceToDevice, stream_of(ctx)),
               ctx.op, "cudaMemcpyAsync");
  return c;
}

/// The variable's value, made safe to write in place: cloned first where a
/// reader not yet launched still holds the buffer (a launch lets go of its
/// inputs once enqueued, so stream order covers the others).
inline void* writable_value(gpu_variable_state& v, gpu_kernel_context& ctx) {
  if (!v.value.is_unique()) v.value = clone(ctx, v.value);
  return v.value.raw_mutable_data();
}

/// Host-memory input i (ctx.host_value) as int64 indices; fails unless int32 or int64.
std::vector<int64_t> host_indices(const gpu_kernel_context& ctx, size_t i);

/// Indices grouped by the row they name, in device memory, for
/// scatter_add_rows: the rows (ascending), and for each the positions that
/// name it, in order (offsets into sources, rows + 1 of them).
struct row_groups {
  device_tensor targets, offsets, sources;
  int64_t rows = 0;
};
row_groups group_rows(gpu_kernel_context& ctx, const std::vector<int64_t>& index);
/// `updates` [n, row_size] with the rows that name the same index summed, in
/// order (the CPU's sum_repeated_rows): [groups.rows, row_size], row r for
/// the index groups.targets[r].
device_tensor sum_repeated_rows(gpu_kernel_context& ctx, const device_tensor& updates,
                                const row_groups& groups, int64_t n, int64_t row_size);

/// l2_loss of x into output 0: its halved squares, summed as sum's are.
void l2_loss_into(gpu_kernel_context& ctx, const device_tensor& x);

/// Reduces x over the dims `reduced` marks into output 0 (whose spec holds the
/// kept dims), with the CPU kernel's rules for empty reductions: the reductions'
/// kernel (reduce_kernels.cpp), which bias_add_grad's uses too.
void reduce_into(gpu_kernel_context& ctx, reduce_op kind, const device_tensor& x,
                 const std::vector<bool>& reduced);

}  // namespace actorflow::gpu::kernels
