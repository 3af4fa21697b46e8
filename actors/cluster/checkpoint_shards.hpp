// Restoring from a cluster checkpoint (schema/checkpoint_manifest.hpp) into a
// graph of any shape: each variable of the graph takes the saved variable of
// its name, or, when the graph splits a variable over another number of parts
// than the run that saved it (or not at all), the rows it holds gathered from
// the saved parts. A task reads only the shard files holding what it needs.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "core/op_registry.hpp"
#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"

namespace actorflow {

/// The variables of `g` as a restore wants them: name, dtype, shape, and for
/// the parts of a partitioned variable (ops/embedding.hpp) where their rows
/// sit (the node attributes make_partitioned_variable sets). `shard` is unused.
std::vector<manifest_variable> restore_targets(const graph& g);

/// Fills each target, value and slots, from the checkpoint in
/// `checkpoint_dir` (its manifest `m`): the saved variable of the same name
/// when it has the target's dtype and shape; else, for a part or a whole
/// variable, its rows from the saved parts of the same whole variable. Every
/// shard read is checked against the manifest first (size and CRC32). All
/// or nothing: throws "[restore_checkpoint] <checkpoint_dir>: ..." naming
/// every target it cannot fill and why (missing, another dtype or shape,
/// another row count), or the shard file that is missing or corrupted.
std::map<std::string, variable_state> assemble_variables(
    const std::string& checkpoint_dir, const checkpoint_manifest& m,
    const std::vector<manifest_variable>& targets);

/// Serializes a list of targets (a manifest that holds only variables), for
/// the restore request a client sends a task; and reads it back (untrusted).
std::string serialize_targets(const std::vector<manifest_variable>& targets);
std::vector<manifest_variable> deserialize_targets(const std::string& bytes,
                                                   const std::string& source_name);

}  // namespace actorflow
