// actorflow-train's output directories, checked before the data load and the
// first epoch: a path it cannot write, or a checkpoint directory that holds
// another run's checkpoints, is an error at start, not after an epoch.
#pragma once
#include <string>

#include "actors/checkpoint.hpp"

namespace actorflow::apps {

/// Makes `dir` (and its parents) when missing and proves it writable by
/// creating and deleting a file in it. Throws "[train] <flag> '<dir>': ..."
/// saying what failed. A full disk may still pass: the report and the
/// checkpoints then fail later, each on its own.
void require_writable_dir(const std::string& dir, const std::string& flag);

/// What a run may do with the checkpoints already in a directory.
enum class existing_checkpoints { refuse, resume, overwrite };

/// Applies `policy` to the checkpoints in `ckpt`'s directory: with refuse,
/// any checkpoint is an error naming the newest (so that a fresh run never
/// mixes its checkpoints with another run's, in retention or a later
/// --resume); with overwrite, they are deleted; with resume, they stay.
/// Something named like a checkpoint that is not a file is an error in all three.
void claim_checkpoint_dir(const checkpoint_manager& ckpt, existing_checkpoints policy);

}  // namespace actorflow::apps
