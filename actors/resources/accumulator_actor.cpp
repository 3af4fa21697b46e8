#include "actors/resources/accumulator_actor.hpp"

#include <iostream>
#include <unordered_map>
#include <variant>

#include "actors/resources/waiting_requests.hpp"
#include "actors/run/messages.hpp"
#include "ops/array_util.hpp"

namespace actorflow {

namespace {

using reply = caf::result<update_result>;

update_result failure(std::string what, error_code code) {
  return update_result::failure(std::move(what), code);
}

std::string spec_text(const tensor& t) { return tensor_spec{t.type(), t.dims()}.to_string(); }

// A sparse accumulator's sum: the variable rows named since the last take, in
// the order they were first named, and the sum of each one's gradient rows.
template <class T>
struct row_sums {
  using value_type = T;
  std::unordered_map<int64_t, size_t> slot_of;  // variable row -> position in `index`
  std::vector<int64_t> index;
  std::vector<T> values;  // index.size() x row_size

  // Adds one gradient, its repeated rows already summed (as the dense
  // gradient sums them), so that every row gets exactly the dense sum.
  void add(const detail::summed_rows<T>& gradient, int64_t row_size) {
    auto width = static_cast<size_t>(row_size);
    for (size_t k = 0; k < gradient.index.size(); ++k) {
      const T* row = gradient.values.data() + k * width;
      auto [it, fresh] = slot_of.try_emplace(gradient.index[k], index.size());
      if (fresh) {
        index.push_back(gradient.index[k]);
        values.insert(values.end(), row, row + width);
      } else {
        T* sum = values.data() + it->second * width;
        for (size_t j = 0; j < width; ++j) sum[j] += row[j];
      }
    }
  }

  void clear() {
    slot_of.clear();
    index.clear();
    values.clear();
  }
};

class accumulator_actor : public caf::event_based_actor {
 public:
  accumulator_actor(caf::actor_config& cfg, std::string name, tensor_spec spec, bool sparse)
      : caf::event_based_actor(cfg),
        name_(std::move(name)),
        spec_(std::move(spec)),
        sparse_(sparse) {
    if (spec_.type == dtype::float64) rows_ = row_sums<double>{};
    for (int i = 1; i < spec_.dims.rank(); ++i) row_size_ *= spec_.dims[i];
  }

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
          cancels_.cancel(step_key{executable, step}, why, takers_);
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
  struct take_request {
    int32_t num_required;
  };

