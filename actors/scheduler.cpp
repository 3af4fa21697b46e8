// CAF 0.17's worker loop runs `CAF_PUSH_AID_FROM_PTR(dynamic_cast<...>(job))`
// before every actor resume. The logging macro stays in even at log level
// QUIET, and the cast costs about 1300 instructions, a quarter of what a node
// firing costs in a pipelined chain. The loop is a header template over the
// scheduling policy, so the runtime names its own policy (CAF's work
// stealing, unchanged) and gives that policy's worker the same loop without
// the cast. CAF loads a scheduler module given in the config in place of its
// default one.
#include "actors/scheduler.hpp"

#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

namespace actorflow {

struct actor_work_stealing : caf::policy::work_stealing {};

}  // namespace actorflow

// Must come before coordinator<actor_work_stealing> is instantiated below.
template <>
void caf::scheduler::worker<actorflow::actor_work_stealing>::run() {
  for (;;) {
    auto job = policy_.dequeue(this);
    policy_.before_resume(this, job);
    auto result = job->resume(this, max_throughput_);
    policy_.after_resume(this, job);
    switch (result) {
      case resumable::resume_later:
        policy_.resume_job_later(this, job);  // keeps its reference
        break;
      case resumable::done:
        policy_.after_completion(this, job);
        intrusive_ptr_release(job);
        break;
      case resumable::awaiting_message:
        intrusive_ptr_release(job);  // enqueued again by its next message
        break;
      case resumable::shutdown_execution_unit:
        policy_.after_completion(this, job);
        policy_.before_shutdown(this);
        return;
    }
  }
}

namespace actorflow {

void load_actorflow_scheduler(caf::actor_system_config& config) {
  config.load<caf::scheduler::coordinator<actor_work_stealing>>();
}

bool runs_actorflow_scheduler(caf::actor_system& system) {
  using coordinator = caf::scheduler::coordinator<actor_work_stealing>;
  return dynamic_cast<coordinator*>(&system.scheduler()) != nullptr;
}

}  // namespace actorflow
