#include "ops/bfloat16_widen.hpp"

#include "core/bfloat16.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

tensor widened(const tensor& t) {
  tensor out(dtype::float32, t.dims());
  const bfloat16* in = t.data<bfloat16>();
  float* o = out.mutable_data<float>();
  parallel_for(t.num_elements(), parallel_grain,
               [&](int64_t b, int64_t e) { bfloat16_to_float(in + b, o + b, e - b); });
  return out;
}

tensor rounded(const tensor& t) {
  tensor out(dtype::bfloat16, t.dims());
  const float* in = t.data<float>();
  bfloat16* o = out.mutable_data<bfloat16>();
  parallel_for(t.num_elements(), parallel_grain,
               [&](int64_t b, int64_t e) { float_to_bfloat16(in + b, o + b, e - b); });
  return out;
}

}  // namespace

void run_widened_to_float32(kernel_context& ctx, const kernel_fn& float_kernel, size_t widen) {
  for (size_t i = 0; i < ctx.inputs.size() && i < widen; ++i)
    if (auto& in = ctx.inputs[i]; in.valid() && in.type() == dtype::bfloat16) in = widened(in);
  float_kernel(ctx);
  for (auto& out : ctx.outputs)
    if (out.valid() && out.type() == dtype::float32) out = rounded(out);
}

}  // namespace actorflow
