// What actorflow-serve serves, without its network front ends (HTTP and
// gRPC live in apps/lib): one model's versions under a base path, the
// batcher actors in front of them, and the metrics. TensorFlow Serving's
// ServerCore, for one model.
//
//   model_server server({.name = "mnist", .base_path = "/models/mnist"});
//   server.poll();                       // loads the newest version
//   auto r = server.predict({.signature = "serving_default",
//                            .inputs = {{"images", batch}}});
//
// Versions: `base_path` holds one directory per version, named by its
// number (TensorFlow Serving's layout, what export_model writes into). The
// server serves the newest that loads; `poll` (a watcher thread calls it
// every `poll_interval`) loads a newer one when it appears and swaps it in:
// requests that took the old version finish on it (each holds it), new ones
// take the new. A newer version that fails to load (incomplete, corrupted)
// is logged with why and left aside, the old one still serving; it is tried
// again once its files change.
//
// Errors are actorflow::error with TensorFlow's codes, which the front ends
// map to HTTP and gRPC statuses: not_found (no such version or signature),
// invalid_argument (bad inputs), unavailable (no version loaded yet, or the
// batch queue full), deadline_exceeded (a request not answered in time),
// cancelled (the server stopping).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/serving/batcher.hpp"
#include "actors/serving/export.hpp"
#include "actors/serving/serving_metrics.hpp"
#include "core/export.hpp"

namespace actorflow {

class runtime;

struct ACTORFLOW_API model_server_options {
  std::string name;       ///< the model's name in requests (/v1/models/<name>)
  std::string base_path;  ///< holds <version>/ directories
  batching_options batching;
  /// How often the watcher looks for new versions (TF Serving's
  /// --file_system_poll_wait_seconds); zero: only when poll() is called.
  std::chrono::milliseconds poll_interval{1000};
  /// A request not answered in this time fails with deadline_exceeded.
  std::chrono::milliseconds request_timeout{30000};
  /// The runtime the models' sessions run on; null: the process's shared one.
  std::shared_ptr<runtime> rt;
  /// Where the server says what it loads, swaps and refuses (stderr if unset).
  std::function<void(const std::string&)> log;
};

/// TensorFlow Serving's ModelVersionStatus. A version swapped out is
/// UNLOADING while requests hold it, END once the watcher unloaded it (or
/// when it failed to load, with the code and message of why).
struct ACTORFLOW_API version_status {
  /// TensorFlow Serving's numbers (ModelVersionStatus.State).
  enum class state {
    unknown = 0,
    start = 10,
    loading = 20,
    available = 30,
    unloading = 40,
    end = 50
  };
  int64_t version = 0;
  state st = state::start;
  error_code code = error_code::ok;  ///< why a version failed to load
  std::string message;
};
ACTORFLOW_API const char* state_name(version_status::state s);  // "AVAILABLE", ...

struct ACTORFLOW_API predict_request {
  std::optional<int64_t> version;  ///< none: the newest served
  std::string signature = std::string(default_signature_key);
  std::map<std::string, tensor> inputs;
  /// Which outputs to return; empty: all (TF Serving's output_filter).
  std::vector<std::string> output_filter;
};

struct ACTORFLOW_API predict_response {
  int64_t version = 0;
  std::string signature;
  std::map<std::string, tensor> outputs;
};

class ACTORFLOW_API model_server {
 public:
  explicit model_server(model_server_options options);
  /// Stops the watcher, refuses new requests and waits for those in flight.
  ~model_server();
  model_server(const model_server&) = delete;
  model_server& operator=(const model_server&) = delete;

  const std::string& name() const { return options_.name; }
  const model_server_options& options() const { return options_; }
  /// Looks at base_path once: loads and swaps in a newer version. Returns
  /// whether the served version changed.
  bool poll();
  /// Starts the thread that calls poll() every poll_interval.
  void start_watching();

  /// Runs a request on its version (through the batcher when batching is
  /// on), waiting at most request_timeout. Thread-safe.
  predict_response predict(const predict_request& request);
  /// The answer, or the exception that failed the request.
  using predict_callback =
      std::function<void(predict_response response, std::exception_ptr failure)>;
  /// Starts a request and returns at once: `done` gets its answer on the
  /// runtime thread that finished its step, and must not block (no thread
  /// waits meanwhile). Throws at once for a request that cannot start: no
  /// version, an unknown signature, inputs that do not fit, a server stopping.
  void predict_then(const predict_request& request, predict_callback done);
  /// The signatures of `version` (none: the newest) and its number.
  std::pair<int64_t, std::vector<signature_def>> metadata(std::optional<int64_t> version) const;
  /// Every version seen, or the one asked for (not_found if never seen).
  std::vector<version_status> status(std::optional<int64_t> version = std::nullopt) const;
  /// The version served now, if any.
  std::optional<int64_t> serving_version() const;

  serving_metrics& metrics() { return metrics_; }
  /// Refuses new requests (cancelled) and waits until those in flight are
  /// answered or `deadline` passes; returns how many were still in flight.
  int64_t drain(std::chrono::milliseconds deadline);

 private:
  struct servable;
  std::shared_ptr<servable> acquire(std::optional<int64_t> version) const;
  void log(const std::string& line) const;

  model_server_options options_;
  serving_metrics metrics_;
  mutable std::mutex mutex_;
  void release_retired();
  std::shared_ptr<servable> current_;
  // Versions swapped out, kept until their last request is answered, then
  // unloaded by the watcher (poll), not on the thread that answered it.
  std::vector<std::shared_ptr<servable>> retired_;
  std::map<int64_t, version_status> versions_;
  std::map<int64_t, std::string> failed_stamps_;  // files of a version that failed, as last seen
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};
  std::mutex watch_mutex_;
  std::condition_variable watch_wake_;
  std::thread watcher_;
};

}  // namespace actorflow
