#include "perf/bench_serve.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <tensorflow_serving/apis/get_model_status.pb.h>
#include <tensorflow_serving/apis/model_service.grpc.pb.h>
#include <tensorflow_serving/apis/predict.pb.h>
#include <tensorflow_serving/apis/prediction_service.grpc.pb.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "actors/serving/export.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/json_values.hpp"
#include "apps/lib/model_export.hpp"
#include "apps/lib/serve_grpc.hpp"
#include "apps/lib/serve_rest.hpp"
#include "perf/bench_util.hpp"
#include "perf/serve_load.hpp"
#include "tests/support/child_process.hpp"

// After Eigen (through the headers above): <resolv.h>, which it includes,
// defines a macro `_res` that Eigen uses as a parameter's name.
#include <httplib.h>

namespace actorflow::bench {

namespace {

namespace fs = std::filesystem;
namespace tfs = tensorflow::serving;
using json = nlohmann::json;

// A fresh directory under $TMPDIR, removed with what it holds.
struct scratch_dir {
  fs::path path;
  scratch_dir() {
    path = fs::temp_directory_path() / fmt::format("actorflow_bench_serve_{}", ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Exports a freshly initialized `kind` classifier into base/<next version>.
std::string export_fresh(const std::string& kind, const std::string& base, int64_t seed) {
  graph g;
  auto net = models::make_classifier(g, kind, seed);
  session s(g);
  s.run({global_variables_initializer(g)});
  return apps::export_classifier(s, *net, base);
}

tensor images(int64_t count, int64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> pixel(0, 1);
  std::vector<float> v(size_t(count) * 784);
  for (auto& p : v) p = pixel(rng);
  return tensor::from_vector<float>(v, {count, 28, 28, 1});
}

tensor one_image(int64_t seed) { return images(1, seed); }

// actorflow-serve on 127.0.0.1 (REST and gRPC), stopped at the end.
struct server_process {
  uint16_t rest = testing::free_port();
  uint16_t grpc = testing::free_port();
  testing::child_process child;
  server_process(const std::string& base, bool batching)
      : child(arguments(base, batching, rest, grpc)) {
    if (!child.wait_for("[serve] ready", std::chrono::seconds(60)))
      throw std::runtime_error("actorflow-serve did not start: " + child.output());
  }
  ~server_process() { child.stop(); }
  static std::vector<std::string> arguments(const std::string& base, bool batching, uint16_t rest,
                                            uint16_t grpc) {
    std::vector<std::string> argv{ACTORFLOW_SERVE_BINARY,
                                  "--model_name=fmnist",
                                  "--model_base_path=" + base,
                                  "--host=127.0.0.1",
                                  fmt::format("--rest_api_port={}", rest),
                                  fmt::format("--port={}", grpc),
                                  "--file_system_poll_wait_seconds=1"};
    if (batching)
      for (auto flag : {"--enable_batching", "--max_batch_size=64", "--batch_timeout_micros=500",
                        "--num_batch_threads=2", "--max_enqueued_batches=256"})
        argv.push_back(flag);
    return argv;
  }
};

client_factory rest_clients(uint16_t port, std::string body) {
  return [port, body] {
    auto http = std::make_shared<httplib::Client>("127.0.0.1", port);
    http->set_keep_alive(true);
    http->set_tcp_nodelay(true);  // as curl and requests do: no 40 ms Nagle waits
    http->set_read_timeout(std::chrono::seconds(30));
    return send_fn([http, body] {
      auto res = http->Post("/v1/models/fmnist:predict", body, "application/json");
      return res && res->status == 200;
    });
  };
}

client_factory grpc_clients(uint16_t port, tfs::PredictRequest request) {
  apps::quiet_abseil_locks();
  return [port, request] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    args.SetMaxReceiveMessageSize(64 << 20);
    std::shared_ptr<tfs::PredictionService::Stub> stub =
        tfs::PredictionService::NewStub(grpc::CreateCustomChannel(
            fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials(), args));
    return send_fn([stub, request] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      tfs::PredictResponse response;
      return stub->Predict(&context, request, &response).ok();
    });
  };
}

// One channel's asynchronous Predict: each call started at once, answered
// on gRPC's threads.
async_send_fn grpc_async_sender(uint16_t port, tfs::PredictRequest request) {
  apps::quiet_abseil_locks();
  std::shared_ptr<tfs::PredictionService::Stub> stub = tfs::PredictionService::NewStub(
      grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()));
  auto shared_request = std::make_shared<tfs::PredictRequest>(std::move(request));
  return [stub, shared_request](std::function<void(bool)> done) {
    struct call {
      grpc::ClientContext context;
      tfs::PredictResponse response;
    };
    auto c = std::make_shared<call>();
    c->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub->async()->Predict(&c->context, shared_request.get(), &c->response,
                           [c, done](grpc::Status status) { done(status.ok()); });
  };
}

// The transport alone: a status request, which runs no model.
client_factory grpc_status_clients(uint16_t port) {
  return [port] {
    std::shared_ptr<tfs::ModelService::Stub> stub = tfs::ModelService::NewStub(
        grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()));
    return send_fn([stub] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      tfs::GetModelStatusRequest request;
      request.mutable_model_spec()->set_name("fmnist");
      tfs::GetModelStatusResponse response;
      return stub->GetModelStatus(&context, request, &response).ok();
    });
  };
}

