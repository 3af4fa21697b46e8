// Helpers of the CUDA device's tests (tests/test_cuda.cpp, tests/cuda/*.cpp):
// completions of the device actor, and the GPU kernels' case table - random
// inputs for every op with a GPU kernel, run on the CPU kernel and on the GPU.
#pragma once
#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/op_registry.hpp"
#include "devices/cuda/gpu_device_actor.hpp"
#include "devices/cuda/gpu_kernel.hpp"

namespace actorflow::testing {

using gpu::gpu_device;
using gpu::gpu_done_atom;

struct completion {
  uint64_t id = 0;
  std::string error = "(no completion)";
};

// The next completion message; nothing may hang, so 30 s without one fails.
inline completion next_completion(caf::scoped_actor& self) {
  completion c;
  self->receive(
      [&](gpu_done_atom, uint64_t id, std::string error) {
        c.id = id;
        c.error = std::move(error);
      },
      caf::after(std::chrono::seconds(30)) >> [&] { FAIL_CHECK("no completion within 30 s"); });
  return c;
}

// Tasks in flight drop to zero just after their completion is sent.
inline bool drains(const gpu_device& device) {
  for (int i = 0; i < 1000 && device.in_flight->load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return device.in_flight->load() == 0;
}

// ---- the GPU kernels' cases ------------------------------------------------------------------

struct gpu_case {
  std::string label;
  std::vector<tensor> inputs;
  attr_map attrs;
  double tolerance = 0;  // 0: by dtype (1e-5 float32, 1e-12 float64, exact otherwise)
};

using case_list = std::vector<gpu_case>;

struct random_source {
  std::mt19937_64 engine{20240607};

  // Uniform in [lo, hi] (integers: whole numbers; bool: random bits).
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
  // Rows of probabilities (label distributions).
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

inline attr_map window_attrs(std::vector<int64_t> strides, const std::string& padding,
                             std::vector<int64_t> ksize = {}) {
  attr_map a{{"strides", std::move(strides)}, {"padding", padding}};
  if (!ksize.empty()) a["ksize"] = std::move(ksize);
  return a;
}

/// The cases of every op that has a GPU kernel (the same on every call).
std::map<std::string, case_list> gpu_cases();

/// The tolerance for a dtype when a case names none: 1e-5 float32, 1e-12 float64, else exact.
double default_tolerance(dtype t);

/// "" when equal (floats within tol * (1 + |expected|), NaN equal to NaN), else what differs.
std::string compare(const tensor& got, const tensor& want, double tol);

/// The dtype a GPU kernel is selected by, for a case's inputs.
dtype key_type(const gpu::gpu_kernel_def& k, const gpu_case& c);

}  // namespace actorflow::testing
