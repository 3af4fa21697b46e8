// The CUDA device on a GPU (the doctest suite "gpu", run by ctest as
// test_cuda_gpu): the optimizer updates, copies, allocation reuse, the device
// actor over CUDA streams, numeric gradient and adjoint checks, TF32/BF16 and
// a session's training steps. Without a GPU (or CUDA) every case prints why,
// once, and passes; ctest reports the test as skipped. Every GPU kernel
// against its CPU kernel is test_ops' device runner (tests/ops/
// device_runner.cpp), which replays the op families' cases on /gpu:N.
#include <doctest/doctest.h>

#include <cmath>
#include <iostream>
#include <tuple>

#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "cuda/cuda_test_util.hpp"
#include "device_training.hpp"
#include "devices/cuda/gpu_support.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"

#if ACTORFLOW_HAS_CUDA
#include "devices/cuda/cuda_device.hpp"
#endif

using namespace actorflow;
using namespace actorflow::gpu;
using namespace actorflow::testing;

// ---------------------------------------------------------------------------------------------
// On the GPU. Without one (or without CUDA) each case prints why and passes; the reason is
// printed once.

namespace {

#if ACTORFLOW_HAS_CUDA
using gpu_device_ptr = std::unique_ptr<cuda_device>;
#else
using gpu_device_ptr = std::unique_ptr<int>;  // never set
#endif

struct gpu_under_test {
  gpu_device_ptr device;
  std::string skip_reason;
};

gpu_under_test& the_gpu() {
  static gpu_under_test gpu = [] {
    gpu_under_test g;
#if ACTORFLOW_HAS_CUDA
    const auto& found = discover_gpus();
    if (found.count == 0) {
      g.skip_reason = found.reason;
    } else {
      try {
        g.device = std::make_unique<cuda_device>();
        std::cout << "GPU tests run on " << g.device->description() << std::endl;
      } catch (const error& e) {
        g.skip_reason = e.what();
      }
    }
#else
    g.skip_reason = gpu_placement_refusal();
#endif
    if (!g.device) std::cout << "GPU tests skipped: " << g.skip_reason << std::endl;
    return g;
  }();
  return gpu;
}

// True when the GPU tests can run; otherwise the reason has been printed.
bool have_gpu() { return static_cast<bool>(the_gpu().device); }

}  // namespace

