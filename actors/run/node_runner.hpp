// One node of a host actor (node_host.cpp): it gathers the node's input
// values per step (and, in a loop, per frame and iteration), holds a loop's
// invariants once per frame, and hands each complete firing to the
// behaviour of its kind (actors/run/nodes/).
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/run/node_output.hpp"
#include "actors/run/node_plan.hpp"
#include "actors/run/nodes/node_behaviour.hpp"

namespace actorflow {

/// Loop state node actors hold in this process (per-iteration inputs,
/// per-frame invariants): counted for loop_states_held().
extern std::atomic<int64_t> loop_states;

/// Where a node's pending inputs wait: one step, and inside a loop one
/// iteration of one frame.
struct pending_key {
  uint64_t step, frame, iteration;
  bool operator==(const pending_key&) const = default;
};
struct pending_key_hash {
  size_t operator()(const pending_key& k) const {
    return std::hash<uint64_t>()(k.step * 0x9e3779b97f4a7c15ULL ^ k.frame ^ (k.iteration << 32));
  }
};

/// Erases `key` from a map of loop state, counting it out of loop_states
/// when it lived in a loop's frame.
template <class Map, class Key>
void erase_counted(Map& map, const Key& key, bool counted) {
  if (map.erase(key) > 0 && counted) --loop_states;
}

class node_runner {
 public:
  node_runner(node_host_base* host, node_plan_ptr plan, uint32_t member);

  size_t batch_limit() const { return plan_ ? plan_->batch_limit : 0; }
  /// Whether a message may fill `slot`: one of the node's input slots, or
  /// one its behaviour takes itself (a history read's saved value, a loop
  /// merge's value let through by its gate).
  bool accepts_slot(int32_t slot) const;
  void on_input(step_input& in);
  /// The device actor ran launch `id` (error: a fault of the device or its
  /// stream); its outputs go on, or the error.
  void launch_done(uint64_t id, const std::string& error);
  /// A frame of the step ended with iteration `last`: its invariants may go.
  void frame_ended(uint64_t step, uint64_t frame, uint64_t last);
  /// Forgets a failed step (its host drops its late messages).
  void drop(uint64_t step);
  /// A loop's back edge makes its actors hold one another through their
  /// plans: let go of the plan (and any state of unfinished steps) when the
  /// actor exits, or none of them would ever be freed.
  void release();

  // ---- for the behaviours ----
  node_host_base* host() const { return host_; }
  const node_plan& plan() const { return *plan_; }
  const node_plan_ptr& plan_ptr() const { return plan_; }
  uint32_t member() const { return member_; }
  /// Sends outputs (or the error) to every consumer.
  void emit(uint64_t step, const frame_tag& tag, std::vector<tensor>& outputs,
            const std::string& error = "", error_code code = error_code::unknown) {
    actorflow::emit(host_, *plan_, step, tag, outputs, error, code);
  }
  /// Sends one output on.
  void emit_value(uint64_t step, const frame_tag& tag, tensor value);
  /// Sends the error on, from no output.
  void emit_error(uint64_t step, const frame_tag& tag, const std::string& error, error_code code);
  void emit_dead(uint64_t step, const frame_tag& tag, dead_kind why) {
    actorflow::emit_dead(host_, *plan_, step, tag, why);
  }
  /// A scratch vector for outputs, empty between firings.
  std::vector<tensor>& outputs() { return outputs_; }
  /// Data input `i` of the op: its folded constant, or the value that came.
  tensor take_input(int i, step_value* slots, size_t num_slots) const;
  /// Data input `i` just as it came: a host tensor or a value in an
  /// accelerator's memory (what control flow passes on), or its constant.
  step_value take_carried(int i, step_value* slots, size_t num_slots) const;
  /// Sends `first` on as it came (see actorflow::emit_carried).
  void emit_carried(uint64_t step, const frame_tag& tag, step_value first,
                    const tensor& second = tensor()) {
    actorflow::emit_carried(host_, *plan_, step, tag, std::move(first), second);
  }
  /// The op's inputs in order, the folded constants and the values that
  /// came, in a vector kept between firings (see release_arrived_inputs).
  std::vector<tensor>& fill_inputs(step_value* slots, size_t num_slots);

 private:
  struct pending {
    std::vector<step_value> slots;
    size_t remaining = 0;
    frame_tag tag;
  };
  // A frame's loop invariants at this node, and the iterations waiting for them.
  struct frame_state {
    std::vector<step_value> invariants;  // by slot
    size_t missing = 0;
    std::vector<std::pair<frame_tag, std::vector<step_value>>> parked;
    uint64_t fired = 0;
    int64_t last = -1;  // the frame's last iteration, once known
  };
  struct frame_key {
    uint64_t step, frame;
    bool operator==(const frame_key&) const = default;
  };
  struct frame_key_hash {
    size_t operator()(const frame_key& k) const {
      return std::hash<uint64_t>()(k.step * 0x9e3779b97f4a7c15ULL ^ k.frame);
    }
  };

  std::vector<step_value> spare_slots();
  void recycle(std::vector<step_value>&& slots);
  frame_state& frame_of(uint64_t step, uint64_t frame);
  void invariant_input(uint64_t step, const frame_tag& tag, size_t slot, step_value&& v);
  void fire_with_invariants(uint64_t step, frame_tag tag, std::vector<step_value> slots);
  void forget_if_done(uint64_t step, uint64_t frame, const frame_state& f);
  void fire(uint64_t step, const frame_tag& tag, step_value* slots, size_t num_slots);

  node_host_base* host_;
  node_plan_ptr plan_;
  uint32_t member_;
  std::unique_ptr<node_behaviour> behaviour_;
  // Reused by every firing (an actor handles one message at a time), so that
  // a cheap node allocates no vectors per step. Between messages outputs_ is
  // empty and inputs_ holds only the folded constants.
  std::vector<tensor> inputs_;
  std::vector<tensor> outputs_;
  std::unordered_map<pending_key, pending, pending_key_hash> pending_;
  std::unordered_map<frame_key, frame_state, frame_key_hash> frames_;
  static constexpr size_t max_spare_slots = 8;
  std::vector<std::vector<step_value>> spare_slots_;
};

}  // namespace actorflow
