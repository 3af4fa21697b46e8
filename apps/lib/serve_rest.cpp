#include "apps/lib/serve_rest.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/lib/http_connection.hpp"
#include "apps/lib/json_values.hpp"
#include "core/bfloat16.hpp"
#include "core/error.hpp"

namespace actorflow::apps {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

// ---------------------------------------------------------------- threads

// cpp-httplib's task queue with a thread per waiting connection, up to a
// bound: its fixed pool would let a few idle connections hold every thread.
class growing_pool : public httplib::TaskQueue {
 public:
  explicit growing_pool(size_t max_threads) : max_threads_(std::max<size_t>(max_threads, 1)) {}
  ~growing_pool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mutex_);
    tasks_.push_back(std::move(fn));
    // A waiting thread takes each queued task; woken ones count as waiting
    // until they take theirs, so compare with the queue, not with zero.
    if (tasks_.size() > idle_ && threads_.size() < max_threads_)
      threads_.emplace_back([this] { work(); });
    else
      wake_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;  // stopping, nothing left
      auto fn = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  size_t max_threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

// ---------------------------------------------------------------- JSON in

[[noreturn]] void bad(const std::string& what) { throw error("[predict] " + what); }

std::string describe(const json_scalar& n) {
  if (n.is_boolean) return n.value != 0 ? "true" : "false";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", n.value);
  return buffer;
}

std::string describe(const json_value& v) {
  switch (v.type) {
    case json_value::kind::null:
      return "null";
    case json_value::kind::boolean:
    case json_value::kind::number:
      return describe(v.scalar);
    case json_value::kind::string:
      return "a string";
    case json_value::kind::array:
      return "a list";
    case json_value::kind::object:
      return "an object";
  }
  return "a value";
}

// One number or boolean as an element of a tensor of `type`.
template <class T>
T element_from(const json_scalar& n, dtype type, const std::string& what) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!n.is_boolean) bad(what + " must hold true or false, found " + describe(n));
    return n.value != 0;
  } else {
    if (n.is_boolean)
      bad(what + " must hold numbers (" + dtype_name(type) + "), found " + describe(n));
    if constexpr (std::is_integral_v<T>) {
      if (!n.is_integer)
        bad(what + " must hold integers (" + dtype_name(type) + "), found " + describe(n));
      if (n.integer < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          n.integer > static_cast<int64_t>(std::numeric_limits<T>::max()))
        bad(what + ": " + std::to_string(n.integer) + " is out of range for " + dtype_name(type));
      return static_cast<T>(n.integer);
    } else if constexpr (std::is_same_v<T, actorflow::bfloat16>) {
      return to_bfloat16(static_cast<float>(n.value));
    } else {
      return static_cast<T>(n.value);
    }
  }
}

template <class T>
T element_from(const json_value& v, dtype type, const std::string& what) {
  if (v.type != json_value::kind::number && v.type != json_value::kind::boolean)
    bad(what + " must hold " + (std::is_same_v<T, bool> ? "true or false" : "numbers") +
        ", found " + describe(v));
  return element_from<T>(v.scalar, type, what);
}

// The dims of nested lists `v`, from their first elements.
std::vector<int64_t> dims_of(const json_value& v) {
  std::vector<int64_t> dims;
  const json_value* at = &v;
  while (at->is_array()) {
    if (at->is_packed()) {
      dims.insert(dims.end(), at->dims.begin(), at->dims.end());
      break;
    }
    dims.push_back(static_cast<int64_t>(at->items.size()));
    if (at->items.empty()) break;
    at = &at->items[0];
  }
  return dims;
}

