#include "actors/compile/cost_model.hpp"

#include <chrono>
#include <future>
#include <map>

#include "core/op_registry.hpp"

namespace actorflow {

namespace {

constexpr int64_t unknown_dim_guess = 64;
constexpr double hop_us = 2;               // a message between actors
constexpr double accelerator_hop_us = 10;  // a launch's copy set-up and completion
constexpr double unusable_gflops = 1e-9;   // never the soonest finish

double known_elements(const shape& dims) {
  double n = 1;
  for (int i = 0; i < dims.rank(); ++i) n *= double(dims[i] < 0 ? unknown_dim_guess : dims[i]);
  return n;
}

double dim_or_guess(const shape& dims, int i) {
  int64_t d = dims.dim(i);
  return double(d < 0 ? unknown_dim_guess : d);
}

const shape& input_dims(const graph& g, const node& n, size_t i) {
  auto& e = n.inputs[i];
  return g.at(e.node).outputs[static_cast<size_t>(e.index)].dims;
}

double seconds_of(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The best of a few runs of fn, in seconds.
double best_of(int runs, const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) best = std::min(best, seconds_of(fn));
  return best;
}

constexpr int64_t probe_n = 256;
constexpr double probe_flops = 2.0 * probe_n * probe_n * probe_n;

tensor filled(shape dims) {
  tensor t(dtype::float32, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = 0.5f;
  return t;
}

// One launch on an accelerator, waited for (this is the session's compiling
// thread, never a CAF one).
void launch_and_wait(accelerator& a, const std::string& op, std::vector<tensor> inputs) {
  accelerator_launch launch;
  launch.def = &op_registry::global().get(op);
  launch.node_name = "cost_model_probe";
  static const attr_map no_attrs;
  launch.attrs = &no_attrs;
  launch.device_inputs.resize(inputs.size());
  launch.host_inputs = std::move(inputs);
  launch.to_host = {1};
  launch.on_device = {0};
  std::promise<std::string> done;
  auto streams = a.streams();
  streams->launch(0, [&] { a.enqueue(0, launch); });
  streams->when_done(0, [&](std::string error) { done.set_value(std::move(error)); });
  std::string error = done.get_future().get();
  if (error.empty()) error = launch.error;
  if (!error.empty()) fail("cost model", "measuring " + a.name() + ": " + error);
}

device_rate measure(const local_device& d) {
  auto a = filled({probe_n, probe_n}), b = filled({probe_n, probe_n});
  device_rate rate;
  if (!d.accel) {
    const op_def& matmul = op_registry::global().get("matmul");
    static const attr_map no_attrs;
    std::string name = "cost_model_probe";
    double secs = best_of(3, [&] {
      d.arena->execute([&] {
        kernel_context ctx{matmul.name, name, no_attrs, {a, b}, {}, 0};
        matmul.kernel(ctx);
      });
    });
    rate.gflops = probe_flops / secs / 1e9;
    return rate;
  }
  rate.gflops = probe_flops /
                best_of(3,
                        [&] {
                          launch_and_wait(*d.accel, "matmul", {a, b});
                        }) /
                1e9;
  auto big = filled({1 << 20});  // 4 MiB in and out
  double secs = best_of(3, [&] { launch_and_wait(*d.accel, "identity", {big}); });
  rate.copy_gbps = 2.0 * double(big.size_bytes()) / secs / 1e9;
  return rate;
}

}  // namespace

std::vector<device_rate> measure_device_rates(const std::vector<local_device>& devices) {
  std::vector<device_rate> rates;
  // CPU devices with as many threads run on the same cores: one measurement
  // serves them all, where separate ones would differ by the machine's noise
  // alone (a probe preempted by another process) and make one of them look
  // slower than it is.
  std::map<int, device_rate> cpu_rate_by_threads;
  for (auto& d : devices) {
    if (!d.accel && d.arena) {
      int threads = d.arena->max_concurrency();
      auto known = cpu_rate_by_threads.find(threads);
      if (known == cpu_rate_by_threads.end())
        known = cpu_rate_by_threads.emplace(threads, measure(d)).first;
      rates.push_back(known->second);
      continue;
    }
    // A device that cannot run the probe (a GPU that fails to open) gets no
    // free node; a node hinted there fails with the device's own error.
    try {
      rates.push_back(measure(d));
    } catch (const std::exception&) {
      rates.push_back({unusable_gflops, 0});
    }
  }
  return rates;
}

double estimated_flops(const graph& g, const node& n) {
  double out = 0;
  for (auto& spec : n.outputs) out += known_elements(spec.dims);
  if (n.op == "matmul" && n.inputs.size() == 2) {
    const shape& a = input_dims(g, n, 0);
    bool ta = get_attr_or<bool>(n.attrs, "transpose_a", n.op, false);
    if (a.rank() == 2) return 2.0 * out * dim_or_guess(a, ta ? 0 : 1);
  }
  if ((n.op == "conv2d" || n.op == "conv2d_backprop_input" || n.op == "conv2d_backprop_filter") &&
      n.inputs.size() >= 2) {
    // Every one of them does the forward product's multiply-adds.
    const shape& filter = input_dims(g, n, 1);
    const shape& dy = n.op == "conv2d" ? n.outputs[0].dims : input_dims(g, n, 2);
    if (filter.rank() == 4)
      return 2.0 * known_elements(dy) * dim_or_guess(filter, 0) * dim_or_guess(filter, 1) *
             dim_or_guess(filter, 2);
  }
  return out;
}

double estimated_bytes(const graph& g, endpoint e) {
  auto& spec = g.at(e.node).outputs[static_cast<size_t>(e.index)];
  return known_elements(spec.dims) * double(dtype_size(spec.type));
}

double transfer_us(const std::vector<local_device>& devices, const std::vector<device_rate>& rates,
                   int from, int to, double bytes) {
  if (from == to) return 0;
  auto& a = devices[static_cast<size_t>(from)];
  auto& b = devices[static_cast<size_t>(to)];
  if (!a.accel && !b.accel) return hop_us;
  double us = accelerator_hop_us;
  for (int d : {from, to})
    if (devices[static_cast<size_t>(d)].accel && rates[static_cast<size_t>(d)].copy_gbps > 0)
      us += bytes / (rates[static_cast<size_t>(d)].copy_gbps * 1e3);
  return us;
}

}  // namespace actorflow
