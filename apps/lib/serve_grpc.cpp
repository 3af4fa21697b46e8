#include "apps/lib/serve_grpc.hpp"

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <tensorflow_serving/apis/get_model_metadata.pb.h>
#include <tensorflow_serving/apis/get_model_status.pb.h>
#include <tensorflow_serving/apis/model_service.grpc.pb.h>
#include <tensorflow_serving/apis/predict.pb.h>
#include <tensorflow_serving/apis/prediction_service.grpc.pb.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <tuple>

namespace actorflow::apps {

// tensor_content is little-endian, as TensorFlow writes it; the copies below
// would need a byte swap elsewhere.
static_assert(std::endian::native == std::endian::little);

namespace {

using tensorflow::DataType;
using tensorflow::TensorProto;
using tensorflow::serving::ModelSpec;

struct dtype_pair {
  dtype type;
  DataType wire;
};
constexpr dtype_pair dtype_pairs[] = {
    {dtype::float32, tensorflow::DT_FLOAT},    {dtype::float64, tensorflow::DT_DOUBLE},
    {dtype::int32, tensorflow::DT_INT32},      {dtype::int64, tensorflow::DT_INT64},
    {dtype::uint8, tensorflow::DT_UINT8},      {dtype::boolean, tensorflow::DT_BOOL},
    {dtype::bfloat16, tensorflow::DT_BFLOAT16}};

DataType wire_dtype(dtype t) {
  for (const auto& p : dtype_pairs)
    if (p.type == t) return p.wire;
  throw error("[grpc] dtype " + std::string(dtype_name(t)) + " has no TensorFlow DataType",
              error_code::internal);
}

// "DT_STRING", or the number when it names no DataType at all.
std::string wire_dtype_name(int value) {
  if (tensorflow::DataType_IsValid(value))
    return tensorflow::DataType_Name(static_cast<DataType>(value));
  return "DataType " + std::to_string(value);
}

[[noreturn]] void bad_tensor(const std::string& what, const std::string& why) {
  throw error("[grpc] " + what + ": " + why, error_code::invalid_argument);
}

dtype dtype_of_wire(int value, const std::string& what) {
  for (const auto& p : dtype_pairs)
    if (p.wire == value) return p.type;
  bad_tensor(what, "dtype " + wire_dtype_name(value) +
                       " is not supported (DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_UINT8, "
                       "DT_BOOL and DT_BFLOAT16 are)");
}

// The shape's dims, each checked, and the tensor's size against max_bytes.
// The product of the nonzero dims is bounded too, checked before it is
// formed: a zero dim makes no huge dims beside it harmless to the shape's
// own arithmetic.
shape shape_of_proto(const TensorProto& proto, dtype type, const std::string& what,
                     int64_t max_bytes) {
  const auto& s = proto.tensor_shape();
  if (s.unknown_rank()) bad_tensor(what, "tensor_shape has unknown_rank set; a value has a shape");
  if (s.dim_size() > max_request_rank)
    bad_tensor(what, "rank " + std::to_string(s.dim_size()) + " is over the limit of " +
                         std::to_string(max_request_rank));
  std::vector<int64_t> dims;
  for (int i = 0; i < s.dim_size(); ++i) {
    const int64_t d = s.dim(i).size();
    if (d < 0) bad_tensor(what, "dim " + std::to_string(i) + " is " + std::to_string(d));
    dims.push_back(d);
  }
  const int64_t max_elements = max_bytes / static_cast<int64_t>(dtype_size(type));
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d == 0) continue;
    if (n > max_elements / d)
      bad_tensor(what, "shape " + shape(dims).to_string() + " of " + dtype_name(type) +
                           " is over the limit of " + std::to_string(max_bytes) + " bytes");
    n *= d;
  }
  return shape(dims);
}

