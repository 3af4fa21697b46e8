// What each kind of node (node_plan::kind) does once its inputs have come:
// one small class per kind, in the file of its family:
//   kernel_node.cpp     an op's kernel, inline, on its device's pool or on an accelerator
//   transfer_nodes.cpp  placeholders, recvs and sends
//   resource_nodes.cpp  variable reads and the requests to a resource's actor
//   cond_nodes.cpp      a cond's switch and merge
//   loop_nodes.cpp      a loop's enter, exit, switch and merge
//   history_nodes.cpp   a loop gradient's saved forward values
// The runner (actors/run/node_runner.hpp) gathers the values of a firing;
// a behaviour decides what goes on.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "actors/run/messages.hpp"
#include "actors/run/node_plan.hpp"

namespace actorflow {

class node_runner;

/// One firing: a step's (and frame iteration's) values, one per slot.
struct firing {
  uint64_t step;
  const frame_tag& tag;
  step_value* slots;
  size_t num_slots;
};

class node_behaviour {
 public:
  virtual ~node_behaviour() = default;
  /// Takes a value itself instead of letting the runner gather the firing's
  /// values (a merge fires on its first live input); true when it did.
  virtual bool take(node_runner& r, step_input& in) { return false; }
  /// Whether a slot beyond the node's inputs carries a value for take().
  virtual bool accepts_extra_slot(int32_t slot) const { return false; }
  /// Sees every firing as it is, failed and dead inputs too (a send passes
  /// an error on to its peer; a loop's switch ends the loop).
  virtual bool sees_every_firing() const { return false; }
  /// Every input came, each live and none failed (unless sees_every_firing).
  virtual void fire(node_runner& r, firing& f) = 0;
  /// An input failed: the node does not run, and the error goes on.
  virtual void fail(node_runner& r, firing& f, const std::string& error, error_code code);
  /// An input is dead (`first` is slot 0's value): the node does not run,
  /// and a dead value goes on.
  virtual void fire_dead(node_runner& r, firing& f, const step_value& first, dead_kind why);
  /// The device ran launch `id` (kernels on an accelerator).
  virtual void launch_done(node_runner& r, uint64_t id, const std::string& error) {}
  /// Forgets a failed step.
  virtual void drop(node_runner& r, uint64_t step) {}
  /// Lets go of what unfinished steps left (the actor exits).
  virtual void release() {}
};

std::unique_ptr<node_behaviour> make_kernel_node();
std::unique_ptr<node_behaviour> make_feed_node(bool recv);
std::unique_ptr<node_behaviour> make_send_node();
std::unique_ptr<node_behaviour> make_variable_read_node();
std::unique_ptr<node_behaviour> make_resource_update_node();
std::unique_ptr<node_behaviour> make_switch_node();
std::unique_ptr<node_behaviour> make_merge_node();
std::unique_ptr<node_behaviour> make_enter_node();
std::unique_ptr<node_behaviour> make_exit_node();
std::unique_ptr<node_behaviour> make_loop_switch_node();
std::unique_ptr<node_behaviour> make_loop_merge_node();
std::unique_ptr<node_behaviour> make_history_push_node();
std::unique_ptr<node_behaviour> make_history_read_node();

/// The behaviour of the plan's kind.
std::unique_ptr<node_behaviour> make_node_behaviour(const node_plan& plan);

/// What the dead values a node sends say: a loop's last iteration passes on
/// as such, so that every node of the body learns where its frame ends.
dead_kind passed_on(const step_value* slots, size_t num_slots);

/// A predicate's check, shared by a cond's switch and a loop's (cond_nodes.cpp).
bool is_scalar_bool(const tensor& pred);
/// "node '...' (...): the predicate must be a scalar bool, not ...".
std::string predicate_error(const node_plan& plan, const tensor& pred);

}  // namespace actorflow