client_factory rest_status_clients(uint16_t port) {
  return [port] {
    auto http = std::make_shared<httplib::Client>("127.0.0.1", port);
    http->set_keep_alive(true);
    http->set_tcp_nodelay(true);
    return send_fn([http] {
      auto res = http->Get("/v1/models/fmnist");
      return res && res->status == 200;
    });
  };
}

std::string rest_body(const tensor& image) {
  auto v = image.to_vector<float>();
  json rows = json::array();
  for (int y = 0; y < 28; ++y) {
    json row = json::array();
    for (int x = 0; x < 28; ++x) row.push_back(json::array({v[size_t(y * 28 + x)]}));
    rows.push_back(row);
  }
  return json{{"instances", json::array({rows})}}.dump();
}

tfs::PredictRequest grpc_request(const tensor& image) {
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("fmnist");
  request.mutable_model_spec()->set_signature_name("serving_default");
  apps::tensor_to_proto(image, (*request.mutable_inputs())["images"]);
  return request;
}

struct model_rows {
  const add_row_fn& add_row;
  std::string prefix;  // "" for the MLP, "cnn_" for the CNN
  void add(const std::string& key, double value, const std::string& unit,
           const std::string& note) const {
    add_row(prefix + key, value, unit, note);
  }
};

// The floor: the same export's predict in this process, one image at a time.
double add_inprocess(const model_rows& rows, const std::string& dir, const tensor& image,
                     int requests) {
  auto model = load_model(dir);
  std::map<std::string, tensor> inputs{{"images", image}};
  for (int i = 0; i < 50; ++i) model->predict("serving_default", inputs);
  load_result r;
  for (int i = 0; i < requests; ++i) {
    double t0 = now_seconds();
    model->predict("serving_default", inputs);
    r.latencies_us.push_back((now_seconds() - t0) * 1e6);
  }
  double p50 = r.quantile_us(0.5);
  rows.add("inprocess_p50_us", p50, "us", "loaded_model::predict of one image in this process");
  rows.add("inprocess_p99_us", r.quantile_us(0.99), "us", "the same, 99th percentile");
  // The same through a model_server in this process: what the server adds
  // before any network (versions, checks, metrics).
  model_server server({.name = "fmnist",
                       .base_path = fs::path(dir).parent_path().string(),
                       .poll_interval = std::chrono::milliseconds(0),
                       .log = [](const std::string&) {}});
  server.poll();
  predict_request request;
  request.inputs = inputs;
  load_result through;
  for (int i = 0; i < requests; ++i) {
    double t0 = now_seconds();
    server.predict(request);
    through.latencies_us.push_back((now_seconds() - t0) * 1e6);
  }
  rows.add("inprocess_server_p50_us", through.quantile_us(0.5), "us",
           "model_server::predict of one image in this process, no batching");
  return p50;
}

// The most batching can give on this machine: images per second through
// batches of 64 in this process, with no transport and no waiting.
double add_batch_ceiling(const model_rows& rows, const std::string& dir) {
  auto model = load_model(dir);
  std::map<std::string, tensor> batch{{"images", images(64, 11)}};
  double secs = median_seconds(15, 3, [&] { model->predict("serving_default", batch); });
  double qps = 64 / secs;
  rows.add("inprocess_qps_batch64", qps, "images/s",
           "loaded_model::predict of 64 images at a time in this process: batching's ceiling");
  return qps;
}

// Returns the throughput, requests/s.
double add_closed(const model_rows& rows, const std::string& api, const client_factory& clients,
                  int c, bool batched, double seconds, double floor_us) {
  auto r = closed_loop(clients, c, seconds);
  std::string tail = fmt::format("_c{}{}", c, batched ? "_batched" : "");
  std::string how = fmt::format("{} clients back to back{}", c, batched ? ", batching on" : "");
  double p50 = r.quantile_us(0.5);
  std::string failures = r.failures ? fmt::format("; {} requests FAILED", r.failures) : "";
  rows.add(fmt::format("serve_{}_p50_us{}", api, tail), p50, "us",
           c == 1 ? fmt::format("{}; {:+.0f} us over the in-process floor{}", how, p50 - floor_us,
                                failures)
                  : how + failures);
  rows.add(fmt::format("serve_{}_p99_us{}", api, tail), r.quantile_us(0.99), "us", how);
  rows.add(api == "grpc" ? "serve_qps" + tail : "serve_rest_qps" + tail, r.qps(), "req/s",
           fmt::format("{} over {}", how, api == "grpc" ? "gRPC" : "REST"));
  return r.qps();
}

