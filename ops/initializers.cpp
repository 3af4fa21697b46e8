// Variance-scaling initializers (Glorot, He).
#include <cmath>

#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/random.hpp"
#include "ops/train.hpp"

namespace actorflow {

namespace {

struct fans {
  double in, out;
};

fans fans_of(const shape& dims, const char* who) {
  if (!dims.is_fully_defined() || dims.rank() < 1)
    fail(who, "needs a fully defined shape of rank >= 1, got " + dims.to_string());
  if (dims.rank() == 1) return {double(dims[0]), double(dims[0])};
  // [..., in, out]: leading dims are the receptive field (conv filters are HWIO).
  double receptive = 1;
  for (int i = 0; i + 2 < dims.rank(); ++i) receptive *= double(dims[i]);
  return {receptive * double(dims[dims.rank() - 2]), receptive * double(dims[dims.rank() - 1])};
}

// A normal truncated at two standard deviations has a smaller spread; this
// restores the intended one (as TensorFlow's variance scaling does).
constexpr double kTruncatedStddevCorrection = 0.87962566103423978;

output uniform_limit(graph& g, const shape& dims, double limit, int64_t seed, dtype type) {
  return random_uniform(g, dims, type, -limit, limit, seed);
}

output truncated(graph& g, const shape& dims, double stddev, int64_t seed, dtype type) {
  return truncated_normal(g, dims, type, 0.0, stddev / kTruncatedStddevCorrection, seed);
}

}  // namespace

output glorot_uniform(graph& g, shape dims, int64_t seed, dtype type) {
  auto f = fans_of(dims, "glorot_uniform");
  return uniform_limit(g, dims, std::sqrt(6.0 / (f.in + f.out)), seed, type);
}

output glorot_normal(graph& g, shape dims, int64_t seed, dtype type) {
  auto f = fans_of(dims, "glorot_normal");
  return truncated(g, dims, std::sqrt(2.0 / (f.in + f.out)), seed, type);
}

output he_uniform(graph& g, shape dims, int64_t seed, dtype type) {
  auto f = fans_of(dims, "he_uniform");
  return uniform_limit(g, dims, std::sqrt(6.0 / f.in), seed, type);
}

output he_normal(graph& g, shape dims, int64_t seed, dtype type) {
  auto f = fans_of(dims, "he_normal");
  return truncated(g, dims, std::sqrt(2.0 / f.in), seed, type);
}

}  // namespace actorflow
