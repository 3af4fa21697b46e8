// Cases for the training ops that run as kernels: dropout and the
// learning-rate schedule (the optimizer updates run in test_train).
#include <cmath>

#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

attr_map exponential(int64_t decay_steps, bool staircase) {
  return {{"kind", std::string("exponential")},
          {"lr0", 0.1},
          {"decay_steps", decay_steps},
          {"rate", 0.5},
          {"staircase", staircase}};
}

const op_case_registrar cases({
    {.op = "dropout",
     .label = "rate 0 keeps everything",
     .inputs = {make<float>({2, 2}, {1, -2, 3, 4}), scalar_of<int64_t>(3)},
     .attrs = {{"rate", 0.0}, {"seed", int64_t{1}}},
     .expected = {make<float>({2, 2}, {1, -2, 3, 4}), make<float>({2, 2}, {1, 1, 1, 1})}},
    {.op = "dropout",
     .label = "rate 0.5: zeros or doubled, the mask says which",
     .inputs = {make<double>({6}, {1, 2, 3, 4, 5, 6}), scalar_of<int64_t>(0)},
     .attrs = {{"rate", 0.5}, {"seed", int64_t{9}}},
     .check =
         [](const std::vector<tensor>& out) {
           auto y = out[0].to_vector<double>(), mask = out[1].to_vector<double>();
           for (size_t i = 0; i < y.size(); ++i) {
             CHECK((mask[i] == 0.0 || mask[i] == 2.0));
             CHECK(y[i] == double(i + 1) * mask[i]);
           }
         }},
    {.op = "dropout",
     .label = "rate 1 is refused",
     .inputs = {make<float>({1}, {1}), scalar_of<int64_t>(0)},
     .attrs = {{"rate", 1.0}, {"seed", int64_t{0}}},
     .expect_error = "rate must be in [0, 1)"},
    {.op = "dropout",
     .label = "integer x is refused",
     .inputs = {make<int32_t>({1}, {1}), scalar_of<int64_t>(0)},
     .attrs = {{"rate", 0.5}, {"seed", int64_t{0}}},
     .expect_error = "x must be float"},
    {.op = "learning_rate_schedule",
     .label = "exponential at step 15",
     .inputs = {scalar_of<int64_t>(15)},
     .attrs = exponential(10, false),
     .expected = {scalar_of<float>(float(0.1 * std::pow(0.5, 1.5)))}},
    {.op = "learning_rate_schedule",
     .label = "exponential staircase at step 15",
     .inputs = {scalar_of<int64_t>(15)},
     .attrs = exponential(10, true),
     .expected = {scalar_of<float>(0.05f)}},
    {.op = "learning_rate_schedule",
     .label = "piecewise on a boundary takes the next value",
     .inputs = {scalar_of<int64_t>(10)},
     .attrs = {{"kind", std::string("piecewise")},
               {"boundaries", std::vector<int64_t>{5, 10}},
               {"values", std::vector<double>{1, 0.5, 0.25}}},
     .expected = {scalar_of<float>(0.25f)}},
    {.op = "learning_rate_schedule",
     .label = "cosine halfway",
     .inputs = {scalar_of<int64_t>(50)},
     .attrs = {{"kind", std::string("cosine")},
               {"lr0", 2.0},
               {"decay_steps", int64_t{100}},
               {"alpha", 0.0}},
     .expected = {scalar_of<float>(1.0f)}},
    {.op = "learning_rate_schedule",
     .label = "unknown kind",
     .inputs = {scalar_of<int64_t>(0)},
     .attrs = {{"kind", std::string("linear")}},
     .expect_error = "unknown schedule 'linear'"},
    {.op = "learning_rate_schedule",
     .label = "decay_steps must be positive",
     .inputs = {scalar_of<int64_t>(0)},
     .attrs = exponential(0, false),
     .expect_error = "decay_steps must be positive"},
    {.op = "learning_rate_schedule",
     .label = "the step must be int64",
     .inputs = {scalar_of<int32_t>(0)},
     .attrs = exponential(10, false),
     .expect_error = "int64 scalar"},
});

// ---- gradient cases (the numeric gradient check, gradient_check.cpp) ----

std::vector<grad_case> gradient_cases() {
  std::vector<grad_case> c;
  // The mask is a function of (seed, counter, index) alone: finite differences see it fixed.
  c.push_back({.op = "dropout",
               .label = "rate 0.5, unknown dim 0",
               .inputs = {uniform({3, 4}), scalar_of<int64_t>(7)},
               .attrs = {{"rate", 0.5}, {"seed", int64_t{3}}},
               .unknown_dim0 = {0}});
  return c;
}

const grad_case_registrar gradient_registration(gradient_cases);

}  // namespace
}  // namespace actorflow::testing