// Batched over unbatched throughput at 64 clients, beside the most it could
// be here: the in-process batches' throughput over the unbatched server's.
void add_batching_gain(const model_rows& rows, const std::string& api,
                       const std::map<bool, double>& qps_c64, double ceiling_qps) {
  double unbatched = qps_c64.at(false), batched = qps_c64.at(true);
  rows.add(api == "grpc" ? "serve_batching_gain_c64" : "serve_rest_batching_gain_c64",
           batched / unbatched, "x",
           fmt::format("batched over unbatched at 64 clients; target >= 4; at most {:.2f} here "
                       "(64-image batches in process, {:.0f} images/s, over the unbatched "
                       "server's {:.0f} req/s)",
                       ceiling_qps / unbatched, ceiling_qps, unbatched));
}

// The REST body of one image read by the front end's JSON reader and by
// nlohmann::json (the general library it replaced for request bodies).
void add_json_rows(const model_rows& rows, const std::string& body) {
  double ours = median_seconds(9, 2, [&] {
    for (int i = 0; i < 100; ++i) apps::parse_json(body, apps::max_json_depth);
  });
  double general = median_seconds(9, 2, [&] {
    for (int i = 0; i < 100; ++i) {
      auto doc = json::parse(body);
      if (!doc.is_object()) throw std::runtime_error("the REST body is not an object");
    }
  });
  rows.add("rest_body_parse_us", ours * 1e4, "us",
           fmt::format("one image's {} byte predict body; {:.1f}x faster than nlohmann::json's "
                       "{:.0f} us",
                       body.size(), general / ours, general * 1e4));
}

// gRPC with no actorflow code on either side: a ModelService in this process
// whose GetModelStatus answers nothing, one client. What any gRPC server
// spends on a round trip here, beside which the served models' figures read.
class empty_model_service final : public tfs::ModelService::Service {
  grpc::Status GetModelStatus(grpc::ServerContext*, const tfs::GetModelStatusRequest*,
                              tfs::GetModelStatusResponse*) override {
    return grpc::Status::OK;
  }
};

double bare_grpc_p50_us(double seconds) {
  empty_model_service service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) throw std::runtime_error("the bare gRPC server could not listen");
  auto run = closed_loop(grpc_status_clients(static_cast<uint16_t>(port)), 1, seconds);
  server->Shutdown();
  return run.quantile_us(0.5);
}

// The kernel's loopback alone: `bytes` written on a TCP connection and echoed
// back by a thread of this process, one at a time (a request's two wake-ups).
// The connection is made and accepted before the echo thread starts, so a
// failure leaves no thread waiting.
double tcp_round_trip_p50_us(size_t bytes, double seconds) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  auto* where = reinterpret_cast<sockaddr*>(&address);
  const bool connected = listener >= 0 && client >= 0 && ::bind(listener, where, length) == 0 &&
                         ::listen(listener, 1) == 0 &&
                         ::getsockname(listener, where, &length) == 0 &&
                         ::connect(client, where, length) == 0;
  const int peer = connected ? ::accept(listener, nullptr, nullptr) : -1;
  if (listener >= 0) ::close(listener);
  if (peer < 0) {
    if (client >= 0) ::close(client);
    throw std::runtime_error("the loopback TCP echo could not connect");
  }
  const int one = 1;
  for (int fd : {client, peer}) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::thread echo([peer] {
    std::vector<char> buffer(65536);
    for (ssize_t got; (got = ::read(peer, buffer.data(), buffer.size())) > 0;)
      if (::write(peer, buffer.data(), size_t(got)) != got) break;
    ::close(peer);
  });
  std::vector<char> message(bytes, 'x'), answer(bytes);
  load_result run;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds)) {
    const auto t0 = std::chrono::steady_clock::now();
    if (::write(client, message.data(), bytes) != ssize_t(bytes)) break;
    size_t got = 0;
    for (ssize_t n; got < bytes && (n = ::read(client, answer.data() + got, bytes - got)) > 0;)
      got += size_t(n);
    if (got < bytes) break;
    run.latencies_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  ::close(client);  // ends the echo's reads
  echo.join();
  return run.quantile_us(0.5);
}

void add_transport_floor_rows(const model_rows& rows, size_t request_bytes, double seconds) {
  rows.add("grpc_bare_status_p50_us", bare_grpc_p50_us(seconds), "us",
           "gRPC alone: GetModelStatus answered by a service that does nothing, in this process, "
           "one client (no actorflow code on either side)");
  rows.add("tcp_round_trip_p50_us", tcp_round_trip_p50_us(request_bytes, seconds), "us",
           fmt::format("a {} byte message echoed over loopback TCP, one at a time (the gRPC "
                       "predict request's size)",
                       request_bytes));
}