  // Graph ops: errors name the node as well as the accumulator.
  reply on_graph_op(variable_update& u) {
    std::string who = requester_of(u);
    const std::string& op = u.def->name;
    if (auto refused = cancels_.refusal(u, who)) return std::move(*refused);
    try {
      if (!sparse_ && op == "accumulator_apply_gradient") return apply(u.inputs[0], u.inputs[1]);
      if (!sparse_ && op == "accumulator_take_gradient") return take(u.inputs[0], who, u.key);
      if (sparse_ && op == "sparse_accumulator_apply_gradient")
        return apply_rows(u.inputs[0], u.inputs[1], u.inputs[2]);
      if (sparse_ && op == "sparse_accumulator_take_gradient") return take(u.inputs[0], who, u.key);
      if (op == "accumulator_set_global_step") return set_global_step(u.inputs[0]);
      if (op == "accumulator_num_accumulated")
        return update_result{{tensor::scalar<int32_t>(count_)}, ""};
    } catch (const std::exception& ex) {
      return failure(who + ex.what(), code_of(ex));
    }
    return failure(
        who + "is not an op of " + (sparse_ ? "sparse " : "dense ") + "accumulator '" + name_ + "'",
        error_code::invalid_argument);
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

  reply apply_rows(const tensor& local_step, const tensor& rows, const tensor& indices) {
    auto step = scalar_input<int64_t>(local_step, "local_step");
    auto index = checked_rows(rows, indices);
    if (step < global_step_) return update_result{};  // stale: dropped, as in apply
    std::visit(
        [&](auto& sums) {
          using T = typename std::decay_t<decltype(sums)>::value_type;
          sums.add(detail::sum_repeated_rows<T>(rows, index, row_size_), row_size_);
        },
        rows_);
    ++count_;
    serve_first_taker();
    return update_result{};
  }

  // The variable row of each gradient row, after checking both tensors.
  std::vector<int64_t> checked_rows(const tensor& rows, const tensor& indices) const {
    if (!rows.valid() || !indices.valid()) fail(where(), "the gradient rows or indices are empty");
    detail::check_index_type(indices.type(), where());
    if (rows.type() != spec_.type ||
        rows.dims() != detail::gathered_rows_shape(indices.dims(), spec_.dims))
      fail(where(), "gradient rows are " + spec_text(rows) + " for indices " +
                        indices.dims().to_string() + ", the accumulator holds rows of " +
                        spec_.to_string());
    return detail::checked_indices(indices, 0, spec_.dims[0], "the accumulator's rows", where());
  }

  reply take(const tensor& num_required, const std::string& who, const step_key& key) {
    auto n = scalar_input<int32_t>(num_required, "num_required");
    if (n < 1) fail(where(), "num_required must be at least 1, got " + std::to_string(n));
    // Takers are served in arrival order: a later one never overtakes.
    if (takers_.empty() && count_ >= n) return take_average();
    if (shut_down_) return failure(who + shut_down_text(n), error_code::cancelled);
    return takers_.hold(make_response_promise(), who, key, {n});
  }

  reply set_global_step(const tensor& new_step) {
    auto step = scalar_input<int64_t>(new_step, "new_global_step");
    // Lower too, as TensorFlow's does (with a warning): a chief restarted
    // from an older checkpoint sets the step back, and must not find every
    // new gradient dropped as stale.
    if (step < global_step_)
      std::cerr << "[accumulator] '" << name_ << "': global step set back from " << global_step_
                << " to " << step << "\n";
    global_step_ = step;
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
    takers_.answer_front(take_average());
  }

  update_result take_average() {
    auto out = sparse_ ? average_rows() : average_dense();
    count_ = 0;
    ++global_step_;
    return out;
  }

  // The average leaves in the sum's own buffer; the next gradient starts a new one.
  update_result average_dense() {
    visit_floating(spec_.type, "conditional_accumulator", [&](auto tag) {
      using T = decltype(tag);
      T* sum = sum_.mutable_data<T>();
      for (int64_t i = 0; i < sum_.num_elements(); ++i) sum[i] /= static_cast<T>(count_);
    });
    update_result out{{std::move(sum_)}, ""};
    sum_ = tensor();
    return out;
  }

  // The rows by ascending variable row, each divided as the dense sum is.
  update_result average_rows() {
    return std::visit(
        [&](auto& sums) {
          using T = typename std::decay_t<decltype(sums)>::value_type;
          std::vector<size_t> order(sums.index.size());
          std::iota(order.begin(), order.end(), size_t{0});
          std::sort(order.begin(), order.end(),
                    [&](size_t a, size_t b) { return sums.index[a] < sums.index[b]; });
          auto n = static_cast<int64_t>(order.size());
          std::vector<int64_t> dims{n};
          dims.insert(dims.end(), spec_.dims.dims().begin() + 1, spec_.dims.dims().end());
          tensor rows(spec_.type, shape(dims));
          tensor indices(dtype::int64, shape{n});
          T* out = rows.mutable_data<T>();
          int64_t* out_index = indices.mutable_data<int64_t>();
          auto width = static_cast<size_t>(row_size_);
          for (size_t k = 0; k < order.size(); ++k) {
            out_index[k] = sums.index[order[k]];
            const T* sum = sums.values.data() + order[k] * width;
            for (size_t j = 0; j < width; ++j) out[k * width + j] = sum[j] / static_cast<T>(count_);
          }
          sums.clear();
          return update_result{{std::move(rows), std::move(indices)}, ""};
        },
        rows_);
  }

  void shut_down() {
    shut_down_ = true;
    takers_.fail_each([&](const take_request& t) { return shut_down_text(t.num_required); },
                      error_code::cancelled);
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
  bool sparse_;
  tensor sum_;  // dense: of the gradients applied since the last take; empty when count_ == 0
  std::variant<row_sums<float>, row_sums<double>> rows_;  // sparse: the same, by row
  int64_t row_size_ = 1;                                  // sparse: elements per variable row
  int32_t count_ = 0;
  int64_t global_step_ = 0;
  waiting_requests<take_request> takers_;  // waiting for enough gradients
  step_cancels cancels_;
  bool shut_down_ = false;
};

}  // namespace

caf::actor spawn_accumulator_actor(caf::actor_system& system, std::string name, tensor_spec spec,
                                   bool sparse) {
  return system.spawn<accumulator_actor>(std::move(name), std::move(spec), sparse);
}

}  // namespace actorflow
