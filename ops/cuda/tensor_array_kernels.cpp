// GPU kernels of the tensor array family (ops/tensor_array.cpp). The
// elements (data) live on the device; the written flags and the indices come
// and go in host memory (the ops' host_memory_inputs and _outputs), so that
// every check the CPU kernel makes (a second write, a read past the end) is
// made on the host before anything is enqueued, with the CPU's messages, and
// a loop writing one element per iteration never waits for the device. Rows
// move with device-to-device copies on the kernel's stream.
#include <algorithm>
#include <cstring>

#include "ops/array_util.hpp"
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

[[noreturn]] void fail_array(const gpu_kernel_context& ctx, const std::string& what) {
  ctx.fail("tensor_array '" + ctx.attr_or<std::string>("array_name", ctx.node_name) + "': " + what);
}

size_t row_bytes(const device_tensor& data) {
  return data.rank() == 0
             ? 0
             : static_cast<size_t>(data.num_elements() / std::max<int64_t>(1, data.dims()[0])) *
                   dtype_size(data.type());
}

shape with_rows(int64_t rows, const shape& of) {
  auto d = of.dims();
  d[0] = rows;
  return shape(d);
}

void copy_bytes(gpu_kernel_context& ctx, void* to, const void* from, size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream_of(ctx)), ctx.op,
             "cudaMemcpyAsync");
}

void zero_bytes(gpu_kernel_context& ctx, void* at, size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemsetAsync(at, 0, bytes, stream_of(ctx)), ctx.op, "cudaMemsetAsync");
}

std::byte* row(device_tensor& t, int64_t i, size_t bytes) {
  return static_cast<std::byte*>(t.raw_mutable_data()) + static_cast<size_t>(i) * bytes;
}
const std::byte* row(const device_tensor& t, int64_t i, size_t bytes) {
  return static_cast<const std::byte*>(t.raw_data()) + static_cast<size_t>(i) * bytes;
}

// TensorFlow's size: the capacity of a fixed array; for a dynamic one the
// size it was made with or one past the highest written index, if higher.
int64_t array_size(const gpu_kernel_context& ctx, int64_t capacity, const tensor& written) {
  if (!ctx.attr_or<bool>("dynamic_size", false)) return capacity;
  const bool* was = written.data<bool>();
  int64_t end = std::min<int64_t>(capacity, written.num_elements());
  while (end > 0 && !was[end - 1]) --end;
  return std::max(end, ctx.attr_or<int64_t>("initial_size", 0));
}

int64_t grown_capacity(int64_t capacity, int64_t highest) {
  return highest < capacity ? capacity : std::max(2 * capacity, highest + 1);
}

// write and scatter: the checks of the CPU kernel, then the rows copied in.
void write_kernel(gpu_kernel_context& ctx) {
  device_tensor data = ctx.input(0);
  ctx.inputs[0] = device_tensor();  // let go, so that data may be unique
  const tensor& was_written = ctx.host_value(1);
  auto idx = host_indices(ctx, 2);
  const device_tensor& value = ctx.input(3);
  const int64_t capacity = data.dims()[0];
  const int64_t highest = detail::check_array_writes(
      idx, capacity, ctx.attr_or<bool>("dynamic_size", false), was_written.data<bool>(),
      [&](const std::string& what) { fail_array(ctx, what); });
  const size_t bytes = row_bytes(data);
  const int64_t rows = grown_capacity(capacity, highest);
  if (rows > capacity) {  // grown: the old rows, then zeros
    device_tensor bigger = ctx.allocate_temp(data.type(), with_rows(rows, data.dims()));
    copy_bytes(ctx, bigger.raw_mutable_data(), data.raw_data(), data.size_bytes());
    zero_bytes(ctx, row(bigger, capacity, bytes), static_cast<size_t>(rows - capacity) * bytes);
    data = std::move(bigger);
  } else if (!data.is_unique()) {
    data = clone(ctx, data);
  }
  tensor written = tensor::zeros(dtype::boolean, shape{rows});
  std::memcpy(written.raw_mutable_data(), was_written.raw_data(),
              static_cast<size_t>(std::min(capacity, was_written.num_elements())));
  bool* mark = written.mutable_data<bool>();
  for (size_t j = 0; j < idx.size(); ++j) {
    copy_bytes(ctx, row(data, idx[j], bytes), row(value, static_cast<int64_t>(j), bytes), bytes);
    mark[idx[j]] = true;
  }
  ctx.set_output(0, std::move(data));
  ctx.set_host_output(1, std::move(written));
}

// read and gather: rows below the size; never-written ones read as zeros.
void read_kernel(gpu_kernel_context& ctx) {
  const device_tensor& data = ctx.input(0);
  const tensor& written = ctx.host_value(1);
  auto idx = host_indices(ctx, 2);
  const int64_t capacity = data.dims()[0], size = array_size(ctx, capacity, written);
  for (int64_t i : idx)
    if (i < 0 || i >= size)
      fail_array(
          ctx, "read past the end: index " + std::to_string(i) + ", size " + std::to_string(size));
  device_tensor& out = ctx.allocate_output(0);
  const size_t bytes = row_bytes(data);
  const bool* was = written.data<bool>();
  for (size_t j = 0; j < idx.size(); ++j) {
    auto* to = row(out, static_cast<int64_t>(j), bytes);
    if (idx[j] < capacity && was[idx[j]])
      copy_bytes(ctx, to, row(data, idx[j], bytes), bytes);
    else
      zero_bytes(ctx, to, bytes);
  }
}

