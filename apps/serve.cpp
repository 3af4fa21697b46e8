// actorflow-serve: serves an exported model (actors/serving/export.hpp) over
// TensorFlow Serving's REST and gRPC APIs, with its flag names:
//
//   actorflow-serve --model_name fmnist --model_base_path /models/fmnist
//                   --rest_api_port 8501 --port 8500 --enable_batching
//
// It serves the newest version under the base path and swaps in newer ones
// as they appear (actors/serving/model_server.hpp). SIGTERM or SIGINT: it
// stops accepting connections, answers what is in flight, and exits (0)
// within --shutdown_timeout_seconds.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "actors/run/runtime.hpp"
#include "actors/serving/model_server.hpp"
#include "apps/lib/batching_file.hpp"
#include "apps/lib/serve_grpc.hpp"
#include "apps/lib/serve_rest.hpp"
#include "apps/lib/stop_signals.hpp"

namespace {

struct serve_flags {
  std::string model_name = "default";
  std::string model_base_path;
  int rest_api_port = 8501;
  int port = 8500;
  std::string host = "0.0.0.0";
  bool enable_batching = false;
  std::string batching_parameters_file;
  int64_t max_batch_size = 64;
  int64_t batch_timeout_micros = 1000;
  int num_batch_threads = 4;
  int max_enqueued_batches = 64;
  int poll_wait_seconds = 1;
  int64_t rest_api_timeout_in_ms = 30000;
  int64_t max_body_bytes = int64_t{64} << 20;
  int http_read_timeout_seconds = 10;
  int threads = 0;
  int shutdown_timeout_seconds = 10;
};

void add_flags(CLI::App& app, serve_flags& f) {
  app.add_option("--model_name", f.model_name, "the name requests use (/v1/models/NAME)");
  app.add_option("--model_base_path", f.model_base_path,
                 "the directory of version directories (1/, 2/, ...) that export_model and "
                 "actorflow-train --export write")
      ->required();
  app.add_option("--rest_api_port", f.rest_api_port, "HTTP port (0: no HTTP)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--port", f.port, "gRPC port (0: no gRPC)")->check(CLI::Range(0, 65535));
  app.add_option("--host", f.host, "the address both listen on");
  app.add_flag("--enable_batching", f.enable_batching, "join requests into batches");
  app.add_option("--batching_parameters_file", f.batching_parameters_file,
                 "TF Serving's BatchingParameters in protobuf's text format (max_batch_size, "
                 "batch_timeout_micros, num_batch_threads, max_enqueued_batches); with "
                 "--enable_batching, over the flags");
  app.add_option("--max_batch_size", f.max_batch_size, "rows per batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--batch_timeout_micros", f.batch_timeout_micros,
                 "how long a batch that is not full waits")
      ->check(CLI::Range(int64_t{0}, int64_t{60'000'000}));
  app.add_option("--num_batch_threads", f.num_batch_threads, "batches run at once")
      ->check(CLI::Range(1, 1024));
  app.add_option("--max_enqueued_batches", f.max_enqueued_batches,
                 "batches waiting for a thread before requests are refused (503)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--file_system_poll_wait_seconds", f.poll_wait_seconds,
                 "how often to look for new versions (0: never)")
      ->check(CLI::Range(0, 86400));
  app.add_option("--rest_api_timeout_in_ms", f.rest_api_timeout_in_ms,
                 "a request not answered in this time fails (504)")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}));
  app.add_option("--max_body_bytes", f.max_body_bytes, "larger request bodies get 413")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
  app.add_option("--http_read_timeout_seconds", f.http_read_timeout_seconds,
                 "how long the HTTP server waits for the next bytes of a request: a body that "
                 "stalls longer gets 408 (not one of TF Serving's flags)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--threads", f.threads, "CAF and kernel threads (0: one per core)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--shutdown_timeout_seconds", f.shutdown_timeout_seconds,
                 "on SIGTERM, how long requests in flight may take")
      ->check(CLI::Range(1, 3600));
}

std::shared_ptr<actorflow::runtime> make_runtime(int threads) {
  actorflow::runtime_options options;
  if (threads > 0) {
    options.scheduler_threads = threads;
    options.compute_threads = threads;
  }
  return std::make_shared<actorflow::runtime>(options);
}

// Each connection holds a descriptor: a thousand idle ones must not reach
// the default soft limit (1024), so take what the hard limit allows.
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

int serve(const serve_flags& f) {
  using namespace actorflow;
  raise_descriptor_limit();
  apps::stop_signals signals("actorflow-serve");  // before any thread starts
  model_server_options options;
  options.name = f.model_name;
  options.base_path = f.model_base_path;
  options.batching = {.enabled = f.enable_batching,
                      .max_batch_size = f.max_batch_size,
                      .batch_timeout = std::chrono::microseconds(f.batch_timeout_micros),
                      .num_batch_threads = f.num_batch_threads,
                      .max_enqueued_batches = f.max_enqueued_batches};
  if (!f.enable_batching && !f.batching_parameters_file.empty())
    throw error("--batching_parameters_file needs --enable_batching (as TF Serving's does)");
  if (f.enable_batching && !f.batching_parameters_file.empty())
    options.batching = apps::read_batching_parameters(f.batching_parameters_file, options.batching);
  options.poll_interval = std::chrono::seconds(f.poll_wait_seconds);
  options.request_timeout = std::chrono::milliseconds(f.rest_api_timeout_in_ms);
  options.rt = make_runtime(f.threads);
  options.log = [](const std::string& line) { std::cout << line << std::endl; };
  model_server server(options);
  server.poll();
  if (!server.serving_version())
    std::cout << "[serve] no version of '" << f.model_name << "' loads yet under "
              << f.model_base_path << ": waiting for one" << std::endl;
  server.start_watching();
  std::optional<apps::rest_server> rest;
  std::optional<apps::grpc_front_end> grpc;
  if (f.rest_api_port > 0) {
    rest.emplace(server, apps::rest_options{
                             .host = f.host,
                             .port = f.rest_api_port,
                             .max_body_bytes = static_cast<size_t>(f.max_body_bytes),
                             .read_timeout = std::chrono::seconds(f.http_read_timeout_seconds)});
    std::cout << "[serve] REST API on " << f.host << ":" << rest->port() << std::endl;
  }
  if (f.port > 0) {
    grpc.emplace(server, apps::grpc_options{
                             .host = f.host,
                             .port = f.port,
                             .shutdown_grace = std::chrono::seconds(f.shutdown_timeout_seconds)});
    std::cout << "[serve] gRPC API on " << f.host << ":" << grpc->port() << std::endl;
  }
  signals.running();
  std::cout << "[serve] ready" << std::endl;
  int received = signals.wait_for_stop(std::chrono::seconds(f.shutdown_timeout_seconds + 5));
  std::cout << "[serve] stopping (signal " << received << "): finishing requests in flight"
            << std::endl;
  auto deadline = std::chrono::seconds(f.shutdown_timeout_seconds);
  if (grpc) grpc->stop();
  if (rest) rest->stop();
  int64_t left = server.drain(deadline);
  std::cout << "[serve] stopped" << (left ? " with " + std::to_string(left) + " unanswered" : "")
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"actorflow-serve: serves an exported model over TensorFlow Serving's APIs"};
  serve_flags flags;
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    return serve(flags);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
