// actorflow-serve's gRPC front end: TensorFlow Serving's gRPC API over a
// model_server (actors/serving/model_server.hpp), with the messages of
// schema/tf_serving (TF Serving's packages, names and field numbers), so
// that TF Serving's own clients (PyPI's tensorflow-serving-api) work
// against it unchanged:
//
//   tensorflow.serving.PredictionService/Predict           outputs by alias
//   tensorflow.serving.PredictionService/GetModelMetadata  "signature_def"
//   tensorflow.serving.ModelService/GetModelStatus         version states
//
// Classify, Regress, MultiInference and HandleReloadConfigRequest are
// answered UNIMPLEMENTED. Errors carry the model_server's codes as gRPC
// status codes (the same numbers): INVALID_ARGUMENT for a malformed request
// (no model_spec, a tensor whose dtype, shape or values are wrong, a version
// label), NOT_FOUND for another model's name, a version or signature that is
// not there, UNAVAILABLE and DEADLINE_EXCEEDED as the server says.
//
// Predict is served through gRPC's callback API: a call is started on the
// model_server (predict_then) and finished when its step ends, so no thread
// waits for a step; the metadata and status calls, which run no model, are
// answered on gRPC's sync threads.
//
// Every number of a request is untrusted: a message over max_receive_bytes
// (64 MiB by default) is refused by gRPC with RESOURCE_EXHAUSTED before it
// is parsed, and a tensor may describe at most max_tensor_bytes (1 GiB), the
// inputs of one request together as much, since TensorFlow's rule that one
// value fills a shape lets a few bytes ask for any size.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/serving/model_server.hpp"

namespace grpc {
class Server;
}
namespace tensorflow {
class TensorProto;
}

namespace actorflow::apps {

struct grpc_options {
  std::string host = "0.0.0.0";
  int port = 8500;  ///< TF Serving's gRPC port; 0: any free one (grpc_front_end::port() says which)
  /// The largest request message gRPC accepts (its default is 4 MiB).
  int max_receive_bytes = 64 << 20;
  /// The largest tensor a request may describe, and all its inputs together.
  int64_t max_tensor_bytes = int64_t{1} << 30;
  /// Threads gRPC may use, its sync calls' (metadata, status) among them;
  /// beyond, calls are refused with RESOURCE_EXHAUSTED rather than queued
  /// without bound.
  int max_threads = 256;
  /// How long stop() lets calls in flight finish before cancelling them.
  std::chrono::milliseconds shutdown_grace{5000};
};

/// The deepest shape a request's tensor may have.
inline constexpr int max_request_rank = 32;

class grpc_front_end {
 public:
  /// Binds and starts serving at once; throws unavailable naming the address
  /// when it cannot be bound.
  grpc_front_end(model_server& server, grpc_options options);
  /// Stops (as stop()).
  ~grpc_front_end();
  grpc_front_end(const grpc_front_end&) = delete;
  grpc_front_end& operator=(const grpc_front_end&) = delete;

  int port() const { return port_; }
  /// Refuses new calls, lets those in flight finish for up to shutdown_grace,
  /// then cancels the rest (their clients see UNAVAILABLE) and returns once
  /// their handlers are done, which the model_server's request_timeout
  /// bounds. Idempotent.
  void stop();

 private:
  struct services;
  grpc_options options_;
  std::unique_ptr<services> services_;
  std::unique_ptr<grpc::Server> grpc_;
  int port_ = 0;
};

/// Turns off Abseil's lock deadlock detection for the process: Debian's
/// Abseil is built with it on, and then every lock gRPC takes updates a
/// graph of locks (2% of the CPU under load). Once per process; the server
/// calls it, and a client of this process's own may.
void quiet_abseil_locks();

/// The tensor a TensorProto describes, by TensorFlow's rules: its elements
/// from tensor_content (raw, little-endian) when set, else from the typed
/// field of its dtype (float_val, double_val, int_val for int32 and uint8,
/// int64_val, bool_val, half_val for bfloat16's bit patterns), which holds
/// as many values as the shape or one that fills it. Throws invalid_argument
/// "[grpc] <what>: ..." naming what is wrong: an unsupported dtype, an
/// unknown rank, a negative dim, a shape over max_bytes, a content size or
/// value count that does not match, a value out of its dtype's range.
tensor tensor_from_proto(const tensorflow::TensorProto& proto, const std::string& what,
                         int64_t max_bytes = int64_t{1} << 30);

/// `t` as a TensorProto with tensor_content (what tf.make_ndarray reads).
void tensor_to_proto(const tensor& t, tensorflow::TensorProto& proto);

}  // namespace actorflow::apps