// Copies `values` into `out`, TensorFlow's rule: as many as the shape holds,
// or one that fills it. `convert` checks and converts each value.
template <class Values, class T, class Convert>
void copy_values(const Values& values, T* out, int64_t n, const std::string& what,
                 const char* field, Convert convert) {
  const int64_t k = values.size();
  if (k == n) {
    for (int64_t i = 0; i < n; ++i) out[i] = convert(values[static_cast<int>(i)], i);
  } else if (k == 1 && n > 1) {
    std::fill_n(out, n, convert(values[0], 0));
  } else {
    bad_tensor(what, std::string(field) + " holds " + std::to_string(k) + " values and " +
                         "tensor_content is empty; the shape holds " + std::to_string(n) +
                         " (give as many values, or one to fill it)");
  }
}

// A converter for values that must fit in [lo, hi] (int_val of a uint8,
// half_val's 16-bit patterns).
template <class T>
auto in_range(const std::string& what, const char* field, int64_t lo, int64_t hi) {
  return [&what, field, lo, hi](int64_t v, int64_t i) {
    if (v < lo || v > hi)
      bad_tensor(what, std::string(field) + "[" + std::to_string(i) + "] is " + std::to_string(v) +
                           ", out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "]");
    return static_cast<T>(v);
  };
}

void values_from_fields(const TensorProto& proto, tensor& t, const std::string& what) {
  const int64_t n = t.num_elements();
  auto same = [](auto v, int64_t) { return v; };
  switch (t.type()) {
    case dtype::float32:
      return copy_values(proto.float_val(), t.mutable_data<float>(), n, what, "float_val", same);
    case dtype::float64:
      return copy_values(proto.double_val(), t.mutable_data<double>(), n, what, "double_val", same);
    case dtype::int32:
      return copy_values(proto.int_val(), t.mutable_data<int32_t>(), n, what, "int_val", same);
    case dtype::int64:
      return copy_values(proto.int64_val(), t.mutable_data<int64_t>(), n, what, "int64_val", same);
    case dtype::uint8:
      return copy_values(proto.int_val(), t.mutable_data<uint8_t>(), n, what, "int_val",
                         in_range<uint8_t>(what, "int_val", 0, 255));
    case dtype::boolean:
      return copy_values(proto.bool_val(), t.mutable_data<bool>(), n, what, "bool_val", same);
    case dtype::bfloat16: {
      auto bits = in_range<uint16_t>(what, "half_val", 0, 0xffff);
      return copy_values(proto.half_val(), t.mutable_data<bfloat16>(), n, what, "half_val",
                         [&](int32_t v, int64_t i) { return bfloat16{bits(v, i)}; });
    }
  }
}

void values_from_content(const std::string& content, tensor& t, const std::string& what) {
  if (content.size() != t.size_bytes())
    bad_tensor(what, "tensor_content holds " + std::to_string(content.size()) + " bytes; shape " +
                         t.dims().to_string() + " of " + dtype_name(t.type()) + " needs " +
                         std::to_string(t.size_bytes()));
  if (content.empty()) return;  // no elements (a null buffer memcpy may not touch)
  if (t.type() != dtype::boolean) {
    std::memcpy(t.raw_mutable_data(), content.data(), content.size());
    return;
  }
  // A bool byte other than 0 or 1 is no bool C++ may read: any nonzero is true.
  auto* out = t.mutable_data<bool>();
  for (size_t i = 0; i < content.size(); ++i) out[i] = content[i] != 0;
}

void shape_to_proto(const std::vector<int64_t>& dims, tensorflow::TensorShapeProto& proto) {
  for (int64_t d : dims) proto.add_dim()->set_size(d);
}

}  // namespace

tensor tensor_from_proto(const TensorProto& proto, const std::string& what, int64_t max_bytes) {
  const dtype type = dtype_of_wire(proto.dtype(), what);
  tensor t(type, shape_of_proto(proto, type, what, max_bytes));
  if (!proto.tensor_content().empty() || t.num_elements() == 0)
    values_from_content(proto.tensor_content(), t, what);
  else
    values_from_fields(proto, t, what);
  return t;
}