// Writes the elements of nested lists `v` to `out`, checking each list
// against `dims` (from level `depth` on).
template <class T>
void flatten(const json_value& v, const std::vector<int64_t>& dims, size_t depth, T*& out,
             dtype type, const std::string& what) {
  if (depth == dims.size()) {
    if (v.is_array() || v.is_object())
      bad(what + " is ragged: a list or object where a value belongs");
    *out++ = element_from<T>(v, type, what);
    return;
  }
  if (!v.is_array()) bad(what + " is ragged: a value where a list belongs");
  if (v.is_packed()) {
    if (!std::equal(v.dims.begin(), v.dims.end(), dims.begin() + static_cast<ptrdiff_t>(depth),
                    dims.end()))
      bad(what + " is ragged: lists of different lengths at depth " + std::to_string(depth));
    for (auto& n : v.elements) *out++ = element_from<T>(n, type, what);
    return;
  }
  if (static_cast<int64_t>(v.items.size()) != dims[depth])
    bad(what + " is ragged: lists of different lengths at depth " + std::to_string(depth));
  for (auto& e : v.items) flatten(e, dims, depth + 1, out, type, what);
}

// The tensor `v` holds for `spec` (a whole tensor, its batch dim included).
tensor tensor_from(const json_value& v, const signature_tensor& spec, const std::string& what) {
  auto dims = dims_of(v);
  shape expected(spec.dims);
  shape found(dims);
  if (found.rank() != expected.rank() || !found.compatible_with(expected))
    bad(what + " has shape " + found.to_string() + ", the signature wants " + expected.to_string());
  tensor out(spec.type, found);
  visit_storage_type(spec.type, [&](auto zero) {
    using T = decltype(zero);
    auto* p = static_cast<T*>(out.raw_mutable_data());
    flatten(v, dims, 0, p, spec.type, what);
  });
  return out;
}

// The rows of instances[*][alias], as one list (by reference: no copies).
tensor column_from(const json_value& instances, const signature_tensor& spec,
                   const std::string& what) {
  json_value column;
  column.type = json_value::kind::array;
  if (instances.is_packed()) bad(what + " is missing from an instance");
  for (auto& instance : instances.items) {
    auto* row = instance.is_object() ? instance.find(spec.alias) : nullptr;
    if (!row) bad(what + " is missing from an instance");
    column.items.push_back(*row);
  }
  return tensor_from(column, spec, what);
}

// ---------------------------------------------------------------- JSON out

template <class T>
json element_json(T v) {
  if constexpr (std::is_same_v<T, actorflow::bfloat16>)
    return to_float(v);
  else
    return v;
}

json tensor_json(const tensor& t, int from_dim = 0, size_t offset = 0) {
  return visit_storage_type(t.type(), [&](auto zero) -> json {
    using T = decltype(zero);
    auto* p = static_cast<const T*>(t.raw_data());
    std::function<json(int, size_t)> build = [&](int d, size_t at) -> json {
      if (d == t.rank()) return element_json(p[at]);
      json list = json::array();
      size_t stride = 1;
      for (int k = d + 1; k < t.rank(); ++k) stride *= static_cast<size_t>(t.dims()[k]);
      for (int64_t i = 0; i < t.dims()[d]; ++i)
        list.push_back(build(d + 1, at + static_cast<size_t>(i) * stride));
      return list;
    };
    return build(from_dim, offset);
  });
}

// Row i of `t` (its first dim) as JSON.
json row_json(const tensor& t, int64_t i) {
  size_t row = t.dims()[0] == 0 ? 0 : static_cast<size_t>(t.num_elements() / t.dims()[0]);
  return tensor_json(t, 1, row * static_cast<size_t>(i));
}

// TF Serving's row format: a list of per-row values, or of objects when the
// signature has several outputs.
json predictions_json(const std::map<std::string, tensor>& outputs) {
  json rows = json::array();
  int64_t n = -1;
  for (auto& [alias, t] : outputs) {
    if (t.rank() == 0)
      bad("output '" + alias + "' is a scalar: ask in the column format ({\"inputs\": ...})");
    if (n >= 0 && t.dims()[0] != n)
      bad("the outputs have different first dims: ask in the column format ({\"inputs\": ...})");
    n = t.dims()[0];
  }
  for (int64_t i = 0; i < n; ++i) {
    if (outputs.size() == 1) {
      rows.push_back(row_json(outputs.begin()->second, i));
      continue;
    }
    json row = json::object();
    for (auto& [alias, t] : outputs) row[alias] = row_json(t, i);
    rows.push_back(std::move(row));
  }
  return rows;
}

