// Internal helpers of the array and reduction families: strided copies (the
// engine behind transpose, slice, pad, tile, broadcast), attribute checks and
// value casts. Not a public API.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/op_registry.hpp"
#include "ops/geometry/dims.hpp"

namespace actorflow::detail {

/// For every index i of `dims`: dst[i·dst_strides] = src[i·src_strides] (strides in
/// elements of `elem_size` bytes; a source stride may be 0 to broadcast). Merges
/// contiguous dims, copies contiguous rows with memcpy, tiles transposes so both
/// sides stay in cache, and parallelizes large copies.
void strided_copy(size_t elem_size, const void* src, std::vector<int64_t> src_strides, void* dst,
                  std::vector<int64_t> dst_strides, std::vector<int64_t> dims);

/// x (dense) broadcast to `to` under NumPy rules; the caller has checked the shapes.
tensor broadcast_tensor(const tensor& x, const shape& to);

/// Sets every element of t (allocated, not yet shared) to value cast to its dtype.
void fill_value(tensor& t, double value, const std::string& op, const char* what = "value");

/// Product of known dims, or -1 when a dim is unknown.
int64_t known_product(const shape& s);

/// A double attribute converted to T; fails when an integer T cannot hold it.
template <class T>
T cast_value(double v, const std::string& op, const char* what) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    // The bounds are exact powers of two (or zero), so the comparisons are exact.
    double lo = static_cast<double>(std::numeric_limits<T>::min());
    double hi = std::ldexp(1.0, std::numeric_limits<T>::digits);
    if (!(v >= lo && v < hi))
      fail(op, std::string(what) + " " + std::to_string(v) + " does not fit " +
                   dtype_name(dtype_of<T>()));
    return static_cast<T>(v);
  }
}

/// Calls f(U{}) with an unsigned type of elem_size bytes: copies only move bytes,
/// so one instantiation per element size serves every dtype.
template <class F>
decltype(auto) visit_elem_size(size_t elem_size, F&& f) {
  switch (elem_size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
  fail("strided_copy", "unsupported element size " + std::to_string(elem_size));
}

/// Fails naming `op` unless t is int32 or int64, the dtypes of indices.
void check_index_type(dtype t, const std::string& op);

/// Calls f(I{}) with the C++ type of an index dtype (int32 or int64).
template <class F>
decltype(auto) visit_index(dtype t, F&& f) {
  if (t == dtype::int32) return f(int32_t{});
  return f(int64_t{});
}

/// Every index as int64, each checked to lie in [0, d) first, so that a bad
/// one fails the step before any work; the error names the index, its
/// position, the axis and `where`.
std::vector<int64_t> checked_indices(const kernel_context& ctx, const tensor& indices, int axis,
                                     int64_t d, const std::string& where);
/// The same outside a kernel: the error is "[fail_as] index ...".
std::vector<int64_t> checked_indices(const tensor& indices, int axis, int64_t d,
                                     const std::string& where, const std::string& fail_as);

/// A tensor array write's checks (ops/tensor_array.cpp and its GPU kernel),
/// all made before anything is written: each index non-negative, below the
/// capacity unless the array is dynamic_size, and written neither before
/// (`was`, capacity flags) nor twice here. `fail` throws with the message.
/// Returns the highest index, -1 for none.
int64_t check_array_writes(const std::vector<int64_t>& idx, int64_t capacity, bool dynamic,
                           const bool* was, const std::function<void(const std::string&)>& fail);

/// The shape of the rows a gather along axis 0 takes from a variable of
/// shape `var` at `indices`: indices' dims, then var's dims after the first
/// (the shape of a row gradient, too).
shape gathered_rows_shape(const shape& indices, const shape& var);

/// The rows of one row gradient with repeated indices summed (in arrival
/// order, as the dense gradient sums them), by ascending variable row.
template <class T>
struct summed_rows {
  std::vector<int64_t> index;  // unique variable rows
  std::vector<T> values;       // index.size() x row_size
};

template <class T>
summed_rows<T> sum_repeated_rows(const tensor& rows, const std::vector<int64_t>& index,
                                 int64_t row_size) {
  std::vector<size_t> order(index.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return index[a] < index[b]; });
  summed_rows<T> out;
  out.values.reserve(index.size() * static_cast<size_t>(row_size));
  const T* src = rows.data<T>();
  for (size_t k : order) {
    const T* row = src + static_cast<int64_t>(k) * row_size;
    if (out.index.empty() || out.index.back() != index[k]) {
      out.index.push_back(index[k]);
      out.values.insert(out.values.end(), row, row + row_size);
    } else {
      T* sum = out.values.data() + (out.index.size() - 1) * static_cast<size_t>(row_size);
      for (int64_t j = 0; j < row_size; ++j) sum[j] += row[j];
    }
  }
  return out;
}

}  // namespace actorflow::detail
