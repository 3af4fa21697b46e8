// The generic op test: every registered op has cases, and every case passes.
#include <set>

#include "ops/op_cases.hpp"

namespace actorflow::testing {

case_list<op_case>& op_case_list() {
  static case_list<op_case> cases;
  return cases;
}

// Tested in test_session, test_input, test_distributed and test_control_flow.

TEST_CASE("every registered op has cases in the generic harness") {
  std::set<std::string> covered;
  for (auto& c : op_cases()) covered.insert(c.op);
  for (auto* def : op_registry::global().all()) {
    if (def->served_by_runtime()) continue;
    CHECK_MESSAGE(covered.count(def->name), "op '" << def->name << "' has no test case");
  }
}

TEST_CASE("every registered op has a gradient or is marked not differentiable") {
  for (auto* def : op_registry::global().all()) {
    bool has_gradient = static_cast<bool>(def->gradient);
    CHECK_MESSAGE((has_gradient || def->not_differentiable),
                  "op '" << def->name << "' has neither a gradient nor .not_differentiable = true");
    CHECK_MESSAGE(!(has_gradient && def->not_differentiable),
                  "op '" << def->name << "' has a gradient and is marked not differentiable");
  }
}

TEST_CASE("every op case passes") {
  for (auto& c : op_cases()) {
    INFO("op '" << c.op << "' case: " << c.label);
    if (!c.expect_error.empty()) {
      std::string what;
      try {
        run_kernel(c.op, c.inputs, c.attrs);
      } catch (const error& e) {
        what = e.what();
      }
      CHECK_MESSAGE(
          what.find(c.expect_error) != std::string::npos,
          "expected an error containing '" << c.expect_error << "', got '" << what << "'");
      continue;
    }
    std::vector<tensor> outs;
    try {
      outs = run_kernel(c.op, c.inputs, c.attrs);
    } catch (const std::exception& e) {
      FAIL_CHECK("threw: " << e.what());
      continue;
    }
    if (c.check) {
      c.check(outs);
      continue;
    }
    if (c.expected.empty()) continue;  // a case for the devices: the CPU kernel ran
    REQUIRE(outs.size() == c.expected.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      auto diff = compare_tensors(outs[i], c.expected[i], c.tolerance);
      CHECK_MESSAGE(diff.empty(), "output " << i << ": " << diff);
    }
  }
}

}  // namespace actorflow::testing
