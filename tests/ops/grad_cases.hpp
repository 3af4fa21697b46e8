// The numeric gradient check's table: op families register cases (float64
// inputs, attributes), and gradient_check.cpp compares every case's gradients
// from gradients() with central finite differences of the op's kernel. Every
// op with a gradient must have a case.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.hpp"
#include "ops/case_list.hpp"

namespace actorflow::testing {

struct grad_case {
  std::string op;
  std::string label;
  /// Float inputs are differentiated (float64 unless the case says why not);
  /// integer and bool inputs (indices, conditions) are fed as they are.
  std::vector<tensor> inputs;
  attr_map attrs = {};
  /// Placeholders get an unknown (-1) dim 0 for these inputs, so that the
  /// gradient must read shapes at run time.
  std::vector<int> unknown_dim0 = {};
  /// The outputs the checked loss weighs; empty: every float output. For
  /// ops whose gradient, as TensorFlow's, flows from some outputs only
  /// (fused_batch_norm's from y, not from its statistics).
  std::vector<int> outputs = {};
  /// Float inputs that the gradient treats as constants, as TensorFlow's
  /// does (fused_batch_norm's mean and variance): the op must give them no
  /// gradient, and no finite differences are taken for them.
  std::vector<int> constant_inputs = {};
  /// |analytic - numeric| <= tolerance * (1 + |numeric|) per element.
  double tolerance = 1e-6;
  /// The finite-difference step.
  double eps = 1e-6;
};

case_list<grad_case>& grad_case_list();
/// Every registered case (built on first call).
inline std::vector<grad_case>& grad_cases() { return grad_case_list().all(); }

struct grad_case_registrar {
  explicit grad_case_registrar(std::vector<grad_case> cases) {
    grad_case_list().add(std::move(cases));
  }
  explicit grad_case_registrar(case_list<grad_case>::factory make) { grad_case_list().add(make); }
};

}  // namespace actorflow::testing
