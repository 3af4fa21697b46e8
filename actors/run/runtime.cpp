#include "actors/run/runtime.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/manager.hpp>
#include <fstream>
#include <mutex>
#include <thread>

#include "actors/caf_ext/network_backend.hpp"
#include "actors/caf_ext/runtime_config.hpp"
#include "actors/caf_ext/scheduler.hpp"
#include "actors/caf_ext/tls_error_queue.hpp"
#include "actors/compile/cost_model.hpp"
#include "actors/run/messages.hpp"
#include "core/error.hpp"
#include "devices/cpu/cpu_device.hpp"
#include "devices/cuda/cuda_accelerator.hpp"
#include "devices/cuda/gpu_support.hpp"
#include "devices/stand_in/stand_in_device.hpp"

namespace actorflow {

namespace {

int default_threads(int requested) {
  if (requested > 0) return requested;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// All three files must be given and readable: CAF would otherwise fail each
// handshake later with an error that does not say which file is wrong.
void check_tls_files(const tls_files& tls) {
  for (auto [path, what, flag] : {std::tuple{&tls.certificate, "certificate", "--tls-cert"},
                                  std::tuple{&tls.key, "private key", "--tls-key"},
                                  std::tuple{&tls.ca_file, "CA file", "--tls-ca"}}) {
    if (path->empty())
      fail("runtime", std::string("TLS needs a certificate, a private key and a CA file; the ") +
                          what + " (" + flag + ") is missing");
    if (!std::ifstream(*path))
      fail("runtime", std::string("cannot read the TLS ") + what + " '" + *path + "'");
  }
}

connection_limits connection_limits_of(const runtime_options& options) {
  if (!options.secret.empty() && options.tls.enabled())
    fail("runtime",
         "give a cluster secret or TLS files, not both: TLS authenticates every "
         "connection by its certificate (and encrypts it)");
  if (options.handshake_timeout_ms < 100 || options.handshake_timeout_ms > 600000)
    fail("runtime", "the handshake timeout must be 100 to 600000 ms, not " +
                        std::to_string(options.handshake_timeout_ms));
  constexpr uint64_t basp_limit = 0xffffffffu;
  if (options.max_message_bytes < (uint64_t{1} << 20) || options.max_message_bytes > basp_limit)
    fail("runtime", "the message bound must be 1 MiB to 4 GiB - 1, not " +
                        std::to_string(options.max_message_bytes) + " bytes");
  connection_limits limits;
  limits.secret = options.secret;
  limits.handshake_timeout = std::chrono::milliseconds(options.handshake_timeout_ms);
  limits.max_message_bytes = options.max_message_bytes;
  return limits;
}

}  // namespace

runtime::runtime(runtime_options options) : options_(options) {
  if (options_.cpu_devices < 1 || options_.cpu_devices > 256)
    fail("runtime", "cpu_devices must be 1 to 256, not " + std::to_string(options_.cpu_devices));
  if (options_.compute_threads < 0) fail("runtime", "compute_threads must be >= 0");
  if (options_.stand_in_devices < 0 || options_.stand_in_devices > 64)
    fail("runtime",
         "stand_in_devices must be 0 to 64, not " + std::to_string(options_.stand_in_devices));
  options_.scheduler_threads = default_threads(options.scheduler_threads);
  options_.compute_threads = options.compute_threads > 0
                                 ? options.compute_threads
                                 : std::max(1, default_threads(0) / options_.cpu_devices);
  if (options_.idle_naps < 0) fail("runtime", "idle_naps must be >= 0");
  if (options_.idle_spin_us < 0) fail("runtime", "idle_spin_us must be >= 0");
  if (options_.kernel_wait_spin_us < 0) fail("runtime", "kernel_wait_spin_us must be >= 0");
  // TBB allows hardware_concurrency - 1 workers by default, counting on the
  // caller to join; enqueued kernels have no joining caller, so the runtime
  // allows one more worker for as long as it lives.
  int compute_total = options_.compute_threads * options_.cpu_devices;
  worker_limit_ = std::make_unique<tbb::global_control>(
      tbb::global_control::max_allowed_parallelism, static_cast<size_t>(compute_total) + 1);
  // Each device's compute threads' slots take the kernels that arrive by
  // enqueue; a slot more per scheduler thread lets an actor that runs kernels
  // on its own thread (a loop's) join the arena, so that the work such a
  // kernel splits goes to the compute threads where they are (the LSTM LM's
  // words/s, in alternating runs of actorflow-train: +2.5%).
  for (int d = 0; d < options_.cpu_devices; ++d)
    arenas_.push_back(
        std::make_unique<tbb::task_arena>(options_.compute_threads + options_.scheduler_threads,
                                          static_cast<unsigned>(options_.scheduler_threads)));
  config_ = std::make_unique<runtime_config>();
  config_->idle_spin = std::chrono::microseconds(options_.idle_spin_us);
  config_->kernel_wait_spin = std::chrono::microseconds(options_.kernel_wait_spin_us);
  config_->connections = connection_limits_of(options_);
  load_actorflow_scheduler(*config_);
  config_->set("scheduler.max-threads", static_cast<size_t>(options_.scheduler_threads));
  config_->set("work-stealing.moderate-poll-attempts", static_cast<size_t>(options_.idle_naps));
  config_->add_message_type<tensor>("actorflow::tensor");
  config_->add_message_type<step_value>("actorflow::step_value");
  config_->add_message_type<step_input>("actorflow::step_input");
  config_->add_message_type<update_result>("actorflow::update_result");
  config_->add_message_type<step_result>("actorflow::step_result");
  // Networking, for clusters (actors/cluster/cluster.hpp): an idle multiplexer thread
  // until something publishes or connects.
  config_->load<caf::io::middleman, spinning_multiplexer>();
  if (options_.tls.enabled()) {
    check_tls_files(options_.tls);
    require_ssl_interposer();
    config_->load<caf::openssl::manager>();
    config_->openssl_certificate = options_.tls.certificate;
    config_->openssl_key = options_.tls.key;
    config_->openssl_cafile = options_.tls.ca_file;
  }
  if (options_.network_workers >= 0)
    config_->set("middleman.workers", static_cast<size_t>(options_.network_workers));
  config_->add_message_type<std::vector<tensor>>("std::vector<actorflow::tensor>");
  system_ = std::make_unique<caf::actor_system>(*config_);
  // The devices share one count of kernels in flight: the scheduler polls
  // while any device runs one.
  for (int d = 0; d < options_.cpu_devices; ++d) {
    auto& arena = *arenas_[static_cast<size_t>(d)];
    arena.initialize();
    cpu_devices_.push_back(spawn_cpu_device(*system_, arena, config_->kernels_in_flight));
    devices_.push_back({"/cpu:" + std::to_string(d), "cpu", d, cpu_devices_.back().actor, &arena});
  }
  int gpus = gpu::built_with_cuda() ? gpu::discover_gpus().count : 0;
  if (options_.gpus >= 0) gpus = std::min(gpus, options_.gpus);
  for (int d = 0; d < gpus; ++d) add_accelerator(gpu::make_cuda_accelerator(d), "gpu", d);
  for (int d = 0; d < options_.stand_in_devices; ++d) {
    add_accelerator(std::make_shared<stand_in_device>(
                        d, stand_in_options{.memory_limit = options_.stand_in_memory_bytes}),
                    "stand_in", d);
  }
}

void runtime::add_accelerator(std::shared_ptr<accelerator> device, const std::string& type,
                              int index) {
  accelerator_actors_.push_back(gpu::spawn_gpu_device(*system_, device->streams()));
  accelerators_.push_back(device);
  devices_.push_back(
      {device->name(), type, index, accelerator_actors_.back().actor, nullptr, device.get()});
}

runtime::~runtime() {
  while (config_->kernels_in_flight->load() > 0) std::this_thread::yield();
  for (auto& device : accelerator_actors_)
    while (device.in_flight->load() > 0) std::this_thread::yield();
  for (auto& device : cpu_devices_) {
    caf::anon_send_exit(device.actor, caf::exit_reason::user_shutdown);
    device.actor = nullptr;
  }
  for (auto& device : accelerator_actors_) {
    caf::anon_send_exit(device.actor, caf::exit_reason::user_shutdown);
    device.actor = nullptr;
  }
  devices_.clear();
  system_.reset();        // waits for every actor; sessions stopped theirs already
  accelerators_.clear();  // after the actors that hold their streams
  for (auto& arena : arenas_) arena->terminate();
}

const std::vector<device_rate>& runtime::device_rates() {
  std::call_once(rates_measured_, [this] { rates_ = measure_device_rates(devices_); });
  return rates_;
}

const local_device* runtime::find_device(const std::string& type, int index) const {
  for (auto& d : devices_)
    if (d.type == type && d.index == index) return &d;
  return nullptr;
}

std::shared_ptr<runtime> runtime::shared() {
  static std::mutex mutex;
  static std::weak_ptr<runtime> current;
  std::lock_guard<std::mutex> lock(mutex);
  auto rt = current.lock();
  if (!rt) {
    rt = std::make_shared<runtime>();
    current = rt;
  }
  return rt;
}

}  // namespace actorflow