json outputs_json(const std::map<std::string, tensor>& outputs) {
  if (outputs.size() == 1) return tensor_json(outputs.begin()->second);
  json out = json::object();
  for (auto& [alias, t] : outputs) out[alias] = tensor_json(t);
  return out;
}

// ---------------------------------------------------------------- metadata

std::string tf_dtype_name(dtype t) {
  switch (t) {
    case dtype::float32:
      return "DT_FLOAT";
    case dtype::float64:
      return "DT_DOUBLE";
    case dtype::int32:
      return "DT_INT32";
    case dtype::int64:
      return "DT_INT64";
    case dtype::uint8:
      return "DT_UINT8";
    case dtype::boolean:
      return "DT_BOOL";
    case dtype::bfloat16:
      return "DT_BFLOAT16";
  }
  return "DT_INVALID";
}

json tensor_info_json(const signature_tensor& t) {
  json dims = json::array();
  for (int64_t d : t.dims) dims.push_back({{"size", std::to_string(d)}, {"name", ""}});
  return {{"dtype", tf_dtype_name(t.type)},
          {"tensor_shape", {{"dim", dims}, {"unknown_rank", false}}},
          {"name", t.tensor}};
}

json signature_json(const signature_def& sig) {
  json inputs = json::object(), outputs = json::object();
  for (auto& t : sig.inputs) inputs[t.alias] = tensor_info_json(t);
  for (auto& t : sig.outputs) outputs[t.alias] = tensor_info_json(t);
  return {{"inputs", inputs}, {"outputs", outputs}, {"method_name", sig.method}};
}

// ---------------------------------------------------------------- requests

std::optional<int64_t> version_of(const httplib::Request& req) {
  if (req.matches.size() < 3 || !req.matches[2].matched) return std::nullopt;
  auto text = req.matches[2].str();
  if (text.size() > 18)
    throw error("[serve] version " + text + " is out of range", error_code::not_found);
  return std::stoll(text);
}

void check_model(const httplib::Request& req, const model_server& server) {
  if (req.matches[1].str() != server.name())
    throw error("[serve] no model '" + req.matches[1].str() + "' (this server serves '" +
                    server.name() + "')",
                error_code::not_found);
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, {{"error", message}});
}

}  // namespace

int http_status_of(error_code code) {
  switch (code) {
    case error_code::ok:
      return 200;
    case error_code::invalid_argument:
    case error_code::failed_precondition:
    case error_code::out_of_range:
      return 400;
    case error_code::unauthenticated:
      return 401;
    case error_code::permission_denied:
      return 403;
    case error_code::not_found:
      return 404;
    case error_code::already_exists:
    case error_code::aborted:
      return 409;
    case error_code::resource_exhausted:  // a body over the limit
      return 413;
    case error_code::unimplemented:
      return 501;
    case error_code::cancelled:
    case error_code::unavailable:
      return 503;
    case error_code::deadline_exceeded:
      return 504;
    default:
      return 500;
  }
}