void add_model_rows(const model_rows& rows, const std::string& kind, const serve_bench_options& o,
                    const std::string& scratch) {
  std::string base = scratch + "/" + kind;
  auto dir = export_fresh(kind, base, 1);
  auto image = one_image(7);
  double floor_us = add_inprocess(rows, dir, image, kind == "mlp" ? 3000 : 300);
  double ceiling_qps = add_batch_ceiling(rows, dir);
  auto body = rest_body(image);
  if (kind == "mlp") add_json_rows(rows, body);
  auto request = grpc_request(image);
  std::map<std::string, std::map<bool, double>> qps_c64;  // by API, batched or not
  for (bool batched : {false, true}) {
    server_process server(base, batched);
    if (!batched && kind == "mlp") {
      // What a request costs without a model: the transports' own floor.
      auto g = closed_loop(grpc_status_clients(server.grpc), 1, o.seconds);
      auto r = closed_loop(rest_status_clients(server.rest), 1, o.seconds);
      rows.add("serve_grpc_status_p50_us", g.quantile_us(0.5), "us",
               "GetModelStatus, one client: gRPC's round trip without a model");
      rows.add("serve_rest_status_p50_us", r.quantile_us(0.5), "us",
               "GET /v1/models/NAME, one client: HTTP's round trip without a model");
      add_transport_floor_rows(rows, request.ByteSizeLong(), o.seconds);
    }
    for (int c : {1, 8, 64}) {
      double grpc = add_closed(rows, "grpc", grpc_clients(server.grpc, request), c, batched,
                               o.seconds, floor_us);
      double rest = add_closed(rows, "rest", rest_clients(server.rest, body), c, batched, o.seconds,
                               floor_us);
      if (c == 64) qps_c64["grpc"][batched] = grpc, qps_c64["rest"][batched] = rest;
    }
    // The batched server at 80% of its closed-loop peak, open loop.
    if (batched) {
      auto peak_run = closed_loop(grpc_clients(server.grpc, request), 64, o.seconds);
      double rate = 0.8 * peak_run.qps();
      auto r = open_loop_async(grpc_async_sender(server.grpc, request), rate, o.seconds * 2);
      double p50 = r.quantile_us(0.5), p99 = r.quantile_us(0.99);
      rows.add("serve_grpc_p50_us_open80", p50, "us",
               fmt::format("open loop at {:.0f} req/s, 80% of the batched peak", rate));
      rows.add("serve_grpc_p99_us_open80", p99, "us",
               fmt::format("{:.2f}x p50; target <= 3x{}", p99 / p50,
                           r.failures ? fmt::format("; {} FAILED", r.failures) : ""));
    }
  }
  for (const auto& [api, qps] : qps_c64) add_batching_gain(rows, api, qps, ceiling_qps);
}

// A version swapped in under load: failures and p99 beside the same load without one.
void add_swap_rows(const model_rows& rows, const std::string& scratch, double seconds) {
  std::string base = scratch + "/swap", staging = scratch + "/staging";
  export_fresh("mlp", base, 1);
  auto next = export_fresh("mlp", staging, 2);  // staging/1
  server_process server(base, false);
  auto clients = grpc_clients(server.grpc, grpc_request(one_image(3)));
  auto calm = closed_loop(clients, 8, seconds * 1.5);
  std::thread swap([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds * 0.3));
    fs::rename(next, base + "/2");  // whole, as an export appears
  });
  auto during = closed_loop(clients, 8, seconds * 1.5);
  swap.join();
  bool swapped = server.child.wait_for("serving version 2", std::chrono::seconds(10));
  rows.add("serve_swap_failed_requests", double(during.failures), "requests",
           fmt::format("gRPC, 8 clients, while version 2 was {}; target 0",
                       swapped ? "loaded and swapped in" : "NOT swapped in"));
  rows.add("serve_swap_p99_ratio", during.quantile_us(0.99) / calm.quantile_us(0.99), "x",
           fmt::format("p99 {:.0f} us during the swap over {:.0f} us without; target <= 2",
                       during.quantile_us(0.99), calm.quantile_us(0.99)));
}

}  // namespace

void add_serve_rows(const add_row_fn& add_row, const serve_bench_options& options) {
  scratch_dir scratch;
  add_model_rows({add_row, ""}, "mlp", options, scratch.path.string());
  add_swap_rows({add_row, ""}, scratch.path.string(), options.seconds);
  if (options.cnn) add_model_rows({add_row, "cnn_"}, "cnn", options, scratch.path.string());
}

}  // namespace actorflow::bench
