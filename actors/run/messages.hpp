// The runtime's messages. Every type that travels between actors is declared here,
// so the one place that registers message types sees them all.
#pragma once
#include <caf/all.hpp>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/run/tensor_wire.hpp"
#include "actors/trace/step_trace.hpp"
#include "core/op_registry.hpp"
#include "core/tensor.hpp"
#include "devices/accelerator.hpp"
#include "devices/device.hpp"

namespace actorflow {

/// Why a value is dead (control flow); see step_value.
enum class dead_kind : uint8_t {
  plain,     // an untaken branch of a cond, or a dead frame
  not_exit,  // a loop switch's exit output in an iteration that goes on: the exit drops it
  loop_end,  // the body of a loop's last iteration (its predicate was false, or the
             // frame is dead): what gets it learns that the frame ends there
};

/// A value flowing along one edge in one step: a tensor, or the error that
/// stopped an upstream node, or a dead value (control flow: the output of a
/// switch that its predicate did not pick, and everything downstream of one
/// up to a merge). Errors and dead values flow like values, so every node
/// still hears from each of its inputs and drops its per-step state; nothing
/// waits forever, and an untaken branch costs one message per node and no
/// kernel.
struct step_value {
  tensor value;
  std::string error;
  bool dead = false;
  dead_kind why_dead = dead_kind::plain;
  /// Between two nodes of one accelerator: the value in its memory (then
  /// `value` is empty). Never leaves the process: a consumer on another
  /// device gets a host copy in `value` (see devices/accelerator.hpp).
  device_value_ptr on_device;
  /// What kind of failure `error` is (core/error.hpp); it travels with it.
  error_code code = error_code::unknown;
  bool ok() const { return error.empty(); }
  static step_value dead_value(dead_kind why = dead_kind::plain) {
    return step_value{tensor(), std::string(), true, why};
  }
  static step_value failure(std::string error, error_code code) {
    step_value v;
    v.error = std::move(error);
    v.code = code;
    return v;
  }
};

/// Where a value lives inside a step (control flow, ops/control_flow.hpp):
/// the frame of the loop it belongs to and the iteration in it. The step's
/// own frame is 0, iteration 0; an enter opens a child frame, whose id mixes
/// the parent's id and iteration with the loop's (so every enter of one
/// loop in one parent iteration computes the same id, with no table); an
/// exit goes back to `parent`. Parents are shared and never change; a
/// frame entered from the step's own frame has none (the root is implied).
struct frame_tag {
  uint64_t frame = 0;
  uint64_t iteration = 0;
  std::shared_ptr<const frame_tag> parent;
  bool is_root() const { return frame == 0; }
};

/// The message of every edge (with input_atom): a value for input `slot` of
/// its receiver in `step` (and, inside a loop, `tag`). One element rather
/// than several: CAF matches and unpacks a message element by element, and
/// this message is the runtime's hot path, one per node firing.
struct step_input {
  uint64_t step = 0;
  int32_t slot = 0;
  step_value value;
  frame_tag tag;
  /// Which node of the receiving actor it is for: an actor may run several
  /// nodes (a loop's, see node_host.cpp); 0 for most.
  uint32_t member = 0;
  /// A send's value in a traced step: the recv's partition traces the step
  /// from here, since its start may reach its coordinator later.
  bool traced = false;
};

/// What the session hands to a step coordinator: feeds in placeholder order,
/// and the promise that the coordinator fulfils with the fetched values.
struct step_request {
  std::vector<tensor> feeds;
  std::promise<std::vector<tensor>> result;
  /// Called once the step is finished (after the promise is set).
  std::function<void()> on_done;
  /// run_options::trace: the step's timeline, filled before the promise is set.
  bool trace = false;
  std::vector<node_trace> trace_records;
  std::map<std::string, int64_t> clock_offset_ns;  // by remote task

