#include "schema/file_io.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <system_error>

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

}  // namespace

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
