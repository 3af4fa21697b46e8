#include "actors/resources/queue_actor.hpp"

#include <deque>

#include "actors/resources/waiting_requests.hpp"
#include "actors/run/messages.hpp"

namespace actorflow {

namespace {

using element = std::vector<tensor>;
using reply = caf::result<update_result>;

update_result failure(std::string what, error_code code) {
  return update_result::failure(std::move(what), code);
}

class queue_actor : public caf::event_based_actor {
 public:
  queue_actor(caf::actor_config& cfg, std::string name, queue_spec spec)
      : caf::event_based_actor(cfg), name_(std::move(name)), spec_(std::move(spec)) {}

  caf::behavior make_behavior() override {
    // Waiting requesters must hear back even when the queue goes away,
    // or the steps waiting on them would never finish.
    set_exit_handler([this](caf::exit_msg& msg) {
      std::string why = "queue '" + name_ + "' was shut down";
      dequeuers_.fail_all(why, error_code::cancelled);
      enqueuers_.fail_all(why, error_code::cancelled);
      quit(msg.reason);
    });
    return {
        [this](update_atom, variable_update& u) { return on_graph_op(u); },
        // A failed or aborted step: its waiting requests fail and leave the
        // queue as it was; an enqueue of that step never adds its element.
        [this](cancel_atom, uint64_t executable, uint64_t step, std::string& why) {
          cancels_.cancel(step_key{executable, step}, why, dequeuers_, enqueuers_);
        },
        [this](enqueue_atom, element& e) { return enqueue(std::move(e), "", {}); },
        [this](dequeue_atom) { return dequeue("", {}); },
        [this](close_atom, bool cancel_pending) { return close(cancel_pending); },
        [this](size_atom) { return size(); },
    };
  }

 private:
  struct enqueue_request {
    element value;
  };

  // Graph ops: errors name the node as well as the queue.
  reply on_graph_op(variable_update& u) {
    std::string who = requester_of(u);
    const std::string& op = u.def->name;
    if (auto refused = cancels_.refusal(u, who)) return std::move(*refused);
    if (op == "queue_enqueue") return enqueue(std::move(u.inputs), who, u.key);
    if (op == "queue_dequeue") return dequeue(who, u.key);
    if (op == "queue_size") return size();
    if (op == "queue_close") {
      auto& attrs = *u.attrs;
      return close(get_attr_or<bool>(attrs, "cancel_pending_enqueues", op, false));
    }
    return failure(who + "is not an op of queue '" + name_ + "'", error_code::invalid_argument);
  }

  reply enqueue(element e, const std::string& who, const step_key& key) {
    try {
      check_queue_element(spec_, e, name_);
    } catch (const std::exception& ex) {
      return failure(who + ex.what(), code_of(ex));
    }
    // TensorFlow's enqueue on a closed queue is cancelled, a dequeue from a
    // closed, empty one out of range (the end of the input).
    if (closed_)
      return failure(who + "queue '" + name_ + "' is closed: enqueue refused",
                     error_code::cancelled);
    if (!dequeuers_.empty()) {  // the queue is empty and someone waits: hand it over
      dequeuers_.answer_front(update_result{std::move(e), ""});
      return update_result{};
    }
    if (elements_.size() < static_cast<size_t>(spec_.capacity)) {
      elements_.push_back(std::move(e));
      return update_result{};
    }
    return enqueuers_.hold(make_response_promise(), who, key, {std::move(e)});
  }

  reply dequeue(const std::string& who, const step_key& key) {
    if (!elements_.empty()) {
      update_result out{std::move(elements_.front()), ""};
      elements_.pop_front();
      admit_waiting_enqueue();
      return out;
    }
    if (closed_) return failure(who + closed_and_empty(), error_code::out_of_range);
    return dequeuers_.hold(make_response_promise(), who, key);
  }

  // A dequeue freed a slot: the oldest waiting enqueue takes it.
  void admit_waiting_enqueue() {
    if (enqueuers_.empty()) return;
    elements_.push_back(std::move(enqueuers_.front().value));
    enqueuers_.answer_front(update_result{});
  }

  reply close(bool cancel_pending) {
    closed_ = true;
    // Waiting dequeues mean the queue is empty: closed, it can never serve them.
    dequeuers_.fail_all(closed_and_empty(), error_code::out_of_range);
    if (cancel_pending)
      enqueuers_.fail_all(
          "queue '" + name_ +
              "' was closed (cancel_pending_enqueues) while this enqueue waited for space",
          error_code::cancelled);
    return update_result{};
  }

  std::string closed_and_empty() const {
    return "queue '" + name_ + "' is closed and empty (out of range): no more elements";
  }

  reply size() {
    return update_result{{tensor::scalar<int32_t>(static_cast<int32_t>(elements_.size()))}, ""};
  }

  std::string name_;
  queue_spec spec_;
  std::deque<element> elements_;
  waiting_requests<enqueue_request> enqueuers_;  // waiting for space
  waiting_requests<> dequeuers_;                 // waiting for an element
  step_cancels cancels_;
  bool closed_ = false;
};

}  // namespace

caf::actor spawn_queue_actor(caf::actor_system& system, std::string name, queue_spec spec) {
  return system.spawn<queue_actor>(std::move(name), std::move(spec));
}

}  // namespace actorflow
