#include "perf/bench_conv.hpp"

#include <fmt/format.h>
#include <oneapi/tbb/info.h>

#include <Eigen/Core>
#include <string>
#include <vector>

#include "core/op_registry.hpp"
#include "devices/cpu/conv_library.hpp"
#include "devices/cpu/gemm_library.hpp"
#include "ops/conv_winograd.hpp"
#include "perf/bench_conv_onednn.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

namespace {

struct conv_layer : conv_layer_shape {
  std::string name;
  conv_layer(std::string layer, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t kh,
             int64_t kw, int64_t stride, bool same = true)
      : conv_layer_shape{n, h, w, c, k, kh, kw, stride, same}, name(std::move(layer)) {}
};

// NHWC input, [KH,KW,C,K] filter, SAME padding unless marked VALID: the CNN's
// layers at its batch, and every distinct layer of Table 1's AlexNet (its
// first three), VGG-A and Overfeat, GoogLeNet's kinds of layer and ResNet-50's
// 3x3 layers, at batch 16.
const std::vector<conv_layer>& layers() {
  constexpr bool valid = false;
  static const std::vector<conv_layer> all{
      {"cnn_conv1", 128, 28, 28, 1, 32, 5, 5, 1},
      {"cnn_conv2", 128, 14, 14, 32, 64, 5, 5, 1},
      {"alexnet_conv1", 16, 224, 224, 3, 64, 11, 11, 4},
      {"alexnet_conv2", 16, 27, 27, 64, 192, 5, 5, 1},
      {"alexnet_conv3", 16, 13, 13, 192, 384, 3, 3, 1},
      {"vgg_conv1", 16, 224, 224, 3, 64, 3, 3, 1},
      {"vgg_conv2", 16, 112, 112, 64, 128, 3, 3, 1},
      {"vgg_conv3", 16, 56, 56, 128, 256, 3, 3, 1},
      {"vgg_conv4", 16, 56, 56, 256, 256, 3, 3, 1},
      {"vgg_conv5", 16, 28, 28, 256, 512, 3, 3, 1},
      {"vgg_conv6", 16, 28, 28, 512, 512, 3, 3, 1},
      {"vgg_conv7", 16, 14, 14, 512, 512, 3, 3, 1},
      {"overfeat_conv1", 16, 231, 231, 3, 96, 11, 11, 4, valid},
      {"overfeat_conv2", 16, 28, 28, 96, 256, 5, 5, 1, valid},
      {"overfeat_conv3", 16, 12, 12, 256, 512, 3, 3, 1},
      {"overfeat_conv4", 16, 12, 12, 512, 1024, 3, 3, 1},
      {"overfeat_conv5", 16, 12, 12, 1024, 1024, 3, 3, 1},
      {"googlenet_3a_1x1", 16, 28, 28, 192, 64, 1, 1, 1},
      {"googlenet_3a_3x3", 16, 28, 28, 96, 128, 3, 3, 1},
      {"googlenet_3a_5x5", 16, 28, 28, 16, 32, 5, 5, 1},
      {"googlenet_4a_1x1", 16, 14, 14, 480, 192, 1, 1, 1},
      // ResNet-50's 3x3 layers at the image_models group's 112x112 images.
      {"resnet50_s1_3x3", 16, 28, 28, 64, 64, 3, 3, 1},
      {"resnet50_s2_3x3", 16, 14, 14, 128, 128, 3, 3, 1},
      {"resnet50_s3_3x3", 16, 7, 7, 256, 256, 3, 3, 1},
      {"resnet50_s4_3x3", 16, 4, 4, 512, 512, 3, 3, 1},
      {"resnet50_s4_3x3_s2", 16, 9, 9, 256, 256, 3, 3, 2, valid},
      // Its 1x1 layers where a product has few rows: stage 4's expansion, and
      // stage 3's and 4's downsampling at stride 2; Inception-v3's stride-2
      // 3x3 at 150 pixels (Mixed_7a).
      {"resnet50_s4_1x1", 16, 4, 4, 512, 2048, 1, 1, 1},
      {"resnet50_s3_1x1_s2", 16, 14, 14, 512, 1024, 1, 1, 2},
      {"resnet50_s4_1x1_s2", 16, 7, 7, 1024, 2048, 1, 1, 2},
      {"inception_7a_3x3_s2", 16, 8, 8, 192, 192, 3, 3, 2, valid},
  };
  return all;
}

tensor random_tensor(shape dims) {
  tensor t(dtype::float32, dims);
  t.mutable_flat<float>() = Eigen::ArrayXf::Random(t.num_elements());
  return t;
}

}  // namespace