predict_request parse_predict_body(
    const std::string& body,
    const std::function<const signature_def&(const std::string& key)>& signature_named,
    bool& row_format) {
  json_value doc;
  try {
    doc = parse_json(body, max_json_depth);
  } catch (const error& e) {
    bad(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) bad("the body must be a JSON object with \"instances\" or \"inputs\"");
  auto* instances = doc.find("instances");
  auto* columns = doc.find("inputs");
  if (!instances == !columns) bad("the body must hold exactly one of \"instances\" and \"inputs\"");
  row_format = instances != nullptr;
  std::string key(default_signature_key);
  if (auto* name = doc.find("signature_name")) {
    if (name->type != json_value::kind::string) bad("\"signature_name\" must be a string");
    key = name->text;
  }
  auto& sig = signature_named(key);
  predict_request request;
  request.signature = sig.key;
  if (sig.inputs.empty()) return request;
  auto& value = instances ? *instances : *columns;
  bool named = value.is_object();
  if (instances) {
    if (!value.is_array()) bad("\"instances\" must be a list, one entry per row");
    named = !value.items.empty() && value.items[0].is_object();
  }
  if (!named && sig.inputs.size() > 1)
    bad("signature '" + sig.key + "' has " + std::to_string(sig.inputs.size()) +
        " inputs: name each (an object of aliases)");
  for (auto& t : sig.inputs) {
    std::string what = "input '" + t.alias + "'";
    if (instances && named) {
      request.inputs[t.alias] = column_from(value, t, what);
    } else if (named) {
      auto* input = value.find(t.alias);
      if (!input) bad(what + " is missing");
      request.inputs[t.alias] = tensor_from(*input, t, what);
    } else {
      request.inputs[t.alias] = tensor_from(value, t, what);
    }
  }
  if (named)
    for (auto& [alias, v] : (instances ? value.items[0] : value).members)
      if (!sig.find_input(alias)) bad("signature '" + sig.key + "' has no input '" + alias + "'");
  return request;
}

rest_server::rest_server(model_server& server, rest_options options)
    : server_(server),
      options_(std::move(options)),
      http_(std::make_unique<head_timed_http_server>()) {
  size_t max_threads = options_.max_connections;
  http_->new_task_queue = [max_threads] { return new growing_pool(max_threads); };
  // One byte more than the limit, so that the predict route's reader sees a
  // body over it (cpp-httplib cuts one there without saying so).
  http_->set_payload_max_length(options_.max_body_bytes + 1);
  http_->set_read_timeout(options_.read_timeout);
  http_->set_write_timeout(options_.read_timeout);
  http_->set_keep_alive_timeout(options_.keep_alive_timeout.count());
  // cpp-httplib closes a connection after 5 requests by default: its clients
  // would reconnect all the time, into a listen backlog of 5.
  http_->set_keep_alive_max_count(std::numeric_limits<int>::max());
  http_->set_tcp_nodelay(true);
  // cpp-httplib listens with a backlog of 5: a burst of new connections
  // would wait for SYN retries (1 s, 3 s, ...). The listening socket is
  // taken as it is made, and listened on again with the system's maximum.
  int listening = -1;
  http_->set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening = sock;
  });
  route();
  port_ = options_.port == 0
              ? http_->bind_to_any_port(options_.host)
              : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0)
    throw error("[serve] cannot listen for HTTP on " + options_.host + ":" +
                    std::to_string(options_.port) + " (in use, or not an address of this host)",
                error_code::unavailable);
  if (listening >= 0) ::listen(listening, SOMAXCONN);
  listener_ = std::thread([this] { http_->listen_after_bind(); });
}

rest_server::~rest_server() { stop(); }

void rest_server::stop() {
  if (!listener_.joinable()) return;
  http_->stop();
  listener_.join();
}

