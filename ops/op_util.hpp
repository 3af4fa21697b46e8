// Helpers shared by the op families: building nodes; normalize_axis and the
// other index arithmetic come from ops/geometry/dims.hpp.
#pragma once
#include "core/graph.hpp"
#include "devices/cpu/parallel.hpp"
#include "ops/geometry/dims.hpp"

namespace actorflow {

/// Adds a node of `op` and returns its output `index`.
inline output make_op(const std::string& op, std::vector<output> inputs, attr_map attrs = {},
                      const std::string& name = "", int index = 0) {
  if (inputs.empty()) fail(op, "make_op needs at least one input to find the graph");
  graph& g = inputs[0].owner();
  auto& n = g.add_node(op, std::move(inputs), std::move(attrs), name);
  return output(&g, {n.id, index});
}

/// All outputs of a node added with `op`.
inline std::vector<output> make_op_outputs(const std::string& op, std::vector<output> inputs,
                                           attr_map attrs = {}, const std::string& name = "") {
  if (inputs.empty()) fail(op, "make_op needs at least one input to find the graph");
  graph& g = inputs[0].owner();
  auto& n = g.add_node(op, std::move(inputs), std::move(attrs), name);
  std::vector<output> outs;
  for (size_t i = 0; i < n.outputs.size(); ++i)
    outs.emplace_back(&g, endpoint{n.id, static_cast<int>(i)});
  return outs;
}

}  // namespace actorflow
