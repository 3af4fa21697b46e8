#include "ops/geometry/dims.hpp"

namespace actorflow::detail {

std::vector<int64_t> dense_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t stride = 1;
  for (size_t k = dims.size(); k-- > 0;) {
    s[k] = stride;
    stride *= dims[k];
  }
  return s;
}

std::string list_to_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace actorflow::detail
