// The CAF scheduler the runtime loads in place of CAF's own work stealing.
#pragma once
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace actorflow {

/// Makes `config`'s actor system use actorflow's scheduler: CAF's
/// work-stealing policy and worker loop, less a per-resume cost that CAF
/// 0.17's loop pays even with logging compiled out (see scheduler.cpp).
void load_actorflow_scheduler(caf::actor_system_config& config);

/// Whether `system` schedules its actors with actorflow's scheduler.
bool runs_actorflow_scheduler(caf::actor_system& system);

}  // namespace actorflow
