// The model server (actors/serving/model_server.hpp): versions found,
// swapped in under load without failing a request, corrupted ones refused
// while the old one serves; batching that answers each request with its own
// rows and refuses a flood beyond its queue. Then actorflow-serve itself,
// a real process, over TensorFlow Serving's REST API: answers equal to the
// export's own, the errors and statuses of bad requests, a thousand idle
// connections, and SIGTERM with requests in flight.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "actors/serving/model_server.hpp"
#include "serving_fixture.hpp"
#include "support/child_process.hpp"
#include "test_util.hpp"

// After Eigen (through the headers above): <resolv.h>, which it includes,
// defines a macro `_res` that Eigen uses as a parameter's name.
#include <httplib.h>

using namespace actorflow;
using actorflow::testing::code_of_failure;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::export_trained;
using actorflow::testing::temp_dir;
using actorflow::testing::trained_classifier;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

tensor one_row(int i) {
  std::vector<float> v(4);
  for (int k = 0; k < 4; ++k) v[static_cast<size_t>(k)] = 0.25f * float((i + k) % 5);
  return tensor::from_vector<float>(v, {1, 4});
}

model_server_options quiet(const std::string& base, std::vector<std::string>* log = nullptr) {
  model_server_options o;
  o.name = "clf";
  o.base_path = base;
  o.poll_interval = std::chrono::milliseconds(0);
  o.log = [log](const std::string& line) {
    if (log) log->push_back(line);
  };
  return o;
}

predict_request request_for(const tensor& features) {
  predict_request r;
  r.inputs = {{"features", features}};
  return r;
}

}  // namespace

TEST_CASE("the server serves the newest version and swaps in a newer one") {
  temp_dir base("serve_versions");
  export_trained(base / "1", 1);
  std::vector<std::string> log;
  model_server server(quiet(base.path.string(), &log));
  CHECK(code_of_failure([&] { server.predict(request_for(one_row(0))); }) ==
        error_code::unavailable);
  CHECK(server.poll());
  CHECK(server.serving_version() == 1);
  auto v1 = load_model(base / "1")->predict("serving_default", {{"features", one_row(3)}});
  auto r = server.predict(request_for(one_row(3)));
  CHECK(r.version == 1);
  CHECK(r.outputs.at("probabilities").to_vector<float>() ==
        v1.at("probabilities").to_vector<float>());
  CHECK_FALSE(server.poll());  // nothing new

  export_trained(base / "2", 9);
  CHECK(server.poll());
  CHECK(server.serving_version() == 2);
  r = server.predict(request_for(one_row(3)));
  CHECK(r.version == 2);
  CHECK(r.outputs.at("probabilities").to_vector<float>() !=
        v1.at("probabilities").to_vector<float>());
  auto asked_old = request_for(one_row(3));
  asked_old.version = 1;
  CHECK(code_of_failure([&] { server.predict(asked_old); }) == error_code::not_found);
  auto states = server.status();
  REQUIRE(states.size() == 2);
  CHECK(states[0].version == 2);
  CHECK(states[0].st == version_status::state::available);
  // Swapped out: unloading until the watcher's next look unloads it.
  CHECK(states[1].st == version_status::state::unloading);
  server.poll();
  CHECK(server.status(1).at(0).st == version_status::state::end);

  // Only the outputs asked for; an unknown one is named.
  auto filtered = request_for(one_row(3));
  filtered.output_filter = {"classes"};
  CHECK(server.predict(filtered).outputs.size() == 1);
  filtered.output_filter = {"logits"};
  CHECK(contains(error_of([&] { server.predict(filtered); }), "output_filter names 'logits'"));
}

