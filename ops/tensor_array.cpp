// The tensor array family (see tensor_array.hpp): write/scatter, read/gather,
// stack, size, unstack, and clear_rows for the gradients. Gradients reuse
// scatter_add_like; only clear_rows is new for them.
#include "ops/tensor_array.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/state.hpp"

namespace actorflow {

using detail::check_index_type;
using detail::visit_index;

namespace {

// ---- shared checks -------------------------------------------------------------

shape element_shape_of(const shape& data) {
  const auto& d = data.dims();
  return shape(std::vector<int64_t>(d.begin() + 1, d.end()));
}

shape with_rows(int64_t rows, const shape& element) {
  std::vector<int64_t> d{rows};
  d.insert(d.end(), element.dims().begin(), element.dims().end());
  return shape(d);
}

// Writes past the end grow the capacity geometrically, so that n writes at
// 0, 1, 2, ... copy O(n) elements in all.
int64_t grown_capacity(int64_t capacity, int64_t highest) {
  return highest < capacity ? capacity : std::max(2 * capacity, highest + 1);
}

[[noreturn]] void fail_array(const kernel_context& ctx, const std::string& what) {
  ctx.fail("tensor_array '" + ctx.attr_or<std::string>("array_name", ctx.node_name) + "': " + what);
}

void check_array_spec(const shape_context& c) {
  const auto& data = c.inputs[0];
  const auto& written = c.inputs[1];
  if (data.dims.rank() == 0)
    c.fail("data must be [capacity, element dims...], got the scalar " + data.to_string());
  if (written.type != dtype::boolean || written.dims.rank() != 1)
    c.fail("written must be bool [capacity], got " + written.to_string());
  if (!written.dims.compatible_with(shape{data.dims[0]}))
    c.fail("data " + data.dims.to_string() + " and written " + written.dims.to_string() +
           " disagree on the capacity");
}

// Input i holds the index (rank 0) or the indices (rank 1).
void check_index_spec(const shape_context& c, size_t i, int rank) {
  check_index_type(c.inputs[i].type, c.op);
  if (c.inputs[i].dims.rank() != rank)
    c.fail(std::string(rank == 0 ? "index must be a scalar" : "indices must be a vector") +
           ", got " + c.inputs[i].dims.to_string());
}

void check_array(const kernel_context& ctx, const tensor& data, const tensor& written) {
  if (data.rank() == 0 || written.type() != dtype::boolean ||
      written.dims() != shape{data.dims()[0]})
    fail_array(ctx, "data " + tensor_spec{data.type(), data.dims()}.to_string() + " and written " +
                        tensor_spec{written.type(), written.dims()}.to_string() +
                        " are not an array ([capacity, ...] and bool [capacity])");
}

std::vector<int64_t> index_values(const tensor& indices) {
  std::vector<int64_t> idx(static_cast<size_t>(indices.num_elements()));
  visit_index(indices.type(), [&](auto tag) {
    const auto* p = indices.data<decltype(tag)>();
    std::copy(p, p + indices.num_elements(), idx.begin());
  });
  return idx;
}

size_t row_bytes(const tensor& data) {
  return static_cast<size_t>(element_shape_of(data.dims()).num_elements()) *
         dtype_size(data.type());
}

// Copies `rows` rows of `bytes` each; memcpy may not see null pointers, even for 0 bytes.
void copy_rows(void* dst, const void* src, int64_t rows, size_t bytes) {
  if (rows > 0 && bytes > 0) std::memcpy(dst, src, static_cast<size_t>(rows) * bytes);
}

// ---- write, scatter ------------------------------------------------------------

std::vector<tensor_spec> write_infer(const shape_context& c) {
  check_array_spec(c);
  bool scatter = c.op == "tensor_array_scatter";
  check_index_spec(c, 2, scatter ? 1 : 0);
  const auto& data = c.inputs[0];
  const auto& value = c.inputs[3];
  shape element = element_shape_of(data.dims);
  shape want = scatter ? with_rows(c.inputs[2].dims[0], element) : element;
  if (value.type != data.type || !value.dims.compatible_with(want))
    c.fail("value " + value.to_string() + " differs from the element" + (scatter ? "s " : " ") +
           tensor_spec{data.type, want}.to_string());
  int64_t capacity = data.dims[0];
  if (c.attr_or<bool>("dynamic_size", false)) {
    // The new capacity is known when the indices are constants, else unknown.
    const auto* constants = c.constant_inputs;
    const tensor* indices = constants && constants->size() > 2 ? &(*constants)[2] : nullptr;
    if (capacity >= 0 && indices && indices->valid()) {
      auto idx = index_values(*indices);
      int64_t highest = idx.empty() ? -1 : *std::max_element(idx.begin(), idx.end());
      capacity = grown_capacity(capacity, highest);
    } else {
      capacity = shape::unknown;
    }
  }
  return {{data.type, with_rows(capacity, element)}, {dtype::boolean, shape{capacity}}};
}

// A new buffer of `capacity` rows holding t's rows, the rest zero.
tensor grown(const tensor& t, int64_t capacity) {
  tensor out = tensor::zeros(t.type(), with_rows(capacity, element_shape_of(t.dims())));
  if (t.size_bytes() > 0) std::memcpy(out.raw_mutable_data(), t.raw_data(), t.size_bytes());
  return out;
}

void write_kernel(kernel_context& ctx) {
  bool scatter = ctx.op == "tensor_array_scatter";
  // Moved out of the inputs, so that when this kernel holds the only
  // reference to a buffer it may write it in place and pass it on: a loop
  // filling an array then costs O(element) per write, not a copy of the
  // whole array. Whoever else holds a buffer (another consumer, a fetch, a
  // folded constant, the caller of run_kernel) keeps its count above one, and
  // then we clone first (copy-on-write, as variable_state::mutable_value).
  tensor data = std::move(ctx.inputs[0]);
  tensor written = std::move(ctx.inputs[1]);
  const tensor& indices = ctx.input(2);
  const tensor& value = ctx.input(3);
  check_array(ctx, data, written);
  check_index_type(indices.type(), ctx.op);
  auto idx = index_values(indices);
  shape element = element_shape_of(data.dims());
  shape want = scatter ? with_rows(static_cast<int64_t>(idx.size()), element) : element;
  if (value.type() != data.type() || value.dims() != want)
    fail_array(ctx, "value " + tensor_spec{value.type(), value.dims()}.to_string() +
                        " differs from the element" + (scatter ? "s " : " ") +
                        tensor_spec{data.type(), want}.to_string());
  // Every check before any write: a failed write leaves nothing half done.
  const int64_t capacity = data.dims()[0];
  const int64_t highest = detail::check_array_writes(
      idx, capacity, ctx.attr_or<bool>("dynamic_size", false), written.data<bool>(),
      [&](const std::string& what) { fail_array(ctx, what); });

  if (highest >= capacity) {
    int64_t grown_to = grown_capacity(capacity, highest);
    data = grown(data, grown_to);
    written = grown(written, grown_to);
  } else {
    if (!data.is_unique()) data = data.clone();
    if (!written.is_unique()) written = written.clone();
  }
  size_t bytes = row_bytes(data);
  auto* dst = static_cast<std::byte*>(data.raw_mutable_data());
  const auto* src = static_cast<const std::byte*>(value.raw_data());
  bool* mark = written.mutable_data<bool>();
  for (size_t j = 0; j < idx.size(); ++j) {
    copy_rows(dst + static_cast<size_t>(idx[j]) * bytes, src + j * bytes, 1, bytes);
    mark[idx[j]] = true;
  }
  ctx.set_output(0, std::move(data));
  ctx.set_output(1, std::move(written));
}

// ---- read, gather --------------------------------------------------------------

// TensorFlow's size: the capacity of a fixed array; for a dynamic one, the
// size it was made with or one past the highest written index, if higher
// (the capacity grows ahead of it).
int64_t array_size(const kernel_context& ctx, const tensor& data, const tensor& written) {
  check_array(ctx, data, written);
  int64_t capacity = data.dims()[0];
  if (!ctx.attr_or<bool>("dynamic_size", false)) return capacity;
  const bool* was = written.data<bool>();
  int64_t end = capacity;
  while (end > 0 && !was[end - 1]) --end;
  return std::max(end, ctx.attr_or<int64_t>("initial_size", 0));
}

std::vector<tensor_spec> read_infer(const shape_context& c) {
  check_array_spec(c);
  bool gather = c.op == "tensor_array_gather";
  check_index_spec(c, 2, gather ? 1 : 0);
  shape element = element_shape_of(c.inputs[0].dims);
  return {{c.inputs[0].type, gather ? with_rows(c.inputs[2].dims[0], element) : element}};
}

// An index below the size that was never written reads as zeros of the
// element shape (always known here), as TensorFlow's TensorArrayV3 reads one
// when its element shape is known.
void read_kernel(kernel_context& ctx) {
  bool gather = ctx.op == "tensor_array_gather";
  const tensor& data = ctx.input(0);
  const tensor& written = ctx.input(1);
  check_index_type(ctx.input(2).type(), ctx.op);
  auto idx = index_values(ctx.input(2));
  int64_t size = array_size(ctx, data, written), capacity = data.dims()[0];
  for (int64_t i : idx)
    if (i < 0 || i >= size)
      fail_array(
          ctx, "read past the end: index " + std::to_string(i) + ", size " + std::to_string(size));
  shape element = element_shape_of(data.dims());
  tensor& out = ctx.allocate_output(
      0, data.type(), gather ? with_rows(static_cast<int64_t>(idx.size()), element) : element);
  size_t bytes = row_bytes(data);
  const auto* src = static_cast<const std::byte*>(data.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_mutable_data());
  const bool* was = written.data<bool>();
  for (size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < capacity && was[idx[j]])
      copy_rows(dst + j * bytes, src + static_cast<size_t>(idx[j]) * bytes, 1, bytes);
    else if (bytes > 0)
      std::memset(dst + j * bytes, 0, bytes);
  }
}

// ---- stack, size ---------------------------------------------------------------

std::vector<tensor_spec> stack_infer(const shape_context& c) {
  check_array_spec(c);
  const auto& data = c.inputs[0];
  if (!c.attr_or<bool>("dynamic_size", false)) return {data};
  return {{data.type, with_rows(shape::unknown, element_shape_of(data.dims))}};
}

// Rows below the size that were never written stack as zeros, as a read
// of them gives.
void stack_kernel(kernel_context& ctx) {
  tensor data = std::move(ctx.inputs[0]);
  const tensor& written = ctx.input(1);
  int64_t size = array_size(ctx, data, written), capacity = data.dims()[0];
  const bool* was = written.data<bool>();
  bool all_written = size <= capacity;
  for (int64_t i = 0; all_written && i < size; ++i) all_written = was[i];
  // A full array is its stack: pass the buffer on, no copy.
  if (all_written && size == capacity) return ctx.set_output(0, std::move(data));
  tensor& out = ctx.allocate_output(0, data.type(), with_rows(size, element_shape_of(data.dims())));
  size_t bytes = row_bytes(data);
  const auto* src = static_cast<const std::byte*>(data.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_mutable_data());
  for (int64_t i = 0; i < size; ++i) {
    auto* row = dst + static_cast<size_t>(i) * bytes;
    if (i < capacity && was[i])
      copy_rows(row, src + static_cast<size_t>(i) * bytes, 1, bytes);
    else if (bytes > 0)
      std::memset(row, 0, bytes);
  }
}

std::vector<tensor_spec> size_infer(const shape_context& c) {
  check_array_spec(c);
  return {{dtype::int32, shape{}}};
}

void size_kernel(kernel_context& ctx) {
  int64_t size = array_size(ctx, ctx.input(0), ctx.input(1));
  if (size > std::numeric_limits<int32_t>::max())
    fail_array(ctx, "size " + std::to_string(size) + " does not fit int32");
  *ctx.allocate_output(0, dtype::int32, {}).mutable_data<int32_t>() = static_cast<int32_t>(size);
}

// ---- unstack -------------------------------------------------------------------

std::vector<tensor_spec> unstack_infer(const shape_context& c) {
  const auto& value = c.inputs[0];
  if (value.dims.rank() == 0) c.fail("cannot unstack the scalar " + value.to_string());
  return {value, {dtype::boolean, shape{value.dims[0]}}};
}

void unstack_kernel(kernel_context& ctx) {
  tensor value = std::move(ctx.inputs[0]);
  if (value.rank() == 0) ctx.fail("cannot unstack a scalar");
  tensor& written = ctx.allocate_output(1, dtype::boolean, shape{value.dims()[0]});
  std::fill_n(written.mutable_data<bool>(), written.num_elements(), true);
  ctx.set_output(0, std::move(value));  // the rows are the elements: no copy
}

// ---- clear_rows ----------------------------------------------------------------

// The rows clear_rows resizes to: like's dim 0 (input 2) when there is one,
// else attr rows, else x's own (-1 while unknown at build time).
int64_t target_rows(const std::vector<int64_t>& dims_like, int64_t attr_rows, int64_t x_rows) {
  if (!dims_like.empty()) return dims_like[0];
  return attr_rows >= 0 ? attr_rows : x_rows;
}

std::vector<tensor_spec> clear_rows_infer(const shape_context& c) {
  const auto& x = c.inputs[0];
  const auto& indices = c.inputs[1];
  check_index_type(indices.type, c.op);
  if (c.inputs.size() > 3) c.fail("expects 2 or 3 inputs (x, indices, like)");
  if (indices.dims.rank() > 1)
    c.fail("indices must be a scalar or a vector, got " + indices.dims.to_string());
  bool has_like = c.inputs.size() == 3;
  if (x.dims.rank() == 0 || (has_like && c.inputs[2].dims.rank() == 0))
    c.fail("x " + x.to_string() + (has_like ? " and like " + c.inputs[2].to_string() : "") +
           " must have rank >= 1");
  std::vector<int64_t> like;
  if (has_like) like = {c.inputs[2].dims[0]};
  int64_t rows = target_rows(like, c.attr_or<int64_t>("rows", -1), x.dims[0]);
  shape element = element_shape_of(x.dims);
  return {{x.type, with_rows(rows, element)},
          {x.type, indices.dims.rank() == 0 ? element : with_rows(indices.dims[0], element)}};
}

void clear_rows_kernel(kernel_context& ctx) {
  tensor x = std::move(ctx.inputs[0]);
  const tensor& indices = ctx.input(1);
  check_index_type(indices.type(), ctx.op);
  bool has_like = ctx.inputs.size() == 3;
  if (x.rank() == 0 || indices.rank() > 1 || (has_like && ctx.input(2).rank() == 0))
    ctx.fail("x and like must have rank >= 1, indices rank <= 1");
  auto idx = index_values(indices);
  std::vector<int64_t> like;
  if (has_like) like = {ctx.input(2).dims()[0]};
  int64_t have = x.dims()[0];
  int64_t rows = target_rows(like, ctx.attr_or<int64_t>("rows", -1), have);
  for (int64_t i : idx)
    if (i < 0) ctx.fail("negative index " + std::to_string(i));
  // The rows first, then the clearing: one op for both, so that no second
  // consumer (a gather) shares x and makes the clearing copy it.
  shape element = element_shape_of(x.dims());
  size_t bytes = row_bytes(x);
  tensor& taken = ctx.allocate_output(
      1, x.type(),
      indices.rank() == 0 ? element : with_rows(static_cast<int64_t>(idx.size()), element));
  auto* to = static_cast<std::byte*>(taken.raw_mutable_data());
  // A row past x is zero (x seen as zero-padded): the adjoint of a truncation
  // clears rows past the gradient it pads.
  for (size_t j = 0; j < idx.size(); ++j) {
    auto* row = to + j * bytes;
    if (idx[j] >= have)
      std::memset(row, 0, bytes);
    else
      copy_rows(row,
                static_cast<const std::byte*>(x.raw_data()) + static_cast<size_t>(idx[j]) * bytes,
                1, bytes);
  }
  // As in write_kernel: a gradient held only here is cleared in place, so the
  // backward pass of a loop of writes stays O(element) per step.
  tensor out;
  if (rows == have && x.is_unique()) {
    out = std::move(x);
  } else {
    out = tensor::zeros(x.type(), with_rows(rows, element));
    copy_rows(out.raw_mutable_data(), x.raw_data(), std::min(rows, have), bytes);
  }
  auto* dst = static_cast<std::byte*>(out.raw_mutable_data());
  for (int64_t i : idx)
    if (i < rows && bytes > 0) std::memset(dst + static_cast<size_t>(i) * bytes, 0, bytes);
  ctx.set_output(0, std::move(out));
}

// ---- gradients -----------------------------------------------------------------

// clear_rows of g to the capacity of the array (data, written). The
// capacity comes from the graph where it is static: a backward pass that held
// the forward data would make every forward write copy it (the write finds
// its buffer shared). Where it is not (a dynamic array in a loop), from
// written: a copy of bools per write, not of data.
std::pair<output, output> cleared_for(const output& g, const output& indices, const output& data,
                                      const output& written) {
  int64_t rows = data.dims()[0];
  if (rows < 0) return tensor_array_clear_rows(g, indices, written);
  auto outs = make_op_outputs("tensor_array_clear_rows", {g, indices}, {{"rows", rows}});
  return {outs[0], outs[1]};
}

// The array gets the gradient minus the written rows (they were overwritten);
// the value gets those rows. written and the indices get none.
void write_grad(grad_context& c) {
  auto [rest, rows] = cleared_for(c.grad(0), c.input(2), c.input(0), c.input(1));
  c.input_grads = {rest, {}, {}, rows};
}

// A read is a gather along axis 0: its adjoint adds the rows back in place.
void read_grad(grad_context& c) {
  c.input_grads = {scatter_add_like(c.grad(), c.input(2), c.input(0))};
}

void stack_grad(grad_context& c) {
  auto none = constant(c.g, tensor(dtype::int32, shape{0}));
  c.input_grads = {cleared_for(c.grad(), none, c.input(0), c.input(1)).first};
}

// Output 0: zeroing rows commutes with resizing, and each is its own adjoint
// (resizing back), so its adjoint is clear_rows back to x's rows. Output 1 is
// a gather: its adjoint is scatter_add_like.
void clear_rows_grad(grad_context& c) {
  const output& x = c.input(0);
  int64_t rows = x.dims()[0];
  output back = rows >= 0 ? make_op(c.op, {c.grad(0), c.input(1)}, {{"rows", rows}})
                          : tensor_array_clear_rows(c.grad(0), c.input(1), x).first;
  c.input_grads = {add(back, scatter_add_like(c.grad(1), c.input(1), x))};
}

const op_registrar registrations[] = {
    op_registrar({.name = "tensor_array_write",
                  .num_inputs = 4,
                  .infer = write_infer,
                  .kernel = write_kernel,
                  .summary = "(data, written) with value written at the scalar index (attrs "
                             "dynamic_size, array_name)",
                  .gradient = write_grad,
                  .host_memory_inputs = {1, 2},
                  .host_memory_outputs = {1}}),
    op_registrar({.name = "tensor_array_scatter",
                  .num_inputs = 4,
                  .infer = write_infer,
                  .kernel = write_kernel,
                  .summary = "(data, written) with the rows of value written at indices [k]",
                  .gradient = write_grad,
                  .host_memory_inputs = {1, 2},
                  .host_memory_outputs = {1}}),
    op_registrar({.name = "tensor_array_read",
                  .num_inputs = 3,
                  .infer = read_infer,
                  .kernel = read_kernel,
                  .summary = "the element at the scalar index below the size (zeros if unwritten)",
                  .gradient = read_grad,
                  .host_memory_inputs = {1, 2}}),
    op_registrar({.name = "tensor_array_gather",
                  .num_inputs = 3,
                  .infer = read_infer,
                  .kernel = read_kernel,
                  .summary = "the elements at indices [k] below the size (zeros where unwritten)",
                  .gradient = read_grad,
                  .host_memory_inputs = {1, 2}}),
    op_registrar({.name = "tensor_array_stack",
                  .num_inputs = 2,
                  .infer = stack_infer,
                  .kernel = stack_kernel,
                  .summary = "the elements below the size, zeros where unwritten (attrs "
                             "dynamic_size, initial_size)",
                  .gradient = stack_grad,
                  .host_memory_inputs = {1}}),
    op_registrar({.name = "tensor_array_size",
                  .num_inputs = 2,
                  .infer = size_infer,
                  .kernel = size_kernel,
                  .summary = "the size as an int32 scalar (attrs dynamic_size, initial_size)",
                  .not_differentiable = true,
                  .host_memory_inputs = {1},
                  .host_memory_outputs = {0}}),
    op_registrar({.name = "tensor_array_unstack",
                  .num_inputs = 1,
                  .infer = unstack_infer,
                  .kernel = unstack_kernel,
                  .summary = "an array holding the rows of value, all written",
                  .gradient = [](grad_context& c) { c.input_grads = {c.grad(0)}; },
                  .host_memory_outputs = {1}}),
    op_registrar({.name = "tensor_array_clear_rows",
                  .num_inputs = -1,
                  .min_inputs = 2,
                  .infer = clear_rows_infer,
                  .kernel = clear_rows_kernel,
                  .summary = "(x with the rows at indices zeroed, resized along dim 0 to the "
                             "optional input 2's dim 0, else attr rows; those rows of x)",
                  .gradient = clear_rows_grad,
                  .host_memory_inputs = {1}}),
};

attr_map array_attrs(const tensor_array& ta) {
  return {{"dynamic_size", ta.dynamic_size},
          {"initial_size", ta.initial_size},
          {"array_name", ta.name}};
}

}  // namespace

