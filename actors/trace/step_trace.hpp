// Step timelines (TensorFlow's RunOptions.trace_level and RunMetadata.step_stats):
// a step run with run_options{.trace = true} records, for every node that ran,
// when it had its inputs, when its kernel (or its request to a resource actor,
// or its launch on an accelerator) started and ended, on which thread or
// device, and the bytes of its outputs; sends and recvs also name the task at
// the other end. session::run returns them in run_metadata.
//
// How it works: the step's coordinator registers a collector under
// (executable id, step id) while the step runs; a firing looks it up only
// when some traced step is in flight anywhere in the process (one relaxed
// atomic load otherwise), so untraced steps cost nothing measurable. A
// partition in another process traces the step when the client's start asks
// it to, and returns its records with its result; the client brings them onto
// its own clock (see clock_offset_ns).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/export.hpp"

namespace actorflow {

/// Per call of session::run (TensorFlow's RunOptions).
struct ACTORFLOW_API run_options {
  /// Record a timeline of the step into run_metadata.
  bool trace = false;
};

/// How a node's work appears on the timeline.
enum class trace_kind : uint8_t {
  kernel,    // ran on a thread: an actor's (CAF worker) or a device pool's (TBB)
  device,    // launched on an accelerator: from the launch to its completion
  resource,  // a request to a resource actor (variable read or update, queue op)
  send,      // a value leaving for another task
  recv,      // a value arriving from another task
  last = recv
};

/// One firing of one node in a traced step. Times are steady-clock
/// nanoseconds; in run_metadata they are on the calling process's clock.
struct ACTORFLOW_API node_trace {
  std::string node;
  std::string op;
  std::string device;  // "/cpu:0", "/gpu:0", ...
  std::string task;    // in a cluster, the task it ran on; else empty
  trace_kind kind = trace_kind::kernel;
  /// The OS thread a kernel ran on, and whether it was an actor's thread (a
  /// CAF worker: cheap kernels run inline) or its device's pool (TBB).
  uint64_t thread = 0;
  bool on_pool = false;
  int64_t ready_ns = 0;  // the node had all its inputs
  int64_t start_ns = 0;  // its kernel started (or its request, launch, send left)
  int64_t end_ns = 0;    // its kernel ended (or the answer, completion, value came)
  int64_t output_bytes = 0;
  /// The nodes whose values (or control edges) it waited for: the timeline's
  /// flow arrows. A recv's is the send at the other end.
  std::vector<std::string> inputs;
  std::string peer_task;  // send/recv: the task at the other end
  uint64_t frame = 0;     // inside a loop: its frame and iteration
  uint64_t iteration = 0;
};

/// What a traced step returns beside its fetches (TensorFlow's RunMetadata).
struct ACTORFLOW_API run_metadata {
  int64_t start_ns = 0;  // session::run was called
  int64_t end_ns = 0;    // its result was ready
  std::vector<node_trace> nodes;
  /// Each remote task's estimated clock offset (its clock minus ours), already
  /// taken off its nodes' times.
  std::map<std::string, int64_t> clock_offset_ns;
};

namespace detail {
extern std::atomic<int64_t> traced_steps;  // in flight in this process
}
/// Whether any step in this process is traced now: the firings' fast path,
/// inline so that an untraced firing pays one relaxed load and no call.
inline bool any_step_traced() { return detail::traced_steps.load(std::memory_order_relaxed) != 0; }

/// Steady-clock nanoseconds: the timelines' clock.
ACTORFLOW_API int64_t trace_now_ns();
/// The calling thread's OS id (gettid), cached per thread.
ACTORFLOW_API uint64_t trace_thread_id();

/// The records of one traced step, filled from any thread.
class ACTORFLOW_API step_trace {
 public:
  void add(node_trace&& t);
  std::vector<node_trace> take();

 private:
  std::mutex mutex_;
  std::vector<node_trace> nodes_;
};
using step_trace_ptr = std::shared_ptr<step_trace>;

/// Starts collecting the firings of (executable, step).
ACTORFLOW_API void begin_step_trace(uint64_t executable, uint64_t step);
/// Stops and returns what was collected (nothing if it was not traced).
ACTORFLOW_API std::vector<node_trace> end_step_trace(uint64_t executable, uint64_t step);
/// Drops collectors begun over a minute ago: a recv that began one for a
/// value arriving after its step was aborted leaves one no coordinator ends.
ACTORFLOW_API void forget_stale_step_traces();
/// The collector of (executable, step), or null (at once when nothing in
/// the process is traced).
inline step_trace_ptr find_step_trace(uint64_t executable, uint64_t step);
/// Traced steps in flight in this process (0 once every one ended).
inline int64_t traced_steps_in_flight() { return detail::traced_steps.load(); }
/// find_step_trace's lookup, once some step is traced.
ACTORFLOW_API step_trace_ptr find_traced_step(uint64_t executable, uint64_t step);
inline step_trace_ptr find_step_trace(uint64_t executable, uint64_t step) {
  return any_step_traced() ? find_traced_step(executable, step) : nullptr;
}

/// The offset of a remote clock from ours, from one round trip: we sent at
/// `sent` and heard back at `heard` (our clock); it got the request at
/// `received` and answered at `answered` (its clock). NTP's estimate: the
/// mid-points of the two intervals coincide.
ACTORFLOW_API int64_t clock_offset_ns(int64_t sent, int64_t received, int64_t answered,
                                      int64_t heard);

}  // namespace actorflow
