// Whether this build and this machine can run anything on a GPU, in words a
// user can act on. Plain C++: every build has it, with CUDA or without.
#pragma once
#include <string>

namespace actorflow::gpu {

/// True when the library was built with the CUDA device (ACTORFLOW_HAS_CUDA).
bool built_with_cuda();

/// The GPUs this process sees: their number, or why there are none.
struct gpu_discovery {
  int count = 0;
  /// Empty when count > 0; else e.g. "CUDA driver version is insufficient for
  /// CUDA runtime version" or "actorflow was built without CUDA (...)".
  std::string reason;
};

/// Asks the CUDA runtime (cudaGetDeviceCount) once and remembers the answer.
const gpu_discovery& discover_gpus();

/// Why a node placed on a GPU cannot run in this process: built without CUDA,
/// no CUDA device, or (GPUs present) its runtime opened fewer than the node
/// asks for. Used in placement errors.
std::string gpu_placement_refusal();

}  // namespace actorflow::gpu
