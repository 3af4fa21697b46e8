// Checkpoints for fault tolerance: every variable of a session (value and
// optimizer slots; the global step is the int64 variable "global_step" when the
// graph has one) saved to a file and restored from it. The file format, with its
// checksums, is schema/checkpoint_io.hpp.
//
//   checkpoint_manager ckpt("run1/ckpt", /*keep_last=*/5);
//   auto r = ckpt.restore_latest(s);           // resume, or start afresh
//   for (auto& e : r.errors) std::cerr << e << "\n";   // corrupt files skipped
//   if (!r.restored) s.run({global_variables_initializer(g)});
//   ... every N steps: ckpt.save(s, step);
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/session.hpp"
#include "core/export.hpp"
#include "schema/checkpoint_dir.hpp"
#include "schema/checkpoint_io.hpp"

namespace actorflow {

/// Saves every variable of `s` and `global_step` to `path`, atomically (the
/// bytes go to path + ".tmp", are synced, and renamed). Tensor bytes are
/// stored in runs of at most `chunk_bytes`. Throws
/// "[save_checkpoint] <path>: ..." when a variable is uninitialized (naming it)
/// or the file cannot be written. Take it between steps (see snapshot_variables).
ACTORFLOW_API void save_checkpoint(session& s, const std::string& path, int64_t global_step,
                                   size_t chunk_bytes = default_checkpoint_chunk_bytes);

/// Restores every variable of `s` from `path` and returns the saved global
/// step. All or nothing: changes no variable and throws
/// "[load_checkpoint] <path>: ..." when the file is missing, truncated or
/// corrupted, or "[restore_checkpoint] <path>: ..." when a variable of the
/// graph is missing from it or has another dtype or shape (naming it, with
/// both shapes).
ACTORFLOW_API int64_t restore_checkpoint(session& s, const std::string& path);

/// A checkpoint directory (schema/checkpoint_dir.hpp) that also saves and
/// restores a session's variables.
class ACTORFLOW_API checkpoint_manager : public checkpoint_directory {
 public:
  struct restore_result {
    /// False when no checkpoint could be restored (none, or all unreadable).
    bool restored = false;
    std::string path;
    int64_t step = 0;
    /// One message per newer checkpoint that was skipped as unreadable
    /// (truncated, corrupted), each naming its file; show them to the user.
    std::vector<std::string> errors;
  };

  using checkpoint_directory::checkpoint_directory;

  /// Writes <dir>/ckpt-<step>.afck (step >= 0; the same step again replaces
  /// it), then deletes the oldest (lowest steps) beyond the last keep_last.
  /// The file just written is always kept. Returns its path.
  std::string save(session& s, int64_t step);

  /// Restores the newest checkpoint that reads cleanly: a truncated or
  /// corrupted one is reported in `errors` and the one before it is tried.
  /// A checkpoint that reads cleanly but does not fit the graph (a variable
  /// missing or of another shape) throws, as restore_checkpoint does: an
  /// older one would not fit either.
  restore_result restore_latest(session& s) const;
};

}  // namespace actorflow
