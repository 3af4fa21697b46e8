// Reverse-mode automatic differentiation over the graph, as in TensorFlow:
// gradients(ys, xs) adds the nodes that compute d(sum of ys)/d(x) for each x.
#pragma once
#include <functional>
#include <map>
#include <utility>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// Adds gradient nodes to ys' graph and returns d(sum ys)/d(xs[i]) for each i.
/// `grad_ys` (optional, one per y) seeds the backward pass; ones by default.
/// An x that no y depends on gets an invalid output. Throws, naming the op,
/// when the path from an x to a y crosses an op that has no gradient.
/// Gradients of integer and bool tensors are never formed.
ACTORFLOW_API std::vector<output> gradients(const std::vector<output>& ys,
                                            const std::vector<output>& xs,
                                            const std::vector<output>& grad_ys = {});

/// True for the dtypes gradients flow through (float32, float64).
ACTORFLOW_API bool is_differentiable_type(dtype type);

/// Builds the gradient of a while loop (frame `frame`) as a backward loop,
/// given the gradient of each of its exits that has one (exit node id ->
/// gradient); returns the gradients of the tensors that enter the loop
/// (loop variables' initial values, loop invariants) that lie in `between`.
/// Registered by ops/control_flow.cpp: the driver lives below the ops.
using loop_gradient_builder = std::function<std::vector<std::pair<endpoint, output>>(
    graph& g, int frame, const std::map<int, output>& exit_grads,
    const std::vector<char>& between)>;
ACTORFLOW_API void register_loop_gradient(loop_gradient_builder builder);

}  // namespace actorflow
