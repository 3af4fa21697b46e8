// summary_writer: TensorFlow's tf.summary.FileWriter. Writes summaries (from
// the summary ops of ops/summary.hpp, or from values the program already has)
// and graphs into a TensorBoard event file in a log directory
// (schema/event_file.hpp).
//
// Errors: the constructor throws actorflow::error when the log directory or
// the event file cannot be created, since nothing could be written then. After
// that no call throws: training must go on when the disk fills up or a
// summary is malformed (a NaN in a histogram). A failed call records its error,
// which last_error() returns (and error_count() counts); once a write to the
// file has failed, later writes fail with that same error, so the file stays a
// readable prefix of what was written.
//
// Thread-safe: every call takes one mutex. Records are buffered and written
// by flush(), when more than flush_seconds passed since the last flush, when
// the buffer passes 64 KiB, and on destruction.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/export.hpp"
#include "core/graph.hpp"
#include "schema/event_file.hpp"

namespace actorflow {

class ACTORFLOW_API summary_writer {
 public:
  /// Creates `logdir` (and its parents) and a new event file in it.
  explicit summary_writer(const std::string& logdir, double flush_seconds = 120);
  /// Writes to exactly this file (for tests of write errors: /dev/full).
  explicit summary_writer(const event_file_path& file, double flush_seconds = 120);
  ~summary_writer();
  summary_writer(const summary_writer&) = delete;
  summary_writer& operator=(const summary_writer&) = delete;

  /// A summary op's output (a 1-D uint8 tensor holding a serialized Summary).
  void add_summary(const tensor& serialized, int64_t step);
  void add_scalar(const std::string& tag, double value, int64_t step);
  void add_histogram(const std::string& tag, const tensor& values, int64_t step);
  void add_image(const std::string& tag, const tensor& images, int64_t step, int max_images = 3);
  void add_text(const std::string& tag, const std::string& text, int64_t step);
  /// The graph, for TensorBoard's graph tab.
  void add_graph(const graph& g, int64_t step = 0);
  /// Writes what is buffered to the file.
  void flush();

  /// The event file's path.
  std::string path() const;
  /// The last error a call recorded ("" when none).
  std::string last_error() const;
  int64_t error_count() const;

 private:
  template <class F>
  void guarded(F&& write);
  mutable std::mutex mutex_;
  event_file_writer file_;
  std::chrono::steady_clock::duration flush_every_;
  std::chrono::steady_clock::time_point last_flush_;
  std::string last_error_;
  int64_t errors_ = 0;
};

}  // namespace actorflow
