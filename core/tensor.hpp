// Tensors: a dtype, a shape and a reference-counted, 64-byte aligned buffer.
//
// The buffer is one allocation: a small header (the reference count) sits just
// before the data, so a new tensor costs one malloc and a copy one atomic
// increment; cheap nodes make one small tensor per step.
//
// A buffer is written only by whoever allocated it, before it is shared; once a
// tensor travels in a message it is immutable. Writers that may hold a shared
// buffer (the variable actor) check is_unique() and clone first (copy-on-write).
#pragma once
#include <Eigen/Core>
#include <atomic>
#include <cstring>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/export.hpp"
#include "core/shape.hpp"

namespace actorflow {

class ACTORFLOW_API tensor {
 public:
  static constexpr size_t alignment = 64;

  /// An empty handle (no dtype, no buffer); valid() is false.
  tensor() = default;
  /// Allocates an uninitialized tensor; the shape must be fully defined.
  tensor(dtype type, shape dims);
  tensor(const tensor& other)
      : data_(other.data_),
        shape_(other.shape_),
        num_elements_(other.num_elements_),
        type_(other.type_),
        valid_(other.valid_) {
    retain();
  }
  tensor(tensor&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        shape_(std::move(other.shape_)),
        num_elements_(other.num_elements_),
        type_(other.type_),
        valid_(other.valid_) {}
  tensor& operator=(const tensor& other) {
    if (this != &other) *this = tensor(other);
    return *this;
  }
  tensor& operator=(tensor&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      shape_ = std::move(other.shape_);
      num_elements_ = other.num_elements_;
      type_ = other.type_;
      valid_ = other.valid_;
    }
    return *this;
  }
  ~tensor() { release(); }

  static tensor zeros(dtype type, shape dims);
  template <class T>
  static tensor scalar(T value) {
    tensor t(dtype_of<T>(), shape{});
    *t.mutable_data<T>() = value;
    return t;
  }
  /// Copies values into a new tensor of the given shape (1-D of values.size() by default).
  template <class T>
  static tensor from_vector(const std::vector<T>& values, shape dims);
  template <class T>
  static tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, shape{static_cast<int64_t>(values.size())});
  }

  bool valid() const { return valid_; }
  dtype type() const { return type_; }
  const actorflow::shape& dims() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t num_elements() const { return num_elements_; }
  size_t size_bytes() const { return static_cast<size_t>(num_elements_) * dtype_size(type_); }

  const void* raw_data() const { return data_; }
  void* raw_mutable_data() { return data_; }

  template <class T>
  const T* data() const {
    check_type<T>();
    return static_cast<const T*>(raw_data());
  }
  /// Writable view. Only for a tensor this code allocated and has not shared yet.
  template <class T>
  T* mutable_data() {
    check_type<T>();
    return static_cast<T*>(raw_mutable_data());
  }

  template <class T>
  using flat_map = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Aligned64>;
  template <class T>
  using mutable_flat_map = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Aligned64>;
  template <class T>
  using matrix_map =
      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  template <class T>
  using mutable_matrix_map =
      Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

  /// All elements as a 1-D Eigen array.
  template <class T>
  flat_map<T> flat() const {
    return flat_map<T>(data<T>(), num_elements_);
  }
  template <class T>
  mutable_flat_map<T> mutable_flat() {
    return mutable_flat_map<T>(mutable_data<T>(), num_elements_);
  }
  /// A rank-2 tensor as a row-major Eigen matrix.
  template <class T>
  matrix_map<T> matrix() const {
    check_rank(2);
    return matrix_map<T>(data<T>(), shape_[0], shape_[1]);
  }
  template <class T>
  mutable_matrix_map<T> mutable_matrix() {
    check_rank(2);
    return mutable_matrix_map<T>(mutable_data<T>(), shape_[0], shape_[1]);
  }

  /// The single value of a one-element tensor.
  template <class T>
  T item() const {
    if (num_elements_ != 1) fail("tensor", "item() of a tensor with shape " + shape_.to_string());
    return *data<T>();
  }
  template <class T>
  std::vector<T> to_vector() const {
    auto p = data<T>();
    return std::vector<T>(p, p + num_elements_);
  }

  /// A deep copy with its own buffer.
  tensor clone() const;
  /// The same buffer seen with another shape of equal element count.
  tensor reshaped(shape dims) const;
  /// True when no other tensor shares this buffer (safe to write in place).
  bool is_unique() const { return !data_ || refs().load(std::memory_order_acquire) == 1; }
  /// Whether both hold the same buffer. An empty tensor (and one moved from)
  /// holds none, which it shares with no other.
  bool shares_buffer_with(const tensor& other) const {
    return data_ != nullptr && data_ == other.data_;
  }

  /// Readable text, e.g. "tensor<float32 (2,2)> [[1, 2], [3, 4]]"; at most max_elements shown.
  std::string to_string(int64_t max_elements = 64) const;

  /// Exact equality of dtype, shape and bytes.
  bool equals(const tensor& other) const;

 private:
  template <class T>
  void check_type() const {
    // Inline check, out-of-line message: every data<T>() call pays this.
    if (!valid_ || dtype_of<T>() != type_) [[unlikely]]
      fail_access(dtype_of<T>());
  }
  [[noreturn]] void fail_access(dtype asked) const;
  void check_rank(int r) const;

  // The reference count lives in the header just before the data (see
  // allocate_buffer in tensor.cpp); an empty (zero-byte) tensor has no buffer.
  using ref_count = std::atomic<int64_t>;
  static constexpr size_t header_size = 16;
  static_assert(sizeof(ref_count) <= header_size);
  ref_count& refs() const { return *reinterpret_cast<ref_count*>(data_ - header_size); }
  void retain() const {
    if (data_) refs().fetch_add(1, std::memory_order_relaxed);
  }
  void release() {
    // acq_rel: the last owner frees only after every other owner's reads.
    if (data_ && refs().fetch_sub(1, std::memory_order_acq_rel) == 1) free_buffer(data_);
    data_ = nullptr;
  }
  static std::byte* allocate_buffer(size_t bytes);
  static void free_buffer(std::byte* data);

  std::byte* data_ = nullptr;
  actorflow::shape shape_;
  int64_t num_elements_ = 0;
  dtype type_ = dtype::float32;
  bool valid_ = false;
};

ACTORFLOW_API std::ostream& operator<<(std::ostream& os, const tensor& t);

template <class T>
tensor tensor::from_vector(const std::vector<T>& values, shape dims) {
  tensor t(dtype_of<T>(), std::move(dims));
  if (static_cast<size_t>(t.num_elements()) != values.size())
    fail("tensor", "from_vector got " + std::to_string(values.size()) + " values for shape " +
                       t.dims().to_string());
  if constexpr (std::is_same_v<T, bool>) {
    std::copy(values.begin(), values.end(), t.mutable_data<bool>());
  } else if (!values.empty()) {
    std::memcpy(t.raw_mutable_data(), values.data(), values.size() * sizeof(T));
  }
  return t;
}

}  // namespace actorflow
