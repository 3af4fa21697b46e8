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

/// Writes `data` to `path` atomically: to path + ".tmp", fsync, rename. Tensor
/// bytes go in runs of at most `chunk_bytes` (1 .. max_capnp_data_bytes).
/// Throws "[save_checkpoint] <path>: ..." for an invalid tensor or name, or
/// when the file cannot be written.
ACTORFLOW_API void save_checkpoint_file(const checkpoint_data& data, const std::string& path,
                                        size_t chunk_bytes = default_checkpoint_chunk_bytes);

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
