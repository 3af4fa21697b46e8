// Inputs for the op families' cases that are not written out by hand: random
// tensors of any dtype (the cases that devices run against the CPU kernel),
// and the float64 inputs of the numeric gradient check, kept away from the
// points where an op is not differentiable.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/op_registry.hpp"

namespace actorflow::testing {

/// Random tensors from a fixed seed: the same on every run.
struct random_source {
  std::mt19937_64 engine{20240607};

  /// Uniform in [lo, hi] (integers: whole numbers; bool: random bits).
  tensor uniform(dtype type, shape dims, double lo = -1, double hi = 1) {
    tensor t(type, std::move(dims));
    visit_dtype(type, [&](auto tag) {
      using T = decltype(tag);
      T* p = t.mutable_data<T>();
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        if constexpr (std::is_same_v<T, bool>)
          p[i] = (engine() & 1) != 0;
        else if constexpr (std::is_floating_point_v<T>)
          p[i] = static_cast<T>(std::uniform_real_distribution<double>(lo, hi)(engine));
        else
          p[i] = static_cast<T>(
              std::uniform_int_distribution<int64_t>(int64_t(lo), int64_t(hi))(engine));
      }
    });
    return t;
  }
  /// Rows of probabilities (label distributions).
  tensor distribution(dtype type, int64_t rows, int64_t cols) {
    auto t = uniform(type, shape{rows, cols}, 0.01, 1);
    visit_floating(type, "test", [&](auto tag) {
      using T = decltype(tag);
      T* p = t.mutable_data<T>();
      for (int64_t r = 0; r < rows; ++r) {
        T sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += p[r * cols + c];
        for (int64_t c = 0; c < cols; ++c) p[r * cols + c] /= sum;
      }
    });
    return t;
  }
};

inline const std::vector<dtype> floats{dtype::float32, dtype::float64};
inline const std::vector<dtype> signed_nums{dtype::float32, dtype::float64, dtype::int32,
                                            dtype::int64};
inline const std::vector<dtype> nums{dtype::float32, dtype::float64, dtype::int32, dtype::int64,
                                     dtype::uint8};
inline const std::vector<dtype> every{dtype::float32, dtype::float64, dtype::int32,
                                      dtype::int64,   dtype::uint8,   dtype::boolean};

/// "what float32": the label of a case repeated over dtypes.
inline std::string label_of(const std::string& what, dtype t) { return what + " " + dtype_name(t); }

/// Every element of a float tensor at position k * step set to `v` (NaN, inf).
inline tensor with_value_every(tensor t, int64_t step, double v) {
  visit_floating(t.type(), "test", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.mutable_data<T>();
    for (int64_t i = 0; i < t.num_elements(); i += step) p[i] = static_cast<T>(v);
  });
  return t;
}

/// Strides, padding and (for pools) the window of a conv or pool op.
inline attr_map window_attrs(std::vector<int64_t> strides, const std::string& padding,
                             std::vector<int64_t> ksize = {}) {
  attr_map a{{"strides", std::move(strides)}, {"padding", padding}};
  if (!ksize.empty()) a["ksize"] = std::move(ksize);
  return a;
}

// ---- the numeric gradient check's inputs (float64) --------------------------------------

/// The gradient cases' engine, one for all families.
inline std::mt19937_64& grad_rng() {
  static std::mt19937_64 r(20240611);
  return r;
}

inline tensor uniform(shape dims, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(dims.num_elements()));
  for (auto& x : v) x = d(grad_rng());
  return tensor::from_vector<double>(v, std::move(dims));
}

inline tensor positive(shape dims) { return uniform(std::move(dims), 0.5, 2); }

/// |x| in [0.2, 1.2) with random signs: away from the kinks of relu, abs and sign.
inline tensor nonzero(shape dims) {
  tensor t = uniform(dims, 0.2, 1.2);
  std::bernoulli_distribution flip(0.5);
  for (int64_t i = 0; i < t.num_elements(); ++i)
    if (flip(grad_rng())) t.mutable_data<double>()[i] *= -1;
  return t;
}

/// All different and 0.1 apart: no ties for max, min and max_pool.
inline tensor distinct(shape dims) {
  std::vector<double> v(static_cast<size_t>(dims.num_elements()));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), grad_rng());
  for (auto& x : v) x = 0.1 * x - 0.05 * static_cast<double>(v.size());
  return tensor::from_vector<double>(v, std::move(dims));
}

/// Multiples of 0.1 in [-1, 1], shifted by `offset`: tensors with different
/// offsets never tie (maximum, minimum).
inline tensor grid(shape dims, double offset) {
  std::uniform_int_distribution<int> d(-10, 10);
  std::vector<double> v(static_cast<size_t>(dims.num_elements()));
  for (auto& x : v) x = 0.1 * d(grad_rng()) + offset;
  return tensor::from_vector<double>(v, std::move(dims));
}

/// Rows that sum to 1: labels for the dense cross-entropy.
inline tensor distributions(int64_t rows, int64_t cols) {
  tensor t = uniform({rows, cols}, 0.1, 1);
  double* p = t.mutable_data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = std::accumulate(p + r * cols, p + (r + 1) * cols, 0.0);
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] /= sum;
  }
  return t;
}

inline tensor ids(shape dims, std::vector<int64_t> v) {
  return tensor::from_vector<int64_t>(v, std::move(dims));
}
inline tensor ids32(shape dims, std::vector<int32_t> v) {
  return tensor::from_vector<int32_t>(v, std::move(dims));
}
inline tensor to_float32(const tensor& t) {
  return run_kernel("cast", {t}, {{"dtype", dtype::float32}})[0];
}

}  // namespace actorflow::testing
