#include "schema/framed_file.hpp"

#include <capnp/serialize.h>
#include <fcntl.h>
#include <kj/array.h>
#include <kj/exception.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "schema/file_io.hpp"
#include "schema/tensor_io.hpp"

namespace actorflow {

namespace {

// Loads allow this many words of traversal per word of payload: enough to
// read everything once, not to follow aliased pointers to one large blob
// over and over.
constexpr uint64_t traversal_words_per_word = 4;
constexpr uint64_t traversal_slack_words = 1024;

void put_le(char* at, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) at[b] = static_cast<char>((v >> (8 * b)) & 0xff);
}

uint64_t get_le(const char* at, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t{static_cast<unsigned char>(at[b])} << (8 * b);
  return v;
}

class framed_reader {
 public:
  framed_reader(const framed_format& format, const std::string& prefix)
      : format_(format), prefix_(prefix) {}

  /// A file that is not a whole, valid one of its kind: data_loss.
  [[noreturn]] void fail(const std::string& what, error_code code = error_code::data_loss) const {
    throw error(prefix_ + what, code);
  }

  // `file` starts at an 8-byte aligned address.
  void read(std::string_view file, const std::function<void(capnp::MessageReader&)>& read) const {
    try {
      auto payload = check_header(file);
      read_payload(payload, read);
    } catch (const error&) {
      throw;
    } catch (const kj::Exception& e) {
      fail("malformed Cap'n Proto message: " + capnp_error_reason(e));
    } catch (const std::bad_alloc&) {
      fail("out of memory while loading", error_code::resource_exhausted);
    }
  }

  // Room for `bytes` bytes at an 8-byte aligned address.
  kj::Array<capnp::word> word_buffer(uint64_t bytes) const {
    try {
      return kj::heapArray<capnp::word>((bytes + sizeof(capnp::word) - 1) / sizeof(capnp::word));
    } catch (const std::bad_alloc&) {
      fail("out of memory reading " + std::to_string(bytes) + " bytes",
           error_code::resource_exhausted);
    }
  }

 private:
  // Checks the header and the checksums; returns the payload.
  std::string_view check_header(std::string_view file) const {
    if (file.empty()) fail("empty file (0 bytes)");
    if (file.size() < framed_header_bytes)
      fail("truncated: " + std::to_string(file.size()) + " bytes, shorter than the " +
           std::to_string(framed_header_bytes) + "-byte header");
    if (file.substr(0, 8) != format_.magic)
      fail("not an actorflow " + std::string(format_.kind) + ": it starts with '" +
           printable(file.substr(0, 8), 8) + "', not '" + printable(format_.magic, 8) + "'");
    const char* h = file.data();
    uint32_t header_crc = crc32_update(0, file.substr(0, 28));
    if (header_crc != get_le(h + 28, 4))
      fail("header checksum mismatch: the header's CRC32 is " + hex32(header_crc) + ", it says " +
           hex32(static_cast<uint32_t>(get_le(h + 28, 4))) + " (the header is corrupted)");
    uint64_t version = get_le(h + 8, 4);
    if (version != format_.version)
      fail("unsupported " + std::string(format_.kind) + " format version " +
           std::to_string(version) + " (this build reads version " +
           std::to_string(format_.version) + ")");
    if (uint64_t reserved = get_le(h + 12, 4))
      fail("reserved header field is " + std::to_string(reserved) + ", not 0");
    uint64_t length = get_le(h + 16, 8), actual = file.size() - framed_header_bytes;
    if (length > actual)
      fail("truncated: the header announces " + std::to_string(length) +
           " payload bytes, the file holds " + std::to_string(actual));
    if (length < actual)
      fail(std::to_string(actual - length) + " bytes of trailing data after the payload");
    if (length == 0) fail("the payload is empty");
    if (length % sizeof(capnp::word) != 0)
      fail("payload length " + std::to_string(length) + " is not a multiple of 8");
    auto payload = file.substr(framed_header_bytes);
    uint32_t crc = crc32_update(0, payload);
    if (crc != get_le(h + 24, 4))
      fail("checksum mismatch: the payload's CRC32 is " + hex32(crc) + ", the header says " +
           hex32(static_cast<uint32_t>(get_le(h + 24, 4))) + " (the file is corrupted)");
    return payload;
  }

