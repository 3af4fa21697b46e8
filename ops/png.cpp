#include "ops/png.hpp"

#include <zlib.h>

#include <string_view>

#include "core/error.hpp"

namespace actorflow {

namespace {

void put_be32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

// A chunk: length, type, data, and the CRC-32 of type and data.
void put_chunk(std::string& out, const char (&type)[5], std::string_view data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out.append(data);
  const auto* p = reinterpret_cast<const Bytef*>(out.data() + start);
  put_be32(out, static_cast<uint32_t>(crc32_z(0, p, out.size() - start)));
}

uint8_t color_type(int channels) {
  switch (channels) {
    case 1:
      return 0;  // grayscale
    case 3:
      return 2;  // truecolor
    case 4:
      return 6;  // truecolor with alpha
  }
  fail("encode_png", "channels must be 1, 3 or 4, got " + std::to_string(channels));
}

}  // namespace

std::string encode_png(const uint8_t* pixels, int64_t height, int64_t width, int channels) {
  const uint8_t type = color_type(channels);
  // PNG allows 2^31 - 1 per side; 2^24 keeps a row's byte count far from overflow.
  constexpr int64_t max_side = int64_t{1} << 24;
  if (height <= 0 || width <= 0 || height > max_side || width > max_side)
    fail("encode_png", "image size " + std::to_string(height) + "x" + std::to_string(width) +
                           " must be positive and at most 2^24 per side");
  const size_t row = static_cast<size_t>(width) * static_cast<size_t>(channels);
  // Each row: filter type 0 (none), then its samples.
  std::string raw;
  raw.reserve((row + 1) * static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(pixels) + static_cast<size_t>(y) * row, row);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                           reinterpret_cast<const Bytef*>(raw.data()),
                           static_cast<uLong>(raw.size()), Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) fail("encode_png", "zlib compress2 failed with code " + std::to_string(rc));
  packed.resize(packed_size);

  std::string ihdr;
  put_be32(ihdr, static_cast<uint32_t>(width));
  put_be32(ihdr, static_cast<uint32_t>(height));
  ihdr += {char(8), char(type), char(0), char(0),
           char(0)};  // depth, color, deflate, filter, no interlace
  std::string png("\x89PNG\r\n\x1a\n", 8);
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "IEND", {});
  return png;
}

}  // namespace actorflow
