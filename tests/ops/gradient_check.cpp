// The generic numeric gradient check (as flashlight's jacobian test); the
// cases are the op families' (tests/ops/<family>_cases.cpp). For each
// case, y = op(inputs) and loss = sum_j sum(y_j * w_j) with fixed random
// weights; gradients() builds d loss / d input in the graph, a session runs it,
// and central finite differences of the op's eager kernel must agree within a
// tight float64 tolerance. Every op with a gradient must have a case. Inputs
// stay away from the points where an op is not differentiable (ties for max and
// the pools, 0 for relu and abs).
#include <algorithm>
#include <map>
#include <set>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/grad_cases.hpp"
#include "ops/math.hpp"
#include "ops/op_cases.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {

case_list<grad_case>& grad_case_list() {
  static case_list<grad_case> cases;
  return cases;
}

namespace {

// Ops with a gradient that the eager check cannot run, and where they are tested.
const std::map<std::string, std::string> exempt = {
    {"stop_gradient", "its gradient is zero by definition, unlike its finite differences"},
    {"read_variable", "served by the variable actor; tests/test_gradients.cpp"},
    {"switch", "run by the runtime (dead values); tests/test_control_flow.cpp"},
    {"merge", "run by the runtime (dead values); tests/test_control_flow.cpp"},
    {"enter", "a loop's gradient is built as a whole; tests/test_while_loop.cpp"},
    {"exit", "a loop's gradient is built as a whole; tests/test_while_loop.cpp"},
    {"next_iteration", "a loop's gradient is built as a whole; tests/test_while_loop.cpp"},
};

double weighted_sum(const std::vector<tensor>& outs, const std::vector<tensor>& weights) {
  double total = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!weights[j].valid()) continue;
    visit_floating(outs[j].type(), "gradient_check", [&](auto tag) {
      using T = decltype(tag);
      const T* y = outs[j].data<T>();
      const T* w = weights[j].data<T>();
      for (int64_t k = 0; k < outs[j].num_elements(); ++k)
        total += static_cast<double>(y[k]) * static_cast<double>(w[k]);
    });
  }
  return total;
}

// Central differences of the weighted sum for every element of input i.
tensor numeric_gradient(const grad_case& gc, size_t i, const std::vector<tensor>& weights) {
  const tensor& x = gc.inputs[i];
  tensor result(dtype::float64, x.dims());
  auto at = [&](int64_t k, double delta) {
    auto inputs = gc.inputs;
    inputs[i] = x.clone();
    visit_floating(x.type(), "gradient_check", [&](auto tag) {
      using T = decltype(tag);
      T* p = inputs[i].template mutable_data<T>();
      p[k] = static_cast<T>(static_cast<double>(p[k]) + delta);
    });
    return weighted_sum(run_kernel(gc.op, inputs, gc.attrs), weights);
  };
  for (int64_t k = 0; k < x.num_elements(); ++k)
    result.mutable_data<double>()[k] = (at(k, gc.eps) - at(k, -gc.eps)) / (2 * gc.eps);
  return result;
}

// The gradients() result for each float input (invalid where there is none).
std::vector<tensor> analytic_gradients(const grad_case& gc, const std::vector<tensor>& weights) {
  graph g;
  std::vector<output> ins, xs;
  feed_list feeds;
  for (size_t i = 0; i < gc.inputs.size(); ++i) {
    const tensor& t = gc.inputs[i];
    shape dims = t.dims();
    if (std::count(gc.unknown_dim0.begin(), gc.unknown_dim0.end(), int(i)) && dims.rank() > 0)
      dims[0] = shape::unknown;
    std::string name = "x";  // not "x" + ...: GCC 12 warns falsely (-Wrestrict)
    name += std::to_string(i);
    ins.push_back(placeholder(g, t.type(), dims, name));
    feeds.emplace_back(ins.back(), t);
    if (is_differentiable_type(t.type())) xs.push_back(ins.back());
  }
  const node& n = g.add_node(gc.op, ins, gc.attrs);
  int id = n.id;
  output loss;
  for (size_t j = 0; j < weights.size(); ++j) {
    if (!weights[j].valid()) continue;
    auto term = reduce_sum(mul(output(&g, {id, int(j)}), constant(g, weights[j])));
    loss = loss.valid() ? add(loss, term) : term;
  }
  auto grads = gradients({loss}, xs);
  std::vector<output> fetches;
  for (auto& d : grads)
    if (d.valid()) fetches.push_back(d);
  session s(g);
  auto values = s.run(feeds, fetches);
  std::vector<tensor> result;
  size_t next = 0, k = 0;
  for (size_t i = 0; i < gc.inputs.size(); ++i) {
    if (!is_differentiable_type(gc.inputs[i].type())) {
      result.emplace_back();
      continue;
    }
    result.push_back(grads[k++].valid() ? values[next++] : tensor());
  }
  return result;
}

