#include "devices/cpu/cpu_device.hpp"

#include "devices/device.hpp"

namespace actorflow {

cpu_device spawn_cpu_device(caf::actor_system& system, tbb::task_arena& arena,
                            std::shared_ptr<std::atomic<int64_t>> in_flight) {
  tbb::task_arena* pool = &arena;
  if (!in_flight) in_flight = std::make_shared<std::atomic<int64_t>>(0);
  // State goes in as spawn arguments, not captures: CAF 0.17 binds a
  // reference to a null argument tuple when a functor is spawned without any
  // (UBSan reports it).
  auto device = [](caf::event_based_actor*, tbb::task_arena* pool,
                   std::shared_ptr<std::atomic<int64_t>> in_flight) -> caf::behavior {
    return {
        [pool, in_flight](run_atom, device_task& task) {
          in_flight->fetch_add(1);
          // TBB wants a const-callable functor; the task itself is mutable.
          auto run = std::make_shared<std::function<void()>>(std::move(task.run));
          pool->enqueue([run, in_flight] {
            (*run)();
            *run = nullptr;  // release what the task holds before counting it done
            in_flight->fetch_sub(1);
          });
        },
    };
  };
  auto actor = system.spawn(device, pool, in_flight);
  return {actor, in_flight};
}

}  // namespace actorflow
