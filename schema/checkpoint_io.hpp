// Checkpoint files: every variable's value and optimizer slots, and the global
// step (schema/checkpoint.capnp behind a fixed header). actors/checkpoint.hpp
// takes them from and gives them to a session; this file is only the format.
//
// Layout (all integers little-endian):
//
//   offset  size  field
//        0     8  magic "AFCKPT\0\0"
//        8     4  format version (checkpoint_format_version)
//       12     4  reserved, 0
//       16     8  payload length in bytes
//       24     4  CRC32 (zlib) of the payload
//       28     4  CRC32 of bytes 0..27
//       32     -  payload: a Cap'n Proto message (schema::Checkpoint) in the
//                 standard stream framing (segment table, then segments)
//
// Every byte read is untrusted. The header and the checksums are checked
// before the message is parsed, so a truncated file or a flipped bit is
// reported as such; then the message is parsed under traversal limits set from
// its size, and every name, dtype, shape and byte count is checked. Problems
// throw actorflow::error "[load_checkpoint] <path>: <what was wrong>", never
// crash and never allocate more than the file's size.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/export.hpp"
#include "core/op_registry.hpp"

namespace actorflow {

/// What a checkpoint holds.
struct ACTORFLOW_API checkpoint_data {
  int64_t global_step = 0;
  /// Variable name -> value and slots.
  std::map<std::string, variable_state> variables;
};

inline constexpr uint32_t checkpoint_format_version = 1;
inline constexpr size_t checkpoint_header_bytes = 32;
/// Tensor bytes are stored in runs of at most this many bytes by default
/// (one Cap'n Proto Data field holds less than 512 MiB).
inline constexpr size_t default_checkpoint_chunk_bytes = size_t{64} << 20;

/// What save_checkpoint_file wrote: the file's size and the CRC32 of all its
/// bytes (a manifest's record of it, with no need to read it back).
struct written_file {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

/// A save beside training (checkpoint_manager::start_save, a ps task's shard)
/// writes at most this many bytes per second by default: on 2 cores, a step
/// during such a save takes at most 1.1 times its time without one
/// (actorflow-bench --only checkpoint), where an unpaced save costs it a
/// third. 1 GiB takes 4 s.
inline constexpr double default_background_save_bytes_per_second = double(uint64_t{256} << 20);

/// Writes `data` to `path` atomically: to path + ".tmp", fsync, rename. Tensor
/// bytes go in runs of at most `chunk_bytes` (1 .. max_capnp_data_bytes),
/// around the page cache where the file system allows (large saves would
/// otherwise cost the CPU a running step needs; see write_header_and_payload),
/// at most `bytes_per_second` (0: as fast as the disk takes them).
/// Throws "[save_checkpoint] <path>: ..." for an invalid tensor or name, or
/// when the file cannot be written.
ACTORFLOW_API written_file save_checkpoint_file(const checkpoint_data& data,
                                                const std::string& path,
                                                size_t chunk_bytes = default_checkpoint_chunk_bytes,
                                                double bytes_per_second = 0);

/// Reads a file written by save_checkpoint_file. Throws
/// "[load_checkpoint] <path>: <what was wrong>" for a missing, unreadable,
/// truncated, corrupted or invalid file.
ACTORFLOW_API checkpoint_data load_checkpoint_file(const std::string& path);

/// The bytes save_checkpoint_file writes (header and payload).
ACTORFLOW_API std::string serialize_checkpoint(const checkpoint_data& data,
                                               size_t chunk_bytes = default_checkpoint_chunk_bytes);

/// Reads serialize_checkpoint's bytes (which may be unaligned); errors read
/// "[deserialize_checkpoint] <source_name>: <what was wrong>".
ACTORFLOW_API checkpoint_data deserialize_checkpoint(std::string_view bytes,
                                                     const std::string& source_name);

/// Puts the header in front of a payload (a flat Cap'n Proto message). For
/// tests and the fuzz target, which craft payloads and need them to pass the
/// checksum.
ACTORFLOW_API std::string frame_checkpoint_payload(std::string_view payload);

}  // namespace actorflow
