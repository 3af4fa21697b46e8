// Cases for the source and identity ops; the variable ops run in test_session.
#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

const op_case_registrar cases({
    {.op = "constant",
     .label = "returns its value",
     .attrs = {{"value", make<float>({2}, {1.5f, -2.f})}},
     .expected = {make<float>({2}, {1.5f, -2.f})}},
    {.op = "identity",
     .label = "0-d int64",
     .inputs = {scalar_of<int64_t>(7)},
     .expected = {scalar_of<int64_t>(7)}},
    {.op = "identity",
     .label = "zero-size",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .expected = {tensor(dtype::float32, {0, 3})}},
    {.op = "stop_gradient",
     .label = "passes its input through",
     .inputs = {make<float>({2}, {1.5f, -2.f})},
     .expected = {make<float>({2}, {1.5f, -2.f})}},
    {.op = "no_op", .label = "no outputs"},
    {.op = "identity", .label = "arity", .expect_error = "expects 1 inputs"},
});

// ---- against the CPU kernel: random inputs of each dtype a GPU kernel takes ----

std::vector<op_case> device_cases() {
  random_source rnd;
  std::vector<op_case> cases;
  for (dtype t : every)
    for (const char* op : {"identity", "stop_gradient"})
      cases.push_back({.op = op,
                       .label = label_of("random (6,4)", t),
                       .inputs = {rnd.uniform(t, shape{6, 4}, 0, 9)}});
  return cases;
}

const op_case_registrar device_registration(device_cases);

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> c;
  for (auto dims : {shape{2, 3}, shape{}})
    c.push_back({.op = "identity", .label = dims.to_string(), .inputs = {uniform(dims)}});
  return c;
}

const grad_case_registrar gradient_registration(gradient_cases);

}  // namespace
}  // namespace actorflow::testing
