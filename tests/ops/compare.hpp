// The one comparison of the op tests: the generic harness (a kernel against
// hand-computed values), the device runner (a device against the CPU kernel),
// the numeric gradient check (gradients() against finite differences) and the
// GPU tests (tests/cuda) all compare tensors with compare_tensors, and take
// their per-dtype tolerances from default_tolerance.
#pragma once
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/tensor.hpp"

namespace actorflow::testing {

/// The tolerance of a device's result against the CPU kernel's when a case
/// names none: the same computation in another order (threads, a GPU's
/// reductions, its transcendental functions) stays this close.
inline double default_tolerance(dtype t) {
  return t == dtype::float32 ? 1e-5 : t == dtype::float64 ? 1e-12 : 0;
}

/// Compares dtype, shape and values: floats within tol * (1 + |expected|), NaN
/// equal to NaN; other dtypes exactly. Returns "" on a match, else what
/// differed (the first element; both tensors too when they are small).
inline std::string compare_tensors(const tensor& actual, const tensor& expected, double tol) {
  if (!actual.valid()) return "output is empty";
  if (actual.type() != expected.type())
    return std::string("dtype ") + dtype_name(actual.type()) + ", expected " +
           dtype_name(expected.type());
  if (actual.dims() != expected.dims())
    return "shape " + actual.dims().to_string() + ", expected " + expected.dims().to_string();
  std::string diff;
  // bfloat16 compares as the float32 it stands for.
  auto value = [](auto v) {
    if constexpr (std::is_same_v<decltype(v), bfloat16>)
      return to_float(v);
    else
      return v;
  };
  visit_storage_type(actual.type(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = actual.data<T>();
    const T* pe = expected.data<T>();
    for (int64_t i = 0; i < actual.num_elements() && diff.empty(); ++i) {
      const auto a = value(pa[i]), e = value(pe[i]);
      bool same = a == e;
      if constexpr (std::is_floating_point_v<decltype(a)>)
        same = same || (std::isnan(a) && std::isnan(e)) ||
               std::abs(double(a) - double(e)) <= tol * (1.0 + std::abs(double(e)));
      if (same) continue;
      std::ostringstream os;
      os.precision(12);
      os << "element " << i << " differs: got " << +a << ", expected " << +e;
      // Whole tensors only while they stay readable (the GPU cases have 60000 elements).
      if (actual.num_elements() <= 64)
        os << " (got " << actual.to_string() << ", expected " << expected.to_string() << ")";
      diff = os.str();
    }
  });
  return diff;
}

}  // namespace actorflow::testing
