// Array and shape ops (TensorFlow semantics): reshape, transpose, expand_dims,
// squeeze, concat, split, slice, pad, tile, gather, one_hot, fill, zeros_like,
// ones_like, shape, size, and the broadcasting helpers broadcast_to and
// broadcast_like. Shape-like parameters are attributes, not inputs; the *_like
// ops (reshape_like, split_like, scatter_add_like, broadcast_like) take a shape
// known only at run time from another tensor, as gradients need with -1 dims.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// x with a new shape of the same element count; at most one dim may be -1
/// (inferred). Never copies: the result shares x's buffer.
ACTORFLOW_API output reshape(output x, std::vector<int64_t> new_shape,
                             const std::string& name = "");
/// x's elements in like's shape, read at run time (like may have -1 dims; only its
/// shape is used). Never copies. The gradient of reshape uses it.
ACTORFLOW_API output reshape_like(output x, output like, const std::string& name = "");
/// Permutes the dims: output dim i is input dim perm[i]. Empty perm reverses the dims.
ACTORFLOW_API output transpose(output x, std::vector<int64_t> perm = {},
                               const std::string& name = "");
/// Inserts a size-1 dim at `axis` (in [-rank-1, rank]). Never copies.
ACTORFLOW_API output expand_dims(output x, int64_t axis, const std::string& name = "");
/// Removes the size-1 dims named by `axes` (all size-1 dims when empty). Never copies.
ACTORFLOW_API output squeeze(output x, std::vector<int64_t> axes = {},
                             const std::string& name = "");
/// Joins tensors of equal rank and dtype along `axis`; other dims must agree.
ACTORFLOW_API output concat(const std::vector<output>& xs, int64_t axis,
                            const std::string& name = "");
/// Splits x along `axis` into num_splits equal parts.
ACTORFLOW_API std::vector<output> split(output x, int64_t num_splits, int64_t axis = 0,
                                        const std::string& name = "");
/// Splits x along `axis` into parts of the given sizes (one may be -1: the rest).
ACTORFLOW_API std::vector<output> split_sizes(output x, std::vector<int64_t> sizes,
                                              int64_t axis = 0, const std::string& name = "");
/// Splits x along `axis` into one part per tensor in likes, each as long there as that
/// tensor is at run time (only the shapes of likes are used; their sizes must add up).
ACTORFLOW_API std::vector<output> split_like(output x, const std::vector<output>& likes,
                                             int64_t axis = 0, const std::string& name = "");
/// x[begin[i] : begin[i] + size[i]] in each dim; size -1 means to the end.
ACTORFLOW_API output slice(output x, std::vector<int64_t> begin, std::vector<int64_t> size,
                           const std::string& name = "");
/// Pads with `value`; paddings = {before0, after0, before1, after1, ...}.
ACTORFLOW_API output pad(output x, std::vector<int64_t> paddings, double value = 0,
                         const std::string& name = "");
/// Repeats x multiples[i] times along dim i.
ACTORFLOW_API output tile(output x, std::vector<int64_t> multiples, const std::string& name = "");
/// Takes slices of params along `axis` at `indices` (int32 or int64); the output
/// shape is params.shape[:axis] + indices.shape + params.shape[axis+1:].
ACTORFLOW_API output gather(output params, output indices, int64_t axis = 0,
                            const std::string& name = "");
/// The adjoint of gather: zeros of like's run-time shape (only its shape is used) and
/// updates' dtype, with each slice of updates added at its index along `axis`;
/// repeated indices add up. updates must have the shape gather(like, indices, axis) has.
ACTORFLOW_API output scatter_add_like(output updates, output indices, output like, int64_t axis = 0,
                                      const std::string& name = "");
/// base with each slice of updates added at its index along dim 0 (repeated
/// indices add up); updates have the shape gather(base, indices) has. Writes
/// into base's buffer when nothing else holds it.
ACTORFLOW_API output scatter_add_into(output base, output updates, output indices,
                                      const std::string& name = "");
/// indices.shape + (depth): on_value where the last coordinate equals the index,
/// off_value elsewhere; an out-of-range index gives an all-off row.
ACTORFLOW_API output one_hot(output indices, int64_t depth, double on_value = 1,
                             double off_value = 0, dtype type = dtype::float32,
                             const std::string& name = "");
/// 0, 1, ..., limit - 1 for an int32 or int64 scalar limit, in limit's dtype.
ACTORFLOW_API output range(output limit, const std::string& name = "");
/// The paper's Part: output k holds the rows of data whose partition (int32,
/// a prefix of data's shape) is k, in their order; partitions must lie in
/// [0, num_partitions).
ACTORFLOW_API std::vector<output> dynamic_partition(output data, output partitions,
                                                    int64_t num_partitions,
                                                    const std::string& name = "");
/// The paper's Stitch: merged[indices[i][j]] = data[i][j]; the output has
/// max index + 1 rows, unnamed rows are zero, and a row named twice takes the
/// later value.
ACTORFLOW_API output dynamic_stitch(const std::vector<output>& indices,
                                    const std::vector<output>& data, const std::string& name = "");
/// How a variable's rows are split among K shards (TensorFlow's
/// embedding_lookup partition_strategy). div: contiguous ranges, shard k holds
/// rows [row_offsets[k], row_offsets[k+1]). mod: id i lives on shard i % K at
/// row i / K, which spreads a frequency-sorted (Zipfian) vocabulary's frequent
/// rows over every shard; row_offsets then must be the even split
/// (even_row_offsets, ops/embedding.hpp: shard k has ceil((rows - k) / K) rows).
enum class partition_strategy { div, mod };
/// "div" or "mod", for messages.
inline const char* partition_strategy_name(partition_strategy s) {
  return s == partition_strategy::mod ? "mod" : "div";
}

/// For the row ids of a variable split by rows among the shards that
/// row_offsets delimits (their cumulative row counts), by `strategy`: {each
/// id's shard (int32), its row within that shard (ids' dtype)}. An id outside
/// the variable fails, naming it.
ACTORFLOW_API std::vector<output> row_shard_ids(
    output ids, std::vector<int64_t> row_offsets,
    partition_strategy strategy = partition_strategy::div, const std::string& name = "");
/// A tensor of the given (fully defined) shape filled with value.
ACTORFLOW_API output fill(graph& g, shape dims, double value, dtype type = dtype::float32,
                          const std::string& name = "");
ACTORFLOW_API output zeros_like(output x, const std::string& name = "");
ACTORFLOW_API output ones_like(output x, const std::string& name = "");
/// x's shape as a 1-D int64 tensor, known at run time (even for -1 dims).
ACTORFLOW_API output shape_of(output x, const std::string& name = "");
/// x's element count as an int64 scalar.
ACTORFLOW_API output size(output x, const std::string& name = "");
/// x broadcast to `dims` under NumPy rules (x's dims align right; each is 1 or equal).
ACTORFLOW_API output broadcast_to(output x, shape dims, const std::string& name = "");
/// x broadcast to like's shape, read at run time (like may have -1 dims).
ACTORFLOW_API output broadcast_like(output x, output like, const std::string& name = "");

}  // namespace actorflow
