#include "actors/resources/queue_actor.hpp"

#include <deque>

#include "actors/run/cancelled_steps.hpp"
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
      fail_dequeuers("queue '" + name_ + "' was shut down", error_code::cancelled);
      fail_enqueuers("queue '" + name_ + "' was shut down");
      quit(msg.reason);
    });
    return {
        [this](update_atom, variable_update& u) { return on_graph_op(u); },
        [this](cancel_atom, uint64_t executable, uint64_t step, std::string& why) {
          cancel(step_key{executable, step}, why);
        },
        [this](enqueue_atom, element& e) { return enqueue(std::move(e), "", {}); },
        [this](dequeue_atom) { return dequeue("", {}); },
        [this](close_atom, bool cancel_pending) { return close(cancel_pending); },
        [this](size_atom) { return size(); },
    };
  }

 private:
  struct waiting_enqueue {
    element value;
    std::string who;  // the graph node, for its error
    step_key key;     // the step it belongs to, for cancelling
    caf::response_promise promise;
  };
  struct waiting_dequeue {
    std::string who;
    step_key key;
    caf::response_promise promise;
  };

  // Graph ops: errors name the node as well as the queue.
  reply on_graph_op(variable_update& u) {
    std::string who = "node '" + u.node_name + "' (" + u.def->name + "): ";
    const std::string& op = u.def->name;
    if (u.def->may_wait)  // ops that cannot wait run even for a cancelled step
      if (auto why = cancelled_.find(u.key))
        return failure(who + cancelled_text(*why), error_code::cancelled);
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
      dequeuers_.front().promise.deliver(update_result{std::move(e), ""});
      dequeuers_.pop_front();
      return update_result{};
    }
    if (elements_.size() < static_cast<size_t>(spec_.capacity)) {
      elements_.push_back(std::move(e));
      return update_result{};
    }
    auto promise = make_response_promise();
    enqueuers_.push_back({std::move(e), who, key, promise});
    return promise;
  }

  reply dequeue(const std::string& who, const step_key& key) {
    if (!elements_.empty()) {
      update_result out{std::move(elements_.front()), ""};
      elements_.pop_front();
      admit_waiting_enqueue();
      return out;
    }
    if (closed_) return failure(who + closed_and_empty(), error_code::out_of_range);
    auto promise = make_response_promise();
    dequeuers_.push_back({who, key, promise});
    return promise;
  }

  // A dequeue freed a slot: the oldest waiting enqueue takes it.
  void admit_waiting_enqueue() {
    if (enqueuers_.empty()) return;
    auto& w = enqueuers_.front();
    elements_.push_back(std::move(w.value));
    w.promise.deliver(update_result{});
    enqueuers_.pop_front();
  }

  reply close(bool cancel_pending) {
    closed_ = true;
    // Waiting dequeues mean the queue is empty: closed, it can never serve them.
    fail_dequeuers(closed_and_empty(), error_code::out_of_range);
    if (cancel_pending)
      fail_enqueuers("queue '" + name_ +
                     "' was closed (cancel_pending_enqueues) while this enqueue waited for space");
    return update_result{};
  }

  void fail_dequeuers(const std::string& why, error_code code) {
    for (auto& w : dequeuers_) w.promise.deliver(failure(w.who + why, code));
    dequeuers_.clear();
  }

  void fail_enqueuers(const std::string& why) {
    for (auto& w : enqueuers_) w.promise.deliver(failure(w.who + why, error_code::cancelled));
    enqueuers_.clear();
  }

  // A failed or aborted step: its waiting requests fail and leave the queue
  // as it was; an enqueue of that step never adds its element.
  void cancel(const step_key& key, const std::string& why) {
    cancelled_.add(key, why);
    cancel_waiting(dequeuers_, key, why);
    cancel_waiting(enqueuers_, key, why);
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
  std::deque<waiting_enqueue> enqueuers_;  // waiting for space, oldest first
  std::deque<waiting_dequeue> dequeuers_;  // waiting for an element, oldest first
  cancelled_steps cancelled_;
  bool closed_ = false;
};

}  // namespace

caf::actor spawn_queue_actor(caf::actor_system& system, std::string name, queue_spec spec) {
  return system.spawn<queue_actor>(std::move(name), std::move(spec));
}

}  // namespace actorflow
