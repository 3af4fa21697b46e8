// Chains of element-wise float32 ops in one pass over memory.
//
// The element-wise ops register their float32 functions here (a unary op its
// segment function, as its own kernel runs it; add, sub, mul and div theirs),
// and fused_elementwise, which the graph optimizer makes
// (actors/compile/graph_optimizer.hpp), runs a program of them block by block: each
// block of a few thousand elements goes through every step while it is in
// cache, where the ops one by one would each read and write the whole tensor.
// An element's result has the same bits either way: the functions are the
// kernels' own, and they give an element the same value wherever it lies.
//
// Op: fused_elementwise(inputs...) with attrs `ops` (the steps' op names,
// comma-separated) and `operands` (two per step: an input's index, or
// num_inputs + an earlier step's index; -1 for a unary step's second). All
// inputs and the output are float32 of one shape. It has no gradient: it is
// made after gradients are built.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace actorflow {

using float_unary_fn = std::function<void(const float* x, float* y, int64_t n)>;
using float_binary_fn = std::function<void(const float* a, const float* b, float* y, int64_t n)>;

/// Registers op `op`'s float32 function (at static initialization, beside the op).
struct float_unary_registrar {
  float_unary_registrar(const std::string& op, float_unary_fn fn);
};

/// The registered functions; null for an op without one.
const float_unary_fn* find_float_unary(const std::string& op);
const float_binary_fn* find_float_binary(const std::string& op);

/// Whether fused_elementwise can run `op` (same-shape operands, float32).
inline bool is_fusable_elementwise(const std::string& op) {
  return find_float_unary(op) || find_float_binary(op);
}

}  // namespace actorflow
