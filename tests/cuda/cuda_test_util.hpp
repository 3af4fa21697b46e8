// Helpers of the CUDA device's tests (tests/test_cuda.cpp, tests/cuda/*.cpp):
// completions of the device actor. The GPU kernels' cases are the op
// families' (tests/ops/<family>_cases.cpp), which the device runner of
// test_ops replays on every device, a GPU included; random inputs and the
// comparison come from there too.
#pragma once
#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "devices/cuda/gpu_device_actor.hpp"
#include "devices/cuda/gpu_kernel.hpp"
#include "ops/case_inputs.hpp"
#include "ops/compare.hpp"

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

}  // namespace actorflow::testing
