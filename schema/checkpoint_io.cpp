#include "schema/checkpoint_io.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <kj/exception.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <new>

#include "schema/checkpoint.capnp.h"
#include "schema/file_io.hpp"
#include "schema/tensor_io.hpp"

namespace actorflow {

namespace {

static_assert(checkpoint_format_version == schema::CHECKPOINT_FORMAT_VERSION);

constexpr char magic[8] = {'A', 'F', 'C', 'K', 'P', 'T', '\0', '\0'};
// Loads allow this many words of traversal per word of payload (as graph
// files do): enough to read everything once, not to follow aliased pointers
// to one large blob over and over.
constexpr uint64_t traversal_words_per_word = 4;
constexpr uint64_t traversal_slack_words = 1024;
// Checkpoint, variables, variable, slots, slot, tensor, chunks, chunk: 8 deep.
constexpr int nesting_limit = 16;

// A name from the file, quoted for an error message (escaped, cut when long).
std::string quoted(std::string_view s) {
  std::string out = "'";
  out += printable(s, 80);
  out += '\'';
  return out;
}

std::string to_std(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

void put_le(char* at, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) at[b] = static_cast<char>((v >> (8 * b)) & 0xff);
}

uint64_t get_le(const char* at, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t{static_cast<unsigned char>(at[b])} << (8 * b);
  return v;
}

// zlib's CRC32, continued from `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Elements are little-endian on disk; a big-endian host swaps each element of
// a whole buffer (chunks may split an element, so never chunk by chunk).
void swap_bytes_if_big_endian(std::byte* p, size_t bytes, size_t elem) {
  if constexpr (std::endian::native == std::endian::big) {
    if (elem == 1) return;
    for (size_t i = 0; i < bytes; i += elem)
      for (size_t a = i, b = i + elem - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
  }
}

// CRC32 of a payload given as pieces.
uint32_t crc_of(const std::vector<std::string_view>& pieces) {
  uint32_t crc = 0;
  for (auto piece : pieces) crc = crc32_update(crc, piece);
  return crc;
}

uint64_t length_of(const std::vector<std::string_view>& pieces) {
  uint64_t length = 0;
  for (auto piece : pieces) length += piece.size();
  return length;
}

// The header of a payload of `length` bytes whose CRC32 is `crc`.
std::string make_header(uint64_t length, uint32_t crc) {
  std::string h(checkpoint_header_bytes, '\0');
  std::memcpy(h.data(), magic, sizeof magic);
  put_le(&h[8], checkpoint_format_version, 4);
  put_le(&h[16], length, 8);
  put_le(&h[24], crc, 4);
  put_le(&h[28], crc32_update(0, std::string_view(h).substr(0, 28)), 4);
  return h;
}

// ---------------------------------------------------------------- writing

void check_name(const std::string& name, const std::string& what) {
  if (name.empty()) throw error(what + " has an empty name");
  if (name.find('\0') != std::string::npos)
    throw error(what + " " + quoted(name) + ": the name holds a NUL byte");
}

// Tensor bytes are not copied into the message: each chunk's Data field is
// allocated there (zeroed and never touched, so that a large segment costs
// address space, not memory) and the tensor's bytes are spliced in its place
// when the message is written out. The bytes are those a copy would have
// made, so the file is the same.
struct spliced_bytes {
  const char* at;      // the chunk's place in the message
  const char* source;  // the bytes that belong there
  size_t size;
};

struct tensor_bytes {
  std::vector<spliced_bytes> chunks;
  std::vector<tensor> swapped;  // big-endian hosts' little-endian copies, which chunks point into
};

void write_tensor(const tensor& t, schema::ChunkedTensor::Builder out, size_t chunk_bytes,
                  const std::string& what, tensor_bytes& bytes_out) {
  if (!t.valid()) throw error(what + " is an empty tensor (uninitialized?)");
  check_untrusted_shape(t.dims().dims(), t.type(), false, what);
  out.setDtype(dtype_to_capnp(t.type()));
  auto& dims = t.dims().dims();
  auto shape_list = out.initShape(static_cast<unsigned>(dims.size()));
  for (size_t i = 0; i < dims.size(); ++i) shape_list.set(static_cast<unsigned>(i), dims[i]);

  size_t bytes = t.size_bytes(), elem = dtype_size(t.type());
  auto src = static_cast<const char*>(t.raw_data());
  if (std::endian::native == std::endian::big && elem > 1 && bytes) {
    tensor swapped = t.clone();
    swap_bytes_if_big_endian(static_cast<std::byte*>(swapped.raw_mutable_data()), bytes, elem);
    src = static_cast<const char*>(swapped.raw_data());
    bytes_out.swapped.push_back(std::move(swapped));
  }
  uint64_t count = (bytes + chunk_bytes - 1) / chunk_bytes;
  if (count > (uint64_t{1} << 29) - 1)
    throw error(what + ": " + std::to_string(bytes) + " bytes in chunks of " +
                std::to_string(chunk_bytes) + " make too many chunks for one list");
  auto chunks = out.initChunks(static_cast<unsigned>(count));
  for (unsigned i = 0; i < count; ++i) {
    size_t at = size_t{i} * chunk_bytes, len = std::min(chunk_bytes, bytes - at);
    auto room = chunks.init(i, static_cast<unsigned>(len));
    bytes_out.chunks.push_back({reinterpret_cast<const char*>(room.begin()), src + at, len});
  }
}

// Words the message will take, so that it is built in one segment.
uint64_t estimate_words(const checkpoint_data& data, size_t chunk_bytes) {
  auto tensor_words = [&](const tensor& t) -> uint64_t {
    if (!t.valid()) return 8;
    uint64_t bytes = t.size_bytes(), chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
    return 8 + static_cast<uint64_t>(t.rank()) + chunks * 2 + bytes / 8;
  };
  uint64_t words = 16;
  for (auto& [name, state] : data.variables) {
    words += 8 + name.size() / 8 + tensor_words(state.value);
    for (auto& [slot, value] : state.slots) words += 8 + slot.size() / 8 + tensor_words(value);
  }
  return words;
}

// Builds the message, or throws `where` followed by what was wrong.
void build_message(const checkpoint_data& data, size_t chunk_bytes, capnp::MessageBuilder& msg,
                   const std::string& where, tensor_bytes& bytes_out) {
  if (chunk_bytes == 0 || chunk_bytes > max_capnp_data_bytes)
    throw error(where + "chunk size " + std::to_string(chunk_bytes) + " is not in [1, " +
                std::to_string(max_capnp_data_bytes) + "]");
  try {
    auto root = msg.initRoot<schema::Checkpoint>();
    root.setVersion(checkpoint_format_version);
    root.setGlobalStep(data.global_step);
    auto vars = root.initVariables(static_cast<unsigned>(data.variables.size()));
    unsigned i = 0;
    for (auto& [name, state] : data.variables) {
      auto out = vars[i++];
      check_name(name, "variable");
      std::string label = "variable " + quoted(name);
      out.setName(capnp::Text::Reader(name.c_str(), name.size()));
      write_tensor(state.value, out.initValue(), chunk_bytes, label, bytes_out);
      auto slots = out.initSlots(static_cast<unsigned>(state.slots.size()));
      unsigned k = 0;
      for (auto& [slot_name, value] : state.slots) {
        check_name(slot_name, label + " slot");
        slots[k].setName(capnp::Text::Reader(slot_name.c_str(), slot_name.size()));
        write_tensor(value, slots[k].initValue(), chunk_bytes, label + " slot " + quoted(slot_name),
                     bytes_out);
        ++k;
      }
    }
  } catch (const error& e) {
    throw error(where + e.what(), e.code());
  } catch (const kj::Exception& e) {
    throw error(where + "cannot encode the checkpoint: " + capnp_error_reason(e));
  }
}

// A checkpoint encoded in memory but for its tensors' bytes, ready to be
// written piece by piece without a copy: the segment table, then the
// message's segments with the tensors' bytes in place (the payload); the
// header, which holds the payload's CRC32, goes in front.
class encoded_checkpoint {
 public:
  encoded_checkpoint(const checkpoint_data& data, size_t chunk_bytes, const std::string& where)
      : msg_(first_segment_words(data, chunk_bytes)) {
    build_message(data, chunk_bytes, msg_, where, bytes_);
    auto segments = msg_.getSegmentsForOutput();
    table_ = capnp_segment_table(segments);
    payload_.push_back(table_);
    splice(segments);
  }
  encoded_checkpoint(const encoded_checkpoint&) = delete;  // the pieces point into it
  encoded_checkpoint& operator=(const encoded_checkpoint&) = delete;

  const std::vector<std::string_view>& payload() const { return payload_; }

 private:
  // The whole message in one segment when it fits (a segment holds < 2^29 words).
  static unsigned first_segment_words(const checkpoint_data& data, size_t chunk_bytes) {
    if (chunk_bytes == 0) return 1024;  // build_message reports the bad chunk size
    return static_cast<unsigned>(
        std::min<uint64_t>(estimate_words(data, chunk_bytes), (uint64_t{1} << 29) - 1));
  }

  // Each segment as pieces: its own bytes between chunks, each chunk's bytes
  // from its tensor.
  void splice(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
    auto& chunks = bytes_.chunks;
    std::sort(chunks.begin(), chunks.end(), [](auto& a, auto& b) { return a.at < b.at; });
    for (auto& segment : segments) {
      const char* at = segment.asChars().begin();
      const char* end = segment.asChars().end();
      auto chunk = std::lower_bound(chunks.begin(), chunks.end(), at,
                                    [](auto& c, const char* p) { return c.at < p; });
      for (; chunk != chunks.end() && chunk->at < end; ++chunk) {
        payload_.emplace_back(at, static_cast<size_t>(chunk->at - at));
        payload_.emplace_back(chunk->source, chunk->size);
        at = chunk->at + chunk->size;
      }
      payload_.emplace_back(at, static_cast<size_t>(end - at));
    }
  }

  capnp::MallocMessageBuilder msg_;
  tensor_bytes bytes_;
  std::string table_;
  std::vector<std::string_view> payload_;
};

// ---------------------------------------------------------------- reading

class loader {
 public:
  explicit loader(std::string prefix) : prefix_(std::move(prefix)) {}

  /// A file that is not a whole, valid checkpoint: data_loss.
  [[noreturn]] void fail(const std::string& what, error_code code = error_code::data_loss) const {
    throw error(prefix_ + what, code);
  }

  // `file` starts at an 8-byte aligned address.
  checkpoint_data parse(std::string_view file) const {
    try {
      auto payload = check_header(file);
      return parse_payload(payload);
    } catch (const error&) {
      throw;
    } catch (const kj::Exception& e) {
      fail("malformed Cap'n Proto message: " + capnp_error_reason(e));
    } catch (const std::bad_alloc&) {
      fail("out of memory while loading", error_code::resource_exhausted);
    }
  }

 private:
  // Checks the header and the checksums; returns the payload.
  std::string_view check_header(std::string_view file) const {
    if (file.empty()) fail("empty file (0 bytes)");
    if (file.size() < checkpoint_header_bytes)
      fail("truncated: " + std::to_string(file.size()) + " bytes, shorter than the " +
           std::to_string(checkpoint_header_bytes) + "-byte header");
    if (std::memcmp(file.data(), magic, sizeof magic) != 0)
      fail("not an actorflow checkpoint: it starts with '" + printable(file.substr(0, 8), 8) +
           "', not 'AFCKPT\\x00\\x00'");
    const char* h = file.data();
    uint32_t header_crc = crc32_update(0, file.substr(0, 28));
    if (header_crc != get_le(h + 28, 4))
      fail("header checksum mismatch: the header's CRC32 is " + hex32(header_crc) + ", it says " +
           hex32(static_cast<uint32_t>(get_le(h + 28, 4))) + " (the header is corrupted)");
    uint64_t version = get_le(h + 8, 4);
    if (version != checkpoint_format_version)
      fail("unsupported checkpoint format version " + std::to_string(version) +
           " (this build reads version " + std::to_string(checkpoint_format_version) + ")");
    if (uint64_t reserved = get_le(h + 12, 4))
      fail("reserved header field is " + std::to_string(reserved) + ", not 0");
    uint64_t length = get_le(h + 16, 8), actual = file.size() - checkpoint_header_bytes;
    if (length > actual)
      fail("truncated: the header announces " + std::to_string(length) +
           " payload bytes, the file holds " + std::to_string(actual));
    if (length < actual)
      fail(std::to_string(actual - length) + " bytes of trailing data after the payload");
    if (length == 0) fail("the payload is empty");
    if (length % sizeof(capnp::word) != 0)
      fail("payload length " + std::to_string(length) + " is not a multiple of 8");
    auto payload = file.substr(checkpoint_header_bytes);
    uint32_t crc = crc32_update(0, payload);
    if (crc != get_le(h + 24, 4))
      fail("checksum mismatch: the payload's CRC32 is " + hex32(crc) + ", the header says " +
           hex32(static_cast<uint32_t>(get_le(h + 24, 4))) + " (the file is corrupted)");
    return payload;
  }

  checkpoint_data parse_payload(std::string_view payload) const {
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(payload.data()),
                                          payload.size() / sizeof(capnp::word));
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * traversal_words_per_word + traversal_slack_words;
    options.nestingLimit = nesting_limit;
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getEnd() != words.end())
      fail(std::to_string((words.end() - reader.getEnd()) * sizeof(capnp::word)) +
           " bytes of trailing data after the message");
    auto root = reader.getRoot<schema::Checkpoint>();
    if (root.getVersion() != checkpoint_format_version)
      fail("unsupported checkpoint message version " + std::to_string(root.getVersion()) +
           " (this build reads version " + std::to_string(checkpoint_format_version) + ")");
    checkpoint_data out;
    out.global_step = root.getGlobalStep();
    auto vars = root.getVariables();
    for (unsigned i = 0; i < vars.size(); ++i) {
      auto v = vars[i];
      std::string name = to_std(v.getName());
      std::string label = "variable " + std::to_string(i) + " (" + quoted(name) + ")";
      check_read_name(name, "variable " + std::to_string(i));
      if (out.variables.count(name)) fail(label + " appears twice");
      variable_state state;
      state.value = read_tensor(v.getValue(), label + " value");
      auto slots = v.getSlots();
      for (unsigned k = 0; k < slots.size(); ++k) {
        std::string slot = to_std(slots[k].getName());
        std::string slot_label = label + " slot " + std::to_string(k) + " (" + quoted(slot) + ")";
        check_read_name(slot, label + " slot " + std::to_string(k));
        if (state.slots.count(slot)) fail(slot_label + " appears twice");
        state.slots.emplace(slot, read_tensor(slots[k].getValue(), slot_label));
      }
      out.variables.emplace(std::move(name), std::move(state));
    }
    return out;
  }

