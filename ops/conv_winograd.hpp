// Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms
// for Convolutional Neural Networks", 2015) behind float32 3x3 convolutions
// at unit strides, and both their backprops.
//
// Each 2x2 tile of the output is computed from a 4x4 tile of the input with
// 16 products per channel pair instead of 36: the input tile is transformed
// (B^T d B), the filter (G g G^T), the two multiplied element-wise and summed
// over input channels, which is 16 independent matrix products (one per
// element of the 4x4 tile, over all tiles at once), and the result
// transformed back (A^T m A). The input gradient is the same computation
// with the filter turned by 180 degrees and its channels swapped; the filter
// gradient is its transpose: G^T [(B^T d B) (.) (A dy A^T)] G summed over
// tiles, again 16 products. The products run on the CPU GEMM library.
//
// The transforms' coefficients are 0, +-1 and +-1/2, so the results differ
// from a direct sum only by rounding (the sums are taken in another order).
#pragma once
#include <cstdint>

#include "ops/geometry/conv_window.hpp"

namespace actorflow::conv_detail {

/// Off: winograd_chosen declines and conv2d computes 3x3 filters directly.
/// On by default; ACTORFLOW_CPU_CONV_WINOGRAD=0 in the environment starts
/// with it off. Benchmarks and tests switch it to compare; change it only
/// while no kernel runs.
void use_winograd(bool on);
bool winograd_on();

/// Whether a float32 convolution of geometry g with k output channels runs
/// through F(2x2, 3x3): a 3x3 filter at unit strides, at least
/// winograd_min_channels channels on each side, the GEMM library on, and
/// winograd on.
bool winograd_chosen(const geometry& g, int64_t k);

/// Fewer channels leave the products too thin to be faster than a direct
/// convolution's.
inline constexpr int64_t winograd_min_channels = 16;

/// y [n, oh, ow, k] = conv2d(x [n, h, w, c], f [3, 3, c, k]).
void winograd_forward(const geometry& g, int64_t k, const float* x, const float* f, float* y);

/// dx [n, h, w, c] from f [3, 3, c, k] and dy [n, oh, ow, k].
void winograd_backprop_input(const geometry& g, int64_t k, const float* f, const float* dy,
                             float* dx);

/// df [3, 3, c, k] from x [n, h, w, c] and dy [n, oh, ow, k].
void winograd_backprop_filter(const geometry& g, int64_t k, const float* x, const float* dy,
                              float* df);

}  // namespace actorflow::conv_detail
