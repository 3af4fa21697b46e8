// A stream of a CUDA device as kernels see it (CUDA builds only): the stream
// and the cuBLAS and cuDNN handles bound to it.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "devices/cuda/gpu_kernel.hpp"

namespace actorflow::gpu {

class cuda_device;

struct gpu_stream {
  int index = 0;
  cudaStream_t stream = nullptr;
  /// Bound to `stream` (cublasSetStream, cudnnSetStream); null on the copy streams.
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cuda_device* device = nullptr;
};

inline cudaStream_t stream_of(const gpu_kernel_context& ctx) { return ctx.stream.stream; }

}  // namespace actorflow::gpu
