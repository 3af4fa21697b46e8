#include "schema/checkpoint_io.hpp"

#include <capnp/message.h>
#include <kj/exception.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <future>

#include "schema/checkpoint.capnp.h"
#include "schema/file_io.hpp"
#include "schema/framed_file.hpp"
#include "schema/tensor_io.hpp"

namespace actorflow {

namespace {

static_assert(checkpoint_format_version == schema::CHECKPOINT_FORMAT_VERSION);

// Checkpoint, variables, variable, slots, slot, tensor, chunks, chunk: 8 deep,
// with room to spare.
constexpr framed_format checkpoint_format{.magic = std::string_view("AFCKPT\0\0", 8),
                                          .version = checkpoint_format_version,
                                          .kind = "checkpoint",
                                          .nesting_limit = 16};
static_assert(checkpoint_header_bytes == framed_header_bytes);

std::string to_std(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

// Elements are little-endian on disk; a big-endian host swaps each element of
// a whole buffer (chunks may split an element, so never chunk by chunk).
void swap_bytes_if_big_endian(std::byte* p, size_t bytes, size_t elem) {
  if constexpr (std::endian::native == std::endian::big) {
    if (elem == 1) return;
    for (size_t i = 0; i < bytes; i += elem)
      for (size_t a = i, b = i + elem - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
  }
}

// CRC32 of a payload given as pieces, summed at `pace`.
uint32_t crc_of(const std::vector<std::string_view>& pieces,
                const write_pace& pace = write_pace()) {
  constexpr size_t slice_bytes = size_t{8} << 20;
  uint32_t crc = 0;
  uint64_t done = 0;
  for (auto piece : pieces)
    for (size_t at = 0; at < piece.size(); at += slice_bytes) {
      auto slice = piece.substr(at, slice_bytes);
      pace.wait_for(done += slice.size());
      crc = crc32_update(crc, slice);
    }
  return crc;
}

uint64_t length_of(const std::vector<std::string_view>& pieces) {
  uint64_t length = 0;
  for (auto piece : pieces) length += piece.size();
  return length;
}

// ---------------------------------------------------------------- writing

void check_name(const std::string& name, const std::string& what) {
  if (name.empty()) throw error(what + " has an empty name");
  if (name.find('\0') != std::string::npos)
    throw error(what + " " + quoted_name(name) + ": the name holds a NUL byte");
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
      std::string label = "variable " + quoted_name(name);
      out.setName(capnp::Text::Reader(name.c_str(), name.size()));
      write_tensor(state.value, out.initValue(), chunk_bytes, label, bytes_out);
      auto slots = out.initSlots(static_cast<unsigned>(state.slots.size()));
      unsigned k = 0;
      for (auto& [slot_name, value] : state.slots) {
        check_name(slot_name, label + " slot");
        slots[k].setName(capnp::Text::Reader(slot_name.c_str(), slot_name.size()));
        write_tensor(value, slots[k].initValue(), chunk_bytes,
                     label + " slot " + quoted_name(slot_name), bytes_out);
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

  const std::string& prefix() const { return prefix_; }

  checkpoint_data read(capnp::MessageReader& reader) const {
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
      std::string label = "variable " + std::to_string(i) + " (" + quoted_name(name) + ")";
      check_read_name(name, "variable " + std::to_string(i));
      if (out.variables.count(name)) fail(label + " appears twice");
      variable_state state;
      state.value = read_tensor(v.getValue(), label + " value");
      auto slots = v.getSlots();
      for (unsigned k = 0; k < slots.size(); ++k) {
        std::string slot = to_std(slots[k].getName());
        std::string slot_label =
            label + " slot " + std::to_string(k) + " (" + quoted_name(slot) + ")";
        check_read_name(slot, label + " slot " + std::to_string(k));
        if (state.slots.count(slot)) fail(slot_label + " appears twice");
        state.slots.emplace(slot, read_tensor(slots[k].getValue(), slot_label));
      }
      out.variables.emplace(std::move(name), std::move(state));
    }
    return out;
  }

 private:
  void check_read_name(const std::string& name, const std::string& label) const {
    if (name.empty()) fail(label + " has an empty name");
    if (name.find('\0') != std::string::npos)
      fail(label + " " + quoted_name(name) + ": the name holds a NUL byte");
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

}  // namespace

std::string frame_checkpoint_payload(std::string_view payload) {
  return make_framed_header(checkpoint_format, {payload}) + std::string(payload);
}

std::string serialize_checkpoint(const checkpoint_data& data, size_t chunk_bytes) {
  encoded_checkpoint encoded(data, chunk_bytes, "[serialize_checkpoint] ");
  auto& payload = encoded.payload();
  std::string out = make_framed_header(checkpoint_format, length_of(payload), crc_of(payload));
  out.reserve(checkpoint_header_bytes + length_of(payload));
  for (auto piece : payload) out.append(piece);
  return out;
}

written_file save_checkpoint_file(const checkpoint_data& data, const std::string& path,
                                  size_t chunk_bytes, double bytes_per_second) {
  std::string where = "[save_checkpoint] " + path + ": ";
  encoded_checkpoint encoded(data, chunk_bytes, where);
  auto& payload = encoded.payload();
  uint64_t length = length_of(payload);
  std::string header;
  uint32_t payload_crc = 0;
  write_file_atomically(
      path,
      [&](int fd, const std::string& what) {
        // The header holds the payload's CRC32: the payload goes first while
        // another thread sums it (on another core, the sum costs no time).
        write_pace pace(bytes_per_second);
        auto crc = std::async(std::launch::async, [&] { return crc_of(payload, pace); });
        write_header_and_payload(
            fd, checkpoint_header_bytes, payload,
            [&] {
              payload_crc = crc.get();
              return header = make_framed_header(checkpoint_format, length, payload_crc);
            },
            what, pace);
      },
      where);
  // The whole file's CRC32 without reading it back: the header's, continued
  // by the payload's.
  return {checkpoint_header_bytes + length,
          crc32_concat(crc32_update(0, header), payload_crc, length)};
}

checkpoint_data deserialize_checkpoint(std::string_view bytes, const std::string& source_name) {
  loader l("[deserialize_checkpoint] " + source_name + ": ");
  checkpoint_data out;
  read_framed_bytes(bytes, checkpoint_format, l.prefix(),
                    [&](capnp::MessageReader& reader) { out = l.read(reader); });
  return out;
}

checkpoint_data load_checkpoint_file(const std::string& path) {
  loader l("[load_checkpoint] " + path + ": ");
  checkpoint_data out;
  read_framed_file(path, checkpoint_format, l.prefix(),
                   [&](capnp::MessageReader& reader) { out = l.read(reader); });
  return out;
}

}  // namespace actorflow
