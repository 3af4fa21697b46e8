#include "actors/accumulator_actor.hpp"

#include <deque>

#include "actors/cancelled_steps.hpp"
#include "actors/messages.hpp"

namespace actorflow {

namespace {

using reply = caf::result<update_result>;

update_result failure(std::string what) { return update_result{{}, std::move(what)}; }

std::string spec_text(const tensor& t) { return tensor_spec{t.type(), t.dims()}.to_string(); }

class accumulator_actor : public caf::event_based_actor {
 public:
  accumulator_actor(caf::actor_config& cfg, std::string name, tensor_spec spec)
      : caf::event_based_actor(cfg), name_(std::move(name)), spec_(std::move(spec)) {}

  caf::behavior make_behavior() override {
    // Waiting takers must hear back even when the accumulator goes away,
    // or the steps waiting on them would never finish.
    set_exit_handler([this](caf::exit_msg& msg) {
      shut_down();
      quit(msg.reason);
    });
    return {
        [this](update_atom, variable_update& u) { return on_graph_op(u); },
        // A failed or aborted step: its waiting take fails, and takes nothing.
        [this](cancel_atom, uint64_t executable, uint64_t step, std::string& why) {
          step_key key{executable, step};
          cancelled_.add(key, why);
          cancel_waiting(takers_, key, why);
        },
        // The resource table closes every non-variable resource when its
        // session goes away; the session then waits for its steps, so a take
        // waiting here (or arriving later) must fail rather than wait on.
        [this](close_atom, bool) {
          shut_down();
          return update_result{};
        },
    };
  }

 private:
  struct waiting_take {
    std::string who;  // the graph node, for its error
    step_key key;     // the step it belongs to, for cancelling
    int32_t num_required;
    caf::response_promise promise;
  };

  // Graph ops: errors name the node as well as the accumulator.
  reply on_graph_op(variable_update& u) {
    std::string who = "node '" + u.node_name + "' (" + u.def->name + "): ";
    const std::string& op = u.def->name;
    if (u.def->may_wait)  // ops that cannot wait run even for a cancelled step
      if (auto why = cancelled_.find(u.key)) return failure(who + cancelled_text(*why));
    try {
      if (op == "accumulator_apply_gradient") return apply(u.inputs[0], u.inputs[1]);
      if (op == "accumulator_take_gradient") return take(u.inputs[0], who, u.key);
      if (op == "accumulator_set_global_step") return set_global_step(u.inputs[0]);
      if (op == "accumulator_num_accumulated")
        return update_result{{tensor::scalar<int32_t>(count_)}, ""};
    } catch (const std::exception& ex) {
      return failure(who + ex.what());
    }
    return failure(who + "is not an op of accumulator '" + name_ + "'");
  }

  reply apply(const tensor& local_step, const tensor& grad) {
    auto step = scalar_input<int64_t>(local_step, "local_step");
    check_gradient(grad);
    // A gradient computed for an earlier step is dropped, never applied:
    // TensorFlow's semantics, which let backup workers finish late harmlessly.
    if (step < global_step_) return update_result{};
    add(grad);
    serve_first_taker();
    return update_result{};
  }

  reply take(const tensor& num_required, const std::string& who, const step_key& key) {
    auto n = scalar_input<int32_t>(num_required, "num_required");
    if (n < 1) fail(where(), "num_required must be at least 1, got " + std::to_string(n));
    // Takers are served in arrival order: a later one never overtakes.
    if (takers_.empty() && count_ >= n) return take_average();
    if (shut_down_) return failure(who + shut_down_text(n));
    auto promise = make_response_promise();
    takers_.push_back({who, key, n, promise});
    return promise;
  }

  reply set_global_step(const tensor& new_step) {
    auto step = scalar_input<int64_t>(new_step, "new_global_step");
    if (step > global_step_) global_step_ = step;  // never back: TensorFlow only warns
    return update_result{};
  }

  void check_gradient(const tensor& grad) const {
    if (!grad.valid()) fail(where(), "the gradient is an empty tensor");
    check_accumulator_gradient(spec_, {grad.type(), grad.dims()}, name_);
    // With unknown dims in the spec, the first gradient fixes the rest's shape.
    if (count_ > 0 && grad.dims() != sum_.dims())
      fail(where(), "gradient is " + spec_text(grad) +
                        ", the gradients accumulated since the last take are " + spec_text(sum_));
  }

  void add(const tensor& grad) {
    if (count_ == 0)
      sum_ = grad.clone();  // the sender may still hold grad's buffer
    else
      add_to_sum(grad);
    ++count_;
  }

  void add_to_sum(const tensor& grad) {
    visit_floating(spec_.type, "conditional_accumulator", [&](auto tag) {
      using T = decltype(tag);
      T* sum = sum_.mutable_data<T>();
      const T* g = grad.data<T>();
      for (int64_t i = 0; i < sum_.num_elements(); ++i) sum[i] += g[i];
    });
  }

  // After a take the count is zero, so at most one waiting taker can be served.
  void serve_first_taker() {
    if (takers_.empty() || count_ < takers_.front().num_required) return;
    takers_.front().promise.deliver(take_average());
    takers_.pop_front();
  }

  // The average leaves in the sum's own buffer; the next gradient starts a new one.
  update_result take_average() {
    visit_floating(spec_.type, "conditional_accumulator", [&](auto tag) {
      using T = decltype(tag);
      T* sum = sum_.mutable_data<T>();
      for (int64_t i = 0; i < sum_.num_elements(); ++i) sum[i] /= static_cast<T>(count_);
    });
    update_result out{{std::move(sum_)}, ""};
    sum_ = tensor();
    count_ = 0;
    ++global_step_;
    return out;
  }

  void shut_down() {
    shut_down_ = true;
    for (auto& w : takers_) w.promise.deliver(failure(w.who + shut_down_text(w.num_required)));
    takers_.clear();
  }

  std::string shut_down_text(int32_t num_required) const {
    return "accumulator '" + name_ + "' was shut down while a take waited for " +
           std::to_string(num_required) + " gradients (" + std::to_string(count_) + " accumulated)";
  }

  template <class T>
  T scalar_input(const tensor& t, const std::string& what) const {
    if (!t.valid() || t.type() != dtype_of<T>() || t.rank() != 0)
      fail(where(), what + " must be a " + dtype_name(dtype_of<T>()) + " scalar, got " +
                        (t.valid() ? spec_text(t) : std::string("an empty tensor")));
    return t.item<T>();
  }

  std::string where() const { return "accumulator '" + name_ + "'"; }

  std::string name_;
  tensor_spec spec_;
  tensor sum_;  // of the gradients applied since the last take; empty when count_ == 0
  int32_t count_ = 0;
  int64_t global_step_ = 0;
  std::deque<waiting_take> takers_;  // waiting for enough gradients, oldest first
  cancelled_steps cancelled_;
  bool shut_down_ = false;
};

}  // namespace

caf::actor spawn_accumulator_actor(caf::actor_system& system, std::string name, tensor_spec spec) {
  return system.spawn<accumulator_actor>(std::move(name), std::move(spec));
}

}  // namespace actorflow
