#include "schema/file_io.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <system_error>
#include <thread>

#include "core/error.hpp"

namespace actorflow {

namespace {

[[noreturn]] void fail_write(const std::string& what, int err) {
  throw error(what + errno_text(err), errno_code(err));
}

// Drops the first `done` bytes of iov[at..].
size_t advance(std::vector<iovec>& iov, size_t at, size_t done) {
  for (; done > 0 && done >= iov[at].iov_len; ++at) done -= iov[at].iov_len;
  if (done > 0) {
    iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + done;
    iov[at].iov_len -= done;
  }
  return at;
}

// Direct I/O moves whole blocks from aligned memory to aligned offsets. 4096
// covers every logical block size in use (512 and 4096).
constexpr size_t direct_alignment = 4096;
constexpr size_t staging_bytes = size_t{8} << 20;

struct free_deleter {
  void operator()(char* p) const { std::free(p); }
};
using aligned_buffer = std::unique_ptr<char, free_deleter>;

aligned_buffer aligned_bytes(size_t n) {
  auto* p = static_cast<char*>(std::aligned_alloc(direct_alignment, n));
  if (p == nullptr) throw std::bad_alloc();
  return aligned_buffer(p);
}

size_t round_up(size_t n) {
  return (n + direct_alignment - 1) / direct_alignment * direct_alignment;
}

// Writes [p, p + n) at `offset`; returns 0, or the errno of the failure.
int pwrite_all(int fd, const char* p, size_t n, uint64_t offset) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w, n -= static_cast<size_t>(w), offset += static_cast<uint64_t>(w);
  }
  return 0;
}

bool set_direct(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  flags = on ? (flags | O_DIRECT) : (flags & ~O_DIRECT);
  return ::fcntl(fd, F_SETFL, flags) == 0;
}

// The file's bytes staged through a ring of aligned buffers: while some are
// written (several writes in flight keep the disk's queue full), the next
// fills, so the disk works while the CPU copies. Each write is padded to
// whole blocks; the caller truncates the file to its length.
class direct_stager {
 public:
  direct_stager(int fd, size_t header_bytes, const write_pace& pace)
      : fd_(fd), pace_(pace), used_(header_bytes) {
    for (auto& b : buffers_) b = aligned_bytes(staging_bytes);
    std::memset(buffers_[0].get(), 0, header_bytes);  // the header's room, written last
  }
  ~direct_stager() { wait_all(); }

  // Returns 0, or the errno of a failed write.
  int append(std::string_view bytes) {
    while (!bytes.empty()) {
      size_t n = std::min(bytes.size(), staging_bytes - used_);
      std::memcpy(buffers_[current_].get() + used_, bytes.data(), n);
      used_ += n, bytes.remove_prefix(n);
      if (used_ == staging_bytes)
        if (int err = flush()) return err;
    }
    return 0;
  }

  // Writes what is staged and waits for every write; 0 or an errno.
  int finish() {
    int err = used_ > 0 ? flush() : 0;
    int waited = wait_all();
    return err ? err : waited;
  }

  // The file's first block as written (the header's room still zero).
  char* first_block() { return first_block_.get(); }

 private:
  static constexpr size_t ring = 4;

  // Sends the current buffer to the disk and waits until the next is free.
  int flush() {
    pace_.wait_for(offset_ + used_);
    size_t padded = round_up(used_);
    char* p = buffers_[current_].get();
    std::memset(p + used_, 0, padded - used_);
    if (offset_ == 0) {
      first_block_ = aligned_bytes(direct_alignment);
      std::memcpy(first_block_.get(), p, direct_alignment);
    }
    in_flight_[current_] = std::async(std::launch::async, [fd = fd_, p, padded, at = offset_] {
      return pwrite_all(fd, p, padded, at);
    });
    offset_ += used_;
    used_ = 0;
    current_ = (current_ + 1) % ring;
    return wait(current_);
  }

  int wait(size_t i) { return in_flight_[i].valid() ? in_flight_[i].get() : 0; }

  int wait_all() {
    int first = 0;
    for (size_t i = 0; i < ring; ++i)
      if (int err = wait(i); err && !first) first = err;
    return first;
  }

  int fd_;
  const write_pace& pace_;
  aligned_buffer buffers_[ring], first_block_;
  std::future<int> in_flight_[ring];
  size_t current_ = 0, used_;
  uint64_t offset_ = 0;
};

// The buffered path: the payload behind the header's room in batches of about
// 64 MiB, each handed to the disk as soon as it is written.
void write_buffered(int fd, size_t header_bytes, const std::vector<std::string_view>& payload,
                    const std::string& what, const write_pace& pace) {
  constexpr uint64_t batch_bytes = uint64_t{64} << 20;
  uint64_t offset = header_bytes, pending = 0;
  std::vector<std::string_view> batch;
  auto flush = [&] {
    pace.wait_for(offset + pending);
    write_pieces_at(fd, batch, offset, what);
    start_writeback(fd, offset, pending);
    offset += pending;
    pending = 0;
    batch.clear();
  };
  for (auto piece : payload) {
    batch.push_back(piece);
    pending += piece.size();
    if (pending >= batch_bytes) flush();
  }
  flush();
}

