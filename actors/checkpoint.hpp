// Checkpoints for fault tolerance: every variable of a session (value and
// optimizer slots; the global step is the int64 variable "global_step" when the
// graph has one) saved and restored.
//
// A session of one process saves one file (schema/checkpoint_io.hpp). A
// cluster session saves a cluster checkpoint (schema/checkpoint_manifest.hpp):
// a directory where every task holding variables writes its own shard of one
// consistent cut, and a manifest written last; it restores from one into any
// shape of cluster (parts of partitioned variables re-split), and a session
// of one process restores from one too (for evaluation or export). Variables
// a cluster session keeps in its own process (a worker's local step) are
// that worker's state, as TensorFlow's local variables: a cluster checkpoint
// leaves them out, and its restore leaves them as they are.
//
//   checkpoint_manager ckpt("run1/ckpt", /*keep_last=*/5);
//   auto r = ckpt.restore_latest(s);           // resume, or start afresh
//   for (auto& e : r.errors) std::cerr << e << "\n";   // corrupt ones skipped
//   if (!r.restored) s.run({global_variables_initializer(g)});
//   ... every N steps: ckpt.save(s, step);
#pragma once
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/session.hpp"
#include "core/export.hpp"
#include "schema/checkpoint_dir.hpp"
#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"

namespace actorflow {

/// Saves every variable of `s` and `global_step` to `path`, atomically (the
/// bytes go to path + ".tmp", are synced, and renamed). Tensor bytes are
/// stored in runs of at most `chunk_bytes`. On a cluster session `path` is a
/// directory: each task writes its shard into it, and the manifest comes last.
/// Throws "[save_checkpoint] <path>: ..." when a variable is uninitialized
/// (naming it) or the file cannot be written. Take it between steps (see
/// snapshot_variables); a cluster session's cut is consistent anyway.
ACTORFLOW_API void save_checkpoint(session& s, const std::string& path, int64_t global_step,
                                   size_t chunk_bytes = default_checkpoint_chunk_bytes);

/// Restores every variable of `s` from `path` (a file, or a cluster
/// checkpoint's directory) and returns the saved global step. All or
/// nothing: changes no variable and throws "[load_checkpoint] <path>: ..."
/// when a file is missing, truncated or corrupted, or
/// "[restore_checkpoint] <path>: ..." when a variable of the graph is missing
/// from it or has another dtype or shape (naming it, with both shapes).
ACTORFLOW_API int64_t restore_checkpoint(session& s, const std::string& path);

/// A checkpoint directory (schema/checkpoint_dir.hpp) that also saves and
/// restores a session's variables: <dir>/ckpt-<step>.afck for a session of
/// one process, <dir>/ckpt-<step>/ for a cluster session.
class ACTORFLOW_API checkpoint_manager : public checkpoint_directory {
 public:
  struct restore_result {
    /// False when no checkpoint could be restored (none, or all unreadable).
    bool restored = false;
    std::string path;
    int64_t step = 0;
    /// One message per newer checkpoint that was skipped as unreadable
    /// (truncated, corrupted, a cluster save that did not finish), each
    /// naming its file; show them to the user.
    std::vector<std::string> errors;
  };

  checkpoint_manager(std::string dir, size_t keep_last = 5,
                     size_t chunk_bytes = default_checkpoint_chunk_bytes);
  ~checkpoint_manager();

  /// Writes the checkpoint of `step` (step >= 0; the same step again replaces
  /// it), then deletes the oldest (lowest steps) beyond the last keep_last.
  /// The one just written is always kept. Returns its path. A cluster
  /// session's save first locks the directory (directory_lock): two runs
  /// never write into one.
  std::string save(session& s, int64_t step);

  /// A save that lets training go on while the files are written: returns
  /// once the cut is taken (a cluster session: every task froze and took
  /// references; one process: references to every variable), with a future
  /// of the path, ready when the checkpoint is complete. Take it between
  /// steps on a session of one process. The files are written at most at
  /// the background rate, save() at the disk's.
  std::future<std::string> start_save(session& s, int64_t step);

  /// The most bytes per second each file of a background save (start_save)
  /// is written at; 0: as fast as the disk takes them. Default:
  /// default_background_save_bytes_per_second.
  void set_background_rate(double bytes_per_second);

  /// Restores the newest checkpoint that reads cleanly: a truncated or
  /// corrupted one (or a cluster save without its manifest) is reported in
  /// `errors` and the one before it is tried. A checkpoint that reads
  /// cleanly but does not fit the graph (a variable missing or of another
  /// shape) throws, as restore_checkpoint does: an older one would not fit
  /// either.
  restore_result restore_latest(session& s) const;

  /// Takes the directory's lock now (a cluster session's first save would):
  /// throws naming the process that holds it.
  void lock_directory();

  /// The cluster checkpoints of the directory (ckpt-<step>/).
  const cluster_checkpoint_directory& cluster_checkpoints() const { return cluster_dir_; }

 private:
  std::future<std::string> start_save(session& s, int64_t step, double bytes_per_second);
  std::future<std::string> start_cluster_save(session& s, int64_t step, double bytes_per_second);

  cluster_checkpoint_directory cluster_dir_;
  double background_rate_ = default_background_save_bytes_per_second;
  std::unique_ptr<directory_lock> lock_;
  std::string run_id_;
};

}  // namespace actorflow