// "" when they agree, else the first element that differs.
std::string compare(const tensor& analytic, const tensor& numeric, const tensor& x, double tol) {
  if (analytic.valid() && (analytic.type() != x.type() || analytic.dims() != x.dims()))
    return "the gradient is " + tensor_spec{analytic.type(), analytic.dims()}.to_string() +
           " but the input is " + tensor_spec{x.type(), x.dims()}.to_string();
  tensor a = analytic.valid() ? run_kernel("cast", {analytic}, {{"dtype", dtype::float64}})[0]
                              : tensor::zeros(dtype::float64, x.dims());
  auto diff = compare_tensors(a, numeric, tol);
  if (diff.empty()) return "";
  return "analytic (got) against numeric (expected): " + diff +
         (analytic.valid() ? "" : " (the op gives this input no gradient)");
}

void check_case(const grad_case& gc) {
  auto outs = run_kernel(gc.op, gc.inputs, gc.attrs);
  std::vector<tensor> weights;
  auto listed = [](const std::vector<int>& list, size_t i) {
    return std::count(list.begin(), list.end(), int(i)) > 0;
  };
  for (size_t j = 0; j < outs.size(); ++j) {
    const tensor& y = outs[j];
    if (!is_differentiable_type(y.type()) || (!gc.outputs.empty() && !listed(gc.outputs, j))) {
      weights.emplace_back();
      continue;
    }
    tensor w = uniform(y.dims());
    weights.push_back(y.type() == dtype::float64 ? w : to_float32(w));
  }
  auto analytic = analytic_gradients(gc, weights);
  for (size_t i = 0; i < gc.inputs.size(); ++i) {
    if (!is_differentiable_type(gc.inputs[i].type())) continue;
    if (listed(gc.constant_inputs, i)) {
      CHECK_MESSAGE(!analytic[i].valid(), "input " << i << " should get no gradient");
      continue;
    }
    auto numeric = numeric_gradient(gc, i, weights);
    auto diff = compare(analytic[i], numeric, gc.inputs[i], gc.tolerance);
    CHECK_MESSAGE(diff.empty(), "input " << i << ": " << diff);
  }
}

}  // namespace

TEST_CASE("every op with a gradient has a numeric gradient check") {
  std::set<std::string> covered;
  for (auto& c : grad_cases()) covered.insert(c.op);
  for (auto* def : op_registry::global().all()) {
    if (!def->gradient || exempt.count(def->name)) continue;
    CHECK_MESSAGE(covered.count(def->name),
                  "op '" << def->name << "' has a gradient but no case in the gradient check");
  }
}

TEST_CASE("gradients agree with finite differences") {
  for (auto& c : grad_cases()) {
    INFO("op '" << c.op << "' case: " << c.label);
    auto* def = op_registry::global().find(c.op);
    REQUIRE_MESSAGE(def, "unknown op");
    CHECK_MESSAGE(def->gradient, "the op has no gradient");
    if (!def->gradient) continue;
    try {
      check_case(c);
    } catch (const std::exception& e) {
      FAIL_CHECK("threw: " << e.what());
    }
  }
}

}  // namespace actorflow::testing