// The direct path. Returns false, having written nothing, where the file
// system refuses direct I/O.
bool write_direct(int fd, size_t header_bytes, const std::vector<std::string_view>& payload,
                  const std::function<std::string()>& header, const std::string& what,
                  const write_pace& pace) {
  if (!set_direct(fd, true)) return false;
  // Some file systems accept the flag and refuse the writes: a block tells.
  {
    auto probe = aligned_bytes(direct_alignment);
    std::memset(probe.get(), 0, direct_alignment);
    int err = pwrite_all(fd, probe.get(), direct_alignment, 0);
    if (err == EINVAL) {
      set_direct(fd, false);
      if (::ftruncate(fd, 0) != 0) fail_write(what, errno);
      return false;
    }
    if (err) fail_write(what, err);
  }
  uint64_t length = header_bytes;
  int err = 0;
  {
    direct_stager stager(fd, header_bytes, pace);
    for (auto piece : payload) {
      length += piece.size();
      if ((err = stager.append(piece))) break;
    }
    if (!err) err = stager.finish();
    if (!err) {
      std::string head = header();
      std::memcpy(stager.first_block(), head.data(), std::min(head.size(), header_bytes));
      err = pwrite_all(fd, stager.first_block(), direct_alignment, 0);
    }
  }
  set_direct(fd, false);
  if (err) fail_write(what, err);
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) fail_write(what, errno);
  return true;
}

}  // namespace

void write_header_and_payload(int fd, size_t header_bytes,
                              const std::vector<std::string_view>& payload,
                              const std::function<std::string()>& header, const std::string& what,
                              const write_pace& pace, bool direct) {
  if (header_bytes == 0 || header_bytes > direct_alignment)
    throw error(what + "a header of " + std::to_string(header_bytes) +
                " bytes (1 to one block of 4096)");
  if (direct && write_direct(fd, header_bytes, payload, header, what, pace)) return;
  write_buffered(fd, header_bytes, payload, what, pace);
  write_pieces_at(fd, {header()}, 0, what);
}

write_pace::write_pace(double bytes_per_second)
    : rate_(bytes_per_second), start_(std::chrono::steady_clock::now()) {}

void write_pace::wait_for(uint64_t bytes) const {
  if (rate_ <= 0) return;
  std::this_thread::sleep_until(
      start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(static_cast<double>(bytes) / rate_)));
}

std::string capnp_segment_table(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  size_t entries = segments.size() + 1;
  std::string table((entries * 4 + 7) / 8 * 8, '\0');
  auto put = [&](size_t at, uint64_t v) {
    if (v > UINT32_MAX) fail("capnp", "message segment too large");
    for (int b = 0; b < 4; ++b) table[at * 4 + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  };
  put(0, segments.size() - 1);
  for (size_t i = 0; i < segments.size(); ++i) put(i + 1, segments[i].size());
  return table;
}

std::string errno_text(int err) { return std::generic_category().message(err); }

void write_pieces_at(int fd, const std::vector<std::string_view>& pieces, uint64_t offset,
                     const std::string& what) {
  std::vector<iovec> iov;
  for (auto piece : pieces)
    if (!piece.empty()) iov.push_back({const_cast<char*>(piece.data()), piece.size()});
  for (size_t at = 0; at < iov.size();) {
    int count = static_cast<int>(std::min<size_t>(iov.size() - at, IOV_MAX));
    ssize_t n = ::pwritev(fd, &iov[at], count, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_write(what, n < 0 ? errno : EIO);
    offset += static_cast<uint64_t>(n);
    at = advance(iov, at, static_cast<size_t>(n));
  }
}

void start_writeback(int fd, uint64_t offset, uint64_t length) {
#ifdef SYNC_FILE_RANGE_WRITE
  ::sync_file_range(fd, static_cast<off_t>(offset), static_cast<off_t>(length),
                    SYNC_FILE_RANGE_WRITE);
#else
  (void)fd, (void)offset, (void)length;
#endif
}

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                           const std::string& where) {
  write_file_atomically(
      path, [&](int fd, const std::string& what) { write_pieces_at(fd, pieces, 0, what); }, where);
}

void write_file_atomically(const std::string& path,
                           const std::function<void(int fd, const std::string& what)>& write,
                           const std::string& where) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw error(where + "cannot open '" + tmp + "' for writing: " + errno_text(errno),
                errno_code(errno));
  try {
    write(fd, where + "cannot write '" + tmp + "': ");
    // The data must be on disk before the rename makes it the file.
    if (::fsync(fd) != 0)
      throw error(where + "cannot sync '" + tmp + "': " + errno_text(errno), errno_code(errno));
    int closed = ::close(fd);
    fd = -1;
    if (closed != 0)
      throw error(where + "cannot close '" + tmp + "': " + errno_text(errno), errno_code(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw error(where + "cannot rename '" + tmp + "' to '" + path + "': " + errno_text(errno),
                  errno_code(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Persist the rename itself (best effort: some file systems refuse to sync a directory).
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

error_code errno_code(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return error_code::resource_exhausted;
    case ENOENT:
      return error_code::not_found;
    case EACCES:
    case EPERM:
    case EROFS:
      return error_code::permission_denied;
    default:
      return error_code::unknown;
  }
}

}  // namespace actorflow
