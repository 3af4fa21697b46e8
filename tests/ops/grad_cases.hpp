// The numeric gradient check's table: op families register cases (float64
// inputs, attributes), and gradient_check.cpp compares every case's gradients
// from gradients() with central finite differences of the op's kernel. Every
// op with a gradient must have a case.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/op_registry.hpp"

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
  /// |analytic - numeric| <= tolerance * (1 + |numeric|) per element.
  double tolerance = 1e-6;
  /// The finite-difference step.
  double eps = 1e-6;
};

std::vector<grad_case>& grad_cases();

struct grad_case_registrar {
  explicit grad_case_registrar(std::vector<grad_case> cases) {
    for (auto& c : cases) grad_cases().push_back(std::move(c));
  }
};

}  // namespace actorflow::testing