TEST_SUITE("gpu") {
#if ACTORFLOW_HAS_CUDA

  namespace {

  std::vector<device_tensor> upload_all(cuda_device& dev, const std::vector<tensor>& host) {
    std::vector<device_tensor> out;
    for (auto& t : host) out.push_back(dev.upload(t));
    return out;
  }

  // As a launch runs it: the op's host-memory inputs in host memory too,
  // and its host-memory outputs taken as they come.
  std::vector<tensor> run_on_gpu(cuda_device& dev, const std::string& op,
                                 const std::vector<tensor>& inputs, const attr_map& attrs) {
    kernel_io io;
    io.host_values.resize(inputs.size());
    for (int i : op_registry::global().get(op).host_memory_inputs)
      if (static_cast<size_t>(i) < inputs.size()) io.host_values[size_t(i)] = inputs[size_t(i)];
    auto outs = dev.run_kernel(op, upload_all(dev, inputs), attrs, 0, "", &io);
    std::vector<tensor> host;
    for (size_t i = 0; i < outs.size(); ++i)
      host.push_back(i < io.host_outputs.size() && io.host_outputs[i].valid()
                         ? io.host_outputs[i]
                         : dev.copy_to_host(outs[i]));
    return host;
  }

  }  // namespace

  TEST_CASE("the fused optimizer updates match the CPU updates, step after step") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    const std::vector<std::pair<std::string, attr_map>> updates{
        {"apply_sgd", {{"weight_decay", 0.01}}},
        {"apply_momentum", {{"momentum", 0.9}}},
        {"apply_momentum", {{"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 0.01}}},
        {"apply_adam", {{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}}},
        {"apply_rmsprop", {{"rho", 0.9}, {"epsilon", 1e-8}}},
        {"apply_rmsprop", {{"rho", 0.9}, {"epsilon", 1e-8}, {"momentum", 0.5}}},
        {"apply_adagrad", {{"epsilon", 1e-10}, {"initial_accumulator", 0.1}}}};
    for (dtype t : floats)
      for (dtype lr_type : floats)
        for (auto& [op, attrs] : updates) {
          INFO(op << " " << dtype_name(t) << ", learning rate " << dtype_name(lr_type));
          const auto& def = op_registry::global().get(op);
          variable_state cpu;
          cpu.value = rnd.uniform(t, shape{1000});
          gpu_variable_state gpu;
          gpu.value = dev.upload(cpu.value);
          for (int step = 0; step < 3; ++step) {
            auto grad = rnd.uniform(t, shape{1000});
            tensor lr = lr_type == dtype::float32 ? tensor::scalar<float>(0.01f)
                                                  : tensor::scalar<double>(0.01);
            std::string name = op;
            kernel_context ctx{def.name, name, attrs, {grad, lr}, {}, 0};
            def.update(cpu, ctx);
            auto out = dev.run_update(op, gpu, {dev.upload(grad), dev.upload(lr)}, attrs);
            REQUIRE(out.size() == 1);
            auto diff =
                compare_tensors(dev.copy_to_host(out[0]), cpu.value, default_tolerance(t) * 10);
            CHECK_MESSAGE(diff.empty(), "step " << step << ": " << diff);
          }
          for (auto& [slot, value] : cpu.slots) {
            if (value.type() == dtype::int64) continue;  // Adam's step count: a host counter
            REQUIRE_MESSAGE(gpu.slots.count(slot), "slot " << slot);
            auto diff = compare_tensors(dev.copy_to_host(gpu.slots[slot]), value,
                                        default_tolerance(t) * 10);
            CHECK_MESSAGE(diff.empty(), "slot " << slot << ": " << diff);
          }
        }
    dev.synchronize();
  }

  TEST_CASE("host/device copies round-trip every dtype through pinned staging buffers") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    for (dtype t : every)
      for (shape dims : {shape{}, shape{0}, shape{3, 1000}}) {
        auto host = rnd.uniform(t, dims, 0, 100);
        auto back = dev.copy_to_host(dev.upload(host));
        CHECK_MESSAGE(back.equals(host), dtype_name(t) << " " << dims.to_string());
      }
    // Copies run on their own streams, ordered with the compute stream by events.
    auto x = dev.upload(rnd.uniform(dtype::float32, shape{1 << 20}));
    auto y = dev.run_kernel("neg", {x});
    auto z = dev.run_kernel("neg", {y[0]});
    CHECK(dev.copy_to_host(z[0]).equals(dev.copy_to_host(x)));
  }

  TEST_CASE("a training-sized step allocates nothing new once the cache is warm") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    auto a = rnd.uniform(dtype::float32, shape{128, 784});
    auto w = dev.upload(rnd.uniform(dtype::float32, shape{784, 512}));
    auto b = dev.upload(rnd.uniform(dtype::float32, shape{512}));
    auto step = [&] {
      auto x = dev.upload(a);
      auto h = dev.run_kernel("matmul", {x, w});
      auto y = dev.run_kernel("relu", {dev.run_kernel("bias_add", {h[0], b})[0]});
      auto g = dev.run_kernel("bias_add_grad", {y[0]});
      dev.copy_to_host(g[0]);
    };
    step();
    step();
    dev.synchronize();
    // The device is shared with the tests before: count from here.
    const auto before = dev.memory()->stats();
    const auto staging_before = dev.staging()->stats();
    for (int i = 0; i < 5; ++i) step();
    dev.synchronize();
    const auto after = dev.memory()->stats();
    CHECK(after.backend_allocations == before.backend_allocations);
    CHECK(after.reuses > before.reuses);
    // A staging buffer given back by the step before may still wait for its
    // fence (recorded at the next allocation): at most one more per copy.
    CHECK(dev.staging()->stats().backend_allocations <= staging_before.backend_allocations + 2);
  }

  TEST_CASE("the device actor runs kernels on CUDA streams and reports completion") {
    if (!have_gpu()) return;
    // A device of its own: the actor system may outlive the test's shared one.
    auto dev = std::make_shared<cuda_device>();
    caf::actor_system_config cfg;
    caf::actor_system system(cfg);
    auto device = spawn_gpu_device(system, dev);
    caf::scoped_actor self(system);
    random_source rnd;
    auto host = rnd.uniform(dtype::float32, shape{4096});
    auto x = dev->upload(host);
    auto result = std::make_shared<std::vector<device_tensor>>();
    self->send(device.actor, run_atom::value,
               gpu_task{0, [dev, x, result] { *result = dev->run_kernel("square", {x}); }, 42});
    auto done = next_completion(self);
    CHECK(done.id == 42);
    CHECK(done.error.empty());
    REQUIRE(result->size() == 1);
    auto want = run_kernel("square", {host})[0];
    CHECK(compare_tensors(dev->copy_to_host((*result)[0]), want, 1e-6).empty());
    // A kernel that cannot launch reports its error in the completion message.
    self->send(device.actor, run_atom::value,
               gpu_task{0,
                        [dev, x] {
                          dev->run_kernel("conv2d", {x, x});
                        },
                        43});
    auto failed = next_completion(self);
    CHECK(failed.id == 43);
    CHECK_MESSAGE(failed.error.find("[conv2d]") != std::string::npos, failed.error);
    result->clear();
    self->send_exit(device.actor, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("numeric gradients on the GPU: the derivative helpers, cross-entropy, pooling") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    const double h = 1e-6;
    auto gpu_eval = [&](const std::string& op, const std::vector<tensor>& in,
                        const attr_map& a = {}) { return run_on_gpu(dev, op, in, a); };
    auto shifted = [](const tensor& x, int64_t i, double by) {
      tensor y = x.clone();
      y.mutable_data<double>()[i] += by;
      return y;
    };
    auto dot = [](const tensor& a, const tensor& b) {
      double s = 0;
      for (int64_t i = 0; i < a.num_elements(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
      return s;
    };

    // Element-wise ops: every element perturbed at once (the ops are element-wise).
    const std::vector<std::tuple<std::string, std::string, double, double>> helpers{
        {"sigmoid", "sigmoid_grad", -4, 4},
        {"tanh", "tanh_grad", -3, 3},
        {"sqrt", "sqrt_grad", 0.2, 5},
        {"rsqrt", "rsqrt_grad", 0.2, 5},
        {"reciprocal", "reciprocal_grad", 0.2, 5},
        {"relu", "relu_grad", -1, 1}};
    for (auto& [f, grad, lo, hi] : helpers) {
      INFO(grad);
      auto x = rnd.uniform(dtype::float64, shape{200}, lo, hi);
      auto dy = rnd.uniform(dtype::float64, shape{200});
      auto y = gpu_eval(f, {x})[0];
      auto analytic = f == "relu" ? gpu_eval(grad, {dy, x})[0] : gpu_eval(grad, {y, dy})[0];
      auto xp = x.clone(), xm = x.clone();
      for (int64_t i = 0; i < 200; ++i) {
        xp.mutable_data<double>()[i] += h;
        xm.mutable_data<double>()[i] -= h;
      }
      auto yp = gpu_eval(f, {xp})[0], ym = gpu_eval(f, {xm})[0];
      for (int64_t i = 0; i < 200; ++i) {
        double numeric =
            (yp.data<double>()[i] - ym.data<double>()[i]) / (2 * h) * dy.data<double>()[i];
        CHECK(analytic.data<double>()[i] == doctest::Approx(numeric).epsilon(1e-5));
      }
    }

    // Cross-entropy: the backprop output is d loss[r] / d logits[r, c].
    for (std::string op :
         {"softmax_cross_entropy_with_logits", "sparse_softmax_cross_entropy_with_logits"}) {
      INFO(op);
      auto logits = rnd.uniform(dtype::float64, shape{4, 6}, -3, 3);
      const bool sparse = op.rfind("sparse", 0) == 0;
      tensor labels = sparse ? rnd.uniform(dtype::int64, shape{4}, 0, 5)
                             : rnd.distribution(dtype::float64, 4, 6);
      auto out = gpu_eval(op, {logits, labels});
      for (int64_t i = 0; i < 24; ++i) {
        auto lp = gpu_eval(op, {shifted(logits, i, h), labels})[0];
        auto lm = gpu_eval(op, {shifted(logits, i, -h), labels})[0];
        const int64_t r = i / 6;
        double numeric = (lp.data<double>()[r] - lm.data<double>()[r]) / (2 * h);
        CHECK(out[1].data<double>()[i] == doctest::Approx(numeric).epsilon(1e-5));
      }
    }

    // Pooling: d sum(pool(x) * dy) / dx.
    for (auto& padding : {std::string("SAME"), std::string("VALID")}) {
      INFO(padding);
      auto a = window_attrs({2, 2}, padding, {3, 3});
      auto x = rnd.uniform(dtype::float64, shape{1, 6, 5, 2});
      auto y = gpu_eval("max_pool", {x}, a)[0];
      auto dy = rnd.uniform(dtype::float64, y.dims());
      auto dmax = gpu_eval("max_pool_grad", {x, y, dy}, a)[0];
      auto davg = gpu_eval("avg_pool_grad", {x, dy}, a)[0];
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        for (std::string op : {"max_pool", "avg_pool"}) {
          double lp = dot(gpu_eval(op, {shifted(x, i, h)}, a)[0], dy);
          double lm = dot(gpu_eval(op, {shifted(x, i, -h)}, a)[0], dy);
          const tensor& analytic = op == "max_pool" ? dmax : davg;
          CHECK(analytic.data<double>()[i] == doctest::Approx((lp - lm) / (2 * h)).epsilon(1e-5));
        }
      }
    }
  }

  TEST_CASE("TF32 and BF16 products (gpu_math) stay close to the float32 result") {
    if (!have_gpu()) return;
    random_source rnd;
    auto a = rnd.uniform(dtype::float32, shape{64, 256});
    auto b = rnd.uniform(dtype::float32, shape{256, 96});
    auto want = run_kernel("matmul", {a, b})[0];
    auto x = rnd.uniform(dtype::float32, shape{2, 12, 12, 8});
    auto f = rnd.uniform(dtype::float32, shape{3, 3, 8, 16});
    auto conv_attrs = window_attrs({1, 1}, "SAME");
    auto want_conv = run_kernel("conv2d", {x, f}, conv_attrs)[0];
    for (auto [math, tol] : {std::pair{gpu_math::tf32, 1e-2}, std::pair{gpu_math::bf16, 5e-2}}) {
      INFO("gpu_math " << int(math));
      cuda_device dev(cuda_device_options{.math = math});
      CHECK(compare_tensors(run_on_gpu(dev, "matmul", {a, b}, {})[0], want, tol).empty());
      CHECK(compare_tensors(run_on_gpu(dev, "conv2d", {x, f}, conv_attrs)[0], want_conv, tol)
                .empty());
    }
  }

  TEST_CASE("conv2d's GPU backprops are its adjoints (float32, TF's odd SAME padding included)") {
    if (!have_gpu()) return;
    cuda_device& dev = *the_gpu().device;
    random_source rnd;
    auto dot = [](const tensor& a, const tensor& b) {
      double s = 0;
      for (int64_t i = 0; i < a.num_elements(); ++i)
        s += double(a.data<float>()[i]) * double(b.data<float>()[i]);
      return s;
    };
    for (auto& [strides, padding] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
             {{1, 1}, "SAME"}, {{2, 2}, "SAME"}, {{2, 1}, "VALID"}}) {
      INFO(padding << " strides " << strides[0] << "," << strides[1]);
      auto a = window_attrs(strides, padding);
      auto x = rnd.uniform(dtype::float32, shape{2, 8, 8, 3});
      auto f = rnd.uniform(dtype::float32, shape{3, 3, 3, 4});
      auto y = run_on_gpu(dev, "conv2d", {x, f}, a)[0];
      auto dy = rnd.uniform(dtype::float32, y.dims());
      auto dx = run_on_gpu(dev, "conv2d_backprop_input", {x, f, dy}, a)[0];
      auto df = run_on_gpu(dev, "conv2d_backprop_filter", {x, f, dy}, a)[0];
      const double yy = dot(y, dy);
      CHECK(dot(x, dx) == doctest::Approx(yy).epsilon(1e-4));
      CHECK(dot(f, df) == doctest::Approx(yy).epsilon(1e-4));
    }
  }

  namespace {

  // A few SGD steps of the Fashion-MNIST MLP on fixed random data, through a
  // session, with the model on `device` ("": the CPU), in precision `p`: the losses.
  std::vector<float> mlp_losses(const std::string& device,
                                models::precision p = models::precision::fp32) {
    constexpr int batch = 64;
    graph g;
    auto images = placeholder(g, dtype::float32, shape{batch, 28, 28, 1}, "images");
    auto labels = placeholder(g, dtype::int32, shape{batch}, "labels");
    std::vector<std::string> devices;
    if (!device.empty()) devices.push_back(device);
    auto net = models::make_classifier(g, "mlp", 7, devices, p);
    auto loss = models::mean_cross_entropy(net->logits(images), labels);
    auto train = make_optimizer("sgd", 0.1)->minimize(loss);
    session s(g);
    s.run({global_variables_initializer(g)});
    random_source rnd;
    auto x = rnd.uniform(dtype::float32, shape{batch, 28, 28, 1}, 0, 1);
    auto y = rnd.uniform(dtype::int32, shape{batch}, 0, 9);
    std::vector<float> losses;
    for (int step = 0; step < 4; ++step)
      losses.push_back(s.run({{images, x}, {labels, y}}, {loss}, {train})[0].item<float>());
    // The products (bfloat16 ones on tensor cores; float32 layers fused with
    // their bias and relu) and the biases all run on the GPU.
    bool product_on_gpu = false, bias_on_gpu = false;
    for (auto& e : s.placement_log()) {
      product_on_gpu |= e.device == device && (e.op == "matmul" || e.op == "fused_matmul");
      bias_on_gpu |= e.device == device && (e.op == "bias_add" || e.op == "fused_matmul");
      if (!device.empty()) CHECK_MESSAGE(e.reason.rfind("soft placement", 0) != 0, e.node);
    }
    CHECK_MESSAGE((device.empty() || product_on_gpu), "no product ran on " << device);
    CHECK_MESSAGE((device.empty() || bias_on_gpu), "no bias ran on " << device);
    return losses;
  }

  }  // namespace

  TEST_CASE("MLP training steps through a session on the GPU match the CPU's") {
    if (!have_gpu()) return;
    auto cpu = mlp_losses("");
    auto gpu = mlp_losses("/gpu:0");
    REQUIRE(gpu.size() == cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) CHECK(gpu[i] == doctest::Approx(cpu[i]).epsilon(1e-4));
    CHECK(cpu.back() < cpu.front());
  }

  TEST_CASE("every optimizer trains with its variables and slots in the GPU's memory") {
    if (!have_gpu()) return;
    auto cpu = std::make_shared<runtime>(runtime_options{.compute_threads = 1, .gpus = 0});
    auto rt = std::make_shared<runtime>(runtime_options{.compute_threads = 1, .gpus = 1});
    check_training_on(cpu, rt, "/gpu:0", 1e-4);
    // Adam's step count comes back from the GPU as an int64 slot, and a
    // restored one goes on counting there.
    auto first = train_mlp_on(rt, "/gpu:0", "adam", 2);
    CHECK(first.variables.at("fc1/w").slots.at("adam/t").item<int64_t>() == 2);
    auto on_cpu = train_mlp_on(cpu, "", "adam", 2, &first.variables);
    auto on_gpu = train_mlp_on(rt, "/gpu:0", "adam", 2, &first.variables);
    for (size_t i = 0; i < on_cpu.losses.size(); ++i)
      CHECK(on_gpu.losses[i] == doctest::Approx(on_cpu.losses[i]).epsilon(1e-4));
    CHECK(on_gpu.variables.at("fc1/w").slots.at("adam/t").item<int64_t>() == 4);
  }

  TEST_CASE("the LSTM language model trains on the GPU to the CPU's losses, all of it there") {
    if (!have_gpu()) return;
    auto cpu = std::make_shared<runtime>(runtime_options{.compute_threads = 1, .gpus = 0});
    auto rt = std::make_shared<runtime>(runtime_options{.compute_threads = 1, .gpus = 1});
    for (bool full : {false, true}) {
      INFO(std::string(full ? "full" : "sampled") << " softmax");
      auto want = lm_losses(cpu, "", full);
      std::vector<placement_entry> log;
      auto got = lm_losses(rt, "/gpu:0", full, &log);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i)
        CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4));
      for (auto& e : log) {
        INFO(e.node << " (" << e.op << "): " << e.reason);
        CHECK(e.reason.rfind("soft placement", 0) == std::string::npos);
      }
    }
  }

  TEST_CASE("mixed precision MLP steps run their bfloat16 products on the GPU and match the CPU") {
    if (!have_gpu()) return;
    auto cpu = mlp_losses("", models::precision::bf16);
    auto gpu = mlp_losses("/gpu:0", models::precision::bf16);
    REQUIRE(gpu.size() == cpu.size());
    // The GPU's float32 ops round differently in the last bit, which may move a bfloat16
    // rounding: a looser bound than float32's.
    for (size_t i = 0; i < cpu.size(); ++i) CHECK(gpu[i] == doctest::Approx(cpu[i]).epsilon(1e-3));
    CHECK(cpu.back() < cpu.front());
  }

#else

  TEST_CASE("GPU kernels against the CPU kernels") { CHECK_FALSE(have_gpu()); }

#endif
}
