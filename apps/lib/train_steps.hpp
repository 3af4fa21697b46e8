// What every actorflow-train model shares around its steps: the output
// directories checked before anything slow, the start (a restored checkpoint
// or fresh variables), and the guards that stop a diverged run without
// saving what diverged.
#pragma once
#include <memory>

#include "actors/checkpoint.hpp"
#include "actors/session.hpp"
#include "apps/lib/training_options.hpp"

namespace actorflow::apps {

/// Checks the output directories before anything slow starts (the runtime,
/// the data load): a bad path or another run's checkpoints cost seconds, not
/// an epoch. Returns the checkpoint manager, or null without --checkpoint-dir.
std::unique_ptr<checkpoint_manager> prepare_outputs(const training_options& c);

/// The runtime a single-process run trains on: --threads, and the device
/// --device names (a GPU, refused with the reason when there is none, or the
/// accelerator stand-in).
std::shared_ptr<runtime> make_training_runtime(const training_options& c);

/// Prints the nodes that placement moved off the device they asked for
/// (soft placement), or that none was: on an accelerator, what runs
/// elsewhere and why.
void print_soft_placement(const session& s);

/// Restores the newest readable checkpoint when --resume asks for it and
/// returns its step; otherwise initializes the variables and returns 0.
int64_t restore_or_initialize(session& s, graph& g, const training_options& c,
                              checkpoint_manager* ckpt);

/// TensorFlow's NanTensorHook: throws at the first non-finite loss, saying
/// which checkpoint is kept.
void require_finite_loss(float loss, int64_t step, const checkpoint_manager* ckpt);

/// Saves a checkpoint at `step` unless a variable (or an optimizer slot) is
/// NaN or infinite, which throws instead.
void save_finite(session& s, checkpoint_manager& ckpt, int64_t step);

}  // namespace actorflow::apps
