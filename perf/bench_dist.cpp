#include "perf/bench_dist.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>

#include "actors/cluster/cluster.hpp"
#include "actors/run/messages.hpp"
#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/sync_replicas.hpp"
#include "perf/bench_train.hpp"
#include "perf/bench_util.hpp"
#include "perf/ps_cluster.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/test_certificates.hpp"

namespace actorflow::bench {

using testing::child_process;
using testing::free_port;

namespace {

using namespace std::chrono_literals;

constexpr int num_ps = 2;
constexpr int num_workers = 4;
constexpr int warmup_steps = 50;
constexpr int blocks = 5;
constexpr int max_block = 200;
constexpr int min_block = 20;
// A block should take about this long; fewer steps when steps are slow.
constexpr double block_seconds = 0.5;
constexpr size_t transfer_bytes = size_t{64} << 20;

int block_for(double seconds_per_step) {
  if (!(seconds_per_step > 0)) return max_block;
  return std::clamp(static_cast<int>(block_seconds / seconds_per_step), min_block, max_block);
}

// ---- the null model ------------------------------------------------------------

struct null_model {
  operation init, train;
};

// One float32 scalar on each PS task. The worker reads both, computes a
// trivial update from each (x * 0, on the worker), and sends it back to be
// added to its variable (assign_add sits with its variable, on the PS). The
// train op groups the two updates; nothing is fetched.
null_model build_null_model(graph& g) {
  null_model m;
  auto zero = scalar(g, 0.0f, "zero");
  std::vector<operation> updates;
  for (int t = 0; t < num_ps; ++t) {
    variable v;
    {
      auto on_ps = g.device_scope(task_name("ps", t));
      v = make_variable(scalar(g, 1.0f), fmt::format("null_v{}", t));
    }
    auto delta = mul(v.value(), zero, fmt::format("null_delta{}", t));
    auto update = assign_add(v, delta, fmt::format("null_update{}", t));
    updates.push_back(operation(&g, update.ref().node));
  }
  m.train = group(g, updates, "null_train");
  m.init = global_variables_initializer(g);
  return m;
}

double null_step_ms_one_worker(const ps_cluster& c,
                               runtime_options options = cluster_runtime_options()) {
  auto cluster = connect_as_worker(c, 0, options);
  graph g;
  auto m = build_null_model(g);
  session s(g, cluster);
  s.run({m.init});
  s.run({m.train});  // compiles
  double t0 = now_seconds();
  for (int i = 0; i < warmup_steps; ++i) s.run({m.train});
  int block = block_for((now_seconds() - t0) / warmup_steps);
  double secs = median_seconds(blocks, 0, [&] {
    for (int i = 0; i < block; ++i) s.run({m.train});
  });
  return 1000.0 * secs / block;
}

// The mean of many ping round trips from an actor of the bench's runtime to
// ps task 0's server, one at a time, as the step driver sends its messages.
double caf_round_trip_ms(const ps_cluster& c) {
  constexpr int round_trips = 2000;
  auto cluster = connect_as_worker(c, 0);
  auto server = cluster->server(task_name("ps", 0));
  auto& system = cluster->rt()->system();
  caf::scoped_actor self{system};
  auto ping_all = [&](int n) {
    auto pinger = system.spawn([server, n](caf::event_based_actor* a) -> caf::behavior {
      auto left = std::make_shared<int>(n);
      a->send(server, ping_atom::value);
      return {[a, server, left](const std::string&) {
        if (--*left > 0)
          a->send(server, ping_atom::value);
        else
          a->quit();
      }};
    });
    self->wait_for(pinger);
  };
  ping_all(100);  // warm-up
  double t0 = now_seconds();
  ping_all(round_trips);
  return 1000.0 * (now_seconds() - t0) / round_trips;
}

// Synchronous training's step: every worker runs one step, then all wait for
// the slowest (a barrier per step). The figure is the median over blocks of
// the mean time from one barrier to the next.
double null_step_ms_lockstep(const ps_cluster& c, int workers) {
  const size_t max_phases = warmup_steps + blocks * max_block + 2;
  std::vector<double> stamps(max_phases, 0.0);  // when phase k completed
  std::atomic<int> total{INT_MAX};              // steps to run, set after warm-up
  int block = max_block;
  size_t phase = 0;
  // Phase 0: every worker is set up (worker 0 has initialized the variables).
  // Phase k > 0: step k - 1 is done everywhere. Runs once per phase, before
  // any thread is released, so what it writes is seen by all.
  auto completion = [&]() noexcept {
    if (phase < stamps.size()) stamps[phase] = now_seconds();
    if (phase == warmup_steps + 1) {  // steps 1 .. warmup_steps done (step 0 compiles)
      block = block_for((stamps[phase] - stamps[1]) / warmup_steps);
      total = warmup_steps + 1 + blocks * block;
    }
    ++phase;
  };
  std::barrier sync(workers, completion);
  std::atomic<bool> failed{false};
  std::vector<std::string> errors(static_cast<size_t>(workers));

  auto body = [&](int index) {
    try {
      auto options = cluster_runtime_options();
      // 4 CAF nodes and 2 PS tasks share this machine's cores (one thread
      // each measured ~15% faster than the default of one per core on 2 cores).
      options.scheduler_threads = 1;
      options.compute_threads = 1;
      auto cluster = connect_as_worker(c, index, options);
      graph g;
      auto m = build_null_model(g);
      session s(g, cluster);
      if (index == 0) s.run({m.init});
      for (int k = 0;; ++k) {
        sync.arrive_and_wait();
        if (failed) break;
        if (k >= total) return;
        s.run({m.train});
      }
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(index)] = e.what();
      failed = true;
    } catch (...) {
      errors[static_cast<size_t>(index)] = "unknown exception";
      failed = true;
    }
    // Failed here or elsewhere: leave the barrier so no one waits for us.
    sync.arrive_and_drop();
  };
  {
    std::vector<std::jthread> threads;  // joined when the block ends
    for (int i = 0; i < workers; ++i) {
      try {
        threads.emplace_back(body, i);
      } catch (const std::exception& e) {
        // The started ones wait on the barrier for this one and the rest:
        // leave it in their place.
        errors[static_cast<size_t>(i)] = std::string("cannot start its thread: ") + e.what();
        failed = true;
        for (int j = i; j < workers; ++j) sync.arrive_and_drop();
        break;
      }
    }
  }
  for (int i = 0; i < workers; ++i)
    if (!errors[static_cast<size_t>(i)].empty())
      throw std::runtime_error(fmt::format("worker {}: {}", i, errors[static_cast<size_t>(i)]));
  std::vector<double> means;
  for (int b = 0; b < blocks; ++b) {
    size_t from = warmup_steps + 1 + static_cast<size_t>(b * block);
    means.push_back((stamps[from + static_cast<size_t>(block)] - stamps[from]) / block);
  }
  std::nth_element(means.begin(), means.begin() + blocks / 2, means.end());
  return 1000.0 * means[blocks / 2];
}

// ---- synchronous MLP training: 2 workers, the variables on ps task 0 -----------

// One worker of synchronous training (ops/sync_replicas.hpp) of the
// Fashion-MNIST MLP with Adam, batch 128, fed one in-memory batch as the
// single-process mlp figure is. Worker 0 is the chief: it initializes the
// variables and runs the aggregation in a second thread, stamping the time of
// each global step into `stamps`, then closes the token queue, which ends the
// other worker's loop.
void sync_mlp_worker(const ps_cluster& c, int index, int workers, int global_steps,
                     std::vector<double>& stamps) {
  constexpr int batch = 128;
  auto cluster = connect_as_worker(c, index, cluster_runtime_options(1));
  graph g;
  auto placement = g.device_function_scope(replica_device_setter(1, task_name("worker", index)));
  auto images = placeholder(g, dtype::float32, {batch, 28, 28, 1}, "images");
  auto labels = placeholder(g, dtype::int32, {batch}, "labels");
  auto net = models::make_classifier(g, "mlp", 1);
  auto loss = models::mean_cross_entropy(net->logits(images), labels);
  adam opt(1e-3);
  auto sync = sync_replicas(opt, loss, workers, workers, task_name("worker", index));
  auto init = global_variables_initializer(g);
  auto ready = global_variables_initialized(g);
  session s(g, cluster);
  const bool chief = index == 0;
  if (chief) s.run({init});
  // The others wait until the chief's init has set every variable.
  for (double deadline = now_seconds() + 20; !s.eval(ready).item<bool>();) {
    if (now_seconds() > deadline)
      throw std::runtime_error("the chief did not initialize within 20 s");
    std::this_thread::sleep_for(20ms);
  }
  s.run({sync.local_step_init});
  std::string aggregation_error;
  std::jthread aggregation;
  if (chief)
    aggregation = std::jthread([&] {
      try {
        for (int k = 0; k < global_steps; ++k) {
          s.run({sync.chief_update});
          stamps.push_back(now_seconds());
        }
      } catch (const std::exception& e) {
        aggregation_error = e.what();
      }
      s.run({sync.close_tokens});
    });
  auto [x, y] = random_fmnist_batch(batch);
  feed_list feeds{{images, x}, {labels, y}};
  for (;;) {
    try {
      s.run(feeds, {loss}, {sync.worker_train});
    } catch (const error& e) {
      if (std::string(e.what()).find("closed") != std::string::npos) break;  // finished
      throw;
    }
  }
  if (aggregation.joinable()) aggregation.join();
  if (!aggregation_error.empty()) throw std::runtime_error("aggregation: " + aggregation_error);
}

double dist_mlp_examples_per_s(const ps_cluster& c) {
  constexpr int workers = 2, batch = 128, warmup = 10, block = 20;
  const int global_steps = warmup + blocks * block;
  std::vector<double> stamps;
  stamps.reserve(static_cast<size_t>(global_steps));
  std::vector<std::string> errors(workers);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < workers; ++i)
      threads.emplace_back([&, i] {
        try {
          sync_mlp_worker(c, i, workers, global_steps, stamps);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(i)] = e.what();
        }
      });
  }
  for (int i = 0; i < workers; ++i)
    if (!errors[static_cast<size_t>(i)].empty())
      throw std::runtime_error(fmt::format("worker {}: {}", i, errors[static_cast<size_t>(i)]));
  if (static_cast<int>(stamps.size()) != global_steps)
    throw std::runtime_error(fmt::format("{} of {} global steps ran", stamps.size(), global_steps));
  std::vector<double> rates;  // examples per second of each block: every worker's batch per step
  for (int b = 0; b < blocks; ++b) {
    size_t from = static_cast<size_t>(warmup - 1 + b * block);
    rates.push_back(double(block * workers * batch) / (stamps[from + block] - stamps[from]));
  }
  std::nth_element(rates.begin(), rates.begin() + blocks / 2, rates.end());
  return rates[blocks / 2];
}

