// The CAF scheduler the runtime loads in place of CAF's own work stealing.
#pragma once
// clang-format off: the version guard comes before the CAF headers it guards.
#include "actors/caf_ext/caf_version.hpp"
// clang-format on

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <cstdint>

#include "actors/caf_ext/mailbox.hpp"

namespace actorflow {

/// Makes `config`'s actor system use actorflow's scheduler: CAF's
/// work-stealing policy and worker loop, less a per-resume cost that CAF
/// 0.17's loop pays even with logging compiled out, plus pinned jobs that
/// busy workers do not steal (see scheduler.cpp; enqueue_pinned in
/// actors/caf_ext/mailbox.hpp).
void load_actorflow_scheduler(caf::actor_system_config& config);

/// How many jobs one of `system`'s workers has pinned to another so far.
uint64_t hand_overs_between_workers(caf::actor_system& system);

/// How many jobs `system`'s scheduler has given out round robin so far
/// (those no worker placed: each may go to a worker that sleeps).
uint64_t jobs_placed_round_robin(caf::actor_system& system);

/// Whether `system` schedules its actors with actorflow's scheduler.
bool runs_actorflow_scheduler(caf::actor_system& system);

}  // namespace actorflow
