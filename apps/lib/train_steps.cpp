#include "apps/lib/train_steps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "actors/run/runtime.hpp"
#include "apps/lib/run_dirs.hpp"
#include "core/error.hpp"
#include "devices/cuda/gpu_support.hpp"
#include "ops/state.hpp"

namespace actorflow::apps {

namespace {

// What a diverged run leaves behind, for its error message.
std::string kept_checkpoint(const checkpoint_manager* ckpt) {
  auto saved = ckpt ? ckpt->list() : std::vector<checkpoint_manager::entry>{};
  return saved.empty() ? "no checkpoint was saved"
                       : "the last checkpoint, " + saved.front().path + ", is kept";
}

bool has_non_finite(const tensor& t) {
  if (!t.valid() || t.type() != dtype::float32) return false;
  const float* p = t.data<float>();
  return !std::all_of(p, p + t.num_elements(), [](float v) { return std::isfinite(v); });
}

}  // namespace

std::shared_ptr<runtime> make_training_runtime(const training_options& c) {
  auto rt = std::make_shared<runtime>(
      runtime_options{.scheduler_threads = c.threads,
                      .compute_threads = c.threads,
                      .gpus = c.device == "gpu" ? -1 : 0,
                      .stand_in_devices = c.device == "stand_in" ? 1 : 0});
  if (c.device == "gpu" && !rt->find_device("gpu", 0))
    fail("train", "--device gpu: no GPU to train on (" + gpu::gpu_placement_refusal() + ")");
  return rt;
}

void print_soft_placement(const session& s) {
  const std::string soft = "soft placement";
  std::vector<placement_entry> moved;
  for (auto& e : s.placement_log())
    if (e.reason.compare(0, soft.size(), soft) == 0) moved.push_back(e);
  fmt::print("soft placement: {} node{} moved off the device they asked for\n", moved.size(),
             moved.size() == 1 ? "" : "s");
  if (!moved.empty()) fmt::print("{}", to_string(moved));
}

// Restores the newest readable checkpoint when asked; otherwise initializes.
int64_t restore_or_initialize(session& s, graph& g, const training_options& c,
                              checkpoint_manager* ckpt) {
  if (c.resume && ckpt) {
    auto r = ckpt->restore_latest(s);
    for (auto& e : r.errors) fmt::print(stderr, "warning: skipped checkpoint: {}\n", e);
    if (r.restored) {
      fmt::print("resumed from {} (step {})\n", r.path, r.step);
      return r.step;
    }
    fmt::print("no checkpoint to resume from in {}; starting afresh\n", c.checkpoint_dir);
  }
  s.run({global_variables_initializer(g)});
  return 0;
}

// Checks the output directories before anything slow starts (the runtime,
// the data load): a bad path or another run's checkpoints cost seconds, not
// an epoch. Returns the checkpoint manager, or null without --checkpoint-dir.
std::unique_ptr<checkpoint_manager> prepare_outputs(const training_options& c) {
  require_writable_dir(c.out, "--out");
  if (c.checkpoint_dir.empty()) return nullptr;
  require_writable_dir(c.checkpoint_dir, "--checkpoint-dir");
  // Made here, so that a killed save's temporaries go before anything else.
  auto ckpt = std::make_unique<checkpoint_manager>(c.checkpoint_dir, size_t(c.keep_checkpoints));
  claim_checkpoint_dir(*ckpt, c.resume                  ? existing_checkpoints::resume
                              : c.overwrite_checkpoints ? existing_checkpoints::overwrite
                                                        : existing_checkpoints::refuse);
  return ckpt;
}

// TensorFlow's NanTensorHook: a diverged run stops at the first non-finite
// loss. The loss is fetched every step anyway, so the check costs nothing.
void require_finite_loss(float loss, int64_t step, const checkpoint_manager* ckpt) {
  if (std::isfinite(loss)) return;
  fail("train", fmt::format("the loss is {} at step {}: training diverged (try a lower --lr); "
                            "stopping; {}",
                            loss, step, kept_checkpoint(ckpt)));
}

// Saves unless a variable (or an optimizer slot) is NaN or infinite: the loss
// is computed before the step's update, so an update that overflows shows
// only in the next loss, and the checkpoint in between must not keep it.
// Scanning the variables costs far less than writing them.
void save_finite(session& s, checkpoint_manager& ckpt, int64_t step) {
  for (auto& [name, state] : s.snapshot_variables()) {
    bool bad = has_non_finite(state.value);
    for (auto& [slot, value] : state.slots) bad = bad || has_non_finite(value);
    if (bad)
      fail("train", fmt::format("variable '{}' is not finite after step {}: training diverged "
                                "(try a lower --lr); stopping without saving it; {}",
                                name, step, kept_checkpoint(&ckpt)));
  }
  ckpt.save(s, step);
}

}  // namespace actorflow::apps
