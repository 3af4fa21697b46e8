#include "schema/event_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

#include "schema/file_io.hpp"

namespace actorflow {

namespace {

// ---------------------------------------------------------------- CRC32C

constexpr uint32_t castagnoli_reflected = 0x82f63b78u;

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ castagnoli_reflected : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto crc_table = make_crc_table();

// The running register (already inverted) over `data`.
uint32_t crc32c_raw(uint32_t c, const unsigned char* p, size_t n) {
#if defined(__SSE4_2__)
  // The CPU's CRC32 instruction computes exactly this polynomial, 8 bytes a time.
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
#else
  for (; n > 0; --n, ++p) c = crc_table[(c ^ *p) & 0xff] ^ (c >> 8);
#endif
  return c;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t{static_cast<unsigned char>(at[static_cast<size_t>(i)])} << (8 * i);
  return v;
}

std::string hex32(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

constexpr const char* file_version = "brain.Event:2";
constexpr size_t flush_threshold = size_t{1} << 16;  // bytes buffered before writing

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  return ~crc32c_raw(~crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

// ---------------------------------------------------------------- writer

event_file_writer::event_file_writer(const std::string& logdir) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec)
    fail("event_file_writer", "cannot create log directory '" + logdir + "': " + ec.message());
  const auto seconds = static_cast<int64_t>(now());
  const std::string base =
      logdir + "/events.out.tfevents." + std::to_string(seconds) + "." + host_name();
  // Two writers started in the same second on one directory get files of their own.
  for (int n = 0;; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    errno = 0;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0) break;
    if (errno != EEXIST || n == 1000) fail_io("cannot create", errno);
  }
  write_event({.wall_time = now(), .file_version = file_version});
}

event_file_writer::event_file_writer(const event_file_path& file) : path_(file.path) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_io("cannot open", errno);
  write_event({.wall_time = now(), .file_version = file_version});
}

event_file_writer::~event_file_writer() {
  try {
    close();
  } catch (const error&) {
    // A destructor must not throw; summary_writer reports errors from flush().
  }
}

void event_file_writer::fail_io(const std::string& what, int err) {
  fail("event_file_writer", what + " '" + path_ + "': " + errno_text(err));
}

double event_file_writer::now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void event_file_writer::write_summary(std::string_view summary_bytes, int64_t step,
                                      double wall_time) {
  write_event({.wall_time = wall_time,
               .step = step,
               .has_summary = true,
               .summary_bytes = std::string(summary_bytes)});
}

void event_file_writer::write_graph(const graph& g, int64_t step, double wall_time) {
  write_event({.wall_time = wall_time, .step = step, .graph_def = encode_graph_def(g)});
}

void event_file_writer::write_event(const event& e) {
  if (!failed_.empty()) throw error(failed_);
  if (fd_ < 0) fail("event_file_writer", "'" + path_ + "' is closed");
  buffer_ += frame_record(encode_event(e));
  if (buffer_.size() >= flush_threshold) flush();
}

void event_file_writer::flush() {
  if (!failed_.empty()) throw error(failed_);
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      buffer_.clear();
      try {
        fail_io("cannot write", err);
      } catch (const error& e) {
        failed_ = e.what();
        throw;
      }
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
}

void event_file_writer::close() {
  if (fd_ < 0) return;
  std::string first_error;
  try {
    flush();
  } catch (const error& e) {
    first_error = e.what();
  }
  if (::close(fd_) != 0 && first_error.empty())
    first_error = "[event_file_writer] cannot close '" + path_ + "': " + errno_text(errno);
  fd_ = -1;
  if (!first_error.empty()) throw error(first_error);
}

// ---------------------------------------------------------------- reader

event_file_reader::event_file_reader(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("event_file_reader", "cannot open '" + path + "': " + errno_text(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) fail("event_file_reader", "cannot read '" + path + "': " + errno_text(errno));
  data_ = std::move(s).str();
}

void event_file_reader::fail_at(uint64_t offset, const std::string& what) const {
  fail("event_file_reader", path_ + ": " + what + " at offset " + std::to_string(offset));
}

std::optional<event> event_file_reader::next() {
  const std::string_view all(data_);
  if (pos_ >= all.size() || truncated()) return std::nullopt;
  const uint64_t start = pos_;
  const uint64_t left = all.size() - pos_;
  if (left < 12) {
    truncation_ = "record at offset " + std::to_string(start) + " has a 12-byte header, " +
                  std::to_string(left) + " bytes left";
    return std::nullopt;
  }
  const auto header = all.substr(pos_, 8);
  const uint64_t length = get_le(header, 8);
  const auto header_crc = static_cast<uint32_t>(get_le(all.substr(pos_ + 8), 4));
  if (masked_crc32c(header) != header_crc)
    fail_at(start, "record length CRC mismatch (stored " + hex32(header_crc) + ", computed " +
                       hex32(masked_crc32c(header)) + ")");
  // Compared with what is left before anything is added to it: a length near
  // 2^64 must not wrap around.
  if (length > left - 12 || left - 12 - length < 4) {
    truncation_ = "record at offset " + std::to_string(start) + " needs " +
                  std::to_string(length + 16) + " bytes, " + std::to_string(left) + " left";
    return std::nullopt;
  }
  const auto data = all.substr(pos_ + 12, length);
  const auto data_crc = static_cast<uint32_t>(get_le(all.substr(pos_ + 12 + length), 4));
  if (masked_crc32c(data) != data_crc)
    fail_at(start, "record data CRC mismatch (stored " + hex32(data_crc) + ", computed " +
                       hex32(masked_crc32c(data)) + ")");
  pos_ += 16 + length;
  try {
    return decode_event(data, "Event");
  } catch (const error& e) {
    fail_at(start, std::string("record does not hold a valid Event: ") + e.what());
  }
}

std::vector<event> event_file_reader::read_all() {
  std::vector<event> events;
  while (auto e = next()) events.push_back(std::move(*e));
  return events;
}

}  // namespace actorflow
