// A checkpoint directory: the last checkpoints of a run, one file per step,
// rotated. What a session saves into it is actors/checkpoint.hpp's business;
// a parameter server's task saves its shard here without a session.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "schema/checkpoint_io.hpp"

namespace actorflow {

/// Keeps the last checkpoints of a run in one directory, as
/// <dir>/ckpt-<step>.afck. A "ckpt-<step>.afck.tmp" left by a write that was
/// killed midway is deleted when one is made for the directory (only a
/// crashed write leaves one; use one per directory); files of
/// other names are ignored. Something named like a checkpoint that is not a
/// regular file (a directory "ckpt-20.afck") is an error naming it, from
/// list() and whatever calls it, since it would fail the save of that step.
class ACTORFLOW_API checkpoint_directory {
 public:
  struct entry {
    int64_t step = 0;
    std::string path;
  };
  /// keep_last >= 1. The directory is made on the first save if missing.
  /// Deletes the directory's leftover "ckpt-<step>.afck.tmp" files (best
  /// effort: one that cannot be deleted is overwritten by the next save).
  explicit checkpoint_directory(std::string dir, size_t keep_last = 5,
                                size_t chunk_bytes = default_checkpoint_chunk_bytes);

  /// Writes `data` as <dir>/ckpt-<step>.afck and then deletes the oldest
  /// (lowest steps) beyond the last keep_last; the file just written is
  /// always kept. Returns its path. The bytes go out at most
  /// `bytes_per_second` (0: as fast as the disk takes them).
  std::string save_data(const checkpoint_data& data, int64_t step, double bytes_per_second = 0);
  /// The newest checkpoint that reads cleanly, or nothing; files that do not
  /// read cleanly are skipped, each named in `errors`. Sets `path` to its file.
  std::optional<checkpoint_data> load_latest(std::vector<std::string>& errors,
                                             std::string* path = nullptr) const;

  /// The checkpoints in the directory, newest (highest step) first. Throws
  /// "[checkpoint_manager] '<dir>/ckpt-<step>.afck' is not a regular file ..."
  /// for a directory (or other non-file) of a checkpoint's name.
  std::vector<entry> list() const;

  const std::string& dir() const { return dir_; }
  size_t keep_last() const { return keep_last_; }

 private:
  std::string dir_;
  size_t keep_last_;
  size_t chunk_bytes_;
};

}  // namespace actorflow