void tensor_to_proto(const tensor& t, TensorProto& proto) {
  proto.set_dtype(wire_dtype(t.type()));
  const auto& dims = t.dims().dims();
  shape_to_proto(std::vector<int64_t>(dims.begin(), dims.end()), *proto.mutable_tensor_shape());
  proto.set_tensor_content(static_cast<const char*>(t.raw_data()), t.size_bytes());
}

namespace {

using clock = std::chrono::steady_clock;

// The code and message of what a call threw.
std::pair<error_code, std::string> failure_of(std::exception_ptr failure, const char* api) {
  try {
    std::rethrow_exception(failure);
  } catch (const error& e) {
    return {e.code(), e.what()};
  } catch (const std::bad_alloc&) {
    return {error_code::resource_exhausted, std::string("[grpc] out of memory answering ") + api};
  } catch (const std::exception& e) {
    return {code_of(e), e.what()};
  }
}

// Records a call in the server's metrics and gives its gRPC status: that of
// the code of what it threw (gRPC's numbers are TensorFlow's).
grpc::Status finish_call(model_server& server, const char* api, clock::time_point start,
                         int64_t version, std::exception_ptr failure) {
  error_code code = error_code::ok;
  std::string message;
  if (failure) std::tie(code, message) = failure_of(failure, api);
  const double us = std::chrono::duration<double, std::micro>(clock::now() - start).count();
  server.metrics().record_request(api, "GRPC", version, code, us);
  if (code == error_code::ok) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(code), message);
}

// Runs one call's `body`, which sets `version` once it knows it, and
// finishes the call (finish_call).
template <class Body>
grpc::Status answer(model_server& server, const char* api, Body&& body) {
  const auto start = clock::now();
  int64_t version = 0;
  std::exception_ptr failure;
  try {
    body(version);
  } catch (...) {
    failure = std::current_exception();
  }
  return finish_call(server, api, start, version, failure);
}

// The version a request's model_spec asks for (none: the newest), after
// checking that it names this server's model.
std::optional<int64_t> requested_version(const model_server& server, bool has_spec,
                                         const ModelSpec& spec, const char* method) {
  if (!has_spec)
    throw error(std::string("[grpc] ") + method + ": the request has no model_spec",
                error_code::invalid_argument);
  if (spec.name().empty())
    throw error(std::string("[grpc] ") + method + ": model_spec.name is empty",
                error_code::invalid_argument);
  if (spec.name() != server.name())
    throw error("[grpc] model '" + spec.name() + "' is not served here (this server serves '" +
                    server.name() + "')",
                error_code::not_found);
  if (spec.version_choice_case() == ModelSpec::kVersionLabel)
    throw error("[grpc] model_spec.version_label '" + spec.version_label() +
                    "': version labels are not served; name the version by number, or none "
                    "for the newest",
                error_code::invalid_argument);
  if (spec.has_version()) return spec.version().value();
  return std::nullopt;
}

void set_spec(ModelSpec& spec, const std::string& name, int64_t version,
              const std::string& signature) {
  spec.set_name(name);
  spec.mutable_version()->set_value(version);
  spec.set_signature_name(signature);
}

// Checks the inputs' sizes before any is made: together they may hold
// max_bytes, as one may.
void check_total_size(const google::protobuf::Map<std::string, TensorProto>& inputs,
                      int64_t max_bytes) {
  int64_t total = 0;
  for (const auto& [alias, proto] : inputs) {
    const std::string what = "input '" + alias + "'";
    const dtype type = dtype_of_wire(proto.dtype(), what);
    total += shape_of_proto(proto, type, what, max_bytes).num_elements() *
             static_cast<int64_t>(dtype_size(type));
    if (total > max_bytes)
      throw error("[grpc] the request's inputs hold more than " + std::to_string(max_bytes) +
                      " bytes together (at " + what + ")",
                  error_code::invalid_argument);
  }
}