// ---- 64 MiB from the worker to a PS task -----------------------------------

// With `transfer` bfloat16 the tensor crosses as half the bytes (cast on each side): the rate
// counts the float32 bytes delivered.
double transfer_gbps(const ps_cluster& c, runtime_options options = cluster_runtime_options(),
                     dtype transfer = dtype::float32) {
  auto cluster = connect_as_worker(c, 0, options, transfer);
  graph g;
  const int64_t n = static_cast<int64_t>(transfer_bytes / sizeof(float));
  auto x = placeholder(g, dtype::float32, {n}, "big");
  output total;
  {
    auto on_ps = g.device_scope(task_name("ps", 0));
    total = reduce_sum(x);
  }
  tensor value(dtype::float32, {n});
  std::fill_n(value.mutable_data<float>(), n, 0.0f);
  session s(g, cluster);
  feed_list feeds{{x, value}};
  auto check = s.run(feeds, {total});  // compiles
  if (*check.at(0).data<float>() != 0.0f)
    throw std::runtime_error("transfer: the PS summed the zeros to " +
                             std::to_string(*check.at(0).data<float>()));
  double secs = median_seconds(7, 1, [&] { s.run(feeds, {total}); });
  return static_cast<double>(transfer_bytes) / secs / 1e9;
}