void add_conv_rows(const add_row_fn& add_row) {
  const int threads = tbb::info::default_concurrency();
  for (const auto& l : layers()) {
    const int64_t oh = l.out(l.h, l.kh), ow = l.out(l.w, l.kw);
    const double flops = 2.0 * l.n * oh * ow * l.k * l.kh * l.kw * l.c;
    tensor x = random_tensor({l.n, l.h, l.w, l.c});
    tensor f = random_tensor({l.kh, l.kw, l.c, l.k});
    tensor dy = random_tensor({l.n, oh, ow, l.k});
    attr_map attrs{{"strides", std::vector<int64_t>{l.stride, l.stride}},
                   {"padding", std::string(l.same ? "SAME" : "VALID")}};
    const std::vector<std::pair<std::string, std::vector<tensor>>> kernels{
        {"conv2d", {x, f}},
        {"conv2d_backprop_input", {x, f, dy}},
        {"conv2d_backprop_filter", {x, f, dy}}};
    const char* tags[] = {"fwd", "bwd_input", "bwd_filter"};
    for (size_t i = 0; i < kernels.size(); ++i) {
      const auto& [op, inputs] = kernels[i];
      const int repeats = flops > 2e9 ? 5 : 15;
      auto gflops = [&] {
        return flops / median_seconds(repeats, 2, [&] { run_kernel(op, inputs, attrs); }) / 1e9;
      };
      // As shipped (Winograd or oneDNN's primitives where chosen), then
      // without Winograd, then actorflow's own im2col + GEMM.
      const cpu::conv_problem problem{l.n,      l.h,      l.w, l.c, l.k, l.kh, l.kw,
                                      l.stride, l.stride, oh,  ow,  0,   0};
      const conv_detail::geometry g{l.n,      l.h,      l.w, l.c, l.kh, l.kw,
                                    l.stride, l.stride, oh,  ow,  0,    0};
      const bool winograd = conv_detail::winograd_chosen(g, l.k);
      const bool library = cpu::conv_library_chosen(cpu::conv_pass(i), problem);
      double ours = gflops();
      conv_detail::use_winograd(false);
      const double direct = winograd ? gflops() : ours;
      cpu::use_conv_library(false);
      double own = gflops();
      cpu::use_conv_library(true);
      conv_detail::use_winograd(true);
      const char* by = winograd  ? "Winograd's F(2x2, 3x3)"
                       : library ? "oneDNN's primitive"
                                 : "our own kernel";
      add_row(fmt::format("conv_{}_{}_gflops", l.name, tags[i]), ours, "GFLOP/s",
              fmt::format("{:.2f} ms; {}x{}x{}x{} * {}x{}x{} /{}{}; by {}; {:.2f}x our own kernel"
                          "{}",
                          flops / ours / 1e6, l.n, l.h, l.w, l.c, l.kh, l.kw, l.k, l.stride,
                          l.same ? "" : " VALID", by, ours / own,
                          winograd ? fmt::format(", {:.2f}x without Winograd", ours / direct)
                                   : std::string()));
      if (winograd)
        add_row(
            fmt::format("conv_{}_{}_gflops_direct", l.name, tags[i]), direct, "GFLOP/s",
            fmt::format("without Winograd: {}", library ? "oneDNN's primitive" : "our own kernel"));
      add_row(fmt::format("conv_{}_{}_gflops_own", l.name, tags[i]), own, "GFLOP/s",
              "actorflow's im2col + GEMM (Winograd and oneDNN's primitives off)");
      // oneDNN's primitive on the same operands, in NHWC and in its own layouts.
      for (bool blocked : {false, true}) {
        auto secs = onednn_conv_seconds(l, conv_pass(i), blocked, threads, repeats);
        if (!secs) continue;
        const double theirs = flops / *secs / 1e9;
        add_row(fmt::format("conv_{}_{}_gflops_onednn_{}", l.name, tags[i],
                            blocked ? "blocked" : "nhwc"),
                theirs, "GFLOP/s",
                fmt::format("oneDNN's primitive on {} threads{}; ours is {:.2f}x it", threads,
                            blocked ? ", its own layouts, reorders in and out timed with it" : "",
                            ours / theirs));
      }
    }
  }
}

}  // namespace actorflow::bench
