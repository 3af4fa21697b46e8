// The paper's Part and Stitch: dynamic_partition splits rows among N outputs
// by a partition index per row, dynamic_stitch merges rows back by position.
// With range and row_shard_ids they read a variable split by rows over tasks
// (ops/embedding.hpp).
#include <algorithm>
#include <cstring>

#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

void check_int_type(dtype t, const std::string& op, const std::string& what) {
  if (t != dtype::int32 && t != dtype::int64)
    fail(op, what + " must be int32 or int64, got " + dtype_name(t));
}

int64_t read_int(const tensor& t, int64_t i) {
  return t.type() == dtype::int32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

// Bytes of one row: the product of data's dims past the index prefix.
size_t row_bytes(const tensor& data, int prefix_rank) {
  int64_t n = 1;
  for (int k = prefix_rank; k < data.rank(); ++k) n *= data.dims()[k];
  return static_cast<size_t>(n) * dtype_size(data.type());
}

// data's shape must start with index's: "(3,2) starts with (3)".
bool starts_with(const shape& data, const shape& prefix) {
  if (data.rank() < prefix.rank()) return false;
  for (int k = 0; k < prefix.rank(); ++k)
    if (data[k] >= 0 && prefix[k] >= 0 && data[k] != prefix[k]) return false;
  return true;
}

shape rows_shape(int64_t rows, const shape& data, int prefix_rank) {
  std::vector<int64_t> d = {rows};
  d.insert(d.end(), data.dims().begin() + prefix_rank, data.dims().end());
  return shape(d);
}

// ---- range -----------------------------------------------------------------

void range_kernel(kernel_context& ctx) {
  const tensor& limit = ctx.input(0);
  check_int_type(limit.type(), ctx.op, "limit");
  if (limit.rank() != 0) ctx.fail("limit must be a scalar, got shape " + limit.dims().to_string());
  int64_t n = read_int(limit, 0);
  if (n < 0) ctx.fail("limit must not be negative, got " + std::to_string(n));
  tensor& out = ctx.allocate_output(0, limit.type(), shape{n});
  for (int64_t i = 0; i < n; ++i) {
    if (limit.type() == dtype::int32)
      out.mutable_data<int32_t>()[i] = static_cast<int32_t>(i);
    else
      out.mutable_data<int64_t>()[i] = i;
  }
}

// ---- dynamic_partition -----------------------------------------------------------

std::vector<tensor_spec> dynamic_partition_infer(const shape_context& c) {
  auto& data = c.inputs[0];
  auto& partitions = c.inputs[1];
  if (partitions.type != dtype::int32)
    c.fail(std::string("partitions must be int32, got ") + dtype_name(partitions.type));
  int64_t n = c.attr<int64_t>("num_partitions");
  if (n < 1) c.fail("num_partitions must be at least 1, got " + std::to_string(n));
  if (!starts_with(data.dims, partitions.dims))
    c.fail("the shape of data " + data.dims.to_string() + " must start with that of partitions " +
           partitions.dims.to_string());
  std::vector<tensor_spec> out(static_cast<size_t>(n),
                               {data.type, rows_shape(-1, data.dims, partitions.dims.rank())});
  return out;
}

void dynamic_partition_kernel(kernel_context& ctx) {
  const tensor& data = ctx.input(0);
  const tensor& partitions = ctx.input(1);
  if (partitions.type() != dtype::int32)
    ctx.fail(std::string("partitions must be int32, got ") + dtype_name(partitions.type()));
  int64_t n = ctx.attr<int64_t>("num_partitions");
  if (n < 1) ctx.fail("num_partitions must be at least 1, got " + std::to_string(n));
  if (!starts_with(data.dims(), partitions.dims()))
    ctx.fail("the shape of data " + data.dims().to_string() +
             " must start with that of partitions " + partitions.dims().to_string());
  const int32_t* p = partitions.data<int32_t>();
  const int64_t rows = partitions.num_elements();
  std::vector<int64_t> counts(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < rows; ++r) {
    if (p[r] < 0 || p[r] >= n)
      ctx.fail("partition " + std::to_string(p[r]) + " (at position " + std::to_string(r) +
               ") is not in [0, " + std::to_string(n) + ")");
    ++counts[static_cast<size_t>(p[r])];
  }
  std::vector<char*> next(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    auto& out = ctx.allocate_output(
        static_cast<size_t>(k), data.type(),
        rows_shape(counts[static_cast<size_t>(k)], data.dims(), partitions.rank()));
    next[static_cast<size_t>(k)] = static_cast<char*>(out.raw_mutable_data());
  }
  const size_t width = row_bytes(data, partitions.rank());
  if (width == 0) return;
  const char* src = static_cast<const char*>(data.raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    auto& dst = next[static_cast<size_t>(p[r])];
    std::memcpy(dst, src + static_cast<size_t>(r) * width, width);
    dst += width;
  }
}

// Each row's gradient goes back to where the row came from: stitch the
// partitioned positions with the outputs' gradients.
void dynamic_partition_grad(grad_context& c) {
  auto partitions = c.input(1);
  int64_t n = c.attr<int64_t>("num_partitions");
  auto positions = reshape_like(range(size(partitions)), partitions);
  auto parts = dynamic_partition(positions, partitions, n);
  auto stitched = dynamic_stitch(parts, c.grads);
  c.input_grads = {reshape_like(stitched, c.input(0)), output()};
}

// ---- dynamic_stitch --------------------------------------------------------------

std::vector<tensor_spec> dynamic_stitch_infer(const shape_context& c) {
  if (c.inputs.size() % 2 != 0)
    c.fail("takes N indices then N data inputs, got " + std::to_string(c.inputs.size()));
  size_t n = c.inputs.size() / 2;
  auto& first_data = c.inputs[n];
  shape tail = rows_shape(-1, first_data.dims, c.inputs[0].dims.rank());
  for (size_t i = 0; i < n; ++i) {
    auto& idx = c.inputs[i];
    auto& data = c.inputs[n + i];
    check_int_type(idx.type, c.op, "indices " + std::to_string(i));
    if (data.type != first_data.type)
      c.fail("data " + std::to_string(i) + " is " + dtype_name(data.type) + ", data 0 is " +
             dtype_name(first_data.type));
    if (!starts_with(data.dims, idx.dims) ||
        !rows_shape(-1, data.dims, idx.dims.rank()).compatible_with(tail))
      c.fail("data " + std::to_string(i) + " " + data.dims.to_string() + " must be indices " +
             std::to_string(i) + " " + idx.dims.to_string() +
             " followed by the row shape of data 0");
  }
  return {{first_data.type, tail}};
}

void dynamic_stitch_kernel(kernel_context& ctx) {
  if (ctx.inputs.size() % 2 != 0)
    ctx.fail("takes N indices then N data inputs, got " + std::to_string(ctx.inputs.size()));
  size_t n = ctx.inputs.size() / 2;
  const tensor& first_data = ctx.input(n);
  shape tail = rows_shape(0, first_data.dims(), ctx.input(0).rank());
  int64_t rows = 0;
  for (size_t i = 0; i < n; ++i) {
    const tensor& idx = ctx.input(i);
    const tensor& data = ctx.input(n + i);
    check_int_type(idx.type(), ctx.op, "indices " + std::to_string(i));
    if (data.type() != first_data.type() || !starts_with(data.dims(), idx.dims()) ||
        data.rank() - idx.rank() != tail.rank() - 1 ||
        rows_shape(0, data.dims(), idx.rank()) != tail)
      ctx.fail("data " + std::to_string(i) + " " + data.dims().to_string() + " of " +
               dtype_name(data.type()) + " must be indices " + std::to_string(i) + " " +
               idx.dims().to_string() + " followed by the row shape of data 0 " +
               first_data.dims().to_string() + " of " + dtype_name(first_data.type()));
    for (int64_t j = 0; j < idx.num_elements(); ++j) {
      int64_t at = read_int(idx, j);
      if (at < 0)
        ctx.fail("index " + std::to_string(at) + " (indices " + std::to_string(i) + ", position " +
                 std::to_string(j) + ") is negative");
      rows = std::max(rows, at + 1);
    }
  }
  auto& out = ctx.allocate_output(0, first_data.type(),
                                  rows_shape(rows, first_data.dims(), ctx.input(0).rank()));
  const size_t width = row_bytes(first_data, ctx.input(0).rank());
  char* dst = static_cast<char*>(out.raw_mutable_data());
  // Rows no index names stay zero; a row named twice takes the later value.
  if (out.size_bytes()) std::memset(dst, 0, out.size_bytes());
  if (width == 0) return;
  for (size_t i = 0; i < n; ++i) {
    const tensor& idx = ctx.input(i);
    const char* src = static_cast<const char*>(ctx.input(n + i).raw_data());
    for (int64_t j = 0; j < idx.num_elements(); ++j)
      std::memcpy(dst + static_cast<size_t>(read_int(idx, j)) * width,
                  src + static_cast<size_t>(j) * width, width);
  }
}

void dynamic_stitch_grad(grad_context& c) {
  size_t n = c.inputs.size() / 2;
  c.input_grads.assign(c.inputs.size(), output());
  for (size_t i = 0; i < n; ++i) c.input_grads[n + i] = gather(c.grad(), c.input(i));
}

// ---- row_shard_ids -----------------------------------------------------------

// The "strategy" attribute: "div" (the default) or "mod".
bool is_mod(const attr_map& attrs, const std::string& op) {
  auto strategy = get_attr_or<std::string>(attrs, "strategy", op, "div");
  if (strategy != "div" && strategy != "mod")
    fail(op, "strategy must be \"div\" or \"mod\", got \"" + strategy + "\"");
  return strategy == "mod";
}

// Shard k holds offsets[k+1] - offsets[k] rows. With mod they must be the
// even split, the only one in which id % K names the shard.
std::vector<int64_t> checked_offsets(const attr_map& attrs, const std::string& op) {
  auto offsets = get_attr<std::vector<int64_t>>(attrs, "row_offsets", op);
  if (offsets.size() < 2 || offsets.front() != 0)
    fail(op, "row_offsets must start at 0 and name at least one shard, got " +
                 detail::list_to_string(offsets));
  for (size_t k = 1; k < offsets.size(); ++k)
    if (offsets[k] < offsets[k - 1])
      fail(op, "row_offsets must not decrease, got " + detail::list_to_string(offsets));
  if (is_mod(attrs, op)) {
    const auto shards = static_cast<int64_t>(offsets.size() - 1), rows = offsets.back();
    for (int64_t k = 0; k < shards; ++k) {
      const int64_t want = rows > k ? (rows - k + shards - 1) / shards : 0;
      if (offsets[static_cast<size_t>(k) + 1] - offsets[static_cast<size_t>(k)] != want)
        fail(op, "row_offsets " + detail::list_to_string(offsets) + " are not a mod split: shard " +
                     std::to_string(k) + " must have " + std::to_string(want) + " rows");
    }
  }
  return offsets;
}

std::vector<tensor_spec> row_shard_ids_infer(const shape_context& c) {
  auto& ids = c.inputs[0];
  check_int_type(ids.type, c.op, "ids");
  checked_offsets(c.attrs, c.op);
  return {{dtype::int32, ids.dims}, {ids.type, ids.dims}};
}

// div: the last shard whose first row is at or before id; mod: id % K.
std::pair<int64_t, int64_t> shard_and_row_of(int64_t id, const std::vector<int64_t>& offsets,
                                             bool mod) {
  if (mod) {
    const auto shards = static_cast<int64_t>(offsets.size() - 1);
    return {id % shards, id / shards};
  }
  auto k = std::upper_bound(offsets.begin(), offsets.end() - 1, id) - offsets.begin() - 1;
  return {k, id - offsets[static_cast<size_t>(k)]};
}

void row_shard_ids_kernel(kernel_context& ctx) {
  const tensor& ids = ctx.input(0);
  check_int_type(ids.type(), ctx.op, "ids");
  auto offsets = checked_offsets(ctx.attrs, ctx.op);
  const bool mod = is_mod(ctx.attrs, ctx.op);
  const int64_t rows = offsets.back();
  // Both allocated before either is held: allocating may move the outputs.
  ctx.allocate_output(0, dtype::int32, ids.dims());
  ctx.allocate_output(1, ids.type(), ids.dims());
  auto& shard = ctx.outputs[0];
  auto& local = ctx.outputs[1];
  for (int64_t j = 0; j < ids.num_elements(); ++j) {
    int64_t id = read_int(ids, j);
    if (id < 0 || id >= rows)
      ctx.fail("id " + std::to_string(id) + " (at position " + std::to_string(j) +
               ") is out of range for a variable of " + std::to_string(rows) + " rows");
    auto [k, within] = shard_and_row_of(id, offsets, mod);
    shard.mutable_data<int32_t>()[j] = static_cast<int32_t>(k);
    if (ids.type() == dtype::int32)
      local.mutable_data<int32_t>()[j] = static_cast<int32_t>(within);
    else
      local.mutable_data<int64_t>()[j] = within;
  }
}

const op_registrar registrations[] = {
    op_registrar({.name = "range",
                  .num_inputs = 1,
                  .infer =
                      [](const shape_context& c) {
                        check_int_type(c.inputs[0].type, c.op, "limit");
                        if (c.inputs[0].dims.rank() != 0)
                          c.fail("limit must be a scalar, got shape " +
                                 c.inputs[0].dims.to_string());
                        return std::vector<tensor_spec>{{c.inputs[0].type, shape{-1}}};
                      },
                  .kernel = range_kernel,
                  .summary = "0, 1, ..., limit - 1 (limit: an int32 or int64 scalar)",
                  .not_differentiable = true}),
    op_registrar({.name = "dynamic_partition",
                  .num_inputs = 2,
                  .infer = dynamic_partition_infer,
                  .kernel = dynamic_partition_kernel,
                  .summary = "output k: the rows of data whose partition is k, in order",
                  .gradient = dynamic_partition_grad}),
    op_registrar({.name = "dynamic_stitch",
                  .num_inputs = -1,
                  .min_inputs = 2,
                  .infer = dynamic_stitch_infer,
                  .kernel = dynamic_stitch_kernel,
                  .summary = "merged[indices_i[j]] = data_i[j]: N indices, then N data",
                  .gradient = dynamic_stitch_grad}),
    op_registrar({.name = "row_shard_ids",
                  .num_inputs = 1,
                  .infer = row_shard_ids_infer,
                  .kernel = row_shard_ids_kernel,
                  .summary = "for row ids of a variable split by attr row_offsets (shard "
                             "sizes) and attr strategy (div or mod): each id's shard and its row "
                             "within the shard",
                  .not_differentiable = true}),
};

}  // namespace

