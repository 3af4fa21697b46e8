// A resource table: the actors that own a process's stateful resources
// (variables, queues), found by node name and spawned on first use. A
// session keeps one for its graph; a cluster task keeps one shared by every
// partition registered with it, so the graphs of many workers update the same
// variables.
#pragma once
#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "actors/run/executable.hpp"
#include "actors/run/runtime.hpp"
#include "core/graph.hpp"

namespace actorflow {

class resource_table {
 public:
  explicit resource_table(runtime& rt) : runtime_(rt) {}
  /// Closes the queues (failing their waiting requests) and stops every actor.
  ~resource_table();
  resource_table(const resource_table&) = delete;
  resource_table& operator=(const resource_table&) = delete;

  /// The actor serving resource node `n` (a variable, a fifo_queue, ...),
  /// spawned on first use. Resources are keyed by node name. A variable
  /// spawned here lives on `device` (null: the first device): on a CPU
  /// device its large updates run on the device's threads; on an
  /// accelerator its value and slots live in the device's memory
  /// (resource_for gives that variable). Fails when a variable that lives on
  /// an accelerator is asked for on another device.
  caf::actor actor_for(const node& n, const local_device* device = nullptr);
  /// actor_for, and for a variable on an accelerator the variable itself.
  resource_ref resource_for(const node& n, const local_device* device = nullptr);
  /// Where a variable not spawned yet lives when a restore or a snapshot
  /// spawns it before any step placed it (the session resolves it from its
  /// graph): its device (null: the first) and its declared dtype and shape.
  using home_resolver =
      std::function<const local_device*(const std::string& name, tensor_spec& declared)>;
  void set_home_resolver(home_resolver resolve);
  /// The variable actor of `name`, spawned on first use (on the first device
  /// when it is spawned here, before any step placed it).
  caf::actor variable(const std::string& name);
  /// The variable actor of `name`, or an invalid handle when none was spawned.
  caf::actor find_variable(const std::string& name) const;
  /// Every variable actor spawned so far, by name.
  std::map<std::string, caf::actor> variables() const;
  /// Closes every queue; waiting dequeues (and, with cancel, enqueues) fail.
  void close_queues();

  /// Values and slots of the named variables; throws naming the variables
  /// that are not initialized, or one whose actor does not answer in time.
  std::map<std::string, variable_state> snapshot(const std::vector<std::string>& names,
                                                 std::chrono::milliseconds timeout);
  /// Sets each named variable (spawning its actor) from `states`; throws
  /// naming a variable whose actor does not answer.
  void restore(const std::map<std::string, variable_state>& states,
               std::chrono::milliseconds timeout);

  /// A consistent snapshot across every variable of the table (a cluster
  /// checkpoint's part on one task): freeze holds every variable's updates
  /// (for at most `hold`, so that a saver that died cannot stop training);
  /// snapshot_frozen takes every initialized variable (buffers shared, not
  /// copied; uninitialized ones are left out) and then thaws them. Returns
  /// the number of variables frozen; throws naming one that did not answer.
  size_t freeze(uint64_t id, std::chrono::milliseconds hold, std::chrono::milliseconds timeout);
  std::map<std::string, variable_state> snapshot_frozen(uint64_t id,
                                                        std::chrono::milliseconds timeout);
  /// Ends freeze `id` (a snapshot that was abandoned); the held updates apply.
  void thaw(uint64_t id);

 private:
  struct variable_entry {
    caf::actor actor;
    const local_device* home = nullptr;
    device_variable_ptr on_device;  // set when home is an accelerator
  };
  variable_entry& variable_locked(const std::string& name, const local_device* device,
                                  const tensor_spec& declared);
  // Fails naming the variable unless every state of `states` whose variable
  // lives on an accelerator fits it (before anything is restored).
  void check_device_restores(const std::map<std::string, variable_state>& states);
  // The set ones of `names`, sharing their buffers; the others are named in
  // `uninitialized`. Throws naming a variable whose actor does not answer.
  std::map<std::string, variable_state> initialized_states(const std::vector<std::string>& names,
                                                           std::chrono::milliseconds timeout,
                                                           std::vector<std::string>& uninitialized);

  runtime& runtime_;
  mutable std::mutex mutex_;
  std::map<std::string, variable_entry> variables_;
  home_resolver resolve_home_;
  std::map<std::string, caf::actor> others_;  // queues and other resource actors
};

/// "'a', 'b'": names for error messages.
std::string quoted_list(const std::vector<std::string>& names);

}  // namespace actorflow
