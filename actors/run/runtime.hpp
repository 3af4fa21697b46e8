// The runtime: one CAF actor system and the devices of a process (one or
// more CPU devices, each a TBB arena with its own threads), shared by the
// process's sessions.
#pragma once
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <caf/all.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "devices/accelerator.hpp"
#include "devices/cpu/cpu_device.hpp"
#include "devices/local_device.hpp"

namespace actorflow {

struct runtime_config;  // actors/caf_ext/runtime_config.hpp
struct device_rate;     // actors/compile/cost_model.hpp

/// Mutual TLS for the connections between cluster tasks (CAF's OpenSSL
/// module): this process's certificate and private key, and the CA file that
/// every peer's certificate must chain to, all PEM files. Each side checks the
/// other's certificate. All empty: plain TCP.
struct ACTORFLOW_API tls_files {
  std::string certificate;
  std::string key;
  std::string ca_file;
  bool enabled() const { return !certificate.empty() || !key.empty() || !ca_file.empty(); }
};

struct ACTORFLOW_API runtime_options {
  /// CAF scheduler threads (actor message handling); 0 means one per core.
  int scheduler_threads = 0;
  /// CPU devices ("/cpu:0", "/cpu:1", ...), each a TBB arena with threads of
  /// its own: nodes placed on different ones run their kernels on different
  /// threads (model parallelism inside a process). At least 1.
  int cpu_devices = 1;
  /// Threads of each CPU device's arena (kernels); 0 divides the cores among
  /// the CPU devices (at least one each). The scheduler's threads and the
  /// arenas' rarely run at once: actors hand long kernels to an arena and go
  /// idle, so the default of one each per core does not oversubscribe in
  /// practice; lower either to share a machine.
  int compute_threads = 0;
  /// GPUs ("/gpu:0", ...) this runtime offers placement: -1 every one the
  /// process sees (none in a build without CUDA), else at most this many.
  /// A GPU is opened (streams, handles) only when a node first runs on it.
  int gpus = -1;
  /// Accelerator stand-ins ("/stand_in:0", ...): devices with the GPU's
  /// protocol and no GPU (devices/stand_in/stand_in_device.hpp), for
  /// testing placement and execution on an accelerator anywhere.
  int stand_in_devices = 0;
  /// Each stand-in's memory, in bytes (0: no limit).
  size_t stand_in_memory_bytes = 0;
  /// Nodes without a device hint go where the cost model expects the step
  /// to finish them soonest (actors/compile/cost_model.hpp), instead of to /cpu:0.
  /// The devices' rates are measured when a signature first needs them.
  bool cost_model_placement = false;
  /// 50-us naps an idle CAF worker takes before it sleeps until a message
  /// wakes it (CAF's default is 500, i.e. 25 ms of naps). A message from a
  /// kernel thread to a napping worker waits out the nap, which cost a
  /// 0.65 ms matmul step a third of its speed; sleeping at once instead adds
  /// one wake-up to each step's start (the 1000-node chain: 0.75 -> 1.0 us per
  /// node). One nap measured best for both; 0 favours big kernels. A serving
  /// process was tried at 0 too: one request at a time came 30-50 us sooner
  /// (its in-process floor 40 sooner), but under open load at 80% of the peak
  /// p99 rose to 3.1-3.7x p50 from 2.5-2.8x, so actorflow-serve keeps one.
  int idle_naps = 1;
  /// CAF threads that decode messages arriving from other processes; -1 keeps
  /// CAF's default (one on a small machine), 0 decodes them on the network
  /// thread itself, which saves a thread hand-off on every hop of a step.
  int network_workers = -1;
  /// Microseconds an idle thread keeps polling before it blocks: the network
  /// thread after each event (actors/caf_ext/network_backend.hpp), a scheduler thread
  /// once out of work. Each hop of a distributed step otherwise waits for
  /// threads to wake: the network thread of the sending process, that of
  /// the receiving one, and the scheduler thread that runs the receiver.
  /// The polling yields the core to any thread that wants it. 0 blocks at
  /// once, as CAF does.
  int idle_spin_us = 0;
  /// Microseconds an idle scheduler thread keeps polling while kernels run on
  /// the CPU device's pool: the message a kernel sends when it ends then
  /// finds it awake (the LSTM LM: 7% more words/s on 2 cores, in alternating
  /// runs of actorflow-train; lstm_lm_words_per_s is its bench row). Steps of
  /// small kernels, which never reach the pool, are not affected (polling
  /// after every small step slowed a step of 10 scalar adds from 6 to 14 us).
  int kernel_wait_spin_us = 100;
  /// TLS for cluster connections; a runtime with TLS publishes and connects
  /// only through it.
  tls_files tls;
  /// The cluster secret: every plain connection this runtime accepts or
  /// makes opens with a mutual proof of it, before CAF sees a byte
  /// (actors/caf_ext/guarded_connection.hpp). Empty: none. Not with TLS, whose
  /// certificates authenticate the connections.
  std::string secret;
  /// Time a new connection has to complete its handshakes before it is closed.
  int handshake_timeout_ms = 10000;
  /// The largest message a connected peer may send (a tensor's bytes plus a
  /// few hundred); a larger one closes the connection. BASP's own limit is
  /// 4 GiB - 1.
  uint64_t max_message_bytes = uint64_t{1} << 30;
};

class ACTORFLOW_API runtime {
 public:
  explicit runtime(runtime_options options = {});
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  /// The process-wide runtime with default options, made on first use.
  static std::shared_ptr<runtime> shared();

  caf::actor_system& system() { return *system_; }
  /// This process's devices, CPU devices first ("/cpu:0" at index 0).
  const std::vector<local_device>& devices() const { return devices_; }
  /// The device of `type` ("cpu") and `index`, or nullptr.
  const local_device* find_device(const std::string& type, int index) const;
  const runtime_options& options() const { return options_; }
  /// Each device's measured rates (actors/compile/cost_model.hpp), in devices()'s
  /// order: measured on the first call (milliseconds), then remembered.
  const std::vector<device_rate>& device_rates();

 private:
  void add_accelerator(std::shared_ptr<accelerator> device, const std::string& type, int index);

  runtime_options options_;
  // TBB allows hardware_concurrency - 1 workers by default, counting on the
  // caller to join; enqueued kernels have no joining caller, so the runtime
  // allows one more worker for as long as it lives.
  std::unique_ptr<tbb::global_control> worker_limit_;
  std::vector<std::unique_ptr<tbb::task_arena>> arenas_;  // one per CPU device
  std::unique_ptr<runtime_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  std::vector<cpu_device> cpu_devices_;
  std::vector<std::shared_ptr<accelerator>> accelerators_;
  std::vector<gpu::gpu_device> accelerator_actors_;
  std::vector<local_device> devices_;
  std::once_flag rates_measured_;
  std::vector<device_rate> rates_;
};

}  // namespace actorflow
