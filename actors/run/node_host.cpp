// The actor of one or more nodes (spawn_node_host): most nodes have one of
// their own; a loop's run together in one, where a value between two of its
// nodes waits in the host's local queue and is handled in the same turn
// instead of travelling as a CAF message. Each node is a node_runner.
#include <algorithm>
#include <utility>

#include "actors/run/cancelled_steps.hpp"
#include "actors/run/node_runner.hpp"

namespace actorflow {

namespace {

// Values between the nodes of one host handled in one turn of the actor:
// a loop of many iterations runs in turns of this many, so that a drop of
// its step, or another step's values, get their turn in between.
constexpr size_t local_values_per_turn = 512;

using drain_atom = caf::atom_constant<caf::atom("drain")>;  // to itself: go on with local values

class node_host : public node_host_base {
 public:
  node_host(caf::actor_config& cfg, std::vector<node_plan_ptr> members) : node_host_base(cfg) {
    runners_.reserve(members.size());  // runners stay put: callbacks hold them
    for (size_t i = 0; i < members.size(); ++i)
      runners_.emplace_back(this, std::move(members[i]), static_cast<uint32_t>(i));
  }

  void on_exit() override {
    for (auto& r : runners_) r.release();
    local_.clear();
    caf::event_based_actor::on_exit();
  }

  resume_result resume(caf::execution_unit* worker, size_t max_throughput) override {
    size_t limit = runners_.size() == 1 ? runners_[0].batch_limit() : 0;
    return caf::event_based_actor::resume(
        worker, limit > 0 ? std::min(limit, max_throughput) : max_throughput);
  }

  caf::behavior make_behavior() override {
    return {
        // Nothing answers an edge message. A handler returning void makes CAF
        // build a response promise for every message only to find no one to
        // answer (~150 instructions, 6% of a pipelined firing); `delegated`
        // tells it that there is no response to make here.
        [this](input_atom, step_input& in) -> caf::delegated<void> {
          handle(in);
          drain_local();
          return {};
        },
        [this](drain_atom) {
          drain_scheduled_ = false;
          drain_local();
        },
        [this](drop_atom, uint64_t step) {
          dropped_.add(step);
          for (auto& r : runners_) r.drop(step);
        },
        [this](gpu::gpu_done_atom, uint64_t id, const std::string& error) {
          uint32_t member = accelerator_launches::member_of(id);
          if (member < runners_.size()) runners_[member].launch_done(id, error);
          drain_local();
        },
        [this](frame_end_atom, uint64_t step, uint64_t frame, uint64_t last, uint32_t member) {
          if ((dropped_.size() != 0 && dropped_.contains(step)) || member >= runners_.size())
            return;
          runners_[member].frame_ended(step, frame, last);
        },
    };
  }

  void drain_local() override {
    for (size_t n = 0; n < local_values_per_turn && !local_.empty(); ++n) {
      step_input in = std::move(local_.front());
      local_.pop_front();
      handle(in);
    }
    if (!local_.empty() && !drain_scheduled_) {
      drain_scheduled_ = true;
      send(this, drain_atom::value);
    }
  }

 private:
  // A value for one of its nodes. Values from another process reach only a
  // recv's host: one that names no node or slot of this host is dropped.
  void handle(step_input& in) {
    if (dropped_.size() != 0 && dropped_.contains(in.step)) return;
    if (in.member >= runners_.size()) return;
    auto& runner = runners_[in.member];
    if (runner.accepts_slot(in.slot)) runner.on_input(in);
  }

  std::vector<node_runner> runners_;
  aborted_steps dropped_;
  bool drain_scheduled_ = false;
};

}  // namespace

int64_t loop_states_held() { return loop_states.load() + loop_history::entries_held_in_process(); }

caf::actor spawn_node_host(caf::actor_system& system, std::vector<node_plan_ptr> members) {
  return system.spawn<node_host>(std::move(members));
}

}  // namespace actorflow
