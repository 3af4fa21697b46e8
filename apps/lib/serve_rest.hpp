// actorflow-serve's HTTP front end: TensorFlow Serving's REST API over a
// model_server (actors/serving/model_server.hpp), on Debian's cpp-httplib.
//
//   POST /v1/models/NAME[/versions/V]:predict   {"instances": [...]} (rows)
//                                               or {"inputs": ...} (columns)
//   GET  /v1/models/NAME[/versions/V]           version status
//   GET  /v1/models/NAME[/versions/V]/metadata  signatures
//   GET  /monitoring/prometheus/metrics         Prometheus text
//
// Errors are {"error": "..."} with the status of their code: 400 bad input
// (malformed JSON, wrong dtype or shape, too deeply nested), 404 no such
// model, version, signature or path, 413 a body over max_body_bytes (the
// one resource_exhausted a request can meet), 503 a
// full batch queue or a server that is stopping, 504 a request not answered
// in time, 500 anything else. A request (line, headers or body) that stalls
// past read_timeout gets 408, and a request line and headers over 64 KiB get
// 431 (apps/lib/http_connection.hpp); a connection that sends nothing is
// closed without an answer after keep_alive_timeout.
//
// Connections: cpp-httplib serves a connection on one thread until it
// closes or idles past keep_alive_timeout, so idle connections hold threads.
// The server's pool grows a thread per waiting connection up to
// max_connections, so that a thousand idle ones do not keep well-formed
// requests waiting; past that, connections queue.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "actors/serving/model_server.hpp"

namespace httplib {
class Server;
}

namespace actorflow::apps {

struct rest_options {
  std::string host = "0.0.0.0";
  int port = 8501;  ///< 0: any free port (rest_server::port() says which)
  size_t max_body_bytes = size_t{64} << 20;
  std::chrono::seconds read_timeout{10};
  std::chrono::seconds keep_alive_timeout{5};
  size_t max_connections = 2048;
};

/// The deepest nesting of arrays and objects a request body may have: a
/// tensor of rank 16 is deeper than any model takes, and a parser's nesting
/// is what a hostile body would use to exhaust the stack.
inline constexpr int max_json_depth = 32;

class rest_server {
 public:
  /// Binds and starts serving at once; throws naming the address when the
  /// port cannot be bound.
  rest_server(model_server& server, rest_options options);
  /// Stops (as stop()).
  ~rest_server();
  rest_server(const rest_server&) = delete;
  rest_server& operator=(const rest_server&) = delete;

  int port() const { return port_; }
  /// Stops accepting connections; requests being answered finish first.
  void stop();

 private:
  void route();
  model_server& server_;
  rest_options options_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::thread listener_;
};

/// The HTTP status of an error code.
int http_status_of(error_code code);

/// A predict request from a JSON body (TF Serving's row or column format)
/// for the signature it names ("signature_name", else serving_default), which
/// `signature_named` finds (or throws not_found). Throws invalid_argument
/// naming what was wrong; `row_format` says which format the body used.
predict_request parse_predict_body(
    const std::string& body,
    const std::function<const signature_def&(const std::string& key)>& signature_named,
    bool& row_format);

}  // namespace actorflow::apps
