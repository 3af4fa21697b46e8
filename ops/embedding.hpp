// Variables split by rows over several tasks, and reading rows of them: the
// paper's partitioned embeddings (Part, Gather, Stitch). Each shard is its own
// variable, so a device function (replica_device_setter) spreads the shards
// over the parameter servers like any other variables; a lookup gathers each
// shard's rows where the shard lives, and only those rows cross the network.
// Rows split by contiguous ranges (div) or round robin (mod), as TensorFlow's
// partition_strategy.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "ops/array.hpp"
#include "ops/state.hpp"

namespace actorflow {

struct ACTORFLOW_API partitioned_variable {
  std::vector<variable> shards;
  /// Shard k holds row_offsets[k + 1] - row_offsets[k] rows; the last entry
  /// is the row count.
  std::vector<int64_t> row_offsets;
  /// The full shape: rows, then the row shape every shard shares.
  actorflow::shape dims;
  /// div: shard k holds rows [row_offsets[k], row_offsets[k + 1]); mod: row
  /// i is shard i % K's row i / K.
  partition_strategy strategy = partition_strategy::div;

  int64_t rows() const { return row_offsets.back(); }
  int num_shards() const { return static_cast<int>(shards.size()); }
  /// The rows of the whole variable that shard k holds, in the shard's order.
  std::vector<int64_t> rows_of_shard(int k) const;
  /// The whole value in row order, assembled where the caller runs.
  output value() const;
  /// Runs every shard's initializer.
  operation initializer() const;
};

/// Rows split as evenly as TensorFlow's fixed_size_partitioner does: the
/// first rows % num_shards shards get one row more.
ACTORFLOW_API std::vector<int64_t> even_row_offsets(int64_t rows, int num_shards);

/// The initial value of shard `index`, of shape `dims` (its rows only, as
/// rows_of_shard names them).
using shard_initializer = std::function<output(graph& g, shape dims, int index)>;

/// A variable of shape `dims` (fully known, rank >= 1) split by rows into
/// `num_shards` variables named "<name>/part_<k>", by `strategy`; either way
/// shard k has as many rows as even_row_offsets gives it. `devices`, when
/// given, puts shard k on devices[k]; otherwise the enclosing device scope or
/// function places each shard.
ACTORFLOW_API partitioned_variable
make_partitioned_variable(graph& g, shape dims, int num_shards, const shard_initializer& init,
                          const std::string& name, const std::vector<std::string>& devices = {},
                          partition_strategy strategy = partition_strategy::div);
/// The same, each shard initialized from its rows of `initial` (with mod,
/// shard k takes rows k, k + K, ...).
ACTORFLOW_API partitioned_variable
make_partitioned_variable(output initial, int num_shards, const std::string& name,
                          const std::vector<std::string>& devices = {},
                          partition_strategy strategy = partition_strategy::div);

/// params' rows at `ids` (int32 or int64, any shape; at most one unknown dim):
/// shape ids.shape + params' row shape, as gather(params.value(), ids) would
/// give. Gradients reach each shard as the rows it served.
ACTORFLOW_API output embedding_lookup(const partitioned_variable& params, output ids,
                                      const std::string& name = "embedding_lookup");

}  // namespace actorflow
