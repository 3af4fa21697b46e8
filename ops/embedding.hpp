// Variables split by rows over several tasks, and reading rows of them: the
// paper's partitioned embeddings (Part, Gather, Stitch). Each shard is its own
// variable, so a device function (replica_device_setter) spreads the shards
// over the parameter servers like any other variables; a lookup gathers each
// shard's rows where the shard lives, and only those rows cross the network.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "ops/state.hpp"

namespace actorflow {

struct ACTORFLOW_API partitioned_variable {
  std::vector<variable> shards;
  /// Shard k holds rows [row_offsets[k], row_offsets[k + 1]); the last entry
  /// is the row count.
  std::vector<int64_t> row_offsets;
  /// The full shape: rows, then the row shape every shard shares.
  actorflow::shape dims;

  int64_t rows() const { return row_offsets.back(); }
  int num_shards() const { return static_cast<int>(shards.size()); }
  /// The whole value, the shards concatenated where the caller runs.
  output value() const;
  /// Runs every shard's initializer.
  operation initializer() const;
};

/// Rows split as evenly as TensorFlow's fixed_size_partitioner does: the
/// first rows % num_shards shards get one row more.
ACTORFLOW_API std::vector<int64_t> even_row_offsets(int64_t rows, int num_shards);

/// The initial value of shard `index`, of shape `dims` (its rows only).
using shard_initializer = std::function<output(graph& g, shape dims, int index)>;

/// A variable of shape `dims` (fully known, rank >= 1) split by rows into
/// `num_shards` variables named "<name>/part_<k>". `devices`, when given, puts
/// shard k on devices[k]; otherwise the enclosing device scope or function
/// places each shard.
ACTORFLOW_API partitioned_variable
make_partitioned_variable(graph& g, shape dims, int num_shards, const shard_initializer& init,
                          const std::string& name, const std::vector<std::string>& devices = {});
/// The same, each shard initialized from its rows of `initial`.
ACTORFLOW_API partitioned_variable
make_partitioned_variable(output initial, int num_shards, const std::string& name,
                          const std::vector<std::string>& devices = {});

/// params' rows at `ids` (int32 or int64, any shape; at most one unknown dim):
/// shape ids.shape + params' row shape, as gather(params.value(), ids) would
/// give. Gradients reach each shard as the rows it served.
ACTORFLOW_API output embedding_lookup(const partitioned_variable& params, output ids,
                                      const std::string& name = "embedding_lookup");

}  // namespace actorflow