  void check_read_name(const std::string& name, const std::string& label) const {
    if (name.empty()) fail(label + " has an empty name");
    if (name.find('\0') != std::string::npos)
      fail(label + " " + quoted(name) + ": the name holds a NUL byte");
  }

  tensor read_tensor(schema::ChunkedTensor::Reader in, const std::string& label) const {
    std::string where = prefix_ + label;
    dtype type = dtype_from_capnp(in.getDtype(), where);
    std::vector<int64_t> dims;
    for (int64_t d : in.getShape()) dims.push_back(d);
    uint64_t bytes = check_untrusted_shape(dims, type, false, where);
    auto chunks = in.getChunks();
    // Each chunk is under 2^29 bytes and there are under 2^29 of them: no overflow.
    uint64_t held = 0;
    for (auto chunk : chunks) held += chunk.size();
    std::string spec = tensor_spec{type, shape(dims)}.to_string();
    if (held != bytes)
      fail(label + ": " + spec + " needs " + std::to_string(bytes) + " bytes, its " +
           std::to_string(chunks.size()) + " chunks hold " + std::to_string(held));
    tensor t(type, shape(std::move(dims)));
    auto dst = static_cast<std::byte*>(t.raw_mutable_data());
    size_t at = 0;
    for (auto chunk : chunks) {
      if (chunk.size()) std::memcpy(dst + at, chunk.begin(), chunk.size());
      at += chunk.size();
    }
    if (type == dtype::boolean) {
      // Any other byte would be an invalid bool object (undefined behaviour to read).
      auto p = reinterpret_cast<const unsigned char*>(dst);
      for (size_t i = 0; i < bytes; ++i)
        if (p[i] > 1)
          fail(label + ": bool element " + std::to_string(i) + " has byte value " +
               std::to_string(p[i]) + " (must be 0 or 1)");
    }
    swap_bytes_if_big_endian(dst, bytes, dtype_size(type));
    return t;
  }

