#include "actors/input/idx_reader.hpp"

#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <limits>

#include "devices/cpu/parallel.hpp"

namespace actorflow {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail_file(const std::string& path, const std::string& what) {
  fail("idx", path + ": " + what);
}

// Deflate expands at most ~1032:1, so a gzip file of n bytes holds at most
// this much data. Checking a header's claim against it keeps a corrupt
// header from allocating terabytes before the data runs out.
constexpr uint64_t max_deflate_ratio = 1032;

// One open file, closed on every path out.
class gz_file {
 public:
  explicit gz_file(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) fail_file(path, "no such file");
    if (fs::is_directory(path, ec)) fail_file(path, "is a directory, not an IDX file");
    size_ = fs::file_size(path, ec);
    if (ec) fail_file(path, "cannot read its size: " + ec.message());
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_)
      fail_file(path,
                std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
  }
  ~gz_file() {
    if (file_) gzclose(file_);
  }
  gz_file(const gz_file&) = delete;
  gz_file& operator=(const gz_file&) = delete;

  /// Reads up to n bytes; fewer only at the end of the data. Corrupt data throws.
  uint64_t read(void* out, uint64_t n) {
    auto p = static_cast<char*>(out);
    uint64_t done = 0;
    while (done < n) {
      // gzread takes an unsigned count and returns an int: read in chunks.
      unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n - done, 1u << 30));
      int got = gzread(file_, p + done, chunk);
      if (got < 0) fail_file(path_, "corrupt gzip data: " + zlib_message());
      if (got == 0) break;
      done += static_cast<uint64_t>(got);
    }
    // zlib reports a stream cut short as end of data plus an error.
    if (done < n && zlib_error() != Z_OK) fail_file(path_, "corrupt gzip data: " + zlib_message());
    return done;
  }

  /// The most data bytes the file can hold, compressed or plain.
  uint64_t max_data_bytes() const { return gzdirect(file_) ? size_ : size_ * max_deflate_ratio; }

 private:
  int zlib_error() {
    int code = Z_OK;
    gzerror(file_, &code);
    return code;
  }
  std::string zlib_message() {
    int code = Z_OK;
    const char* msg = gzerror(file_, &code);
    if (code == Z_ERRNO) return std::strerror(errno);
    return msg && *msg ? msg : "unknown zlib error";
  }

  std::string path_;
  uint64_t size_ = 0;
  gzFile file_ = nullptr;
};

struct idx_header {
  uint8_t type_code = 0;
  std::vector<int64_t> dims;
};

// Type codes of the IDX format and their element sizes on disk.
size_t stored_size(uint8_t code) {
  switch (code) {
    case 0x08:
    case 0x09:
      return 1;  // uint8, int8
    case 0x0B:
      return 2;  // int16
    case 0x0C:
    case 0x0D:
      return 4;  // int32, float32
    case 0x0E:
      return 8;  // float64
    default:
      return 0;
  }
}

dtype dtype_for(uint8_t code) {
  switch (code) {
    case 0x08:
      return dtype::uint8;
    case 0x0D:
      return dtype::float32;
    case 0x0E:
      return dtype::float64;
    default:
      return dtype::int32;  // int8, int16, int32 widen to int32
  }
}

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string dims_text(const std::vector<int64_t>& dims) { return shape(dims).to_string(); }

idx_header read_header(gz_file& f, const std::string& path) {
  unsigned char magic[4];
  uint64_t got = f.read(magic, 4);
  if (got < 4)
    fail_file(path, "truncated: " + std::to_string(got) + " bytes, too short for an IDX header");
  if (magic[0] != 0 || magic[1] != 0) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08X", big_endian32(magic));
    fail_file(path, std::string("bad magic ") + text + ": not an IDX file (expected 0x0000TTRR)");
  }
  idx_header h;
  h.type_code = magic[2];
  if (!stored_size(h.type_code))
    fail_file(path, "unknown IDX type code " + std::to_string(h.type_code) +
                        " (expected 8, 9, 11, 12, 13 or 14)");
  if (magic[3] == 0) fail_file(path, "rank 0: an IDX file has at least one dimension");
  std::vector<unsigned char> raw(magic[3] * size_t{4});
  if (f.read(raw.data(), raw.size()) < raw.size())
    fail_file(path, "truncated: the header declares " + std::to_string(magic[3]) +
                        " dimensions, the file ends before them");
  for (size_t i = 0; i < magic[3]; ++i) h.dims.push_back(big_endian32(&raw[i * 4]));
  return h;
}

