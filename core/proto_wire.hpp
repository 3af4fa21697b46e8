// A minimal protocol buffers wire-format writer and reader (header-only, std
// only), for the few TensorFlow messages actorflow writes: TensorBoard's
// Summary and Event, and the GraphDef it draws (ops/summary, schema/event_file).
//
// The writer emits fields in the order they are written; the reader walks a
// buffer field by field. Every byte read is untrusted: a truncated varint, a
// length running past the end, a field number 0 or a group wire type throws
// actorflow::error naming the offset, and nothing is ever allocated from a
// length the buffer claims (bytes fields are views into the buffer).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace actorflow::proto {

enum class wire_type : uint8_t { varint = 0, fixed64 = 1, bytes = 2, fixed32 = 5 };

class writer {
 public:
  /// int32, int64, uint64, bool and enum fields. A negative int64 is written as
  /// its two's complement (10 bytes), as protobuf does.
  void varint_field(uint32_t field, uint64_t v) {
    tag(field, wire_type::varint);
    raw_varint(v);
  }
  void int64_field(uint32_t field, int64_t v) { varint_field(field, static_cast<uint64_t>(v)); }
  void fixed32_field(uint32_t field, uint32_t v) {
    tag(field, wire_type::fixed32);
    raw_le(v, 4);
  }
  void fixed64_field(uint32_t field, uint64_t v) {
    tag(field, wire_type::fixed64);
    raw_le(v, 8);
  }
  void double_field(uint32_t field, double v) { fixed64_field(field, std::bit_cast<uint64_t>(v)); }
  void float_field(uint32_t field, float v) { fixed32_field(field, std::bit_cast<uint32_t>(v)); }
  /// string, bytes and embedded message fields.
  void bytes_field(uint32_t field, std::string_view v) {
    tag(field, wire_type::bytes);
    raw_varint(v.size());
    out_.append(v);
  }
  void message_field(uint32_t field, const writer& sub) { bytes_field(field, sub.bytes()); }
  /// A packed repeated double field (proto3's default for repeated scalars).
  void packed_doubles_field(uint32_t field, std::span<const double> values) {
    tag(field, wire_type::bytes);
    raw_varint(values.size() * 8);
    for (double v : values) raw_le(std::bit_cast<uint64_t>(v), 8);
  }

  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void tag(uint32_t field, wire_type t) {
    raw_varint((uint64_t{field} << 3) | static_cast<uint64_t>(t));
  }
  void raw_varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void raw_le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

/// One field as read: for varint and fixed types `value` holds the bits, for
/// length-delimited ones `bytes` views the payload inside the buffer.
struct field {
  uint32_t number = 0;
  wire_type type = wire_type::varint;
  uint64_t value = 0;
  std::string_view bytes;
  size_t offset = 0;  // where the field's tag starts in the buffer

  double as_double() const { return std::bit_cast<double>(value); }
  float as_float() const { return std::bit_cast<float>(static_cast<uint32_t>(value)); }
  int64_t as_int64() const { return static_cast<int64_t>(value); }
};

class reader {
 public:
  /// `where` prefixes errors, e.g. "event_file_reader: Summary".
  explicit reader(std::string_view buffer, std::string where = "proto")
      : buf_(buffer), where_(std::move(where)) {}

  /// Reads the next field into `f`; false at the end of the buffer.
  bool next(field& f) {
    if (pos_ == buf_.size()) return false;
    f = field{};
    f.offset = pos_;
    const uint64_t key = read_varint();
    const uint64_t number = key >> 3;
    if (number == 0 || number > 0x1fffffff)
      fail_at(f.offset, "invalid field number " + std::to_string(number));
    f.number = static_cast<uint32_t>(number);
    switch (key & 7) {
      case 0:
        f.type = wire_type::varint;
        f.value = read_varint();
        break;
      case 1:
        f.type = wire_type::fixed64;
        f.value = read_le(8);
        break;
      case 5:
        f.type = wire_type::fixed32;
        f.value = read_le(4);
        break;
      case 2: {
        f.type = wire_type::bytes;
        const size_t at = pos_;
        const uint64_t len = read_varint();
        if (len > buf_.size() - pos_)
          fail_at(at, "length " + std::to_string(len) + " of field " + std::to_string(number) +
                          " runs past the end (" + std::to_string(buf_.size() - pos_) +
                          " bytes left)");
        f.bytes = buf_.substr(pos_, static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        break;
      }
      default:
        fail_at(f.offset, "unsupported wire type " + std::to_string(key & 7) + " of field " +
                              std::to_string(number));
    }
    return true;
  }

  size_t offset() const { return pos_; }
  const std::string& where() const { return where_; }

  /// Checks that `f` has wire type `t` (a field of the expected kind).
  void expect(const field& f, wire_type t) const {
    if (f.type != t)
      fail_at(f.offset, "field " + std::to_string(f.number) + " has wire type " +
                            std::to_string(static_cast<int>(f.type)) + ", expected " +
                            std::to_string(static_cast<int>(t)));
  }

  /// Appends a repeated double field's values, packed or not.
  void append_doubles(const field& f, std::vector<double>& out) const {
    if (f.type == wire_type::fixed64) {
      out.push_back(f.as_double());
      return;
    }
    expect(f, wire_type::bytes);
    if (f.bytes.size() % 8 != 0)
      fail_at(f.offset, "packed doubles of field " + std::to_string(f.number) + " hold " +
                            std::to_string(f.bytes.size()) + " bytes, not a multiple of 8");
    for (size_t i = 0; i < f.bytes.size(); i += 8) {
      uint64_t bits = 0;
      for (int b = 0; b < 8; ++b)
        bits |= uint64_t{static_cast<uint8_t>(f.bytes[i + static_cast<size_t>(b)])} << (8 * b);
      out.push_back(std::bit_cast<double>(bits));
    }
  }

  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    fail(where_, what + " at offset " + std::to_string(offset));
  }

 private:
  uint64_t read_varint() {
    const size_t start = pos_;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == buf_.size()) fail_at(start, "truncated varint");
      const auto byte = static_cast<uint8_t>(buf_[pos_++]);
      v |= uint64_t{byte & 0x7fu} << shift;
      if (!(byte & 0x80)) return v;
    }
    fail_at(start, "varint longer than 10 bytes");
  }
  uint64_t read_le(int bytes) {
    if (buf_.size() - pos_ < static_cast<size_t>(bytes))
      fail_at(pos_, "truncated fixed" + std::to_string(8 * bytes) + " value");
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= uint64_t{static_cast<uint8_t>(buf_[pos_ + static_cast<size_t>(i)])} << (8 * i);
    pos_ += static_cast<size_t>(bytes);
    return v;
  }

  std::string_view buf_;
  size_t pos_ = 0;
  std::string where_;
};

}  // namespace actorflow::proto
