// Random tensors: random_uniform, random_normal, truncated_normal.
//
// The ops are stateful (each run of a node draws new numbers) yet reproducible: element i of
// run r of a node is a pure function of (seed, seed2, r, i), computed with the counter-based
// Philox-4x32-10 generator. Two sessions built with the same seeds see the same sequence, and
// the values do not depend on how the work was split across threads.
//
// Unlike TensorFlow, where seed = seed2 = 0 asks for nondeterministic numbers, the seeds here
// default to 0 and are still deterministic: pass different seeds for different streams.
#pragma once
#include <array>
#include <cstdint>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// Uniform values in [minval, maxval) (float32 or float64).
ACTORFLOW_API output random_uniform(graph& g, shape dims, dtype type = dtype::float32,
                                    double minval = 0.0, double maxval = 1.0, int64_t seed = 0,
                                    int64_t seed2 = 0, const std::string& name = "");
/// Normally distributed values with the given mean and standard deviation.
ACTORFLOW_API output random_normal(graph& g, shape dims, dtype type = dtype::float32,
                                   double mean = 0.0, double stddev = 1.0, int64_t seed = 0,
                                   int64_t seed2 = 0, const std::string& name = "");
/// Like random_normal, except that values more than 2 standard deviations from the mean are
/// drawn again (TensorFlow's truncated_normal).
ACTORFLOW_API output truncated_normal(graph& g, shape dims, dtype type = dtype::float32,
                                      double mean = 0.0, double stddev = 1.0, int64_t seed = 0,
                                      int64_t seed2 = 0, const std::string& name = "");

/// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
/// 128 random bits from a 128-bit counter and a 64-bit key.
ACTORFLOW_API std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter,
                                                 std::array<uint32_t, 2> key);

}  // namespace actorflow
