// oneDNN's convolution primitives behind conv2d and its backprops on the CPU.
//
// oneDNN's direct convolutions run in its own blocked layouts (channels in
// blocks of 16 for AVX-512). Per call, the NHWC input and HWIO filter are
// reordered into them and the result back, so the ops keep TensorFlow's
// layouts. Each call is split across the CPU device's TBB arena, each piece
// one primitive call on one OpenMP thread (onednn_threads.hpp): by slices of
// images (the filter gradient then sums the slices' partial filters), or, for
// filters of 8 MiB and up, by channels of the result, each part over all
// images. Primitives are made once per shape, pass and thread count, then cached.
//
// ops/conv.cpp asks this library first for the shapes where it is faster than
// actorflow's own im2col + GEMM (conv_library_chosen), and runs its own
// kernel otherwise, or where the build has no oneDNN.
#pragma once
#include <cstdint>
#include <functional>

#include "core/bfloat16.hpp"

namespace actorflow::cpu {

/// A 2-D convolution: NHWC input [n,h,w,c], filter [kh,kw,c,k], output
/// [n,oh,ow,k], with pad_top/pad_left zeros before each spatial axis (the
/// bottom/right padding follows from the sizes, as TensorFlow's SAME).
struct conv_problem {
  int64_t n, h, w, c;
  int64_t k, kh, kw;
  int64_t sh, sw;
  int64_t oh, ow;
  int64_t pad_top, pad_left;
};

enum class conv_pass { forward, backprop_input, backprop_filter };

/// Off: library_conv declines, and conv2d runs its own kernels. On by default;
/// off too while use_gemm_library(false) (no library at all), and where the
/// environment has ACTORFLOW_CPU_CONV=own at start. Change it only while no
/// kernel runs.
void use_conv_library(bool on);

/// Whether library_conv computes convolutions (oneDNN built in, both switches on).
bool conv_library_on();

/// Whether ops/conv.cpp should take this pass of this problem to library_conv:
/// the library is on, the problem is large enough to amortize the reorders, and
/// it is not one of the shape classes where actorflow's own kernel is faster
/// (see conv_library.cpp for the measurements behind the rule).
bool conv_library_chosen(conv_pass pass, const conv_problem& p);

/// The measurements conv_library_chosen follows: those of CPUs with AVX-512 or
/// of those without (oneDNN runs other kernels there), by default this CPU's.
/// Tests set one to check its choices, or to reach the library's passes on any
/// CPU. Change it only while no kernel runs.
enum class conv_rules { this_cpu, avx512, avx2 };
void set_conv_rules(conv_rules rules);

/// Computes one pass of a float32 convolution, the operands in TensorFlow's
/// layouts: forward y = conv(x, f) with (a, b, out) = (x, f, y); backprop_input
/// dx from (f, dy); backprop_filter df from (x, dy). Returns false (and
/// computes nothing) where library_conv is off or oneDNN has no primitive
/// for the problem: the caller computes it. `finish_rows`, where given, is
/// called on each slice's rows of a forward result (rows of k values) right
/// after they are written, while they are in cache: a fused op's epilogue.
bool library_conv(conv_pass pass, const conv_problem& p, const float* a, const float* b, float* out,
                  const std::function<void(float* rows, int64_t count)>& finish_rows = {});

/// library_conv for bfloat16 operands and result: oneDNN's bfloat16
/// primitives (AMX or AVX512_BF16), products summed in float32 and rounded
/// once, as TensorFlow's; the filter gradient's slices are summed in float32
/// too. Returns false where library_conv would, or where the CPU has no
/// bfloat16 convolution in oneDNN: the caller converts to float32.
bool library_conv_bf16(conv_pass pass, const conv_problem& p, const bfloat16* a, const bfloat16* b,
                       bfloat16* out);

}  // namespace actorflow::cpu