// ---- the same bytes over a plain TCP loopback connection ---------------------

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) close(fd);
  }
};

void set_timeouts(int fd, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Sends or receives exactly `n` bytes; false on error, timeout or EOF.
bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// A thread accepts on 127.0.0.1 and reads each 64 MiB message in full into
// its buffer, then answers one byte; this thread writes. One connection for
// all repeats, as the cluster keeps its connection.
double tcp_loopback_gbps() {
  constexpr int repeats = 7, warmup = 1;
  fd_guard listener{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (listener.fd < 0) throw std::runtime_error("tcp: socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      listen(listener.fd, 1) != 0)
    throw std::runtime_error(std::string("tcp: cannot listen on 127.0.0.1: ") + strerror(errno));

  std::string reader_error;
  std::jthread reader([&] {
    pollfd p{listener.fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) {
      reader_error = "no connection within 10 s";
      return;
    }
    fd_guard conn{accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC)};
    if (conn.fd < 0) {
      reader_error = std::string("accept failed: ") + strerror(errno);
      return;
    }
    set_timeouts(conn.fd, 10);
    std::vector<char> buffer(transfer_bytes, 0);
    char ack = 1;
    for (int r = 0; r < warmup + repeats; ++r)
      if (!recv_all(conn.fd, buffer.data(), buffer.size()) || !send_all(conn.fd, &ack, 1)) {
        reader_error = "reading the bytes failed or timed out";
        return;
      }
  });

  std::string writer_error;
  std::vector<double> times;
  {
    fd_guard conn{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    set_timeouts(conn.fd, 10);
    if (conn.fd < 0 || connect(conn.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      writer_error = std::string("connect failed: ") + strerror(errno);
    } else {
      std::vector<char> buffer(transfer_bytes, 1);
      for (int r = 0; r < warmup + repeats && writer_error.empty(); ++r) {
        double t0 = now_seconds();
        char ack = 0;
        if (!send_all(conn.fd, buffer.data(), buffer.size()) || !recv_all(conn.fd, &ack, 1))
          writer_error = "writing the bytes failed or timed out";
        else if (r >= warmup)
          times.push_back(now_seconds() - t0);
      }
    }
    if (conn.fd >= 0) shutdown(conn.fd, SHUT_RDWR);               // the reader stops at once
    if (!writer_error.empty()) shutdown(listener.fd, SHUT_RDWR);  // ... or stops waiting
  }
  reader.join();
  if (!writer_error.empty() || !reader_error.empty())
    throw std::runtime_error("tcp loopback: " +
                             (writer_error.empty() ? reader_error : writer_error));
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return static_cast<double>(transfer_bytes) / times[repeats / 2] / 1e9;
}

template <class F>
void measure(std::optional<double>& into, std::vector<std::string>& errors, const char* what,
             F fn) {
  try {
    into = fn();
  } catch (const std::exception& e) {
    errors.push_back(fmt::format("{}: {}", what, e.what()));
  } catch (...) {
    errors.push_back(fmt::format("{}: unknown exception", what));
  }
}

// The null step and the transfer again, with every connection over mutual
// TLS (test certificates made here; skipped, with a reason, without openssl).
void measure_tls(dist_figures& out) {
  auto dir =
      (std::filesystem::temp_directory_path() / ("actorflow-bench-tls-" + std::to_string(getpid())))
          .string();
  if (!testing::make_test_certificates(dir)) {
    out.errors.push_back("TLS: cannot make test certificates with openssl (see " + dir +
                         "/openssl.log)");
    return;
  }
  auto node = testing::test_tls_files(dir, "node");
  auto client = cluster_runtime_options();
  client.tls = testing::test_tls_files(dir, "client");
  std::unique_ptr<ps_cluster> cluster;
  try {
    cluster = start_ps_cluster(
        num_ps, num_workers,
        {"--tls-cert", node.certificate, "--tls-key", node.key, "--tls-ca", node.ca_file});
  } catch (const std::exception& e) {
    out.errors.push_back(std::string("TLS: ") + e.what());
  }
  if (cluster) {
    measure(out.null_step_ms_1w_2ps_tls, out.errors, "null step over TLS",
            [&] { return null_step_ms_one_worker(*cluster, client); });
    measure(out.transfer_gbps_tls, out.errors, "64 MiB transfer over TLS",
            [&] { return transfer_gbps(*cluster, client); });
    cluster.reset();
  }
  std::filesystem::remove_all(dir);
}

// The null step and the transfer again, every process with a cluster secret.
void measure_secret(dist_figures& out) {
  auto client = cluster_runtime_options();
  client.secret = "bench-secret";
  std::unique_ptr<ps_cluster> cluster;
  try {
    cluster = start_ps_cluster(num_ps, num_workers, {"--secret", client.secret});
  } catch (const std::exception& e) {
    out.errors.push_back(std::string("secret: ") + e.what());
  }
  if (!cluster) return;
  measure(out.null_step_ms_1w_2ps_secret, out.errors, "null step with a secret",
          [&] { return null_step_ms_one_worker(*cluster, client); });
  measure(out.transfer_gbps_secret, out.errors, "64 MiB transfer with a secret",
          [&] { return transfer_gbps(*cluster, client); });
}

}  // namespace

dist_figures dist_benchmarks() {
  dist_figures out;
  std::unique_ptr<ps_cluster> cluster;
  try {
    cluster = start_ps_cluster(num_ps, num_workers);
  } catch (const std::exception& e) {
    out.errors.push_back(e.what());
  }
  if (cluster) {
    measure(out.null_step_ms_1w_2ps, out.errors, "null step, 1 worker",
            [&] { return null_step_ms_one_worker(*cluster); });
    measure(out.caf_round_trip_ms, out.errors, "CAF round trip",
            [&] { return caf_round_trip_ms(*cluster); });
    measure(out.null_step_ms_4w_2ps, out.errors, "null step, 4 workers",
            [&] { return null_step_ms_lockstep(*cluster, num_workers); });
    measure(out.transfer_gbps, out.errors, "64 MiB transfer",
            [&] { return transfer_gbps(*cluster); });
    measure(out.transfer_gbps_bf16, out.errors, "64 MiB transfer as bfloat16",
            [&] { return transfer_gbps(*cluster, cluster_runtime_options(), dtype::bfloat16); });
    measure(out.dist_mlp_examples_per_s, out.errors, "synchronous MLP, 2 workers",
            [&] { return dist_mlp_examples_per_s(*cluster); });
    for (auto& t : cluster->tasks)
      if (t->exited())
        out.errors.push_back("a PS task exited during the benchmark: " + tail(t->output()));
    cluster.reset();  // stops and reaps the tasks
  }
  measure_secret(out);
  measure_tls(out);
  measure(out.tcp_gbps, out.errors, "tcp loopback", [] { return tcp_loopback_gbps(); });
  measure(out.mlp_examples_per_s, out.errors, "single-process MLP",
          [] { return 128 * 1000.0 / train_step_ms("mlp", 128, 100); });
  return out;
}

}  // namespace actorflow::bench
