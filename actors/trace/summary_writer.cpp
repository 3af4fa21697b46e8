#include "actors/trace/summary_writer.hpp"

#include "ops/summary.hpp"

namespace actorflow {

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

summary_writer::summary_writer(const std::string& logdir, double flush_seconds)
    : file_(logdir),
      flush_every_(seconds(flush_seconds)),
      last_flush_(std::chrono::steady_clock::now()) {}

summary_writer::summary_writer(const event_file_path& file, double flush_seconds)
    : file_(file),
      flush_every_(seconds(flush_seconds)),
      last_flush_(std::chrono::steady_clock::now()) {}

summary_writer::~summary_writer() {
  std::lock_guard lock(mutex_);
  try {
    file_.flush();
  } catch (const error&) {
    // Recorded by an earlier call, or lost with the writer: a destructor must not throw.
  }
}

// Runs one write under the mutex; an error is recorded instead of thrown.
template <class F>
void summary_writer::guarded(F&& write) {
  std::lock_guard lock(mutex_);
  try {
    write();
    const auto now = std::chrono::steady_clock::now();
    if (now - last_flush_ >= flush_every_) {
      last_flush_ = now;
      file_.flush();
    }
  } catch (const std::exception& e) {
    // std::exception, not only actorflow::error: a bad_alloc from a huge image
    // must not end a training run either.
    last_error_ = e.what();
    ++errors_;
  }
}

void summary_writer::add_summary(const tensor& serialized, int64_t step) {
  guarded([&] { file_.write_summary(summary_bytes(serialized), step); });
}

void summary_writer::add_scalar(const std::string& tag, double value, int64_t step) {
  guarded([&] { file_.write_summary(encode_scalar_summary(tag, value), step); });
}

void summary_writer::add_histogram(const std::string& tag, const tensor& values, int64_t step) {
  guarded([&] { file_.write_summary(encode_histogram_summary(tag, values), step); });
}

void summary_writer::add_image(const std::string& tag, const tensor& images, int64_t step,
                               int max_images) {
  guarded([&] { file_.write_summary(encode_image_summary(tag, images, max_images), step); });
}

void summary_writer::add_text(const std::string& tag, const std::string& text, int64_t step) {
  guarded([&] { file_.write_summary(encode_text_summary(tag, text), step); });
}

void summary_writer::add_graph(const graph& g, int64_t step) {
  guarded([&] { file_.write_graph(g, step); });
}

void summary_writer::flush() {
  guarded([&] {
    last_flush_ = std::chrono::steady_clock::now();
    file_.flush();
  });
}

std::string summary_writer::path() const { return file_.path(); }

std::string summary_writer::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

int64_t summary_writer::error_count() const {
  std::lock_guard lock(mutex_);
  return errors_;
}

}  // namespace actorflow
