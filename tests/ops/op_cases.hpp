// The generic op harness's table: each op family's test file registers cases
// (inputs, attributes, hand-computed expected outputs, or an expected error),
// and registry_harness.cpp runs every case and fails for any registered op
// without one. Later devices run the same table against the CPU results.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/op_registry.hpp"

namespace actorflow::testing {

struct op_case {
  std::string op;
  std::string label;  // what the case covers, e.g. "broadcast (2,1)+(3)"
  std::vector<tensor> inputs;
  attr_map attrs;
  /// Expected outputs; floats compare within `tolerance`, others exactly.
  std::vector<tensor> expected;
  double tolerance = 1e-6;
  /// For outputs that cannot be written down (random ops): checks them instead.
  std::function<void(const std::vector<tensor>&)> check;
  /// Non-empty: the op must throw an actorflow::error whose text contains it.
  std::string expect_error;
};

std::vector<op_case>& op_cases();

struct op_case_registrar {
  explicit op_case_registrar(std::vector<op_case> cases) {
    for (auto& c : cases) op_cases().push_back(std::move(c));
  }
};

/// A tensor from values in row-major order: make<float>({2,2}, {1,2,3,4}).
template <class T>
tensor make(shape dims, std::vector<T> values) {
  return tensor::from_vector<T>(values, std::move(dims));
}
template <class T>
tensor scalar_of(T v) {
  return tensor::scalar<T>(v);
}

inline constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
inline constexpr float inf_f = std::numeric_limits<float>::infinity();
inline constexpr int32_t i32_min = std::numeric_limits<int32_t>::min();
inline constexpr int32_t i32_max = std::numeric_limits<int32_t>::max();

/// Runs a kernel without the shape function, as the runtime does with specs
/// that had unknown dims, to test the kernel's own validation.
inline std::vector<tensor> run_kernel_only(const std::string& op, std::vector<tensor> inputs,
                                           attr_map attrs = {}) {
  auto& def = op_registry::global().get(op);
  std::string name = op;
  kernel_context ctx{def.name, name, attrs, std::move(inputs), {}, 0};
  def.kernel(ctx);
  return ctx.outputs;
}

/// Compares dtype, shape and values; floats within tol (relative to magnitude).
/// Returns an empty string on a match, else what differed.
std::string compare_tensors(const tensor& actual, const tensor& expected, double tol);

}  // namespace actorflow::testing
