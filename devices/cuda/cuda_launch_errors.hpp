// Launch errors of the op kernels' launchers (ops/cuda), kept per thread for
// cuda_device::launch to report (CUDA builds only).
#pragma once
#include <cuda_runtime_api.h>

namespace actorflow::gpu {

/// Every launcher calls note_launch() after its launches: it keeps this
/// thread's first launch error, so that later CUDA calls (an event query that
/// clears a "not ready" status) cannot hide it. take_launch_error() returns it
/// and starts over (cuda_device::launch checks it after each kernel).
void note_launch();
cudaError_t take_launch_error();

}  // namespace actorflow::gpu