predict_request to_predict_request(const tensorflow::serving::PredictRequest& request,
                                   std::optional<int64_t> version, int64_t max_bytes) {
  predict_request out;
  out.version = version;
  const auto& name = request.model_spec().signature_name();
  out.signature = name.empty() ? std::string(default_signature_key) : name;
  check_total_size(request.inputs(), max_bytes);
  for (const auto& [alias, proto] : request.inputs())
    out.inputs.emplace(alias, tensor_from_proto(proto, "input '" + alias + "'", max_bytes));
  std::set<std::string> seen;
  for (const auto& alias : request.output_filter()) {
    if (!seen.insert(alias).second)
      throw error("[grpc] output_filter names '" + alias + "' twice", error_code::invalid_argument);
    out.output_filter.push_back(alias);
  }
  return out;
}

tensorflow::TensorInfo tensor_info(const signature_tensor& st) {
  tensorflow::TensorInfo info;
  info.set_name(st.tensor);
  info.set_dtype(wire_dtype(st.type));
  shape_to_proto(st.dims, *info.mutable_tensor_shape());
  return info;
}

tensorflow::SignatureDef signature_proto(const signature_def& sig) {
  tensorflow::SignatureDef out;
  for (const auto& in : sig.inputs) (*out.mutable_inputs())[in.alias] = tensor_info(in);
  for (const auto& o : sig.outputs) (*out.mutable_outputs())[o.alias] = tensor_info(o);
  out.set_method_name(sig.method);
  return out;
}

tensorflow::serving::ModelVersionStatus::State wire_state(version_status::state s) {
  using wire = tensorflow::serving::ModelVersionStatus;
  switch (s) {
    case version_status::state::unknown:
      return wire::UNKNOWN;
    case version_status::state::start:
      return wire::START;
    case version_status::state::loading:
      return wire::LOADING;
    case version_status::state::available:
      return wire::AVAILABLE;
    case version_status::state::unloading:
      return wire::UNLOADING;
    case version_status::state::end:
      return wire::END;
  }
  return wire::UNKNOWN;
}

// Predict answers through the callback API: the call is started on the
// model_server and finished when its step ends, so no thread waits for a
// step (a thread per call in flight made the threads, and their switches,
// what a loaded server spent its time on).
class prediction_service final
    : public tensorflow::serving::PredictionService::WithCallbackMethod_Predict<
          tensorflow::serving::PredictionService::Service> {
 public:
  prediction_service(model_server& server, int64_t max_tensor_bytes)
      : server_(server), max_tensor_bytes_(max_tensor_bytes) {}

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const tensorflow::serving::PredictRequest* request,
                                    tensorflow::serving::PredictResponse* response) override {
    auto* reactor = context->DefaultReactor();
    const auto start = clock::now();
    int64_t version = 0;
    try {
      auto asked =
          requested_version(server_, request->has_model_spec(), request->model_spec(), "Predict");
      version = asked.value_or(0);
      server_.predict_then(
          to_predict_request(*request, asked, max_tensor_bytes_),
          [this, reactor, response, start](predict_response result, std::exception_ptr failure) {
            if (!failure) {
              try {
                set_spec(*response->mutable_model_spec(), server_.name(), result.version,
                         result.signature);
                for (const auto& [alias, t] : result.outputs)
                  tensor_to_proto(t, (*response->mutable_outputs())[alias]);
              } catch (...) {
                failure = std::current_exception();
              }
            }
            reactor->Finish(finish_call(server_, "predict", start, result.version, failure));
          });
    } catch (...) {
      reactor->Finish(finish_call(server_, "predict", start, version, std::current_exception()));
    }
    return reactor;
  }

  grpc::Status GetModelMetadata(grpc::ServerContext*,
                                const tensorflow::serving::GetModelMetadataRequest* request,
                                tensorflow::serving::GetModelMetadataResponse* response) override {
    return answer(server_, "metadata", [&](int64_t& version) {
      auto asked = requested_version(server_, request->has_model_spec(), request->model_spec(),
                                     "GetModelMetadata");
      version = asked.value_or(0);
      check_fields(*request);
      auto [served, signatures] = server_.metadata(asked);
      version = served;
      tensorflow::serving::SignatureDefMap map;
      for (const auto& sig : signatures)
        (*map.mutable_signature_def())[sig.key] = signature_proto(sig);
      response->mutable_model_spec()->set_name(server_.name());
      response->mutable_model_spec()->mutable_version()->set_value(served);
      (*response->mutable_metadata())["signature_def"].PackFrom(map);
    });
  }

 private:
  // TF Serving's rule: at least one field, and each one it knows.
  static void check_fields(const tensorflow::serving::GetModelMetadataRequest& request) {
    if (request.metadata_field_size() == 0)
      throw error("[grpc] GetModelMetadata: metadata_field is empty; ask for \"signature_def\"",
                  error_code::invalid_argument);
    for (const auto& field : request.metadata_field())
      if (field != "signature_def")
        throw error("[grpc] GetModelMetadata: metadata_field '" + field +
                        "' is not supported (only \"signature_def\" is)",
                    error_code::invalid_argument);
  }

  model_server& server_;
  int64_t max_tensor_bytes_;
};

