// The requests a resource actor holds until it can answer them (a dequeue on
// an empty queue, a take before enough gradients; op_def::may_wait), and the
// cancelling of those of a failed or aborted step (cancel_atom).
#pragma once
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "actors/run/cancelled_steps.hpp"
#include "actors/run/messages.hpp"

namespace actorflow {

/// Who sent a graph op's request, as its errors begin: "node 'n' (op): ".
inline std::string requester_of(const variable_update& u) {
  return "node '" + u.node_name + "' (" + u.def->name + "): ";
}

/// What a waiting request holds beside its promise when it holds nothing (a dequeue).
struct nothing_held {};

/// One kind of request that waits at a resource actor, oldest first: each with
/// its promise, its requester (named in its error), its step (for cancelling)
/// and what `Held` adds (an enqueue's element, a take's count).
template <class Held = nothing_held>
class waiting_requests {
 public:
  struct waiting : Held {
    std::string who;
    step_key key;
    caf::response_promise promise;
  };

  bool empty() const { return waiting_.empty(); }
  waiting& front() { return waiting_.front(); }

  /// Holds a request until it can be answered; returns its promise, for the
  /// actor's handler to return.
  caf::response_promise hold(caf::response_promise promise, const std::string& who,
                             const step_key& key, Held held = {}) {
    waiting_.push_back({std::move(held), who, key, promise});
    return promise;
  }

  /// Answers the oldest request and drops it.
  void answer_front(update_result result) {
    waiting_.front().promise.deliver(std::move(result));
    waiting_.pop_front();
  }

  /// Fails every request, each with `why` after its requester.
  void fail_all(const std::string& why, error_code code) {
    fail_each([&](const waiting&) { return why; }, code);
  }

  /// Fails every request, each with why_of(request) after its requester.
  template <class WhyOf>
  void fail_each(WhyOf why_of, error_code code) {
    for (auto& w : waiting_) w.promise.deliver(update_result::failure(w.who + why_of(w), code));
    waiting_.clear();
  }

  /// Fails the requests of step `key`, oldest first, and drops them.
  void cancel(const step_key& key, const std::string& why) { cancel_waiting(waiting_, key, why); }

 private:
  std::deque<waiting> waiting_;
};

/// The steps a resource actor was told to cancel: their waiting requests fail,
/// and their later ones are refused (a cancel can overtake the request it is
/// meant for; see cancelled_steps).
class step_cancels {
 public:
  /// Records the cancel of step `key` and fails its requests waiting in each
  /// of `lists`, in the order given.
  template <class... Held>
  void cancel(const step_key& key, const std::string& why, waiting_requests<Held>&... lists) {
    cancelled_.add(key, why);
    (lists.cancel(key, why), ...);
  }

  /// The answer that refuses graph op request `u` (from `who`) because its step
  /// was cancelled; none when it was not, or when the op cannot wait: such ops
  /// run even for a cancelled step.
  std::optional<update_result> refusal(const variable_update& u, const std::string& who) const {
    if (!u.def->may_wait) return std::nullopt;
    const std::string* why = cancelled_.find(u.key);
    if (!why) return std::nullopt;
    return update_result::failure(who + cancelled_text(*why), error_code::cancelled);
  }

 private:
  cancelled_steps cancelled_;
};

}  // namespace actorflow
