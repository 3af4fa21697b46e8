// The op table: each op family's test file (tests/ops/<family>_cases.cpp)
// registers its forward cases (op_case: inputs, attributes, and hand-computed
// outputs, a check, an expected error, or nothing: "as the CPU kernel") and
// its gradient cases (grad_case, ops/grad_cases.hpp) side by side. Three
// runners replay the table:
//   registry_harness.cpp  every forward case on the CPU kernel; fails for a
//                         registered op without a case;
//   device_runner.cpp     every forward case through a session on every
//                         device of a runtime (/cpu:0, /cpu:1, /stand_in:0,
//                         /gpu:N where there is one) against the CPU kernel;
//                         fails for a GPU kernel without cases of its dtypes;
//   gradient_check.cpp    every gradient case against finite differences;
//                         fails for an op with a gradient and no case.
// All compare with compare_tensors (ops/compare.hpp).
//
// Adding an op:
//  1. ops/<family>.cpp: its op_def (inputs, attrs, shape function, CPU
//     kernel, gradient or .not_differentiable = true), registered with
//     op_registrar; its builder function in ops/<family>.hpp (a new family
//     file is listed in ops/CMakeLists.txt).
//  2. tests/ops/<family>_cases.cpp: forward cases (values, edge cases, each
//     error the kernel raises) and, with a gradient, gradient cases. Nothing
//     else: the device runner runs them on every device.
//  3. A GPU kernel: ops/cuda/<family>_kernels.cpp, registered with
//     gpu_kernel_registrar, its device code in ops/cuda/<family>.cu (both
//     named after the CPU's ops/<family>.cpp, both listed in
//     ops/cuda/CMakeLists.txt); add random-input cases without expected
//     outputs (random_source, ops/case_inputs.hpp) to the family's cases,
//     covering each dtype the kernel lists.
//  4. An op the runtime itself serves (feeds, resources, control flow, as
//     served_by_runtime lists) is tested in tests/test_<area>.cpp instead.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "actors/compile/placement.hpp"
#include "core/op_registry.hpp"
#include "ops/case_inputs.hpp"
#include "ops/case_list.hpp"
#include "ops/compare.hpp"
#include "ops/grad_cases.hpp"

namespace actorflow::testing {

struct op_case {
  std::string op;
  std::string label;  // what the case covers, e.g. "broadcast (2,1)+(3)"
  std::vector<tensor> inputs;
  attr_map attrs;
  /// Expected outputs; floats compare within `tolerance`, others exactly.
  /// None (and no check): the case only says what every device must compute
  /// as the CPU kernel does.
  std::vector<tensor> expected;
  double tolerance = 1e-6;
  /// A device against the CPU kernel; 0: default_tolerance of the output's dtype.
  double device_tolerance = 0;
  /// For outputs that cannot be written down (random ops): checks them instead.
  std::function<void(const std::vector<tensor>&)> check;
  /// Non-empty: the op must throw an actorflow::error whose text contains it.
  std::string expect_error;
};

case_list<op_case>& op_case_list();
/// Every registered case (built on first call).
inline std::vector<op_case>& op_cases() { return op_case_list().all(); }

struct op_case_registrar {
  explicit op_case_registrar(std::vector<op_case> cases) { op_case_list().add(std::move(cases)); }
  explicit op_case_registrar(case_list<op_case>::factory make) { op_case_list().add(make); }
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

/// Ops whose work the runtime's actors do (actors/compile/placement.hpp: feeds,
/// variables, queues, transfers, control flow, resource updates): no case in
/// the table, and no node of their own on a device.

}  // namespace actorflow::testing