shape tensor_array::element_shape() const { return element_shape_of(data.dims()); }

tensor_array tensor_array::with(output new_data, output new_written) const {
  tensor_array ta = *this;
  ta.data = new_data;
  ta.written = new_written;
  return ta;
}

tensor_array tensor_array::write(output index, output value) const {
  auto outs = make_op_outputs("tensor_array_write", {data, written, index, value},
                              array_attrs(*this), name + "/write");
  return with(outs[0], outs[1]);
}

tensor_array tensor_array::scatter(output indices, output value) const {
  auto outs = make_op_outputs("tensor_array_scatter", {data, written, indices, value},
                              array_attrs(*this), name + "/scatter");
  return with(outs[0], outs[1]);
}

output tensor_array::read(output index) const {
  return make_op("tensor_array_read", {data, written, index}, array_attrs(*this), name + "/read");
}

output tensor_array::gather(output indices) const {
  return make_op("tensor_array_gather", {data, written, indices}, array_attrs(*this),
                 name + "/gather");
}

output tensor_array::stack() const {
  return make_op("tensor_array_stack", {data, written}, array_attrs(*this), name + "/stack");
}

output tensor_array::size() const {
  return make_op("tensor_array_size", {data, written}, array_attrs(*this), name + "/size");
}

tensor_array make_tensor_array(graph& g, dtype type, int64_t size, shape element_shape,
                               bool dynamic_size, const std::string& name) {
  const char* op = "make_tensor_array";
  if (size < 0) fail(op, "size " + std::to_string(size) + " is negative");
  if (!element_shape.is_fully_defined())
    fail(op, "the element shape " + element_shape.to_string() +
                 " must be fully defined (actorflow does not infer it from the first write)");
  tensor_array ta;
  ta.data = fill(g, with_rows(size, element_shape), 0, type, name + "/data");
  ta.written = fill(g, shape{size}, 0, dtype::boolean, name + "/written");
  ta.dynamic_size = dynamic_size;
  ta.initial_size = size;
  ta.name = name;
  return ta;
}

tensor_array unstack_to_tensor_array(output value, const std::string& name) {
  tensor_array ta;
  ta.name = name.empty() ? "tensor_array" : name;
  auto outs = make_op_outputs("tensor_array_unstack", {value}, {}, ta.name + "/unstack");
  ta.data = outs[0];
  ta.written = outs[1];
  return ta;
}

std::pair<output, output> tensor_array_clear_rows(output x, output indices, output like,
                                                  const std::string& name) {
  auto outs = make_op_outputs("tensor_array_clear_rows", {x, indices, like}, {}, name);
  return {outs[0], outs[1]};
}

}  // namespace actorflow