TEST_CASE("a corrupted or incomplete new version is refused; the old one goes on serving") {
  temp_dir base("serve_corrupt");
  export_trained(base / "1", 1);
  std::vector<std::string> log;
  model_server server(quiet(base.path.string(), &log));
  server.poll();
  // Version 2 without MODEL (copied by hand, half done), version 3 with a flipped byte.
  fs::create_directories(base / "2");
  fs::copy_file(base / "1/model.afg", base / "2/model.afg");
  export_trained(base / "3", 4);
  {
    std::fstream f(base / "3/model.afg", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  CHECK_FALSE(server.poll());
  CHECK(server.serving_version() == 1);
  CHECK(server.predict(request_for(one_row(1))).version == 1);
  auto three = server.status(3);
  REQUIRE(three.size() == 1);
  CHECK(three[0].code == error_code::data_loss);
  CHECK(contains(three[0].message, "model.afg"));
  bool logged = false;
  for (auto& line : log)
    logged = logged || contains(line, "version 3 failed to load, still serving version 1");
  CHECK(logged);
  // Repaired (written again): tried again, and served.
  fs::remove_all(base / "3");
  export_trained(base / "3", 4);
  CHECK(server.poll());
  CHECK(server.serving_version() == 3);
}

TEST_CASE("a version swap under load fails no request") {
  temp_dir base("serve_swap");
  export_trained(base / "1", 1);
  model_server server(quiet(base.path.string()));
  server.poll();
  auto expected_v1 = load_model(base / "1")->predict("serving_default", {{"features", one_row(2)}});
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, answered{0}, wrong{0};
  std::map<int64_t, std::vector<float>> expected;
  expected[1] = expected_v1.at("probabilities").to_vector<float>();
  export_trained(base / "2", 9);
  expected[2] = load_model(base / "2")
                    ->predict("serving_default", {{"features", one_row(2)}})
                    .at("probabilities")
                    .to_vector<float>();
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      while (!stop) {
        try {
          auto r = server.predict(request_for(one_row(2)));
          if (r.outputs.at("probabilities").to_vector<float>() != expected.at(r.version)) ++wrong;
          ++answered;
        } catch (const std::exception&) {
          ++failures;
        }
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(server.poll());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  for (auto& c : clients) c.join();
  CHECK(failures == 0);
  CHECK(wrong == 0);
  CHECK(answered > 20);
  CHECK(server.serving_version() == 2);
}

TEST_CASE("batching answers each request with its own rows, in fewer steps") {
  temp_dir base("serve_batching");
  export_trained(base / "1", 3);
  auto direct = load_model(base / "1");
  auto options = quiet(base.path.string());
  options.batching = {.enabled = true,
                      .max_batch_size = 8,
                      .batch_timeout = std::chrono::milliseconds(20),
                      .num_batch_threads = 2,
                      .max_enqueued_batches = 16};
  model_server server(options);
  server.poll();
  constexpr int requests = 32;
  std::vector<std::thread> clients;
  std::atomic<int> mismatches{0}, failures{0};
  for (int i = 0; i < requests; ++i)
    clients.emplace_back([&, i] {
      try {
        auto r = server.predict(request_for(one_row(i)));
        auto want = direct->predict("serving_default", {{"features", one_row(i)}});
        if (r.outputs.at("classes").to_vector<int64_t>() !=
                want.at("classes").to_vector<int64_t>() ||
            r.outputs.at("probabilities").to_vector<float>() !=
                want.at("probabilities").to_vector<float>() ||
            r.outputs.at("probabilities").dims() != shape{1, 3})
          ++mismatches;
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& c : clients) c.join();
  CHECK(mismatches == 0);
  CHECK(failures == 0);
  // The batch histogram's count is the number of steps run: fewer than requests.
  auto text = server.metrics().prometheus_text();
  auto at = text.find(":tensorflow:serving:batching_session:processed_batch_size_count");
  REQUIRE(at != std::string::npos);
  int64_t batches = std::stoll(text.substr(text.find("} ", at) + 2));
  MESSAGE("batches for " << requests << " requests: " << batches);
  CHECK(batches < requests);
  CHECK(batches >= requests / 8);

  // A request of several rows, and one larger than a batch, keep their rows.
  auto big = tensor::zeros(dtype::float32, {20, 4});
  auto r = server.predict(request_for(big));
  CHECK(r.outputs.at("probabilities").dims() == shape{20, 3});
}

TEST_CASE("a flood beyond the batch queue is refused with unavailable, and the server recovers") {
  temp_dir base("serve_flood");
  export_trained(base / "1", 3);
  auto options = quiet(base.path.string());
  options.batching = {.enabled = true,
                      .max_batch_size = 1,
                      .batch_timeout = std::chrono::microseconds(0),
                      .num_batch_threads = 1,
                      .max_enqueued_batches = 1};
  model_server server(options);
  server.poll();
  std::atomic<int> refused{0}, answered{0}, other{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t)
    clients.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        try {
          server.predict(request_for(one_row(i)));
          ++answered;
        } catch (const error& e) {
          (e.code() == error_code::unavailable ? refused : other)++;
        }
      }
    });
  for (auto& c : clients) c.join();
  MESSAGE("answered " << answered.load() << ", refused " << refused.load());
  CHECK(other == 0);
  CHECK(refused > 0);
  CHECK(answered > 0);
  CHECK(server.predict(request_for(one_row(1))).outputs.size() == 2);
  CHECK(server.metrics().queue_depth() == 0);
}

// ---------------------------------------------------------------- actorflow-serve

namespace {

// actorflow-serve on 127.0.0.1, serving `base` as model "clf" over REST.
struct serve_process {
  uint16_t port = actorflow::testing::free_port();
  actorflow::testing::child_process child;

  serve_process(const std::string& base, std::vector<std::string> extra = {})
      : child(arguments(base, port, std::move(extra))) {
    REQUIRE_MESSAGE(child.wait_for("[serve] ready", std::chrono::seconds(60)), child.output());
  }
  ~serve_process() { child.stop(); }

  static std::vector<std::string> arguments(const std::string& base, uint16_t port,
                                            std::vector<std::string> extra) {
    std::vector<std::string> argv{ACTORFLOW_SERVE_BINARY,
                                  "--model_name=clf",
                                  "--model_base_path=" + base,
                                  "--host=127.0.0.1",
                                  "--rest_api_port=" + std::to_string(port),
                                  "--port=0",
                                  "--file_system_poll_wait_seconds=1",
                                  "--threads=2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(std::chrono::seconds(5));
    c.set_read_timeout(std::chrono::seconds(10));
    return c;
  }

  // A plain TCP connection to the server's HTTP port, for requests no
  // client library would send; -1 when it cannot connect.
  int connect_raw() const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  // Resident memory of the server process, in KiB (from /proc).
  int64_t rss_kib() {
    std::ifstream status("/proc/" + std::to_string(child.pid()) + "/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    return -1;
  }
};

json rows_of(const tensor& t) {
  json rows = json::array();
  auto v = t.to_vector<float>();
  for (int64_t i = 0; i < t.dims()[0]; ++i)
    rows.push_back(std::vector<float>(v.begin() + i * 4, v.begin() + (i + 1) * 4));
  return rows;
}

tensor four_rows() {
  return tensor::from_vector<float>(
      {1, 0, 0, 1, 0, 1, 1, 0, 0.5f, 0.5f, 0, 1, 0.2f, 0.4f, 0.6f, 0.8f}, {4, 4});
}

}  // namespace

TEST_CASE("actorflow-serve answers TensorFlow Serving's REST API as the export does") {
  temp_dir base("serve_rest");
  export_trained(base / "1", 3);
  auto expected = load_model(base / "1")->predict("serving_default", {{"features", four_rows()}});
  auto probabilities = expected.at("probabilities").to_vector<float>();
  auto classes = expected.at("classes").to_vector<int64_t>();
  serve_process serve(base.path.string());
  auto http = serve.client();

  // Rows: one prediction object per instance.
  auto res = http.Post("/v1/models/clf:predict", json{{"instances", rows_of(four_rows())}}.dump(),
                       "application/json");
  REQUIRE(res);
  REQUIRE_MESSAGE(res->status == 200, res->body);
  auto predictions = json::parse(res->body).at("predictions");
  REQUIRE(predictions.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(predictions[i].at("classes").get<int64_t>() == classes[i]);
    for (size_t k = 0; k < 3; ++k)
      CHECK(predictions[i].at("probabilities")[k].get<float>() == probabilities[i * 3 + k]);
  }
  // Columns, the version named, a named input.
  res = http.Post(
      "/v1/models/clf/versions/1:predict",
      json{{"signature_name", "serving_default"}, {"inputs", {{"features", rows_of(four_rows())}}}}
          .dump(),
      "application/json");
  REQUIRE(res);
  REQUIRE_MESSAGE(res->status == 200, res->body);
  auto outputs = json::parse(res->body).at("outputs");
  CHECK(outputs.at("classes").get<std::vector<int64_t>>() == classes);
  // A large body sent as a form, as `curl -d` sends it.
  json many = json::array();
  for (int i = 0; i < 500; ++i) many.push_back(rows_of(four_rows())[i % 4]);
  res = http.Post("/v1/models/clf:predict", json{{"instances", many}}.dump(),
                  "application/x-www-form-urlencoded");
  REQUIRE(res);
  CHECK_MESSAGE(res->status == 200, res->body);

  res = http.Get("/v1/models/clf");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json::parse(res->body)["model_version_status"][0]["state"] == "AVAILABLE");
  res = http.Get("/v1/models/clf/metadata");
  REQUIRE(res);
  auto sig =
      json::parse(res->body)["metadata"]["signature_def"]["signature_def"]["serving_default"];
  CHECK(sig["inputs"]["features"]["dtype"] == "DT_FLOAT");
  CHECK(sig["outputs"]["classes"]["dtype"] == "DT_INT64");
  CHECK(sig["inputs"]["features"]["tensor_shape"]["dim"][1]["size"] == "4");
  res = http.Get("/monitoring/prometheus/metrics");
  REQUIRE(res);
  CHECK(contains(res->body,
                 ":tensorflow:serving:request_count{model_name=\"clf\",version=\"1\","
                 "API=\"predict\",entrypoint=\"REST\",status=\"ok\"} 3"));
  CHECK(contains(res->body, ":tensorflow:serving:request_latency_bucket{"));
}

TEST_CASE("actorflow-serve answers bad requests with the matching status and goes on") {
  temp_dir base("serve_rest_bad");
  export_trained(base / "1", 3);
  serve_process serve(base.path.string(), {"--max_body_bytes=4096"});
  auto http = serve.client();
  auto post = [&](const std::string& path, const std::string& body) {
    auto res = http.Post(path, body, "application/json");
    REQUIRE(res);
    return std::make_pair(res->status, json::parse(res->body, nullptr, false));
  };
  auto good = json{{"instances", rows_of(four_rows())}}.dump();
  auto expect = [&](const std::string& path, const std::string& body, int status,
                    const std::string& part) {
    auto [got, answer] = post(path, body);
    CHECK_MESSAGE(got == status, path << " " << body.substr(0, 60) << " -> " << answer.dump());
    CHECK_MESSAGE(contains(answer.value("error", ""), part), answer.dump());
    CHECK(post("/v1/models/clf:predict", good).first == 200);  // still answering
  };
  const std::string predict = "/v1/models/clf:predict";
  expect(predict, "{\"instances\": [[1, 2", 400, "not valid JSON");
  expect(predict, "[1]", 400, "must be a JSON object");
  expect(predict, "{\"instances\": [[true, false, true, true]]}", 400, "must hold numbers");
  expect(predict, "{\"instances\": [[1, 2, 3]]}", 400,
         "has shape (1,3), the signature wants (?,4)");
  expect(predict, "{\"instances\": [[1, 2, 3, 4], [1, 2]]}", 400, "ragged");
  expect(predict, "{\"inputs\": {\"other\": [[1, 2, 3, 4]]}}", 400, "input 'features' is missing");
  expect(predict, "{\"instances\": [], \"inputs\": []}", 400, "exactly one of");
  expect(predict, std::string(100, '[') + std::string(100, ']'), 400, "deeper than 32");
  expect(predict, "{\"signature_name\": \"nope\", \"instances\": [[1, 2, 3, 4]]}", 404,
         "no signature 'nope'");
  expect("/v1/models/other:predict", good, 404, "no model 'other'");
  expect("/v1/models/clf/versions/9:predict", good, 404, "no version 9");
  expect("/v1/models/clf/versions/99999999999999999999:predict", good, 404, "out of range");
  expect("/v1/nothing", good, 404, "no such path");
  expect(predict, "{\"instances\": [" + std::string(8000, ' ') + "]}", 413, "larger than");
  auto res = http.Get("/v1/models/clf/versions/5");
  REQUIRE(res);
  CHECK(res->status == 404);
}

TEST_CASE("actorflow-serve keeps answering with a thousand idle connections, in bounded memory") {
  temp_dir base("serve_rest_idle");
  export_trained(base / "1", 3);
  serve_process serve(base.path.string());
  auto http = serve.client();
  auto good = json{{"instances", rows_of(four_rows())}}.dump();
  REQUIRE(http.Post("/v1/models/clf:predict", good, "application/json")->status == 200);
  int64_t before = serve.rss_kib();
  std::vector<int> idle;
  for (int i = 0; i < 1000; ++i) {
    int fd = serve.connect_raw();
    if (fd < 0) break;
    if (i % 2)
      ::send(fd, "POST /v1/models/clf:predict HTTP/1.1\r\nHost: x\r\n", 47, 0);  // half sent
    idle.push_back(fd);
  }
  CHECK(idle.size() == 1000);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    auto res = http.Post("/v1/models/clf:predict", good, "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t during = serve.rss_kib();
  MESSAGE("5 requests beside 1000 idle connections: " << seconds << " s; RSS " << before
                                                      << " KiB -> " << during << " KiB");
  CHECK(seconds < 5);
  CHECK(during - before < 256 * 1024);
  for (int fd : idle) ::close(fd);
}

// Sends `text` on a new raw connection and reads what comes back until the
// server closes it (or 10 s pass: every answer here is due within about 1 s).
std::string exchange_raw(const serve_process& serve, const std::string& text) {
  int fd = serve.connect_raw();
  REQUIRE(fd >= 0);
  timeval wait{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  for (size_t sent = 0; sent < text.size();) {
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    sent += size_t(n);
  }
  std::string answer;
  char chunk[4096];
  for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) answer.append(chunk, size_t(n));
  ::close(fd);
  return answer;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST_CASE("a request that stalls past the read timeout gets 408 and its connection closes") {
  temp_dir base("serve_rest_slow");
  export_trained(base / "1", 3);
  serve_process serve(base.path.string(), {"--http_read_timeout_seconds=1"});
  auto http = serve.client();
  auto good = json{{"instances", rows_of(four_rows())}}.dump();
  const std::string head =
      "POST /v1/models/clf:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100\r\n\r\n";
  struct stall {
    const char* what;
    std::string sent;
    const char* message;
  };
  for (auto& [what, sent, message] : std::vector<stall>{
           {"the body", head + "{\"instances\": [", "request body did not arrive within 1 s"},
           {"the request line", "POST /v1/models/clf:pre",
            "request line and headers did not arrive within 1 s"},
           {"the headers", "POST /v1/models/clf:predict HTTP/1.1\r\nHost: x\r\n",
            "request line and headers did not arrive within 1 s"}}) {
    CAPTURE(what);
    auto start = std::chrono::steady_clock::now();
    auto answer = exchange_raw(serve, sent);  // returns once the server closes
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_MESSAGE(answer.rfind("HTTP/1.1 408", 0) == 0, answer);
    CHECK_MESSAGE(answer.find(message) != std::string::npos, answer);
    CHECK(answer.find("Connection: close") != std::string::npos);
    CHECK(seconds < 5);
    auto res = http.Post("/v1/models/clf:predict", good, "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
  }
}

TEST_CASE("a request head over 64 KiB gets 431; pipelined requests are each answered") {
  temp_dir base("serve_rest_head");
  export_trained(base / "1", 3);
  serve_process serve(base.path.string());
  auto big = exchange_raw(serve, "GET /v1/models/clf HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                     std::string(70000, 'a') + "\r\n\r\n");
  CHECK_MESSAGE(big.rfind("HTTP/1.1 431", 0) == 0, big.substr(0, 200));
  CHECK(big.find("larger than the server accepts (65536 bytes)") != std::string::npos);
  // Three requests in one send: a predict between two status requests, the
  // last one closing. Each is answered, in order.
  auto good = json{{"instances", rows_of(four_rows())}}.dump();
  auto status = [](const char* connection) {
    return std::string("GET /v1/models/clf HTTP/1.1\r\nHost: x\r\nConnection: ") + connection +
           "\r\n\r\n";
  };
  auto answers =
      exchange_raw(serve, status("keep-alive") +
                              "POST /v1/models/clf:predict HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(good.size()) + "\r\n\r\n" + good + status("close"));
  CHECK_MESSAGE(count_of(answers, "HTTP/1.1 200 OK") == 3, answers);
  auto first = answers.find("model_version_status"), second = answers.find("predictions"),
       third = answers.rfind("model_version_status");
  CHECK(first < second);
  CHECK(second < third);
  CHECK(third != std::string::npos);
}

TEST_CASE("actorflow-serve refuses a flood beyond its batch queue with 503 and keeps answering") {
  temp_dir base("serve_rest_flood");
  export_trained(base / "1", 3);
  // TF Serving's parameters file, over the flags' defaults.
  std::ofstream(base / "batching.config") << "max_batch_size { value: 1 }\n"
                                             "batch_timeout_micros { value: 0 }  # at once\n"
                                             "num_batch_threads: { value: 1 }\n"
                                             "max_enqueued_batches { value: 1 }\n";
  serve_process serve(base.path.string(), {"--enable_batching", "--batching_parameters_file=" +
                                                                    (base / "batching.config")});
  auto good = json{{"instances", rows_of(four_rows())}}.dump();
  int64_t before = serve.rss_kib();
  std::atomic<int> answered{0}, refused{0}, other{0};
  std::string refusal;
  std::mutex refusal_mutex;
  std::vector<std::thread> clients;
  for (int t = 0; t < 24; ++t)
    clients.emplace_back([&] {
      auto http = serve.client();
      for (int i = 0; i < 40; ++i) {
        auto res = http.Post("/v1/models/clf:predict", good, "application/json");
        if (res && res->status == 200) {
          ++answered;
        } else if (res && res->status == 503) {
          ++refused;
          std::lock_guard lock(refusal_mutex);
          refusal = res->body;
        } else {
          ++other;
        }
      }
    });
  for (auto& c : clients) c.join();
  MESSAGE("answered " << answered.load() << ", refused " << refused.load() << "; RSS " << before
                      << " -> " << serve.rss_kib() << " KiB");
  CHECK(other == 0);
  CHECK(refused > 0);
  CHECK(answered > 0);
  CHECK(contains(refusal, "the batch queue is full"));
  CHECK(serve.rss_kib() - before < 128 * 1024);
  auto http = serve.client();
  auto res = http.Post("/v1/models/clf:predict", good, "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
}

TEST_CASE("actorflow-serve swaps in a new version under load and stops cleanly on SIGTERM") {
  temp_dir base("serve_rest_swap");
  export_trained(base / "1", 1);
  serve_process serve(base.path.string());
  auto good = json{{"instances", rows_of(four_rows())}}.dump();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::thread load([&] {
    auto http = serve.client();
    while (!stop) {
      auto res = http.Post("/v1/models/clf:predict", good, "application/json");
      (res && res->status == 200 ? ok : failed)++;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  export_trained(base / "2", 9);
  bool swapped = serve.child.wait_for("serving version 2", std::chrono::seconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  load.join();
  CHECK(swapped);
  CHECK(failed == 0);
  CHECK(ok > 10);
  auto http = serve.client();
  auto res = http.Get("/v1/models/clf");
  REQUIRE(res);
  CHECK(json::parse(res->body)["model_version_status"][0]["version"] == "2");

  // SIGTERM with requests in flight: each is answered or refused, none
  // hangs, and the process exits 0 within its shutdown bound.
  std::atomic<int> answered{0}, refused{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      auto c = serve.client();
      for (int i = 0; i < 200; ++i) {
        auto r = c.Post("/v1/models/clf:predict", good, "application/json");
        if (!r) {
          ++refused;
          break;
        }
        (r->status == 200 ? answered : refused)++;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  serve.child.signal(SIGTERM);
  int status = serve.child.wait_exit(std::chrono::seconds(20));
  for (auto& c : clients) c.join();
  CHECK_MESSAGE(status == 0, serve.child.output());
  CHECK(contains(serve.child.output(), "[serve] stopped"));
  CHECK(answered > 0);
}
