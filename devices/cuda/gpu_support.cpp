#include "devices/cuda/gpu_support.hpp"

#include "core/error.hpp"
#include "devices/cuda/cuda_accelerator.hpp"

#if ACTORFLOW_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace actorflow::gpu {

namespace {

constexpr const char* without_cuda =
    "actorflow was built without CUDA (-DACTORFLOW_CUDA=OFF or no nvcc)";

gpu_discovery ask_runtime() {
#if ACTORFLOW_HAS_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clears the error, which is not sticky
    return {0, std::string("no CUDA device: ") + cudaGetErrorString(e)};
  }
  if (n == 0) return {0, "no CUDA device: cudaGetDeviceCount found none"};
  return {n, ""};
#else
  return {0, without_cuda};
#endif
}

}  // namespace

bool built_with_cuda() {
#if ACTORFLOW_HAS_CUDA
  return true;
#else
  return false;
#endif
}

const gpu_discovery& discover_gpus() {
  static const gpu_discovery found = ask_runtime();
  return found;
}

std::string gpu_placement_refusal() {
  if (!built_with_cuda()) return without_cuda;
  const auto& d = discover_gpus();
  if (d.count == 0) return d.reason;
  return "this process sees " + std::to_string(d.count) +
         " GPU(s), /gpu:0 to /gpu:" + std::to_string(d.count - 1) +
         ", but its runtime opened fewer (runtime_options::gpus)";
}

#if !ACTORFLOW_HAS_CUDA
// The CUDA build defines it in cuda_accelerator.cpp.
std::shared_ptr<accelerator> make_cuda_accelerator(int) { fail("gpu device", without_cuda); }
#endif

}  // namespace actorflow::gpu