  /// Answers the caller: the fetched values, or an actorflow::error with
  /// `message` and `code`; then on_done.
  void complete(std::vector<tensor> fetched, const std::string& message = "",
                error_code code = error_code::unknown);
};
using step_request_ptr = std::shared_ptr<step_request>;

/// A resource actor's answer to an update op: one tensor per output of the
/// update node (none for an enqueue, one per component for a dequeue), or the
/// error that failed it.
struct update_result {
  std::vector<tensor> values;
  std::string error;
  error_code code = error_code::unknown;  // of the error
  bool ok() const { return error.empty(); }
  static update_result failure(std::string error, error_code code) {
    return update_result{{}, std::move(error), code};
  }
};

/// A partition's answer to a step the cluster client started (start_atom):
/// its fetched values in order, or the first error of the step.
struct step_result {
  std::vector<tensor> values;
  std::string error;
  /// A traced step: the partition's records, on its clock, and when it got
  /// the start and answered (for the client's estimate of the clock offset).
  std::vector<node_trace> trace;
  int64_t received_ns = 0;
  int64_t answered_ns = 0;
  error_code code = error_code::unknown;  // of the error
  bool ok() const { return error.empty(); }
  static step_result failure(std::string error, error_code code) {
    step_result r;
    r.error = std::move(error);
    r.code = code;
    return r;
  }
};

/// The step a request to a resource actor belongs to: the process-wide id of
/// the executable whose node asks, and the step's id there. A resource actor
/// that holds a request (a dequeue on an empty queue) keeps its key, so that
/// a failed or aborted step can cancel it (cancel_atom).
struct step_key {
  uint64_t executable = 0;  // 0: not part of a step (a reader's direct message)
  uint64_t step = 0;
  bool operator==(const step_key&) const = default;
};

struct op_def;
/// Asks a resource actor (a variable's, a queue's) to apply an update op.
struct variable_update {
  const op_def* def = nullptr;
  std::string node_name;
  const attr_map* attrs = nullptr;  // the node plan's, alive as long as the node actor
  std::vector<tensor> inputs;
  step_key key;
};

using input_atom = caf::atom_constant<caf::atom("input")>;    // (step_input)
using read_atom = caf::atom_constant<caf::atom("read")>;      // -> step_value
using update_atom = caf::atom_constant<caf::atom("update")>;  // variable_update -> update_result
// To a resource actor that may hold requests (op_def::may_wait): fail those of
// step (executable, step) with the reason, and refuse the step's later ones.
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;  // (uint64_t, uint64_t, string)
// To a node actor of an executable with loops: forget step (uint64_t), which
// failed; its late messages are dropped (a loop would otherwise run on).
using drop_atom = caf::atom_constant<caf::atom("drop")>;
// To a node of a loop's predicate that holds loop invariants: the frame
// (step, frame) ended with iteration (uint64_t), so it may forget them; the
// last uint32_t names the node within its actor (step_input::member).
using frame_end_atom = caf::atom_constant<caf::atom("frame_end")>;
// A partition's step coordinator, driven by a cluster client (actors/distributed_executable):
using start_atom = caf::atom_constant<caf::atom("start")>;  // (step, vector<tensor> feeds,
                                                            // bool trace) -> step_result
using abort_atom =
    caf::atom_constant<caf::atom("abort")>;  // (step): drop a step that failed elsewhere
// A task server (actors/cluster/task_server.hpp), the entry point of a cluster task:
using hello_atom = caf::atom_constant<caf::atom("hello")>;        // -> task name
using register_atom = caf::atom_constant<caf::atom("register")>;  // see task_server.hpp
using connect_atom = caf::atom_constant<caf::atom("connect")>;    // (id, sends, recvs) -> bool
using release_atom = caf::atom_constant<caf::atom("release")>;    // (id)
using ping_atom = caf::atom_constant<caf::atom("ping")>;          // -> task name
// A queue actor's direct interface (readers and tools, beside the graph's ops):
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;  // vector<tensor> -> update_result
using dequeue_atom = caf::atom_constant<caf::atom("dequeue")>;  // -> update_result
using close_atom = caf::atom_constant<caf::atom("close")>;  // bool cancel_pending -> update_result
using size_atom = caf::atom_constant<caf::atom("size")>;    // -> update_result (int32 scalar)

// A variable actor's checkpoint interface (actors/checkpoint.hpp, via the session):
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;  // -> variable_state
using restore_atom = caf::atom_constant<caf::atom("restore")>;    // variable_state -> bool
// Consistent snapshots across variables (and tasks): a frozen variable holds
// its updates, in order, until thawed (or until the freeze's hold time ends,
// so that a saver that died cannot stop training); reads go on.
using freeze_atom = caf::atom_constant<caf::atom("freeze")>;  // (id, hold ms) -> bool
using thaw_atom = caf::atom_constant<caf::atom("thaw")>;      // (id) -> bool
// A task server's part in a cluster checkpoint (actors/cluster/task_server.hpp):
using snap_prepare_atom = caf::atom_constant<caf::atom("snapprep")>;
using snap_commit_atom = caf::atom_constant<caf::atom("snapcommit")>;
using snap_abort_atom = caf::atom_constant<caf::atom("snapabort")>;
using restore_prepare_atom = caf::atom_constant<caf::atom("restprep")>;
using restore_commit_atom = caf::atom_constant<caf::atom("restcommit")>;
using restore_abort_atom = caf::atom_constant<caf::atom("restabort")>;
using write_atom = caf::atom_constant<caf::atom("write")>;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_trace& x) {
  return f(caf::meta::type_name("actorflow::node_trace"), x.node, x.op, x.device, x.task, x.kind,
           x.thread, x.on_pool, x.ready_ns, x.start_ns, x.end_ns, x.output_bytes, x.inputs,
           x.peer_task, x.frame, x.iteration);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_value& x) {
  return f(caf::meta::type_name("actorflow::step_value"), x.value, x.error, x.dead, x.why_dead,
           x.code);
}

/// On the wire a tag is its path of (frame, iteration) pairs, outermost
/// first; a hostile depth or an unknown dead kind is an error, not a crash.
caf::error save_frame_tag(caf::serializer& sink, frame_tag& x);
caf::error load_frame_tag(caf::deserializer& source, frame_tag& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, frame_tag& x) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    return save_frame_tag(f, x);
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    return load_frame_tag(f, x);
  } else {
    return f(caf::meta::type_name("actorflow::frame_tag"), x.frame, x.iteration);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_input& x) {
  return f(caf::meta::type_name("actorflow::step_input"), x.step, x.slot, x.value, x.tag, x.member,
           x.traced);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("actorflow::step_result"), x.values, x.error, x.trace,
           x.received_ns, x.answered_ns, x.code);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, update_result& x) {
  return f(caf::meta::type_name("actorflow::update_result"), x.values, x.error, x.code);
}

}  // namespace actorflow

// In-process only: these carry pointers and callables.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::step_request_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::variable_update)
// A session snapshots and restores its own variables, in its own process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::variable_state)
