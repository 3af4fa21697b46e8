// Tensor shapes. At graph-build time a dimension may be unknown (-1); at run
// time every shape is fully defined. The rank is always known.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dim_vector.hpp"
#include "core/export.hpp"

namespace actorflow {

class ACTORFLOW_API shape {
 public:
  static constexpr int64_t unknown = -1;

  shape() = default;  // a scalar: rank 0, one element
  shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit shape(const std::vector<int64_t>& dims) : dims_(dims) {}
  explicit shape(dim_vector dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  /// Dimension i, counting from the end when i is negative.
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  /// The dims, stored in place up to rank 6 (see dim_vector).
  const dim_vector& dims() const { return dims_; }

  bool is_fully_defined() const;
  /// Product of the dims; throws if a dim is unknown, negative, or the product overflows.
  int64_t num_elements() const;
  /// True when every known dim agrees (unknown dims match anything).
  bool compatible_with(const shape& other) const;
  /// "(2,3)", "()" for a scalar, "?" for an unknown dim.
  std::string to_string() const;

  friend bool operator==(const shape& a, const shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const shape& a, const shape& b) { return a.dims_ != b.dims_; }

 private:
  dim_vector dims_;
};

}  // namespace actorflow