  void read_payload(std::string_view payload,
                    const std::function<void(capnp::MessageReader&)>& read) const {
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(payload.data()),
                                          payload.size() / sizeof(capnp::word));
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * traversal_words_per_word + traversal_slack_words;
    options.nestingLimit = format_.nesting_limit;
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getEnd() != words.end())
      fail(std::to_string((words.end() - reader.getEnd()) * sizeof(capnp::word)) +
           " bytes of trailing data after the message");
    read(reader);
  }

  const framed_format& format_;
  const std::string& prefix_;
};

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

uint32_t crc32_update(uint32_t crc, std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return static_cast<uint32_t>(crc32_combine64(crc_a, crc_b, static_cast<z_off64_t>(length_b)));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string quoted_name(std::string_view s) {
  // Appended, not "'" + ...: GCC 12 warns falsely (-Wrestrict) about the sum.
  std::string out = "'";
  out += printable(s, 80);
  out += '\'';
  return out;
}

std::string make_framed_header(const framed_format& format,
                               const std::vector<std::string_view>& payload) {
  uint32_t crc = 0;
  uint64_t length = 0;
  for (auto piece : payload) {
    crc = crc32_update(crc, piece);
    length += piece.size();
  }
  return make_framed_header(format, length, crc);
}

std::string make_framed_header(const framed_format& format, uint64_t length, uint32_t crc) {
  std::string h(framed_header_bytes, '\0');
  std::memcpy(h.data(), format.magic.data(), 8);
  put_le(&h[8], format.version, 4);
  put_le(&h[16], length, 8);
  put_le(&h[24], crc, 4);
  put_le(&h[28], crc32_update(0, std::string_view(h).substr(0, 28)), 4);
  return h;
}

void read_framed_bytes(std::string_view bytes, const framed_format& format,
                       const std::string& prefix,
                       const std::function<void(capnp::MessageReader&)>& read) {
  framed_reader r(format, prefix);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(capnp::word) == 0)
    return r.read(bytes, read);
  // Cap'n Proto reads words in place and needs them aligned: copy.
  auto words = r.word_buffer(bytes.size());
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  r.read({reinterpret_cast<const char*>(words.begin()), bytes.size()}, read);
}

void read_framed_file(const std::string& path, const framed_format& format,
                      const std::string& prefix,
                      const std::function<void(capnp::MessageReader&)>& read) {
  framed_reader r(format, prefix);
  fd_guard file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) r.fail("cannot open: " + errno_text(errno), errno_code(errno));
  struct stat st;
  if (::fstat(file.fd, &st) != 0) r.fail("cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) r.fail("not a regular file");
  auto size = static_cast<uint64_t>(st.st_size);
  auto words = r.word_buffer(size);
  auto p = reinterpret_cast<char*>(words.begin());
  for (uint64_t done = 0; done < size;) {
    ssize_t n = ::read(file.fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) r.fail("read error: " + errno_text(errno));
    if (n == 0)
      r.fail("file ended after " + std::to_string(done) + " of " + std::to_string(size) +
             " bytes (changed while reading?)");
    done += static_cast<uint64_t>(n);
  }
  r.read({p, size}, read);
}

namespace {

// Files can be gigabytes: read them in blocks large enough that the system
// calls cost nothing beside the CRC, small enough to stay in cache.
constexpr size_t digest_block_bytes = size_t{4} << 20;

}  // namespace

file_digest digest_file(const std::string& path, const std::string& where) {
  fd_guard file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw error(where + "cannot open: " + errno_text(errno), errno_code(errno));
  struct stat st;
  if (::fstat(file.fd, &st) != 0) throw error(where + "cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw error(where + "not a regular file");
  size_t block = std::clamp<size_t>(static_cast<size_t>(st.st_size), 1, digest_block_bytes);
  std::unique_ptr<char[]> buffer(new char[block]);
  file_digest out;
  for (;;) {
    ssize_t n = ::read(file.fd, buffer.get(), block);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw error(where + "read error: " + errno_text(errno), errno_code(errno));
    if (n == 0) break;
    out.crc32 = crc32_update(out.crc32, {buffer.get(), static_cast<size_t>(n)});
    out.bytes += static_cast<uint64_t>(n);
  }
  return out;
}

}  // namespace actorflow
