#include "devices/cuda/gpu_device_actor.hpp"

#include "core/error.hpp"

namespace actorflow::gpu {

namespace {

void launch_task(stream_executor& streams, gpu_task& task, const caf::actor& reply_to,
                 const std::shared_ptr<std::atomic<int64_t>>& in_flight) {
  const uint64_t id = task.id;
  // An anonymous sender's work runs too; there is just nobody to tell.
  auto tell = [reply_to, id](std::string error) {
    if (reply_to) caf::anon_send(reply_to, gpu_done_atom::value, id, std::move(error));
  };
  try {
    if (task.stream < 0 || task.stream >= streams.num_streams())
      fail("gpu device", "stream " + std::to_string(task.stream) + " of " +
                             std::to_string(streams.num_streams()));
    streams.launch(task.stream, std::move(task.work));
  } catch (const std::exception& e) {
    tell(e.what());
    return;
  }
  if (task.answer_on_enqueue && streams.enqueues_on_call()) {
    tell("");  // stream order does the rest; no callback to pay for
    return;
  }
  // The work's closure is gone (launch took it), so whatever it held - device
  // tensors included - was released here, on this thread, not in the callback.
  in_flight->fetch_add(1);
  streams.when_done(task.stream, [tell, in_flight](std::string error) {
    tell(std::move(error));
    in_flight->fetch_sub(1);
  });
}

}  // namespace

gpu_device spawn_gpu_device(caf::actor_system& system, std::shared_ptr<stream_executor> streams) {
  auto in_flight = std::make_shared<std::atomic<int64_t>>(0);
  // State goes in as spawn arguments, not captures (see spawn_cpu_device).
  auto device = [](caf::event_based_actor* self, std::shared_ptr<stream_executor> streams,
                   std::shared_ptr<std::atomic<int64_t>> in_flight) -> caf::behavior {
    return {
        [self, streams, in_flight](run_atom, gpu_task& task) {
          auto reply_to = caf::actor_cast<caf::actor>(self->current_sender());
          launch_task(*streams, task, reply_to, in_flight);
        },
    };
  };
  auto actor = system.spawn(device, std::move(streams), in_flight);
  return {actor, in_flight};
}

}  // namespace actorflow::gpu