// Bytes of data the dims describe; throws when the count overflows.
uint64_t data_bytes(const idx_header& h, const std::string& path) {
  uint64_t n = stored_size(h.type_code);
  for (int64_t d : h.dims) {
    if (d != 0 &&
        n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(d))
      fail_file(path, "dims " + dims_text(h.dims) + " describe more data than can be addressed");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

template <class T>
T from_big_endian(const unsigned char* p) {
  unsigned char b[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = p[sizeof(T) - 1 - i];
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

// Big-endian stored values to the tensor's element type.
void decode(const unsigned char* src, uint8_t code, tensor& out) {
  int64_t n = out.num_elements();
  switch (code) {
    case 0x09: {
      auto dst = out.mutable_data<int32_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int8_t>(src[i]);
      return;
    }
    case 0x0B: {
      auto dst = out.mutable_data<int32_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = from_big_endian<int16_t>(src + 2 * i);
      return;
    }
    case 0x0C: {
      auto dst = out.mutable_data<int32_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = from_big_endian<int32_t>(src + 4 * i);
      return;
    }
    case 0x0D: {
      auto dst = out.mutable_data<float>();
      for (int64_t i = 0; i < n; ++i) dst[i] = from_big_endian<float>(src + 4 * i);
      return;
    }
    case 0x0E: {
      auto dst = out.mutable_data<double>();
      for (int64_t i = 0; i < n; ++i) dst[i] = from_big_endian<double>(src + 8 * i);
      return;
    }
  }
}

// Reads exactly `bytes` of data, then checks that nothing follows.
void read_data(gz_file& f, const std::string& path, const idx_header& h, void* out,
               uint64_t bytes) {
  uint64_t got = f.read(out, bytes);
  if (got < bytes)
    fail_file(path, "truncated: dims " + dims_text(h.dims) + " need " + std::to_string(bytes) +
                        " bytes of data, the file has " + std::to_string(got));
  char extra;
  if (f.read(&extra, 1) > 0)
    fail_file(path, "dims " + dims_text(h.dims) + " need " + std::to_string(bytes) +
                        " bytes of data, but the file has more (trailing bytes)");
}

}  // namespace

tensor read_idx(const std::string& path) {
  gz_file f(path);
  idx_header h = read_header(f, path);
  uint64_t bytes = data_bytes(h, path);
  if (bytes > f.max_data_bytes())
    fail_file(path,
              "dims " + dims_text(h.dims) + " need " + std::to_string(bytes) +
                  " bytes of data, more than the file can hold (truncated or corrupt header)");
  tensor out(dtype_for(h.type_code), shape(h.dims));
  if (h.type_code == 0x08) {  // the common case: read straight into the tensor
    read_data(f, path, h, out.raw_mutable_data(), bytes);
    return out;
  }
  std::vector<unsigned char> raw(bytes);
  read_data(f, path, h, raw.data(), bytes);
  decode(raw.data(), h.type_code, out);
  return out;
}

// ---- Fashion-MNIST --------------------------------------------------------

namespace {

constexpr int64_t image_side = 28;
constexpr int num_classes = 10;

std::string install_hint() {
  return "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)";
}

std::string require_file(const std::string& dir, const std::string& name) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("fashion_mnist", "directory " + dir + " not found: " + install_hint());
  std::string path = (fs::path(dir) / name).string();
  if (!fs::exists(path, ec)) fail("fashion_mnist", path + " not found: " + install_hint());
  return path;
}

// uint8 [N,28,28] -> float32 [N,28,28,1] in [0,1].
tensor load_images(const std::string& path) {
  tensor raw = read_idx(path);
  if (raw.type() != dtype::uint8 || raw.rank() != 3 || raw.dims()[1] != image_side ||
      raw.dims()[2] != image_side)
    fail("fashion_mnist", path + ": expected uint8 images of shape (N,28,28), got " +
                              std::string(dtype_name(raw.type())) + raw.dims().to_string());
  tensor out(dtype::float32, shape{raw.dims()[0], image_side, image_side, 1});
  const uint8_t* src = raw.data<uint8_t>();
  float* dst = out.mutable_data<float>();
  parallel_for(out.num_elements(), [&](int64_t b, int64_t e) {
    // A division, not a multiply by 1/255: correctly rounded, as PyTorch's div_(255).
    for (int64_t i = b; i < e; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  });
  return out;
}

// uint8 [N] -> int32 [N], each in 0..9.
tensor load_labels(const std::string& path, int64_t expected_count) {
  tensor raw = read_idx(path);
  if (raw.type() != dtype::uint8 || raw.rank() != 1)
    fail("fashion_mnist", path + ": expected uint8 labels of shape (N), got " +
                              std::string(dtype_name(raw.type())) + raw.dims().to_string());
  if (raw.dims()[0] != expected_count)
    fail("fashion_mnist", path + ": " + std::to_string(raw.dims()[0]) + " labels for " +
                              std::to_string(expected_count) + " images");
  tensor out(dtype::int32, raw.dims());
  const uint8_t* src = raw.data<uint8_t>();
  int32_t* dst = out.mutable_data<int32_t>();
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    if (src[i] >= num_classes)
      fail("fashion_mnist", path + ": label " + std::to_string(i) + " is " +
                                std::to_string(src[i]) + ", outside 0..9");
    dst[i] = src[i];
  }
  return out;
}

}  // namespace

fashion_mnist load_fashion_mnist(const std::string& dir) {
  // Every file is looked for before any is read: a partial install fails at once.
  auto train_images = require_file(dir, "train-images-idx3-ubyte.gz");
  auto train_labels = require_file(dir, "train-labels-idx1-ubyte.gz");
  auto test_images = require_file(dir, "t10k-images-idx3-ubyte.gz");
  auto test_labels = require_file(dir, "t10k-labels-idx1-ubyte.gz");
  fashion_mnist d;
  d.train_images = load_images(train_images);
  d.train_labels = load_labels(train_labels, d.train_images.dims()[0]);
  d.test_images = load_images(test_images);
  d.test_labels = load_labels(test_labels, d.test_images.dims()[0]);
  return d;
}

}  // namespace actorflow
