// TensorBoard event files: a sequence of TFRecords, each an Event
// (schema/event_proto.hpp), as tf.summary.FileWriter writes them.
//
// A record is: uint64 length (little-endian), uint32 masked CRC32C of those 8
// bytes, the data, uint32 masked CRC32C of the data. The writer names its file
// DIR/events.out.tfevents.<unix seconds>.<hostname> (TensorBoard finds files by
// "tfevents" in the name) and begins it with an Event whose file_version is
// "brain.Event:2".
//
// The reader trusts nothing: a file cut short (a run killed mid-write) yields
// every whole record and then stops, saying the tail was truncated; a CRC that
// does not match is an error naming the record's offset.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/export.hpp"
#include "schema/event_proto.hpp"

namespace actorflow {

/// CRC32C (Castagnoli), continued from `crc` (0 to start):
/// crc32c("123456789") == 0xE3069283.
ACTORFLOW_API uint32_t crc32c(std::string_view data, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
ACTORFLOW_API uint32_t masked_crc32c(std::string_view data);
/// One TFRecord: length, its masked CRC, the data, the data's masked CRC.
ACTORFLOW_API std::string frame_record(std::string_view data);

/// Names an event file to write directly, rather than a log directory.
struct ACTORFLOW_API event_file_path {
  std::string path;
};

class ACTORFLOW_API event_file_writer {
 public:
  /// Creates `logdir` (and its parents) and a new event file in it. Throws
  /// actorflow::error naming the directory or file and the system's reason.
  explicit event_file_writer(const std::string& logdir);
  /// Writes to exactly this file (created or truncated), e.g. to test how a
  /// full disk (/dev/full) is reported.
  explicit event_file_writer(const event_file_path& file);
  ~event_file_writer();  // writes what is buffered; errors are dropped there
  event_file_writer(const event_file_writer&) = delete;
  event_file_writer& operator=(const event_file_writer&) = delete;

  /// The event file's path.
  const std::string& path() const { return path_; }

  /// An Event holding a serialized Summary (from ops/summary).
  void write_summary(std::string_view summary_bytes, int64_t step, double wall_time = now());
  /// An Event holding g as a GraphDef (encode_graph_def).
  void write_graph(const graph& g, int64_t step = 0, double wall_time = now());
  /// Any event, framed as one record.
  void write_event(const event& e);
  /// Writes the buffered records to the file (the OS holds them from there:
  /// a killed process loses nothing, TensorBoard sees them).
  void flush();
  /// Flushes and closes; later writes throw.
  void close();

  /// Seconds since the epoch, as Event.wall_time holds them.
  static double now();

 private:
  void open(int flags);
  [[noreturn]] void fail_io(const std::string& what, int err);
  std::string path_;
  int fd_ = -1;
  std::string buffer_;
  // After a failed write the file may end in part of a record: later writes
  // fail with the first error rather than add records after that gap.
  std::string failed_;
};

class ACTORFLOW_API event_file_reader {
 public:
  /// Reads the whole file; throws naming it when it cannot be read.
  explicit event_file_reader(const std::string& path);

  /// The next whole record's Event; nullopt at the end of the file, or where
  /// the file ends inside a record (then truncated() is true). Throws
  /// "[event_file_reader] <path>: ... at offset N" for a CRC mismatch or a
  /// record whose Event does not decode.
  std::optional<event> next();
  /// Every event up to the end (or the truncated tail).
  std::vector<event> read_all();

  bool truncated() const { return !truncation_.empty(); }
  /// What was cut short, e.g. "record at offset 120 needs 4000 bytes, 37 left".
  const std::string& truncation() const { return truncation_; }
  /// The offset of the next record.
  uint64_t offset() const { return pos_; }

 private:
  [[noreturn]] void fail_at(uint64_t offset, const std::string& what) const;
  std::string path_;
  std::string data_;
  uint64_t pos_ = 0;
  std::string truncation_;
};

}  // namespace actorflow
