// Cluster checkpoints: one global step saved by several tasks at once. Each
// checkpoint is a directory <dir>/ckpt-<step>/ holding one shard file per
// saving task (schema/checkpoint_io.hpp's format, named after the task) and a
// manifest, written last and atomically: a directory without a manifest that
// reads cleanly is not a checkpoint (a save that was interrupted).
//
//   <dir>/LOCK                    held (flock) by the run writing into <dir>
//   <dir>/ckpt-200/ps-0.afck      the shard of /job:ps/task:0
//   <dir>/ckpt-200/ps-1.afck
//   <dir>/ckpt-200/MANIFEST       step, shards with sizes and CRC32s, the
//                                 cluster's shape, every variable and its shape
//
// The manifest file has checkpoint files' layout (a 32-byte header with its
// own magic "AFMANI\0\0", version, payload length and CRC32s, then a Cap'n
// Proto message, schema::Manifest in schema/checkpoint.capnp). Every byte read
// is untrusted: problems throw "[load_manifest] <path>: <what was wrong>".
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/export.hpp"

namespace actorflow {

/// One shard file of a cluster checkpoint.
struct ACTORFLOW_API manifest_shard {
  std::string task;    ///< the task that wrote it, "/job:ps/task:1"
  std::string file;    ///< its name inside the checkpoint's directory ("ps-1.afck"); no '/'
  uint64_t bytes = 0;  ///< the file's size
  uint32_t crc32 = 0;  ///< zlib CRC32 of the whole file
};

/// Where a variable's rows sit in a whole variable split by rows
/// (ops/embedding.hpp's partitioned_variable). Empty `of`: not a part.
struct ACTORFLOW_API partition_info {
  std::string of;        ///< the whole variable's name ("emb" for "emb/part_1")
  int64_t rows = 0;      ///< rows of the whole variable
  int32_t count = 0;     ///< how many parts
  int32_t index = 0;     ///< this part, 0 .. count - 1
  std::string strategy;  ///< "div" or "mod"
  bool is_part() const { return !of.empty(); }
};

struct ACTORFLOW_API manifest_variable {
  std::string name;
  dtype type = dtype::float32;
  std::vector<int64_t> dims;
  uint32_t shard = 0;  ///< the index in checkpoint_manifest::shards of the file holding it
  partition_info partition;
};

struct ACTORFLOW_API checkpoint_manifest {
  int64_t step = 0;
  std::string run_id;  ///< the run that wrote it (checkpoints of two runs never mix)
  /// The shape of the cluster that saved it: job -> number of tasks.
  std::map<std::string, int32_t> cluster;
  std::vector<manifest_shard> shards;
  std::vector<manifest_variable> variables;
  /// How long updates were held on the tasks while the snapshot was taken.
  double pause_ms = 0;

  /// The variable named `name`, or null.
  const manifest_variable* find(const std::string& name) const;
};

inline constexpr uint32_t manifest_format_version = 1;
inline constexpr std::string_view manifest_file_name = "MANIFEST";

/// The bytes of a manifest file (header and payload).
ACTORFLOW_API std::string serialize_manifest(const checkpoint_manifest& m);
/// Reads serialize_manifest's bytes (which may be unaligned). Checks the
/// header and checksums, then every field: names non-empty and unique, shard
/// indexes in range, file names plain (no '/', not "." or ".."), dims >= 0,
/// partition fields consistent. Errors read "[load_manifest] <source_name>: ...".
ACTORFLOW_API checkpoint_manifest deserialize_manifest(std::string_view bytes,
                                                       const std::string& source_name);
/// Puts the header in front of a payload (a flat Cap'n Proto message). For
/// tests and the fuzz target, which craft payloads and need them to pass the
/// checksum (as frame_checkpoint_payload does for checkpoint files).
ACTORFLOW_API std::string frame_manifest_payload(std::string_view payload);
/// Writes atomically: path + ".tmp", fsync, rename, fsync of the directory.
/// Throws "[save_checkpoint] <path>: ..." when it cannot.
ACTORFLOW_API void save_manifest(const checkpoint_manifest& m, const std::string& path);
/// Throws "[load_manifest] <path>: ..." for a missing, truncated, corrupted
/// or invalid file.
ACTORFLOW_API checkpoint_manifest load_manifest(const std::string& path);

/// The size and CRC32 of the file at `path` (file = its name without the
/// directory; task left empty), read in large blocks. Throws
/// "[save_checkpoint] <path>: ..." when it cannot be read.
ACTORFLOW_API manifest_shard describe_file(const std::string& path);
/// Throws "[load_checkpoint] <checkpoint_dir>/<file>: ..." when the shard
/// is missing, or its size or CRC32 differs from the manifest's (saying
/// which, with both values).
ACTORFLOW_API void verify_shard(const std::string& checkpoint_dir, const manifest_shard& shard);

/// Holds an exclusive lock (flock) on <dir>/LOCK for its lifetime, so that
/// two runs never write into one directory; a killed process's lock goes
/// with it. Throws "[checkpoint_manager] <dir>: another process (pid N)
/// holds <dir>/LOCK: ..." when it is taken. Makes <dir> if missing.
class ACTORFLOW_API directory_lock {
 public:
  explicit directory_lock(const std::string& dir);
  ~directory_lock();
  directory_lock(const directory_lock&) = delete;
  directory_lock& operator=(const directory_lock&) = delete;

 private:
  int fd_ = -1;
};

/// The cluster checkpoints of one directory.
class ACTORFLOW_API cluster_checkpoint_directory {
 public:
  struct entry {
    int64_t step = 0;
    std::string path;       ///< <dir>/ckpt-<step>
    bool complete = false;  ///< its manifest reads cleanly
    std::string
        problem;  ///< why not: "no MANIFEST (a save that did not finish)", or the load error
  };
  /// keep_last >= 1.
  explicit cluster_checkpoint_directory(std::string dir, size_t keep_last = 5);

  /// Every ckpt-<step> directory, newest (highest step) first, complete or
  /// not. Other names are ignored; a non-directory named ckpt-<step> is an
  /// entry with a problem.
  std::vector<entry> list() const;
  /// <dir>/ckpt-<step>, made (with <dir>) if missing; an existing one of
  /// that step is emptied first (a save of that step that did not finish).
  std::string prepare_step(int64_t step) const;
  /// Writes <dir>/ckpt-<m.step>/MANIFEST, last, then deletes complete
  /// checkpoints beyond the newest keep_last and incomplete ones older than
  /// m.step (their stale shards). Returns the manifest's path.
  std::string commit(const checkpoint_manifest& m) const;
  /// The newest complete checkpoint whose shards all verify (verify_shard);
  /// each newer one skipped is named in `skipped` with why. Nothing when none.
  std::optional<std::pair<entry, checkpoint_manifest>> newest(
      std::vector<std::string>& skipped) const;

  const std::string& dir() const { return dir_; }
  size_t keep_last() const { return keep_last_; }

 private:
  std::string dir_;
  size_t keep_last_;
};

/// The name of the shard file task `task` writes: "/job:ps/task:1" -> "ps-1.afck".
ACTORFLOW_API std::string shard_file_name(const std::string& task);

}  // namespace actorflow
