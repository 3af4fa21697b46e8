// Inverted dropout (declared in ops/train.hpp): a counter-based mask, so that a
// step's mask depends only on (seed, counter, element) and a resumed run
// draws the masks it would have drawn.
#include <array>
#include <cmath>

#include "devices/cpu/parallel.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/random.hpp"
#include "ops/train.hpp"

namespace actorflow {

namespace {

std::vector<tensor_spec> dropout_infer(const shape_context& c) {
  auto& x = c.inputs[0];
  auto& counter = c.inputs[1];
  if (x.type != dtype::float32 && x.type != dtype::float64)
    c.fail("x must be float, got " + x.to_string());
  if (counter.type != dtype::int64 || counter.dims.rank() != 0)
    c.fail("the counter must be an int64 scalar, got " + counter.to_string());
  double rate = c.attr<double>("rate");
  if (!(rate >= 0 && rate < 1)) c.fail("rate must be in [0, 1), got " + std::to_string(rate));
  return {x, x};
}

// Output 0 is x * mask, output 1 the mask (0 or 1 / (1 - rate)) for the gradient.
void dropout_kernel(kernel_context& ctx) {
  const tensor& x = ctx.inputs[0];
  uint64_t counter = uint64_t(ctx.inputs[1].data<int64_t>()[0]);
  double rate = ctx.attr<double>("rate");
  uint64_t seed = uint64_t(ctx.attr<int64_t>("seed"));
  std::array<uint32_t, 2> key = {uint32_t(seed), uint32_t(seed >> 32)};
  // Keep when the 32-bit draw is at or above rate * 2^32.
  uint64_t threshold = uint64_t(std::ldexp(rate, 32));
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    const T keep_scale = T(1.0 / (1.0 - rate));
    const T* in = x.data<T>();
    T* y = ctx.allocate_output(0, x.type(), x.dims()).template mutable_data<T>();
    T* mask = ctx.allocate_output(1, x.type(), x.dims()).template mutable_data<T>();
    int64_t blocks = (x.num_elements() + 3) / 4;
    parallel_for(blocks, 4096, [&](int64_t b, int64_t e) {
      for (int64_t block = b; block < e; ++block) {
        auto bits = philox4x32({uint32_t(block), uint32_t(uint64_t(block) >> 32), uint32_t(counter),
                                uint32_t(counter >> 32)},
                               key);
        for (int64_t j = 0; j < 4 && block * 4 + j < x.num_elements(); ++j) {
          int64_t i = block * 4 + j;
          mask[i] = bits[size_t(j)] >= threshold ? keep_scale : T(0);
          y[i] = in[i] * mask[i];
        }
      }
    });
  });
}

const op_registrar registration({
    .name = "dropout",
    .num_inputs = 2,
    .infer = dropout_infer,
    .kernel = dropout_kernel,
    .summary = "inverted dropout with a mask from (seed, counter, index)",
    .gradient =
        [](grad_context& c) {
          c.input_grads = {mul(c.grad(0), c.outputs[1]), output()};
        },
});

}  // namespace

output dropout(output x, double rate, output counter, int64_t seed) {
  return make_op("dropout", {x, counter}, {{"rate", rate}, {"seed", seed}}, "dropout");
}

}  // namespace actorflow