void rest_server::route() {
  // Every answer, in one place: the status of its error and its metric.
  auto answer = [this](const char* api, httplib::Response& res,
                       const std::function<json(int64_t & version)>& fn) {
    auto start = clock_type::now();
    int64_t version = 0;
    error_code code = error_code::ok;
    try {
      send_json(res, 200, fn(version));
    } catch (const std::exception& e) {
      code = code_of(e);
      send_error(res, http_status_of(code), e.what());
    }
    double us = std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
    server_.metrics().record_request(api, "REST", version, code, us);
  };
  const std::string model = R"(/v1/models/([^/:]+)(?:/versions/(\d+))?)";
  // The body is read here rather than by cpp-httplib, which would refuse
  // one over 8 KiB sent as a form (what `curl -d` sends) before the route.
  http_->Post(model + ":predict", [this, answer](const httplib::Request& req,
                                                 httplib::Response& res,
                                                 const httplib::ContentReader& read) {
    std::string body;
    bool over = false;
    // cpp-httplib's reader fails, with nothing passed on, for a body whose
    // length is over its limit; a chunked one is cut here.
    bool complete = read([&](const char* data, size_t n) {
      over = over || body.size() + n > options_.max_body_bytes;
      if (!over) body.append(data, n);
      return !over;
    });
    over = over || (!complete && res.status == 413);
    if (!complete && !over) {
      // The body stopped short: the client closed or stalled past the read
      // timeout. A stalled one is still there to read the answer; the
      // connection closes after it (apps/lib/http_connection.hpp).
      res.set_header("Connection", "close");
      send_error(res, 408,
                 "[predict] the request body did not arrive within " +
                     std::to_string(options_.read_timeout.count()) + " s");
      server_.metrics().record_request("predict", "REST", 0, error_code::deadline_exceeded, 0);
      return;
    }
    answer("predict", res, [&](int64_t& version) {
      if (over)
        throw error("[predict] the body is larger than the server accepts (" +
                        std::to_string(options_.max_body_bytes) + " bytes)",
                    error_code::resource_exhausted);
      check_model(req, server_);
      auto asked = version_of(req);
      // The signatures of the version served now; the request itself takes
      // whichever is served when it runs (a swap in between fails nothing).
      auto [served, signatures] = server_.metadata(asked);
      auto signature_named = [&, served = served](const std::string& key) -> const signature_def& {
        for (auto& s : signatures)
          if (s.key == key) return s;
        throw error("[predict] model '" + server_.name() + "' version " + std::to_string(served) +
                        " has no signature '" + key + "'",
                    error_code::not_found);
      };
      bool rows = true;
      auto request = parse_predict_body(body, signature_named, rows);
      request.version = asked;
      auto response = server_.predict(request);
      version = response.version;
      return rows ? json{{"predictions", predictions_json(response.outputs)}}
                  : json{{"outputs", outputs_json(response.outputs)}};
    });
  });
  http_->Get(model, [this, answer](const httplib::Request& req, httplib::Response& res) {
    answer("status", res, [&](int64_t&) {
      check_model(req, server_);
      json list = json::array();
      for (auto& s : server_.status(version_of(req)))
        list.push_back({{"version", std::to_string(s.version)},
                        {"state", state_name(s.st)},
                        {"status",
                         {{"error_code", s.code == error_code::ok ? "OK" : error_code_name(s.code)},
                          {"error_message", s.message}}}});
      return json{{"model_version_status", list}};
    });
  });
  http_->Get(model + "/metadata", [this, answer](const httplib::Request& req,
                                                 httplib::Response& res) {
    answer("metadata", res, [&](int64_t& version) {
      check_model(req, server_);
      auto [served, signatures] = server_.metadata(version_of(req));
      version = served;
      json defs = json::object();
      for (auto& s : signatures) defs[s.key] = signature_json(s);
      return json{
          {"model_spec",
           {{"name", server_.name()}, {"signature_name", ""}, {"version", std::to_string(served)}}},
          {"metadata", {{"signature_def", {{"signature_def", defs}}}}}};
    });
  });
  http_->Get("/monitoring/prometheus/metrics",
             [this](const httplib::Request&, httplib::Response& res) {
               res.set_content(server_.metrics().prometheus_text(), "text/plain; version=0.0.4");
             });
  // cpp-httplib's own refusals (an unknown path 404, a body over the limit
  // 413, an unreadable request 400) get a body saying so.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string why = res.status == 404   ? "no such path: " + req.method + " " + req.path
                      : res.status == 413 ? "the body is larger than the server accepts"
                                          : "the request could not be read";
    send_error(res, res.status, why);
  });
}

}  // namespace actorflow::apps
