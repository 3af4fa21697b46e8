#include "devices/cuda/cuda_launch_errors.hpp"

namespace actorflow::gpu {

namespace {
thread_local cudaError_t first_launch_error = cudaSuccess;
}

void note_launch() {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess && first_launch_error == cudaSuccess) first_launch_error = e;
}

cudaError_t take_launch_error() {
  cudaError_t e = first_launch_error;
  first_launch_error = cudaSuccess;
  return e;
}

}  // namespace actorflow::gpu