output range(output limit, const std::string& name) { return make_op("range", {limit}, {}, name); }

std::vector<output> dynamic_partition(output data, output partitions, int64_t num_partitions,
                                      const std::string& name) {
  return make_op_outputs("dynamic_partition", {data, partitions},
                         {{"num_partitions", num_partitions}}, name);
}

output dynamic_stitch(const std::vector<output>& indices, const std::vector<output>& data,
                      const std::string& name) {
  if (indices.size() != data.size() || indices.empty())
    fail("dynamic_stitch", "needs as many indices as data inputs, at least one; got " +
                               std::to_string(indices.size()) + " and " +
                               std::to_string(data.size()));
  std::vector<output> ins = indices;
  ins.insert(ins.end(), data.begin(), data.end());
  return make_op("dynamic_stitch", ins, {}, name);
}

std::vector<output> row_shard_ids(output ids, std::vector<int64_t> row_offsets,
                                  partition_strategy strategy, const std::string& name) {
  attr_map attrs = {{"row_offsets", std::move(row_offsets)}};
  // Without the attribute the op is div, as graphs written before mod existed.
  if (strategy == partition_strategy::mod) attrs["strategy"] = std::string("mod");
  return make_op_outputs("row_shard_ids", {ids}, attrs, name);
}

}  // namespace actorflow