// The rows below the size, zeros where never written; a full array is its
// own stack. Runs of written rows go in one copy each.
void stack_kernel(gpu_kernel_context& ctx) {
  const device_tensor& data = ctx.input(0);
  const tensor& written = ctx.host_value(1);
  const int64_t capacity = data.dims()[0], size = array_size(ctx, capacity, written);
  const bool* was = written.data<bool>();
  auto written_at = [&](int64_t i) { return i < capacity && was[i]; };
  int64_t first_gap = 0;
  while (first_gap < size && written_at(first_gap)) ++first_gap;
  if (first_gap == size && size == capacity) return ctx.set_output(0, data);
  device_tensor& out = ctx.allocate_output(0);
  const size_t bytes = row_bytes(data);
  for (int64_t i = 0; i < size;) {
    int64_t end = i;
    const bool set = written_at(i);
    while (end < size && written_at(end) == set) ++end;
    const size_t span = static_cast<size_t>(end - i) * bytes;
    if (set)
      copy_bytes(ctx, row(out, i, bytes), row(data, i, bytes), span);
    else
      zero_bytes(ctx, row(out, i, bytes), span);
    i = end;
  }
}

void size_kernel(gpu_kernel_context& ctx) {
  int64_t size = array_size(ctx, ctx.input(0).dims()[0], ctx.host_value(1));
  if (size > std::numeric_limits<int32_t>::max())
    fail_array(ctx, "size " + std::to_string(size) + " does not fit int32");
  ctx.set_host_output(0, tensor::scalar<int32_t>(static_cast<int32_t>(size)));
}

// The rows are the elements: no copy; every one written.
void unstack_kernel(gpu_kernel_context& ctx) {
  const device_tensor& value = ctx.input(0);
  tensor written(dtype::boolean, shape{value.dims()[0]});
  std::fill_n(written.mutable_data<bool>(), written.num_elements(), true);
  ctx.set_output(0, value);
  ctx.set_host_output(1, std::move(written));
}

// (x with the rows at indices zeroed, resized to the target rows; the rows
// taken first, zeros past x), in place where x has no other holder.
void clear_rows_kernel(gpu_kernel_context& ctx) {
  device_tensor x = ctx.input(0);
  ctx.inputs[0] = device_tensor();
  auto idx = host_indices(ctx, 1);
  for (int64_t i : idx)
    if (i < 0) ctx.fail("negative index " + std::to_string(i));
  const int64_t have = x.dims()[0], rows = ctx.output_specs[0].dims[0];
  const size_t bytes = row_bytes(x);
  device_tensor& taken = ctx.allocate_output(1);
  for (size_t j = 0; j < idx.size(); ++j) {
    auto* to = row(taken, static_cast<int64_t>(j), bytes);
    if (idx[j] >= have)
      zero_bytes(ctx, to, bytes);
    else
      copy_bytes(ctx, to, row(x, idx[j], bytes), bytes);
  }
  device_tensor out;
  if (rows == have && x.is_unique()) {
    out = std::move(x);
  } else {
    out = ctx.allocate_temp(x.type(), ctx.output_specs[0].dims);
    zero_bytes(ctx, out.raw_mutable_data(), out.size_bytes());
    copy_bytes(ctx, out.raw_mutable_data(), x.raw_data(),
               static_cast<size_t>(std::min(rows, have)) * bytes);
  }
  for (int64_t i : idx)
    if (i < rows) zero_bytes(ctx, row(out, i, bytes), bytes);
  ctx.set_output(0, std::move(out));
}

// float32, the dtype the op table has cases of (tests/ops).
const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar(
        {.op = "tensor_array_write", .types = {dtype::float32}, .kernel = write_kernel}),
    gpu_kernel_registrar(
        {.op = "tensor_array_scatter", .types = {dtype::float32}, .kernel = write_kernel}),
    gpu_kernel_registrar(
        {.op = "tensor_array_read", .types = {dtype::float32}, .kernel = read_kernel}),
    gpu_kernel_registrar(
        {.op = "tensor_array_gather", .types = {dtype::float32}, .kernel = read_kernel}),
    gpu_kernel_registrar(
        {.op = "tensor_array_stack", .types = {dtype::float32}, .kernel = stack_kernel}),
    gpu_kernel_registrar(
        {.op = "tensor_array_size", .types = {dtype::float32}, .kernel = size_kernel}),
    gpu_kernel_registrar(
        {.op = "tensor_array_unstack", .types = {dtype::float32}, .kernel = unstack_kernel}),
    gpu_kernel_registrar(
        {.op = "tensor_array_clear_rows", .types = {dtype::float32}, .kernel = clear_rows_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