class model_service final : public tensorflow::serving::ModelService::Service {
 public:
  explicit model_service(model_server& server) : server_(server) {}

  grpc::Status GetModelStatus(grpc::ServerContext*,
                              const tensorflow::serving::GetModelStatusRequest* request,
                              tensorflow::serving::GetModelStatusResponse* response) override {
    return answer(server_, "status", [&](int64_t& version) {
      auto asked = requested_version(server_, request->has_model_spec(), request->model_spec(),
                                     "GetModelStatus");
      version = asked.value_or(0);
      for (const auto& st : server_.status(asked)) {
        auto* out = response->add_model_version_status();
        out->set_version(st.version);
        out->set_state(wire_state(st.st));
        out->mutable_status()->set_error_code(static_cast<tensorflow::error::Code>(st.code));
        out->mutable_status()->set_error_message(st.message);
      }
    });
  }

 private:
  model_server& server_;
};

std::string listen_address(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

struct grpc_front_end::services {
  services(model_server& server, int64_t max_tensor_bytes)
      : prediction(server, max_tensor_bytes), model(server) {}
  prediction_service prediction;
  model_service model;
};

namespace {

constexpr int idle_pollers = 16;

}  // namespace

void quiet_abseil_locks() {
  static std::once_flag once;
  std::call_once(once, [] { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); });
}

grpc_front_end::grpc_front_end(model_server& server, grpc_options options)
    : options_((quiet_abseil_locks(), std::move(options))),
      services_(std::make_unique<services>(server, options_.max_tensor_bytes)) {
  const std::string address = listen_address(options_.host, options_.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(options_.max_receive_bytes);
  // gRPC binds with SO_REUSEPORT by default, so that a second server on a
  // port in use would share it silently; a port is this server's alone.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("actorflow-serve-grpc");
  quota.SetMaxThreads(options_.max_threads);
  builder.SetResourceQuota(quota);
  // A handler blocks while its request runs; with gRPC's default of at most
  // 2 idle pollers, each burst of calls made threads that exited at once
  // (their stacks mapped and unmapped every time: a fifth of the CPU under
  // 64 clients). More idle pollers keep threads; 256 of them slowed one
  // client's calls (each call woke many), so the pool stays at 16.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              std::min(options_.max_threads, idle_pollers));
  builder.RegisterService(&services_->prediction);
  builder.RegisterService(&services_->model);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || port_ == 0)
    throw error("[grpc] cannot listen on " + address + " (in use, or not an address here)",
                error_code::unavailable);
}

grpc_front_end::~grpc_front_end() { stop(); }

void grpc_front_end::stop() {
  if (!grpc_) return;
  grpc_->Shutdown(std::chrono::system_clock::now() + options_.shutdown_grace);
  grpc_->Wait();
  grpc_.reset();
}

}  // namespace actorflow::apps
