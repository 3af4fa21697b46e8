// The runtime's CAF scheduler: CAF's work stealing with two changes. It
// specializes CAF 0.17's worker template and derives from its policy's
// data (actors/caf_ext/README.md).
//
// CAF 0.17's worker loop runs `CAF_PUSH_AID_FROM_PTR(dynamic_cast<...>(job))`
// before every actor resume. The logging macro stays in even at log level
// QUIET, and the cast costs about 1300 instructions, a quarter of what a node
// firing costs in a pipelined chain. The loop is a header template over the
// scheduling policy, so the runtime names its own policy and gives that
// policy's worker the same loop without the cast. CAF loads a scheduler
// module given in the config in place of its default one.
//
// Each worker also has a queue of pinned jobs, which busy workers never
// steal: the segments of a long chain of nodes (see place_chains in
// executable.cpp). Under plain work stealing an idle worker steals the next
// node of a chain from the busy one, and the two take turns on one chain; a
// segment pinned to each worker lets them run different steps at once.
#include "actors/caf_ext/scheduler.hpp"

#include <sched.h>

#include <atomic>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <chrono>
#include <mutex>
#include <thread>

#include "actors/caf_ext/runtime_config.hpp"

namespace actorflow {

struct actor_work_stealing : caf::policy::work_stealing {
  using base = caf::policy::work_stealing;

  struct coordinator_data : base::coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator* self)
        : base::coordinator_data(self) {}
    std::atomic<uint64_t> hand_overs{0};
  };

  struct worker_data : base::worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* parent) : base::worker_data(parent) {
      if (auto* config = runtime_config_of(parent->system())) {
        idle_spin = config->idle_spin;
        kernel_wait_spin = config->kernel_wait_spin;
        kernels_in_flight = config->kernels_in_flight;
      }
    }
    worker_data(const worker_data& other)
        : base::worker_data(other),
          idle_spin(other.idle_spin),
          kernel_wait_spin(other.kernel_wait_spin),
          kernels_in_flight(other.kernels_in_flight) {}
    queue_type pinned;
    std::chrono::microseconds idle_spin{0}, kernel_wait_spin{0};
    std::shared_ptr<const std::atomic<int64_t>> kernels_in_flight;

    // Whether a thread out of work `idle` long keeps polling.
    bool keeps_polling(std::chrono::steady_clock::duration idle) const {
      if (idle < idle_spin) return true;
      return idle < kernel_wait_spin && kernels_in_flight &&
             kernels_in_flight->load(std::memory_order_relaxed) > 0;
    }
  };

  static const runtime_config* runtime_config_of(caf::actor_system& system) {
    return dynamic_cast<const runtime_config*>(&system.config());
  }

  // From the worker itself: to run next, as CAF's own exec_later does.
  template <class Worker>
  static void pin_here(Worker* self, caf::resumable* job) {
    self->data().pinned.prepend(job);
  }

  // From the worker itself: after what its queue holds, where an idle
  // worker that is awake may steal it; no one is woken for it.
  template <class Worker>
  static void queue_here(Worker* self, caf::resumable* job) {
    self->data().queue.append(job);
  }

  // From another worker: after what it has pinned, waking it if asleep.
  template <class Worker>
  static void hand_over(Worker* self, caf::resumable* job) {
    auto& data = self->data();
    data.pinned.append(job);
    self->parent()->data().hand_overs.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock<std::mutex> guard(data.waitdata.lock);
    if (data.waitdata.sleeping) data.waitdata.cv.notify_one();
  }

  // Pinned jobs first: a chain segment runs through before the worker turns
  // to the next batch of steps waiting at its head. Most workloads pin
  // nothing; a look without the lock spares them a lock per dequeue.
  template <class Worker>
  static caf::resumable* take_own(Worker* self) {
    auto& data = self->data();
    if (!data.pinned.empty())
      if (auto* job = data.pinned.take_head()) return job;
    return data.queue.take_head();
  }

  // Only for a worker that slept through a whole relaxed poll: some worker
  // may be stuck on a long job with pinned ones waiting behind it.
  template <class Worker>
  static caf::resumable* steal_pinned(Worker* self) {
    auto* parent = self->parent();
    for (size_t i = 0; i < parent->num_workers(); ++i)
      if (auto* job = parent->worker_by_id(i)->data().pinned.take_tail()) return job;
    return nullptr;
  }

  // CAF's dequeue (policy/work_stealing.hpp), reading both queues.
  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& data = self->data();
    for (size_t k = 0; k < 2; ++k) {  // aggressive, then moderate polling
      auto& strategy = data.strategies[k];
      for (size_t i = 0; i < strategy.attempts; i += strategy.step_size) {
        if (auto* job = take_own(self)) return job;
        if (i % strategy.steal_interval == 0)
          if (auto* job = try_steal(self)) return job;
        if (strategy.sleep_duration.count() > 0)
          std::this_thread::sleep_for(strategy.sleep_duration);
      }
    }
    // Then poll for idle_spin more, and while kernels run on the pool for up
    // to kernel_wait_spin, yielding the core to anyone who wants it: a job
    // that comes meanwhile (such as the message a kernel sends when it ends)
    // does not wait for this thread to wake.
    const auto idle_since = std::chrono::steady_clock::now();
    while (data.keeps_polling(std::chrono::steady_clock::now() - idle_since)) {
      if (auto* job = take_own(self)) return job;
      if (auto* job = try_steal(self)) return job;
      sched_yield();
    }
    auto& relaxed = data.strategies[2];
    auto& wait = data.waitdata;
    for (size_t i = 1;; ++i) {
      bool woken;
      {
        std::unique_lock<std::mutex> guard(wait.lock);
        wait.sleeping = true;
        woken = wait.cv.wait_for(guard, relaxed.sleep_duration,
                                 [&] { return !data.queue.empty() || !data.pinned.empty(); });
        wait.sleeping = false;
      }
      caf::resumable* job = nullptr;
      if (woken)
        job = take_own(self);
      else if (i % relaxed.steal_interval == 0)
        job = try_steal(self);
      if (job == nullptr && !woken) job = steal_pinned(self);
      if (job != nullptr) return job;
    }
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker* self, UnaryFunction f) {
    for (auto* job = take_own(self); job != nullptr; job = take_own(self)) f(job);
  }
};

