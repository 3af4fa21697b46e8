// GPU kernels of the random ops (ops/random.cpp) that initialize variables:
// random_uniform and truncated_normal, from the CPU's generator (random.cu).
#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stream's key from the seeds, as ops/random.cpp's stream makes it.
uint64_t key_of(const gpu_kernel_context& ctx) {
  auto seed = static_cast<uint64_t>(ctx.attr_or<int64_t>("seed", 0));
  auto seed2 = static_cast<uint64_t>(ctx.attr_or<int64_t>("seed2", 0));
  return splitmix64(seed ^ splitmix64(seed2));
}

// A number attribute given as a float or an int (the shape function checked it).
double number(const gpu_kernel_context& ctx, const std::string& name, double fallback) {
  auto it = ctx.attrs.find(name);
  if (it == ctx.attrs.end()) return fallback;
  if (auto p = std::get_if<int64_t>(&it->second)) return static_cast<double>(*p);
  return ctx.attr<double>(name);
}

void uniform_kernel(gpu_kernel_context& ctx) {
  device_tensor& y = ctx.allocate_output(0);
  random_uniform(y.type(), y.raw_mutable_data(), y.num_elements(), ctx.invocation, key_of(ctx),
                 number(ctx, "minval", 0), number(ctx, "maxval", 1), stream_of(ctx));
}

void truncated_kernel(gpu_kernel_context& ctx) {
  device_tensor& y = ctx.allocate_output(0);
  truncated_normal(y.type(), y.raw_mutable_data(), y.num_elements(), ctx.invocation, key_of(ctx),
                   number(ctx, "mean", 0), number(ctx, "stddev", 1), stream_of(ctx));
}

// They take no input: the dtype of the output is what matters (the op's
// shape function refuses any but float32 and float64).
const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "random_uniform", .types = float_types, .kernel = uniform_kernel}),
    gpu_kernel_registrar(
        {.op = "truncated_normal", .types = float_types, .kernel = truncated_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
