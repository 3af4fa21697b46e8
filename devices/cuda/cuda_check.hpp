// Turning CUDA, cuBLAS and cuDNN status codes into actorflow::error (CUDA builds only).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "core/error.hpp"

namespace actorflow::gpu {

/// "<what>: cudaErrorMemoryAllocation: out of memory".
inline std::string cuda_error_text(cudaError_t e, const std::string& what) {
  return what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}

/// Throws "[where] <what>: <CUDA error>" unless e is cudaSuccess.
inline void check_cuda(cudaError_t e, const std::string& where, const std::string& what) {
  if (e != cudaSuccess) fail(where, cuda_error_text(e, what));
}

inline void check_cublas(cublasStatus_t s, const std::string& where, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(where, what + ": " + cublasGetStatusName(s) + ": " + cublasGetStatusString(s));
}

inline void check_cudnn(cudnnStatus_t s, const std::string& where, const std::string& what) {
  if (s != CUDNN_STATUS_SUCCESS) fail(where, what + ": " + cudnnGetErrorString(s));
}

}  // namespace actorflow::gpu
