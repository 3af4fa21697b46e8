// GPU kernels of the indexing ops (ops/array_index.cpp): gather and its
// adjoints scatter_add_like and scatter_add_into. Their indices come in host
// memory (the ops' host_memory_inputs): checked there with the CPU's errors,
// then uploaded as int64 for array_index.cu.
#include <algorithm>
#include <numeric>

#include "ops/array_util.hpp"
#include "ops/cuda/glue.hpp"
#include "ops/geometry/dims.hpp"

namespace actorflow::gpu {

using namespace kernels;

std::vector<int64_t> kernels::host_indices(const gpu_kernel_context& ctx, size_t i) {
  const tensor& t = ctx.host_value(i);
  detail::check_index_type(t.type(), ctx.op);
  std::vector<int64_t> idx(static_cast<size_t>(t.num_elements()));
  detail::visit_index(t.type(), [&](auto tag) {
    const auto* p = t.data<decltype(tag)>();
    std::copy(p, p + t.num_elements(), idx.begin());
  });
  return idx;
}

row_groups kernels::group_rows(gpu_kernel_context& ctx, const std::vector<int64_t>& index) {
  std::vector<int64_t> order(index.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return index[static_cast<size_t>(a)] < index[static_cast<size_t>(b)];
  });
  std::vector<int64_t> targets, offsets;
  for (size_t k = 0; k < order.size(); ++k) {
    int64_t row = index[static_cast<size_t>(order[k])];
    if (targets.empty() || targets.back() != row) {
      targets.push_back(row);
      offsets.push_back(static_cast<int64_t>(k));
    }
  }
  offsets.push_back(static_cast<int64_t>(order.size()));
  row_groups g;
  g.rows = static_cast<int64_t>(targets.size());
  auto up = [&](const std::vector<int64_t>& v) {
    return ctx.upload(tensor::from_vector<int64_t>(v, shape{static_cast<int64_t>(v.size())}));
  };
  g.targets = up(targets);
  g.offsets = up(offsets);
  g.sources = up(order);
  return g;
}

device_tensor kernels::sum_repeated_rows(gpu_kernel_context& ctx, const device_tensor& updates,
                                         const row_groups& groups, int64_t n, int64_t row_size) {
  std::vector<int64_t> compact(static_cast<size_t>(groups.rows));
  std::iota(compact.begin(), compact.end(), int64_t{0});
  device_tensor at = ctx.upload(tensor::from_vector<int64_t>(compact, shape{groups.rows}));
  device_tensor summed = ctx.allocate_temp(updates.type(), shape{groups.rows, row_size});
  fill(updates.type(), 0, summed.raw_mutable_data(), summed.num_elements(), stream_of(ctx));
  scatter_add_rows(updates.type(), updates.raw_data(), summed.raw_mutable_data(), 1, groups.rows, n,
                   row_size, at.data<int64_t>(), groups.offsets.data<int64_t>(),
                   groups.sources.data<int64_t>(), groups.rows, stream_of(ctx));
  return summed;
}

namespace {

// (outer, d, inner) of x around `axis`.
struct around_axis {
  int64_t outer = 1, d = 0, inner = 1;
};
around_axis split_at(const shape& dims, int axis) {
  around_axis a;
  const auto& v = dims.dims();
  a.d = v[static_cast<size_t>(axis)];
  for (int k = 0; k < axis; ++k) a.outer *= v[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < v.size(); ++k) a.inner *= v[k];
  return a;
}

device_tensor upload_indices(gpu_kernel_context& ctx, const std::vector<int64_t>& idx) {
  return ctx.upload(tensor::from_vector<int64_t>(idx, shape{static_cast<int64_t>(idx.size())}));
}

void gather_kernel(gpu_kernel_context& ctx) {
  const device_tensor& params = ctx.input(0);
  int axis = normalize_axis(ctx.attr_or<int64_t>("axis", 0), params.rank(), ctx.op);
  auto a = split_at(params.dims(), axis);
  const tensor& indices = ctx.host_value(1);
  auto idx =
      detail::checked_indices(indices, axis, a.d, "params " + params.dims().to_string(), ctx.op);
  device_tensor& out = ctx.allocate_output(0);
  if (out.num_elements() == 0) return;
  device_tensor on_device = upload_indices(ctx, idx);
  gather_rows(dtype_size(params.type()), params.raw_data(), on_device.data<int64_t>(),
              out.raw_mutable_data(), a.outer, a.d, static_cast<int64_t>(idx.size()), a.inner,
              stream_of(ctx));
}

// out (zeros, or base) with the updates added at the rows the indices name.
void scatter_rows_into(gpu_kernel_context& ctx, const device_tensor& updates,
                       const std::vector<int64_t>& idx, device_tensor& out, const around_axis& a) {
  if (updates.num_elements() == 0) return;
  auto groups = group_rows(ctx, idx);
  scatter_add_rows(out.type(), updates.raw_data(), out.raw_mutable_data(), a.outer, a.d,
                   static_cast<int64_t>(idx.size()), a.inner, groups.targets.data<int64_t>(),
                   groups.offsets.data<int64_t>(), groups.sources.data<int64_t>(), groups.rows,
                   stream_of(ctx));
}

void scatter_add_like_kernel(gpu_kernel_context& ctx) {
  const device_tensor& updates = ctx.input(0);
  const shape& like = ctx.input(2).dims();
  int axis = normalize_axis(ctx.attr_or<int64_t>("axis", 0), like.rank(), ctx.op);
  auto a = split_at(like, axis);
  auto idx = detail::checked_indices(ctx.host_value(1), axis, a.d, "the output " + like.to_string(),
                                     ctx.op);
  device_tensor& out = ctx.allocate_output(0);
  fill(out.type(), 0, out.raw_mutable_data(), out.num_elements(), stream_of(ctx));
  scatter_rows_into(ctx, updates, idx, out, a);
}

// In place when base's buffer has no other holder, as on the CPU.
void scatter_add_into_kernel(gpu_kernel_context& ctx) {
  device_tensor base = ctx.input(0);
  auto a = split_at(base.dims(), 0);
  auto idx = detail::checked_indices(ctx.host_value(2), 0, a.d,
                                     "the base " + base.dims().to_string(), ctx.op);
  ctx.inputs[0] = device_tensor();  // let go, so that base may be unique
  if (!base.is_unique()) base = clone(ctx, base);
  scatter_rows_into(ctx, ctx.input(1), idx, base, a);
  ctx.set_output(0, std::move(base));
}

// The dtypes the op table has cases of (tests/ops).
const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "gather",
                          .types = {dtype::float32, dtype::float64, dtype::int32},
                          .kernel = gather_kernel}),
    gpu_kernel_registrar({.op = "scatter_add_like",
                          .types = {dtype::float32, dtype::float64, dtype::int32},
                          .kernel = scatter_add_like_kernel}),
    gpu_kernel_registrar(
        {.op = "scatter_add_into", .types = float_types, .kernel = scatter_add_into_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
