// A tensor whose elements live in GPU memory: a dtype, a shape and a
// reference-counted block of a caching allocator. Like actorflow::tensor it is
// written only by whoever allocated it, before it is shared. When the last
// handle drops, the block goes back to its allocator, which reuses it only
// after the streams that used it have run their work (see caching_allocator).
#pragma once
#include <memory>
#include <string>

#include "core/dtype.hpp"
#include "core/export.hpp"
#include "core/shape.hpp"
#include "devices/cuda/caching_allocator.hpp"

namespace actorflow::gpu {

class ACTORFLOW_API device_tensor {
 public:
  /// An empty handle; valid() is false.
  device_tensor() = default;

  /// Allocates (uninitialized) from `memory` for work on `stream`.
  static device_tensor allocate(const std::shared_ptr<caching_allocator>& memory, int stream,
                                dtype type, shape dims) {
    device_tensor t;
    t.type_ = type;
    t.num_elements_ = dims.num_elements();
    t.shape_ = std::move(dims);
    const size_t bytes = static_cast<size_t>(t.num_elements_) * dtype_size(type);
    void* p = memory->allocate(bytes, stream);
    t.memory_ = memory.get();
    t.buffer_ = std::shared_ptr<void>(p, [memory](void* q) { memory->deallocate(q); });
    t.valid_ = true;
    return t;
  }

  bool valid() const { return valid_; }
  dtype type() const { return type_; }
  const actorflow::shape& dims() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t num_elements() const { return num_elements_; }
  size_t size_bytes() const { return static_cast<size_t>(num_elements_) * dtype_size(type_); }

  /// Device pointers: never dereference them on the host.
  const void* raw_data() const { return buffer_.get(); }
  void* raw_mutable_data() { return buffer_.get(); }
  template <class T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(raw_data());
  }
  template <class T>
  T* mutable_data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(raw_mutable_data());
  }

  /// The same buffer seen with another shape of equal element count.
  device_tensor reshaped(shape dims) const {
    if (dims.num_elements() != num_elements_)
      fail("device_tensor", "cannot reshape " + shape_.to_string() + " to " + dims.to_string());
    device_tensor t = *this;
    t.shape_ = std::move(dims);
    return t;
  }
  /// Notes that work on `stream` uses this buffer besides the stream it was
  /// allocated for, so the block is not reused before that work has run.
  void record_stream(int stream) const {
    if (valid_) memory_->record_stream(buffer_.get(), stream);
  }
  bool is_unique() const { return buffer_.use_count() <= 1; }
  bool shares_buffer_with(const device_tensor& other) const { return buffer_ == other.buffer_; }
  /// "device_tensor<float32 (2,3)>".
  std::string describe() const {
    return std::string("device_tensor<") + dtype_name(type_) + " " + shape_.to_string() + ">";
  }

 private:
  void check_type(dtype t) const {
    if (!valid_) fail("device_tensor", "access to an empty tensor");
    if (t != type_)
      fail("device_tensor",
           std::string("accessed as ") + dtype_name(t) + " but holds " + dtype_name(type_));
  }

  std::shared_ptr<void> buffer_;
  caching_allocator* memory_ = nullptr;  // kept alive by buffer_'s deleter
  actorflow::shape shape_;
  int64_t num_elements_ = 0;
  dtype type_ = dtype::float32;
  bool valid_ = false;
};

}  // namespace actorflow::gpu
