// A PNG encoder of our own (zlib's compress2 and crc32), for image summaries:
// 8-bit grayscale, RGB or RGBA, no interlacing, every row with filter 0.
#pragma once
#include <cstdint>
#include <string>

namespace actorflow {

/// Encodes height x width pixels of `channels` (1: gray, 3: RGB, 4: RGBA)
/// interleaved uint8 samples, row by row. Throws "[encode_png] ..." for
/// other channel counts, empty or too large images.
std::string encode_png(const uint8_t* pixels, int64_t height, int64_t width, int channels);

}  // namespace actorflow
