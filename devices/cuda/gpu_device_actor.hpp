// The GPU device actor: one per GPU. Node actors send it work for one of its
// streams; it enqueues the work at once and goes on with its next message (no
// CAF thread ever waits for a GPU), and when the stream has run the work, a
// callback on a driver thread sends the completion back as a message - the
// "completion arrives later, from a stream callback" of the execution protocol.
//
// The actor drives a stream_executor: CUDA streams on a GPU (cuda_device), or a
// CPU stand-in that runs each stream's work on a thread of its own, which is
// how the protocol is tested on machines without a GPU.
#pragma once
#include <atomic>
#include <caf/all.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/export.hpp"
#include "devices/device.hpp"

namespace actorflow::gpu {

/// A few in-order queues of asynchronous work.
class ACTORFLOW_API stream_executor {
 public:
  virtual ~stream_executor() = default;
  virtual int num_streams() const = 0;
  /// Hands `work` to stream s. On a GPU, `work` runs now and enqueues kernels
  /// and copies on the stream; either way launch() does not wait for the
  /// stream. Throws actorflow::error when the work cannot be enqueued.
  virtual void launch(int s, std::function<void()> work) = 0;
  /// Whether launch() enqueues the work before it returns (a GPU), so that
  /// work launched later on the same stream runs after it: then a task's
  /// completion may be told as soon as it is enqueued (gpu_task::answer_on_enqueue).
  virtual bool enqueues_on_call() const { return false; }
  /// Calls done(error) once stream s has run everything launched on it so far:
  /// error is "" on success, else what failed (a failure is sticky, as a CUDA
  /// stream's). Called exactly once, on a thread of the executor's choosing
  /// that must not call into CUDA; never blocks the caller.
  virtual void when_done(int s, std::function<void(std::string error)> done) = 0;
};

/// Work for one stream: `work` enqueues it (see stream_executor::launch).
struct ACTORFLOW_API gpu_task {
  int stream = 0;
  std::function<void()> work;
  /// Echoed in the completion message, so the sender can match it.
  uint64_t id = 0;
  /// Answer once the work is enqueued rather than run, where the streams
  /// enqueue on call: for work whose results stay on the device, which later
  /// work on the stream reads in stream order. A fault of the device during
  /// it then shows at the next completion that waits for the stream.
  bool answer_on_enqueue = false;
};

/// The completion of a gpu_task: (gpu_done_atom, id, error), error "" on success.
using gpu_done_atom = caf::atom_constant<caf::atom("gpu_done")>;

struct ACTORFLOW_API gpu_device {
  caf::actor actor;
  /// Tasks launched and not completed yet; shutdown waits for zero.
  std::shared_ptr<std::atomic<int64_t>> in_flight;
};

/// Spawns the device actor over `streams`. It understands (run_atom, gpu_task)
/// and answers each with one (gpu_done_atom, id, error) message to the sender,
/// also when launching fails (bad stream, a throwing work function).
ACTORFLOW_API gpu_device spawn_gpu_device(caf::actor_system& system,
                                          std::shared_ptr<stream_executor> streams);

}  // namespace actorflow::gpu

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::gpu::gpu_task)
