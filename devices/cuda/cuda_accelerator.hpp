// A GPU as an accelerator (devices/accelerator.hpp): "/gpu:N" runs the GPU
// kernel registry's kernels on a cuda_device. Host inputs go in through the
// device's pinned staging buffers on its copy stream; outputs stay in device
// memory for consumers on the same GPU and come out through the other copy
// stream only for the rest. Plain C++ header; the definition needs CUDA.
#pragma once
#include <memory>

#include "devices/accelerator.hpp"

namespace actorflow::gpu {

/// "/gpu:<ordinal>". The device (its streams, cuBLAS and cuDNN handles) is
/// opened on first use, so a process that places nothing on it pays nothing;
/// a failure to open it fails the launch that asked, naming the device.
/// Throws in a build without CUDA.
std::shared_ptr<accelerator> make_cuda_accelerator(int ordinal);

}  // namespace actorflow::gpu
