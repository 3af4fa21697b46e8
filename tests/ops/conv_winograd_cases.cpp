// conv2d's 3x3 filters at unit strides through Winograd's F(2x2, 3x3)
// (ops/conv_winograd.hpp): against direct float64 sums, its rounding beside
// the direct kernels', and how far a NaN reaches.
#include <array>
#include <cmath>
#include <random>

#include "devices/cpu/gemm_library.hpp"
#include "ops/conv_reference.hpp"
#include "ops/conv_winograd.hpp"
#include "ops/geometry/conv_window.hpp"
#include "test_util.hpp"

namespace actorflow::testing {
namespace {

// 3x3 filters at unit strides with 16 channels or more on each side run
// through Winograd's F(2x2, 3x3) (ops/conv_winograd.hpp): odd sizes (tiles
// past the last row and column), VALID (the input gradient padded by 2),
// channels that are not multiples of anything, 512 channels (rows padded off
// 2 KB strides), and more tiles than one block holds.
TEST_CASE(
    "conv2d 3x3 at unit strides through Winograd's F(2x2, 3x3) matches a direct-loop reference") {
  const conv_cfg cases[] = {{2, 7, 7, 16, 3, 3, 16, 1, 1, true},
                            {3, 9, 6, 17, 3, 3, 33, 1, 1, false},
                            {1, 5, 11, 40, 3, 3, 24, 1, 1, true},
                            {1, 3, 3, 20, 3, 3, 18, 1, 1, false},  // one output pixel
                            {2, 4, 4, 512, 3, 3, 512, 1, 1, true},
                            {2, 130, 129, 16, 3, 3, 16, 1, 1, true}};
  for (const auto& c : cases) {
    auto g = conv_detail::make_geometry(shape{c.n, c.h, c.w, c.c}, 3, 3, attrs_of(c), "strides",
                                        "conv2d", "filter");
    CHECK(conv_detail::winograd_chosen(g, c.k) == cpu::gemm_library_on());
    check_against_reference<float>(c, 1e-4);
  }
  // Thinner layers keep the direct kernels.
  auto thin = conv_detail::make_geometry(shape{2, 8, 8, 8}, 3, 3, conv_attrs({1, 1}, "SAME"),
                                         "strides", "conv2d", "filter");
  CHECK_FALSE(conv_detail::winograd_chosen(thin, 64));
  auto strided = conv_detail::make_geometry(shape{2, 8, 8, 64}, 3, 3, conv_attrs({2, 2}, "SAME"),
                                            "strides", "conv2d", "filter");
  CHECK_FALSE(conv_detail::winograd_chosen(strided, 64));
}

// The header's promise about NaN: it reaches the outputs whose 3x3 windows
// read it, and the rest of their 2x2 tiles, never further.
TEST_CASE("a NaN through Winograd's conv2d stays within a pixel of its window") {
  if (!cpu::gemm_library_on()) return;
  std::mt19937 rng(3);
  tensor x = random_tensor<float>({1, 9, 9, 16}, rng);
  tensor w = random_tensor<float>({3, 3, 16, 16}, rng);
  const int64_t py = 4, px = 5;
  x.mutable_data<float>()[(py * 9 + px) * 16 + 3] = std::nanf("");
  tensor y = run_kernel("conv2d", {x, w}, conv_attrs({1, 1}, "SAME"))[0];
  for (int64_t oy = 0; oy < 9; ++oy)
    for (int64_t ox = 0; ox < 9; ++ox) {
      CAPTURE(oy);
      CAPTURE(ox);
      const int64_t dy = std::abs(oy - py), dx = std::abs(ox - px);
      const float v = y.data<float>()[(oy * 9 + ox) * 16];
      if (dy <= 1 && dx <= 1) CHECK(std::isnan(v));
      if (dy > 2 || dx > 2) CHECK(std::isfinite(v));
    }
}

// The largest error of each pass (conv2d, input and filter gradients) of a
// float32 layer against float64 sums of the same operands, relative to the
// largest magnitude of the pass's result.
std::array<double, 3> float32_errors(const conv_cfg& c) {
  std::mt19937 rng(7);
  auto attrs = attrs_of(c);
  tensor x = random_tensor<float>({c.n, c.h, c.w, c.c}, rng);
  tensor w = random_tensor<float>({c.kh, c.kw, c.c, c.k}, rng);
  tensor dy = random_tensor<float>(out_shape(c), rng);
  const auto [y, dx, dw] = reference_sums<float>(c, x, w, dy);
  auto error = [](const tensor& got, const std::vector<double>& want) {
    double worst = 0, largest = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(double(got.data<float>()[i]) - want[i]));
      largest = std::max(largest, std::abs(want[i]));
    }
    return worst / largest;
  };
  return {error(run_kernel("conv2d", {x, w}, attrs)[0], y),
          error(run_kernel("conv2d_backprop_input", {x, w, dy}, attrs)[0], dx),
          error(run_kernel("conv2d_backprop_filter", {x, w, dy}, attrs)[0], dw)};
}

// What the header promises: Winograd's results differ from direct sums by
// rounding of the same order, at ResNet-50's stage 3 and 4 widths.
TEST_CASE("Winograd's rounding errors are of the direct convolution's order") {
  if (!cpu::gemm_library_on()) return;  // no Winograd without the library
  for (const conv_cfg& c : {conv_cfg{2, 7, 7, 256, 3, 3, 256, 1, 1, true},
                            conv_cfg{2, 4, 4, 512, 3, 3, 512, 1, 1, true}}) {
    const auto winograd = float32_errors(c);
    conv_detail::use_winograd(false);
    const auto direct = float32_errors(c);
    conv_detail::use_winograd(true);
    for (int pass = 0; pass < 3; ++pass) {
      CAPTURE(pass);
      MESSAGE("channels " << c.c << ", pass " << pass << ": Winograd " << winograd[pass]
                          << ", direct " << direct[pass] << " (relative to the largest value)");
      CHECK(winograd[pass] < 4e-6);
      CHECK(winograd[pass] < 8 * direct[pass]);
    }
  }
}

}  // namespace
}  // namespace actorflow::testing
