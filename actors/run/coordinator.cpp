#include "actors/run/coordinator.hpp"

#include <unordered_map>

#include "actors/run/cancelled_steps.hpp"

namespace actorflow {

namespace {

// One step in flight. Its state appears with the first message about it: a
// partition's sinks may hear from a remote send before the client's start.
struct active_step {
  bool started = false;
  bool traced = false;
  int64_t received_ns = 0;      // a traced partition step: when its start came
  step_request_ptr request;     // a local run
  caf::response_promise reply;  // a start from a cluster client
  std::vector<tensor> fetched;
  size_t remaining = 0;
  std::string error;
  error_code code = error_code::unknown;  // of the error
};

struct coordinator_state {
  uint64_t next_step = 1;
  std::unordered_map<uint64_t, active_step> steps;
  aborted_steps aborted;
};

using coordinator_actor = caf::stateful_actor<coordinator_state>;

active_step& step_state(coordinator_actor* self, const coordinator_plan& plan, uint64_t step) {
  auto [it, fresh] = self->state.steps.try_emplace(step);
  if (fresh) {
    it->second.fetched.resize(plan.num_fetches);
    it->second.remaining = plan.num_fetches + plan.num_targets;
  }
  return it->second;
}

// A step that failed or was aborted will not use what its waiting requests
// would get: a dequeue still waiting would otherwise take the next element
// for nobody, and the step would wait for it.
void cancel_waiting_requests(coordinator_actor* self, const coordinator_plan& plan, uint64_t step,
                             const std::string& why) {
  for (auto& r : plan.waiting_resources)
    self->send(r, cancel_atom::value, plan.executable_id, step, why);
}

void launch(coordinator_actor* self, const coordinator_plan& plan, uint64_t step,
            const std::vector<tensor>& feeds) {
  for (auto& p : plan.placeholders)
    self->send(p.target, input_atom::value,
               step_input{step, 0, step_value{feeds[p.feed_index], ""}});
  for (auto& a : plan.starters) self->send(a, input_atom::value, step_input{step, 0, step_value{}});
}

// Answers a step's caller: a local run's promise, or the cluster client's
// start (with the partition's timeline when it was traced).
void answer_step(const coordinator_plan& plan, uint64_t step, active_step& st,
                 std::vector<tensor> fetched) {
  std::vector<node_trace> trace;
  if (any_step_traced()) {
    trace = end_step_trace(plan.executable_id, step);  // also one a recv began
    forget_stale_step_traces();
  }
  if (!st.traced) trace.clear();
  if (st.request) {
    st.request->trace_records = std::move(trace);
    return st.request->complete(std::move(fetched), st.error, st.code);
  }
  step_result r{std::move(fetched), std::move(st.error)};
  r.code = st.code;
  if (st.traced) {
    r.trace = std::move(trace);
    r.received_ns = st.received_ns;
    r.answered_ns = trace_now_ns();
  }
  st.reply.deliver(std::move(r));
}

// A step of an executable with loops that failed: answered now, and
// forgotten by its nodes, whose late messages are dropped.
void fail_now(coordinator_actor* self, const coordinator_plan& plan, uint64_t step) {
  for (auto& h : plan.histories) h->forget(step);
  auto it = self->state.steps.find(step);
  active_step st = std::move(it->second);
  self->state.steps.erase(it);
  self->state.aborted.add(step);
  for (auto& n : plan.nodes) self->send(n, drop_atom::value, step);
  answer_step(plan, step, st, {});
}

// Answers the step's caller once it started and every sink reported.
void finish_if_done(coordinator_actor* self, const coordinator_plan& plan, uint64_t step) {
  auto it = self->state.steps.find(step);
  if (it == self->state.steps.end() || !it->second.started || it->second.remaining > 0) return;
  for (auto& h : plan.histories) h->forget(step);
  active_step st = std::move(it->second);
  self->state.steps.erase(it);
  answer_step(plan, step, st, std::move(st.fetched));
}

caf::behavior coordinate(coordinator_actor* self, std::shared_ptr<coordinator_plan> plan) {
  // Stopped (its executable released: a cluster client that went away takes
  // its partitions with it) with steps in flight: their requests still
  // waiting in queues and accumulators would take what arrives next for
  // nobody (a restarted chief's token, the gradients it aggregates).
  self->set_exit_handler([self, plan](caf::exit_msg& msg) {
    for (auto& [step, st] : self->state.steps)
      cancel_waiting_requests(self, *plan, step,
                              "step " + std::to_string(step) + "'s executable was released");
    self->quit(msg.reason);
  });
  return {
      [self, plan](run_atom, step_request_ptr& request) {
        if (plan->num_fetches + plan->num_targets == 0) {
          request->complete({});
          return;
        }
        uint64_t step = self->state.next_step++;
        auto& st = step_state(self, *plan, step);
        st.started = true;
        if (request->trace) {
          st.traced = true;
          begin_step_trace(plan->executable_id, step);
        }
        launch(self, *plan, step, request->feeds);
        st.request = std::move(request);
      },
      [self, plan](start_atom, uint64_t step, std::vector<tensor>& feeds, bool trace) {
        const int64_t received = trace ? trace_now_ns() : 0;
        auto reply = self->make_response_promise();
        if (feeds.size() != plan->num_feeds) {
          reply.deliver(step_result::failure(
              "[session] a partition step got " + std::to_string(feeds.size()) +
                  " feeds, it takes " + std::to_string(plan->num_feeds),
              error_code::invalid_argument));
          return;
        }
        if (plan->num_fetches + plan->num_targets == 0) {
          reply.deliver(step_result{});
          return;
        }
        auto& st = step_state(self, *plan, step);
        st.started = true;
        st.reply = std::move(reply);
        if (trace) {
          st.traced = true;
          st.received_ns = received;
          begin_step_trace(plan->executable_id, step);
        }
        launch(self, *plan, step, feeds);
        finish_if_done(self, *plan, step);
      },
      [self, plan](abort_atom, uint64_t step) {
        self->state.aborted.add(step);
        cancel_waiting_requests(self, *plan, step,
                                "step " + std::to_string(step) + " was aborted by its client");
        // A loop's part here would otherwise go on with the step's values.
        for (auto& h : plan->histories) h->forget(step);
        if (plan->has_loops)
          for (auto& n : plan->nodes) self->send(n, drop_atom::value, step);
        if (any_step_traced())
          end_step_trace(plan->executable_id, step);  // a recv may have begun it
        auto it = self->state.steps.find(step);
        if (it == self->state.steps.end()) return;
        auto& st = it->second;
        if (st.started && !st.request)
          st.reply.deliver(step_result::failure(
              "[session] step " + std::to_string(step) + " aborted", error_code::aborted));
        self->state.steps.erase(it);
      },
      [self, plan](input_atom, step_input& in) {
        if (self->state.aborted.contains(in.step)) return;
        auto& st = step_state(self, *plan, in.step);
        if (!in.value.ok()) {
          if (st.error.empty()) {
            st.error = std::move(in.value.error);
            st.code = in.value.code;
            cancel_waiting_requests(self, *plan, in.step,
                                    "another node of step " + std::to_string(in.step) + " failed");
            if (plan->has_loops && st.started) return fail_now(self, *plan, in.step);
          }
        } else if (static_cast<size_t>(in.slot) < plan->num_fetches) {
          if (in.value.dead && st.error.empty()) {  // a target may be dead: it did not run
            st.error = "[session] fetch '" + plan->fetch_names[static_cast<size_t>(in.slot)] +
                       "' has no value in this step: it lies in a branch of a cond that was "
                       "not taken";
            st.code = error_code::invalid_argument;
          }
          st.fetched[static_cast<size_t>(in.slot)] = std::move(in.value.value);
        }
        --st.remaining;
        finish_if_done(self, *plan, in.step);
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& system, std::shared_ptr<coordinator_plan> plan) {
  return system.spawn(coordinate, std::move(plan));
}

}  // namespace actorflow