using worker = caf::scheduler::worker<actor_work_stealing>;

// The worker this thread is, if it is one of the runtime's.
thread_local worker* this_worker = nullptr;

}  // namespace actorflow

// Must come before coordinator<actor_work_stealing> is instantiated below.
template <>
void caf::scheduler::worker<actorflow::actor_work_stealing>::run() {
  actorflow::this_worker = this;
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

namespace {

enum class unit_kind { pin_here, hand_over, queue_here };

// Passed to an actor's enqueue: CAF calls exec_later on it if the message
// makes the actor runnable. It lives on the caller's stack for that call.
template <unit_kind kind>
class pinning_unit final : public caf::execution_unit {
 public:
  explicit pinning_unit(worker* to) : caf::execution_unit(&to->system()), to_(to) {}
  void exec_later(caf::resumable* job) override {
    if constexpr (kind == unit_kind::pin_here)
      actor_work_stealing::pin_here(to_, job);
    else if constexpr (kind == unit_kind::hand_over)
      actor_work_stealing::hand_over(to_, job);
    else
      actor_work_stealing::queue_here(to_, job);
  }

 private:
  worker* to_;
};

}  // namespace

void enqueue_pinned(caf::abstract_actor* target, direct_message message) {
  if (this_worker == nullptr) return target->enqueue(std::move(message), nullptr);
  pinning_unit<unit_kind::pin_here> here(this_worker);
  target->enqueue(std::move(message), &here);
}

void enqueue_pinned_to_next_worker(caf::abstract_actor* target, direct_message message) {
  if (this_worker == nullptr) return target->enqueue(std::move(message), nullptr);
  auto* parent = this_worker->parent();
  pinning_unit<unit_kind::hand_over> next(
      parent->worker_by_id((this_worker->id() + 1) % parent->num_workers()));
  target->enqueue(std::move(message), &next);
}

void enqueue_after_queued(caf::abstract_actor* target, direct_message message) {
  if (this_worker == nullptr) return target->enqueue(std::move(message), nullptr);
  pinning_unit<unit_kind::queue_here> here(this_worker);
  target->enqueue(std::move(message), &here);
}

void load_actorflow_scheduler(caf::actor_system_config& config) {
  config.load<caf::scheduler::coordinator<actor_work_stealing>>();
}

using coordinator = caf::scheduler::coordinator<actor_work_stealing>;

bool runs_actorflow_scheduler(caf::actor_system& system) {
  return dynamic_cast<coordinator*>(&system.scheduler()) != nullptr;
}

uint64_t hand_overs_between_workers(caf::actor_system& system) {
  auto* ours = dynamic_cast<coordinator*>(&system.scheduler());
  return ours != nullptr ? ours->data().hand_overs.load() : 0;
}

uint64_t jobs_placed_round_robin(caf::actor_system& system) {
  auto* ours = dynamic_cast<coordinator*>(&system.scheduler());
  return ours != nullptr ? ours->data().next_worker.load() : 0;  // CAF's round robin counter
}

}  // namespace actorflow
