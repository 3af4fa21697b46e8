// Learning-rate schedules: one op that maps the global step to a float32
// rate, so a schedule costs one small kernel per step and restores with the step.
#include <cmath>
#include <numbers>

#include "ops/op_util.hpp"
#include "ops/train.hpp"

namespace actorflow {

namespace {

double exponential(const kernel_context& ctx, double step) {
  double decay_steps = double(ctx.attr<int64_t>("decay_steps"));
  double p = step / decay_steps;
  if (ctx.attr<bool>("staircase")) p = std::floor(p);
  return ctx.attr<double>("lr0") * std::pow(ctx.attr<double>("rate"), p);
}

double piecewise(const kernel_context& ctx, double step) {
  auto bounds = ctx.attr<std::vector<int64_t>>("boundaries");
  auto values = ctx.attr<std::vector<double>>("values");
  size_t i = 0;
  while (i < bounds.size() && step >= double(bounds[i])) ++i;
  return values[i];
}

double cosine(const kernel_context& ctx, double step) {
  double decay_steps = double(ctx.attr<int64_t>("decay_steps"));
  double alpha = ctx.attr<double>("alpha");
  double done = std::min(step, decay_steps) / decay_steps;
  double c = 0.5 * (1 + std::cos(std::numbers::pi * done));
  return ctx.attr<double>("lr0") * ((1 - alpha) * c + alpha);
}

void schedule_kernel(kernel_context& ctx) {
  const tensor& step_t = ctx.inputs[0];
  double step = double(step_t.data<int64_t>()[0]);
  auto kind = ctx.attr<std::string>("kind");
  double lr = kind == "exponential" ? exponential(ctx, step)
              : kind == "piecewise" ? piecewise(ctx, step)
                                    : cosine(ctx, step);
  ctx.set_output(0, tensor::scalar<float>(float(lr)));
}

std::vector<tensor_spec> schedule_infer(const shape_context& c) {
  auto& step = c.inputs[0];
  if (step.type != dtype::int64 || step.dims.rank() != 0)
    c.fail("the step must be an int64 scalar, got " + step.to_string());
  auto kind = c.attr<std::string>("kind");
  if (kind == "piecewise") {
    auto bounds = c.attr<std::vector<int64_t>>("boundaries");
    auto values = c.attr<std::vector<double>>("values");
    if (values.size() != bounds.size() + 1)
      c.fail("piecewise_constant needs one more value than boundaries, got " +
             std::to_string(values.size()) + " values for " + std::to_string(bounds.size()) +
             " boundaries");
    for (size_t i = 1; i < bounds.size(); ++i)
      if (bounds[i] <= bounds[i - 1]) c.fail("boundaries must increase");
  } else if (kind == "exponential" || kind == "cosine") {
    if (c.attr<int64_t>("decay_steps") <= 0) c.fail("decay_steps must be positive");
  } else {
    c.fail("unknown schedule '" + kind + "'");
  }
  return {{dtype::float32, shape{}}};
}

const op_registrar registration({.name = "learning_rate_schedule",
                                 .num_inputs = 1,
                                 .infer = schedule_infer,
                                 .kernel = schedule_kernel,
                                 .summary = "a learning rate computed from the global step",
                                 .not_differentiable = true});

output schedule(const variable& step, attr_map attrs) {
  return make_op("learning_rate_schedule", {step.value()}, std::move(attrs), "learning_rate");
}

}  // namespace

output exponential_decay(const variable& step, double lr0, int64_t decay_steps, double rate,
                         bool staircase) {
  return schedule(step, {{"kind", std::string("exponential")},
                         {"lr0", lr0},
                         {"decay_steps", decay_steps},
                         {"rate", rate},
                         {"staircase", staircase}});
}

output piecewise_constant(const variable& step, std::vector<int64_t> boundaries,
                          std::vector<double> values) {
  return schedule(step, {{"kind", std::string("piecewise")},
                         {"boundaries", std::move(boundaries)},
                         {"values", std::move(values)}});
}

output cosine_decay(const variable& step, double lr0, int64_t decay_steps, double alpha) {
  return schedule(step, {{"kind", std::string("cosine")},
                         {"lr0", lr0},
                         {"decay_steps", decay_steps},
                         {"alpha", alpha}});
}

}  // namespace actorflow
