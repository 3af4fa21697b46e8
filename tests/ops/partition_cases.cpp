// Cases for the Part/Stitch ops (ops/array_partition.cpp): range,
// dynamic_partition, dynamic_stitch and row_shard_ids.
#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

using ints = std::vector<int64_t>;

const op_case_registrar partition_cases({
    // ---- range ----
    {.op = "range",
     .label = "int64 limit",
     .inputs = {scalar_of<int64_t>(4)},
     .expected = {make<int64_t>({4}, {0, 1, 2, 3})}},
    {.op = "range",
     .label = "int32 limit 0 gives an empty range",
     .inputs = {scalar_of<int32_t>(0)},
     .expected = {tensor(dtype::int32, {0})}},
    {.op = "range",
     .label = "negative limit",
     .inputs = {scalar_of<int32_t>(-2)},
     .expect_error = "limit must not be negative, got -2"},
    {.op = "range",
     .label = "limit not a scalar",
     .inputs = {make<int32_t>({1}, {3})},
     .expect_error = "limit must be a scalar"},
    // ---- dynamic_partition ----
    {.op = "dynamic_partition",
     .label = "rows of (4,2) into 3, one partition empty",
     .inputs = {make<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), make<int32_t>({4}, {2, 0, 2, 0})},
     .attrs = {{"num_partitions", int64_t{3}}},
     .expected = {make<float>({2, 2}, {3, 4, 7, 8}), tensor(dtype::float32, {0, 2}),
                  make<float>({2, 2}, {1, 2, 5, 6})}},
    {.op = "dynamic_partition",
     .label = "2-D partitions over (2,2) int64 elements",
     .inputs = {make<int64_t>({2, 2}, {10, 11, 12, 13}), make<int32_t>({2, 2}, {1, 0, 0, 1})},
     .attrs = {{"num_partitions", int64_t{2}}},
     .expected = {make<int64_t>({2}, {11, 12}), make<int64_t>({2}, {10, 13})}},
    {.op = "dynamic_partition",
     .label = "partition out of range",
     .inputs = {make<float>({3}, {1, 2, 3}), make<int32_t>({3}, {0, 2, 1})},
     .attrs = {{"num_partitions", int64_t{2}}},
     .expect_error = "partition 2 (at position 1) is not in [0, 2)"},
    {.op = "dynamic_partition",
     .label = "partitions not a prefix of data",
     .inputs = {make<float>({3}, {1, 2, 3}), make<int32_t>({2}, {0, 1})},
     .attrs = {{"num_partitions", int64_t{2}}},
     .expect_error = "must start with that of partitions (2)"},
    {.op = "dynamic_partition",
     .label = "int64 partitions",
     .inputs = {make<float>({2}, {1, 2}), make<int64_t>({2}, {0, 1})},
     .attrs = {{"num_partitions", int64_t{2}}},
     .expect_error = "partitions must be int32, got int64"},
    {.op = "dynamic_partition",
     .label = "no partitions",
     .inputs = {make<float>({2}, {1, 2}), make<int32_t>({2}, {0, 0})},
     .attrs = {{"num_partitions", int64_t{0}}},
     .expect_error = "num_partitions must be at least 1"},
    // ---- dynamic_stitch ----
    {.op = "dynamic_stitch",
     .label = "rows back in order, an unnamed row stays zero",
     .inputs = {make<int32_t>({2}, {0, 3}), make<int64_t>({1}, {1}),
                make<float>({2, 2}, {1, 2, 7, 8}), make<float>({1, 2}, {3, 4})},
     .expected = {make<float>({4, 2}, {1, 2, 3, 4, 0, 0, 7, 8})}},
    {.op = "dynamic_stitch",
     .label = "a row named twice takes the later value; 2-D indices",
     .inputs = {make<int32_t>({1}, {1}), make<int32_t>({2, 1}, {0, 1}), make<int32_t>({1}, {5}),
                make<int32_t>({2, 1}, {6, 9})},
     .expected = {make<int32_t>({2}, {6, 9})}},
    {.op = "dynamic_stitch",
     .label = "no rows at all",
     .inputs = {tensor(dtype::int32, {0}), tensor(dtype::float32, {0, 3})},
     .expected = {tensor(dtype::float32, {0, 3})}},
    {.op = "dynamic_stitch",
     .label = "row shapes differ",
     .inputs = {make<int32_t>({1}, {0}), make<int32_t>({1}, {1}), make<float>({1, 2}, {1, 2}),
                make<float>({1, 3}, {1, 2, 3})},
     .expect_error = "followed by the row shape of data 0"},
    {.op = "dynamic_stitch",
     .label = "negative index",
     .inputs = {make<int32_t>({2}, {0, -1}), make<float>({2}, {1, 2})},
     .expect_error = "index -1 (indices 0, position 1) is negative"},
    {.op = "dynamic_stitch",
     .label = "odd input count",
     .inputs = {make<int32_t>({1}, {0}), make<float>({1}, {1}), make<float>({1}, {1})},
     .expect_error = "takes N indices then N data inputs, got 3"},
    // ---- row_shard_ids ----
    {.op = "row_shard_ids",
     .label = "ids over shards of 3, 3 and 2 rows",
     .inputs = {make<int64_t>({2, 3}, {0, 2, 3, 7, 5, 6})},
     .attrs = {{"row_offsets", ints{0, 3, 6, 8}}},
     .expected = {make<int32_t>({2, 3}, {0, 0, 1, 2, 1, 2}),
                  make<int64_t>({2, 3}, {0, 2, 0, 1, 2, 0})}},
    {.op = "row_shard_ids",
     .label = "one shard, int32 ids",
     .inputs = {make<int32_t>({2}, {4, 1})},
     .attrs = {{"row_offsets", ints{0, 5}}},
     .expected = {make<int32_t>({2}, {0, 0}), make<int32_t>({2}, {4, 1})}},
    {.op = "row_shard_ids",
     .label = "id past the last row",
     .inputs = {make<int32_t>({2}, {1, 8})},
     .attrs = {{"row_offsets", ints{0, 3, 6, 8}}},
     .expect_error = "id 8 (at position 1) is out of range for a variable of 8 rows"},
    {.op = "row_shard_ids",
     .label = "negative id",
     .inputs = {make<int64_t>({1}, {-3})},
     .attrs = {{"row_offsets", ints{0, 4}}},
     .expect_error = "id -3"},
    {.op = "row_shard_ids",
     .label = "offsets that decrease",
     .inputs = {make<int64_t>({1}, {0})},
     .attrs = {{"row_offsets", ints{0, 4, 2}}},
     .expect_error = "row_offsets must not decrease"},
});

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> c;
  c.push_back({.op = "dynamic_partition",
               .label = "rows of (4,3) into 3 partitions, one empty",
               .inputs = {uniform({4, 3}), make<int32_t>({4}, {1, 0, 1, 0})},
               .attrs = {{"num_partitions", int64_t{3}}}});
  c.push_back({.op = "dynamic_partition",
               .label = "2-D partitions of a (2,2) matrix",
               .inputs = {uniform({2, 2}), make<int32_t>({2, 2}, {1, 0, 0, 1})},
               .attrs = {{"num_partitions", int64_t{2}}}});
  c.push_back({.op = "dynamic_stitch",
               .label = "two parts of (2,3) rows into 4 rows",
               .inputs = {ids({2}, {0, 2}), ids({2}, {3, 1}), uniform({2, 3}), uniform({2, 3})}});
  return c;
}

const grad_case_registrar gradient_registration(gradient_cases);

}  // namespace
}  // namespace actorflow::testing
