#include "perf/bench_devices.hpp"

#include <cstring>
#include <deque>
#include <future>
#include <memory>

#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "devices/stand_in/stand_in_device.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "perf/bench_train.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

namespace {

// One MLP training set-up: its runtime, graph and session, run in blocks of
// steps with up to `in_flight` of them started and not yet answered.
class mlp_setup {
 public:
  mlp_setup(runtime_options options, std::vector<std::string> devices, int in_flight)
      : rt_(std::make_shared<runtime>(options)), in_flight_(in_flight) {
    constexpr int batch = 128;
    auto images = placeholder(g_, dtype::float32, {batch, 28, 28, 1}, "images");
    auto labels = placeholder(g_, dtype::int32, {batch}, "labels");
    auto net = models::make_classifier(g_, "mlp", 1, devices);
    loss_ = models::mean_cross_entropy(net->logits(images), labels);
    train_ = adam(1e-3).minimize(loss_);
    session_ = std::make_unique<session>(g_, rt_);
    session_->run({global_variables_initializer(g_)});
    auto [x, y] = random_fmnist_batch(batch);
    feeds_ = {{images, x}, {labels, y}};
    block_ms(10);  // warm-up
  }

  // Milliseconds per step over `steps` steps, the loss fetched each step.
  double block_ms(int steps) {
    std::deque<std::future<std::vector<tensor>>> window;
    double t0 = now_seconds();
    for (int i = 0; i < steps; ++i) {
      if (static_cast<int>(window.size()) == in_flight_) {
        window.front().get();
        window.pop_front();
      }
      window.push_back(session_->run_async(feeds_, {loss_}, {train_}));
    }
    for (auto& f : window) f.get();
    return 1000.0 * (now_seconds() - t0) / steps;
  }

 private:
  std::shared_ptr<runtime> rt_;
  graph g_;
  output loss_;
  operation train_;
  std::unique_ptr<session> session_;
  feed_list feeds_;
  int in_flight_;
};

double copy_gbps(const std::function<void()>& copy_in_and_out, size_t bytes) {
  double secs = median_seconds(7, 2, copy_in_and_out);
  return 2.0 * double(bytes) / secs / 1e9;
}

}  // namespace

device_figures device_benchmarks() {
  device_figures f;
  {
    mlp_setup one({}, {}, 1);
    mlp_setup one_pipelined({}, {}, 8);
    mlp_setup two({.cpu_devices = 2}, {"/cpu:0", "/cpu:1"}, 8);
    // Alternating blocks: the machine's load drifts, and a drift between two
    // long runs would skew the ratios.
    std::vector<double> a, b, c;
    for (int round = 0; round < 5; ++round) {
      a.push_back(one.block_ms(40));
      b.push_back(one_pipelined.block_ms(40));
      c.push_back(two.block_ms(40));
    }
    f.mlp_step_ms = median(a);
    f.mlp_step_ms_8_in_flight = median(b);
    f.two_device_mlp_step_ms = median(c);
  }
  constexpr size_t bytes = size_t{64} << 20;
  tensor host(dtype::float32, {int64_t(bytes / 4)});
  std::memset(host.raw_mutable_data(), 1, bytes);
  stand_in_device device(0);
  f.device_copy_gbps = copy_gbps([&] { device.copy_out(*device.copy_in(host, 0)); }, bytes);
  tensor a(dtype::float32, host.dims()), b(dtype::float32, host.dims());
  f.memcpy_gbps = copy_gbps(
      [&] {
        std::memcpy(a.raw_mutable_data(), host.raw_data(), bytes);
        std::memcpy(b.raw_mutable_data(), a.raw_data(), bytes);
      },
      bytes);
  return f;
}

}  // namespace actorflow::bench