  std::string prefix_;
};

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// Room for `bytes` bytes at an 8-byte aligned address.
kj::Array<capnp::word> word_buffer(uint64_t bytes, const loader& l) {
  try {
    return kj::heapArray<capnp::word>((bytes + sizeof(capnp::word) - 1) / sizeof(capnp::word));
  } catch (const std::bad_alloc&) {
    l.fail("out of memory reading " + std::to_string(bytes) + " bytes",
           error_code::resource_exhausted);
  }
}

// Writes the payload behind the header's room in batches of about 64 MiB,
// each handed to the disk as soon as it is written (start_writeback), so that
// the disk writes while the rest is copied into the page cache.
void write_payload(int fd, const std::vector<std::string_view>& payload, const std::string& what) {
  constexpr uint64_t batch_bytes = uint64_t{64} << 20;
  uint64_t offset = checkpoint_header_bytes, pending = 0;
  std::vector<std::string_view> batch;
  auto flush = [&] {
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

}  // namespace

std::string frame_checkpoint_payload(std::string_view payload) {
  return make_header(payload.size(), crc32_update(0, payload)) + std::string(payload);
}

std::string serialize_checkpoint(const checkpoint_data& data, size_t chunk_bytes) {
  encoded_checkpoint encoded(data, chunk_bytes, "[serialize_checkpoint] ");
  auto& payload = encoded.payload();
  std::string out = make_header(length_of(payload), crc_of(payload));
  out.reserve(checkpoint_header_bytes + length_of(payload));
  for (auto piece : payload) out.append(piece);
  return out;
}

void save_checkpoint_file(const checkpoint_data& data, const std::string& path,
                          size_t chunk_bytes) {
  std::string where = "[save_checkpoint] " + path + ": ";
  encoded_checkpoint encoded(data, chunk_bytes, where);
  auto& payload = encoded.payload();
  write_file_atomically(
      path,
      [&](int fd, const std::string& what) {
        // The header holds the payload's CRC32: the payload goes first, behind
        // room for the header, while another thread sums it (on another core,
        // the sum costs no time), and the header last.
        auto crc = std::async(std::launch::async, [&] { return crc_of(payload); });
        write_payload(fd, payload, what);
        write_pieces_at(fd, {make_header(length_of(payload), crc.get())}, 0, what);
      },
      where);
}

checkpoint_data deserialize_checkpoint(std::string_view bytes, const std::string& source_name) {
  loader l("[deserialize_checkpoint] " + source_name + ": ");
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(capnp::word) == 0) return l.parse(bytes);
  // Cap'n Proto reads words in place and needs them aligned: copy.
  auto words = word_buffer(bytes.size(), l);
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  return l.parse({reinterpret_cast<const char*>(words.begin()), bytes.size()});
}

checkpoint_data load_checkpoint_file(const std::string& path) {
  loader l("[load_checkpoint] " + path + ": ");
  fd_guard file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) l.fail("cannot open: " + errno_text(errno), errno_code(errno));
  struct stat st;
  if (::fstat(file.fd, &st) != 0) l.fail("cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) l.fail("not a regular file");
  auto size = static_cast<uint64_t>(st.st_size);
  auto words = word_buffer(size, l);
  auto p = reinterpret_cast<char*>(words.begin());
  for (uint64_t done = 0; done < size;) {
    ssize_t n = ::read(file.fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) l.fail("read error: " + errno_text(errno));
    if (n == 0)
      l.fail("file ended after " + std::to_string(done) + " of " + std::to_string(size) +
             " bytes (changed while reading?)");
    done += static_cast<uint64_t>(n);
  }
  return l.parse({p, size});
}

}  // namespace actorflow
