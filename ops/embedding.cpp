#include "ops/embedding.hpp"

#include "ops/array.hpp"

namespace actorflow {

namespace {

const char* kOp = "partitioned_variable";

std::vector<int64_t> row_shape_of(const shape& dims) {
  return std::vector<int64_t>(dims.dims().begin() + 1, dims.dims().end());
}

// The rows of the whole variable that shard k holds, in the shard's order.
std::vector<int64_t> rows_held(const std::vector<int64_t>& offsets, int k,
                               partition_strategy strategy) {
  const auto at = static_cast<size_t>(k);
  const auto shards = static_cast<int64_t>(offsets.size() - 1);
  std::vector<int64_t> ids;
  for (int64_t j = 0; j < offsets[at + 1] - offsets[at]; ++j)
    ids.push_back(strategy == partition_strategy::mod ? k + j * shards : offsets[at] + j);
  return ids;
}

output int64_vector(graph& g, const std::vector<int64_t>& v) {
  return constant(g, tensor::from_vector(v, shape{static_cast<int64_t>(v.size())}));
}

}  // namespace

std::vector<int64_t> even_row_offsets(int64_t rows, int num_shards) {
  if (num_shards < 1) fail(kOp, "needs at least one shard, got " + std::to_string(num_shards));
  if (rows < num_shards)
    fail(kOp, std::to_string(rows) + " rows cannot fill " + std::to_string(num_shards) + " shards");
  std::vector<int64_t> offsets = {0};
  const int64_t base = rows / num_shards, extra = rows % num_shards;
  for (int k = 0; k < num_shards; ++k) offsets.push_back(offsets.back() + base + (k < extra));
  return offsets;
}

std::vector<int64_t> partitioned_variable::rows_of_shard(int k) const {
  return rows_held(row_offsets, k, strategy);
}

output partitioned_variable::value() const {
  std::vector<output> parts;
  for (auto& s : shards) parts.push_back(s.value());
  if (parts.size() == 1) return parts[0];
  if (strategy == partition_strategy::div) return concat(parts, 0);
  // mod interleaves the shards: each shard's rows go to the ids it holds.
  graph& g = parts[0].owner();
  std::vector<output> positions;
  for (int k = 0; k < num_shards(); ++k) positions.push_back(int64_vector(g, rows_of_shard(k)));
  return reshape(dynamic_stitch(positions, parts), dims.dims());
}

operation partitioned_variable::initializer() const {
  std::vector<operation> inits;
  for (auto& s : shards) inits.push_back(s.initializer());
  return group(shards.front().value().owner(), inits);
}

partitioned_variable make_partitioned_variable(graph& g, shape dims, int num_shards,
                                               const shard_initializer& init,
                                               const std::string& name,
                                               const std::vector<std::string>& devices,
                                               partition_strategy strategy) {
  if (dims.rank() < 1 || !dims.is_fully_defined())
    fail(kOp, "'" + name + "' needs a known shape of rank >= 1, got " + dims.to_string());
  if (!devices.empty() && static_cast<int>(devices.size()) != num_shards)
    fail(kOp, "'" + name + "' has " + std::to_string(num_shards) + " shards but " +
                  std::to_string(devices.size()) + " devices");
  partitioned_variable v;
  v.dims = dims;
  v.strategy = strategy;
  v.row_offsets = even_row_offsets(dims[0], num_shards);
  for (int k = 0; k < num_shards; ++k) {
    std::vector<int64_t> shard_dims = {v.row_offsets[static_cast<size_t>(k) + 1] -
                                       v.row_offsets[static_cast<size_t>(k)]};
    for (auto d : row_shape_of(dims)) shard_dims.push_back(d);
    // The initial value is made where the caller runs, as for make_variable.
    auto initial = init(g, shape(shard_dims), k);
    if (initial.dims() != shape(shard_dims))
      fail(kOp, "the initializer of '" + name + "' shard " + std::to_string(k) + " gave " +
                    initial.dims().to_string() + ", not " + shape(shard_dims).to_string());
    auto on = g.device_scope(devices.empty() ? "" : devices[static_cast<size_t>(k)]);
    // Where the part's rows sit: a restore into another split reads them
    // (actors/cluster/checkpoint_shards.hpp).
    attr_map where{{"_partition_of", name},
                   {"_partition_rows", dims[0]},
                   {"_partition_count", int64_t{num_shards}},
                   {"_partition_index", int64_t{k}},
                   {"_partition_strategy", std::string(partition_strategy_name(strategy))}};
    v.shards.push_back(make_variable(initial, name + "/part_" + std::to_string(k), where));
  }
  return v;
}

partitioned_variable make_partitioned_variable(output initial, int num_shards,
                                               const std::string& name,
                                               const std::vector<std::string>& devices,
                                               partition_strategy strategy) {
  const shape dims = initial.dims();
  if (dims.rank() < 1 || !dims.is_fully_defined())
    fail(kOp, "'" + name + "' needs an initial value of known shape and rank >= 1, got " +
                  dims.to_string());
  auto offsets = even_row_offsets(dims[0], num_shards);
  auto rows_of = [&](graph& g, shape shard_dims, int k) {
    // mod's rows k, k + K, ... are a strided read: a gather of constant ids.
    if (strategy == partition_strategy::mod)
      return gather(initial, int64_vector(g, rows_held(offsets, k, strategy)));
    std::vector<int64_t> begin(static_cast<size_t>(dims.rank()), 0);
    begin[0] = offsets[static_cast<size_t>(k)];
    return slice(initial, begin, shard_dims.dims());
  };
  return make_partitioned_variable(initial.owner(), dims, num_shards, rows_of, name, devices,
                                   strategy);
}

output embedding_lookup(const partitioned_variable& params, output ids, const std::string& name) {
  graph& g = ids.owner();
  std::vector<int64_t> out_dims = ids.dims().dims();
  int unknown = 0;
  for (auto d : out_dims) unknown += d < 0;
  if (unknown > 1)
    fail("embedding_lookup", "ids " + ids.dims().to_string() +
                                 " may have at most one unknown dim, to shape the result");
  for (auto d : row_shape_of(params.dims)) out_dims.push_back(d);
  auto scope = g.name_scope(name);
  const int shards = params.num_shards();
  // Part: which shard serves each id, and where its row goes in the result.
  auto flat_ids = reshape(ids, {-1});
  auto shard_and_row = row_shard_ids(flat_ids, params.row_offsets, params.strategy);
  auto rows_wanted = dynamic_partition(shard_and_row[1], shard_and_row[0], shards);
  auto positions = dynamic_partition(range(size(flat_ids)), shard_and_row[0], shards);
  // Gather: on each shard's own device.
  std::vector<output> rows;
  for (int k = 0; k < shards; ++k) {
    const auto& shard = params.shards[static_cast<size_t>(k)];
    auto on = g.device_scope(shard.value().node().device);
    rows.push_back(gather(shard.value(), rows_wanted[static_cast<size_t>(k)]));
  }
  // Stitch: back into the ids' order and shape.
  return reshape(dynamic_stitch(positions, rows), out_dims);
}

}  // namespace actorflow
