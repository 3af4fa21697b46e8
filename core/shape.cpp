#include "core/shape.hpp"

#include "core/error.hpp"

namespace actorflow {

bool shape::is_fully_defined() const {
  for (auto d : dims_)
    if (d < 0) return false;
  return true;
}

int64_t shape::num_elements() const {
  int64_t n = 1;
  for (auto d : dims_) {
    if (d < 0) fail("shape", "num_elements of a shape with unknown dims " + to_string());
    if (d != 0 && n > INT64_MAX / d) fail("shape", "element count overflows in " + to_string());
    n *= d;
  }
  return n;
}

bool shape::compatible_with(const shape& other) const {
  if (rank() != other.rank()) return false;
  for (int i = 0; i < rank(); ++i)
    if (dims_[i] >= 0 && other.dims_[i] >= 0 && dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string shape::to_string() const {
  std::string s = "(";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += dims_[i] < 0 ? "?" : std::to_string(dims_[i]);
  }
  return s + ")";
}

}  // namespace actorflow
