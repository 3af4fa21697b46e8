// The CAF scheduler the runtime loads in place of CAF's own work stealing.
#pragma once
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/mailbox_element.hpp>

namespace actorflow {

/// Makes `config`'s actor system use actorflow's scheduler: CAF's
/// work-stealing policy and worker loop, less a per-resume cost that CAF
/// 0.17's loop pays even with logging compiled out, plus pinned jobs that
/// busy workers do not steal (see scheduler.cpp).
void load_actorflow_scheduler(caf::actor_system_config& config);

/// Enqueues `message` to `target`; if that makes `target` runnable, this
/// worker runs it next, and no other worker steals it while they are busy.
/// Off the runtime's workers (a pool thread), CAF's scheduler places it.
void enqueue_pinned(caf::abstract_actor* target, caf::mailbox_element_ptr message);

/// The same, but pinned to the next worker, which is woken if asleep.
void enqueue_pinned_to_next_worker(caf::abstract_actor* target, caf::mailbox_element_ptr message);

/// How many jobs one of `system`'s workers has pinned to another so far.
uint64_t hand_overs_between_workers(caf::actor_system& system);

/// Whether `system` schedules its actors with actorflow's scheduler.
bool runs_actorflow_scheduler(caf::actor_system& system);

}  // namespace actorflow
