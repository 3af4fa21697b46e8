// A session runs a graph: `run(feeds, fetches, targets)` compiles the signature
// once (prune, place, spawn actors), caches it, and runs one step per call.
// Many threads may call run at once; their steps are in flight together and
// share the session's variables.
#pragma once
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/compile/placement_entry.hpp"
#include "actors/trace/step_trace.hpp"
#include "core/export.hpp"
#include "core/graph.hpp"
#include "core/op_registry.hpp"

// What session.hpp names of the runtime, declared only: an application that
// builds and runs graphs includes nothing of CAF or TBB through it.
namespace caf {
class actor;
}

namespace actorflow {

class runnable;
class cluster_connection;
class runtime;
class resource_table;
struct local_device;
struct run_signature;
struct step_request;

using feed_list = std::vector<std::pair<output, tensor>>;

struct ACTORFLOW_API session_options {
  /// Rewrite each signature's graph before its actors are spawned: fold
  /// constants, remove common subexpressions and pass-throughs, fuse layers
  /// (actors/compile/graph_optimizer.hpp). Results are those of the graph as built,
  /// up to float rounding; node names in traces and placement logs are those
  /// of the nodes that remain (a fused layer carries its last op's name).
  bool optimize = true;
};

class ACTORFLOW_API session {
 public:
  /// The graph must outlive the session; nodes may still be added to it
  /// between runs, but not while a run is being compiled.
  /// A session on the process's shared runtime (runtime::shared()).
  explicit session(graph& g, session_options options = {});
  /// A session on `rt` (actors/run/runtime.hpp: devices, threads, tuning).
  session(graph& g, std::shared_ptr<runtime> rt, session_options options = {});
  /// A session in a cluster: nodes placed on other tasks ("/job:ps/task:0")
  /// run in those tasks' processes (actors/cluster/distributed_executable.hpp); the
  /// rest, and every node without a job, run here, in `cluster`'s local task.
  session(graph& g, std::shared_ptr<cluster_connection> cluster, session_options options = {});
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  /// Runs one step: returns the fetched tensors in order. Throws
  /// actorflow::error for a bad signature or feed, or when a kernel fails
  /// (the message names the node); the session stays usable.
  std::vector<tensor> run(const feed_list& feeds, const std::vector<output>& fetches,
                          const std::vector<operation>& targets = {});
  /// The same with options (TensorFlow's RunOptions and RunMetadata):
  /// run_options{.trace = true} fills `metadata` (when given) with the
  /// step's timeline, also when the step fails (then it throws after).
  std::vector<tensor> run(const run_options& options, const feed_list& feeds,
                          const std::vector<output>& fetches, const std::vector<operation>& targets,
                          run_metadata* metadata);
  /// Runs one step for one fetch.
  tensor eval(output fetch, const feed_list& feeds = {});
  /// Targets only (initializers, train ops).
  void run(const std::vector<operation>& targets);
  /// Starts a step and returns at once; for pipelining steps.
  std::future<std::vector<tensor>> run_async(const feed_list& feeds,
                                             const std::vector<output>& fetches,
                                             const std::vector<operation>& targets = {});
  /// Starts a step and returns at once; `done` gets its fetched values, or
  /// the exception that failed it, on the runtime thread that finished it
  /// (so no thread waits for the step: `done` must not block). Throws, as
  /// run does, for a bad signature or feed, before any step starts.
  using step_callback =
      std::function<void(std::vector<tensor> fetched, std::exception_ptr failure)>;
  void run_then(const feed_list& feeds, const std::vector<output>& fetches, step_callback done);
  /// The same with names ("x", "softmax:1", "train"), for tools and loaded graphs.
  std::vector<tensor> run_by_name(const std::vector<std::pair<std::string, tensor>>& feeds,
                                  const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets = {});

  /// The actor of `queue` (a fifo_queue output), spawned on first use; a
  /// reader actor (actors/input/reader_actor.hpp) enqueues to it directly. At
  /// destruction the session closes its queues, cancelling waiting enqueues,
  /// so that no step or reader waits on them forever.
  caf::actor queue_actor(output queue);

  graph& owner() { return graph_; }
  /// The cluster this session runs in; null for a session of one process.
  const std::shared_ptr<cluster_connection>& cluster() const { return cluster_; }
  runtime& rt() { return *runtime_; }
  /// The runtime, shared: for helpers whose actors must not outlive it (readers).
  std::shared_ptr<runtime> shared_rt() const { return runtime_; }
  /// Compiled signatures so far.
  size_t num_executables() const;
  /// Where this process runs each node of the signatures compiled so far,
  /// and why (actors/compile/placement.hpp): one entry per node, in graph order.
  std::vector<placement_entry> placement_log() const;

  /// Every variable of the graph, by name: its value and optimizer slots
  /// (sharing their buffers; updates copy before writing one that is shared).
  /// Throws naming the variables that are not initialized, or one whose actor
  /// does not answer within `timeout`. Take it between steps: a step in flight
  /// may update some variables before their snapshot and others after.
  /// (actors/session_variables.cpp; checkpoints use it, actors/checkpoint.hpp.)
  std::map<std::string, variable_state> snapshot_variables(
      std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// Sets every variable of the graph, value and slots, from `states`, all or
  /// nothing: first checks that each variable of the graph is there with the
  /// graph's dtype and shape (throws naming every variable that is missing or
  /// differs, with both shapes) and changes nothing if one is not; then spawns
  /// the variable actors not yet spawned and restores each. Entries that name
  /// no variable of the graph are ignored. Run it between steps.
  void restore_variables(const std::map<std::string, variable_state>& states,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  const local_device* home_of(const std::string& name, tensor_spec& declared) const;
  std::future<std::vector<tensor>> start(std::shared_ptr<step_request> request,
                                         const feed_list& feeds, const std::vector<output>& fetches,
                                         const std::vector<operation>& targets);
  // Checks the feeds, compiles and starts the step; the request's on_done
  // (if set) runs after the session's own bookkeeping.
  void launch(std::shared_ptr<step_request> request, const feed_list& feeds,
              const std::vector<output>& fetches, const std::vector<operation>& targets);
  std::shared_ptr<const runnable> compile(const feed_list& feeds,
                                          const std::vector<output>& fetches,
                                          const std::vector<operation>& targets);

  graph& graph_;
  std::shared_ptr<runtime> runtime_;
  session_options options_;
  mutable std::mutex mutex_;
  std::shared_ptr<runnable> build(const run_signature& sig);
  std::shared_ptr<runnable> build_on(const graph& g, const run_signature& sig);

  std::shared_ptr<cluster_connection> cluster_;
  std::map<std::string, std::shared_ptr<const runnable>> executables_;
  std::unique_ptr<resource_table> resources_;
  std::shared_ptr<std::atomic<int64_t>> in_flight_;
};

}  // namespace actorflow
