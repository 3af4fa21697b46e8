// Files of a Cap'n Proto message behind a fixed 32-byte header, the layout of
// checkpoint files (schema/checkpoint_io.hpp describes it) and of cluster
// checkpoints' manifests (schema/checkpoint_manifest.hpp). Only the magic and
// the version differ, so the header's checks and the untrusted message's
// limits live here once.
#pragma once
#include <capnp/message.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace actorflow {

inline constexpr size_t framed_header_bytes = 32;

/// What tells one kind of framed file from another.
struct framed_format {
  std::string_view magic;  ///< 8 bytes, e.g. "AFCKPT\0\0"
  uint32_t version;
  std::string_view kind;  ///< in messages: "not an actorflow <kind>"
  int nesting_limit;      ///< how deep the message's pointers may go
};

/// The header for a payload given as pieces (segment table, then segments).
std::string make_framed_header(const framed_format& format,
                               const std::vector<std::string_view>& payload);
/// The header for a payload of `length` bytes whose CRC32 is `crc` (a writer
/// that sums the payload while it writes it).
std::string make_framed_header(const framed_format& format, uint64_t length, uint32_t crc);

/// The message in `bytes` (a whole file, which may be unaligned) handed to
/// `read`, once its header and checksums are checked and under traversal
/// limits set from its size. Every problem, `read`'s Cap'n Proto errors
/// included, throws actorflow::error: `prefix` followed by what was wrong.
void read_framed_bytes(std::string_view bytes, const framed_format& format,
                       const std::string& prefix,
                       const std::function<void(capnp::MessageReader&)>& read);
/// The same for the file at `path`, read whole (a missing one is not_found).
void read_framed_file(const std::string& path, const framed_format& format,
                      const std::string& prefix,
                      const std::function<void(capnp::MessageReader&)>& read);

/// A file's size and the CRC32 of all its bytes.
struct file_digest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
/// The digest of the regular file at `path`, read in blocks. Throws
/// actorflow::error `where` followed by what failed (a missing file is not_found).
file_digest digest_file(const std::string& path, const std::string& where);

/// zlib's CRC32 of `bytes`, continued from `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, std::string_view bytes);
/// The CRC32 of A followed by B, from A's CRC, B's and B's length.
uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);
/// "0x0000abcd"
std::string hex32(uint32_t v);
/// Text from a file quoted for an error message (escaped, cut when long).
std::string quoted_name(std::string_view s);

}  // namespace actorflow
