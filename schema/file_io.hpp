// Writing files so that a crash never leaves a half-written one: the bytes go
// to "<path>.tmp", are synced, and the temporary file is renamed over `path`.
// Shared by graph files and checkpoints, with the Cap'n Proto stream framing
// both write.
#pragma once
#include <capnp/common.h>
#include <kj/common.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace actorflow {

/// Writes the concatenation of `pieces` to path + ".tmp", fsyncs it, renames it
/// to `path`, then syncs the directory (best effort). On failure the temporary
/// file is removed and actorflow::error is thrown: `where` followed by what
/// failed, the file and the system's reason.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                           const std::string& where);

/// The same, with `write` putting the bytes into the open temporary file
/// (its argument `what` is the start of an error message for a failed write):
/// for a writer that fills the file out of order.
void write_file_atomically(const std::string& path,
                           const std::function<void(int fd, const std::string& what)>& write,
                           const std::string& where);

/// Writes the concatenation of `pieces` at `offset` of file `fd`, many pieces
/// per system call (pwritev) and large ones unsplit. Throws actorflow::error
/// `what` followed by the system's reason.
void write_pieces_at(int fd, const std::vector<std::string_view>& pieces, uint64_t offset,
                     const std::string& what);

/// Asks the kernel to start writing bytes [offset, offset + length) of file
/// `fd` to the disk now, without waiting: the disk works while the writer is
/// still producing the rest, and a large file's fsync waits only for its
/// tail. A hint (where the system has none, nothing): failures show at fsync.
void start_writeback(int fd, uint64_t offset, uint64_t length);

/// Paces a background writer to at most `bytes_per_second` from its
/// construction on (0: no limit): a save beside training takes longer and
/// takes less of the CPU the steps need at any moment.
class write_pace {
 public:
  explicit write_pace(double bytes_per_second = 0);
  /// Sleeps until `bytes` written since the start are due.
  void wait_for(uint64_t bytes) const;

 private:
  double rate_;
  std::chrono::steady_clock::time_point start_;
};

/// Writes a file made of a header of `header_bytes` and, behind it, the
/// concatenation of `payload`: the payload first, then the header, which
/// `header` makes once the payload is out (it may hold the payload's
/// checksum, summed meanwhile on another thread). The bytes bypass the page
/// cache (O_DIRECT, through aligned staging buffers): on a virtual machine,
/// copying a large file into the page cache costs several times the CPU of
/// the disk's own transfer, CPU that a training step beside a background
/// save loses. Where the file system refuses direct I/O, they go through the
/// page cache, each block handed to the disk once written. Either way the
/// file holds exactly those bytes; `direct` false takes the page cache
/// always. The payload goes out at `pace`. The header is 1 to 4096 bytes.
/// Throws actorflow::error `what` followed by the system's reason.
void write_header_and_payload(int fd, size_t header_bytes,
                              const std::vector<std::string_view>& payload,
                              const std::function<std::string()>& header, const std::string& what,
                              const write_pace& pace = write_pace(), bool direct = true);

/// The standard Cap'n Proto stream framing of a message's segments: (segment
/// count - 1) and each segment's size in words, as little-endian uint32, padded
/// to a whole word. Write it, then each segment's bytes.
std::string capnp_segment_table(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments);

/// The system's text for an errno value.
std::string errno_text(int err);
/// The kind of failure an errno value is: a full disk resource_exhausted, a
/// missing file not_found, a refused one permission_denied, others unknown.
error_code errno_code(int err);

}  // namespace actorflow
