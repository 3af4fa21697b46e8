// Saving and loading graphs as Cap'n Proto messages (schema/graph.capnp).
//
// A saved graph holds each node's name, op, device, inputs, control inputs and
// attributes; loading rebuilds it through graph::add_node_raw, which re-runs op
// lookup, input validation and shape inference, so the output specs come back
// as they were. Every byte read is untrusted: a truncated, corrupted or hostile
// file throws actorflow::error naming the source and what was wrong, e.g.
//   [load_graph] model.afg: node 3 ('dense/matmul') input 0 names node 7,
//   which is not an earlier node
// and never crashes or allocates without bound.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// Writes g to `path`: first to path + ".tmp", then renamed over `path`, so a
/// crash mid-write never leaves a half-written file. Throws naming the path and
/// the system's reason when a file cannot be opened, written or renamed.
ACTORFLOW_API void save_graph(const graph& g, const std::string& path);

/// Reads a graph written by save_graph. Throws actorflow::error
/// "[load_graph] <path>: <what was wrong>" for a missing, unreadable, truncated,
/// corrupted or invalid file.
ACTORFLOW_API std::unique_ptr<graph> load_graph(const std::string& path);

/// The bytes save_graph would write (a flat, unpacked Cap'n Proto message).
ACTORFLOW_API std::string serialize_graph(const graph& g);

/// Rebuilds a graph from serialize_graph's bytes (which may be unaligned);
/// errors read "[deserialize_graph] <source_name>: <what was wrong>".
ACTORFLOW_API std::unique_ptr<graph> deserialize_graph(std::string_view bytes,
                                                       const std::string& source_name);

}  // namespace actorflow
