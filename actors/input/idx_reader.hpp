// IDX files, the format of the MNIST family: a big-endian header (two zero
// bytes, a type code, the rank), one 32-bit dimension per axis, then the data
// in row-major order. Files may be gzip-compressed (zlib reads both forms).
#pragma once
#include <string>

#include "core/export.hpp"
#include "core/tensor.hpp"

namespace actorflow {

/// Reads an IDX file, gzip-compressed or plain, into a tensor of its shape.
/// uint8 data stays uint8 (as stored); int8, int16 and int32 become int32;
/// float32 and float64 stay as they are. Throws actorflow::error naming the
/// file and what is wrong: missing or unreadable, not IDX (bad magic), an
/// unknown type code, rank 0, dims whose size overflows or disagrees with the
/// data (truncated, or bytes left over), corrupt gzip data.
ACTORFLOW_API tensor read_idx(const std::string& path);

/// Fashion-MNIST (Zalando), as the models want it.
struct ACTORFLOW_API fashion_mnist {
  tensor train_images;  ///< float32 [60000,28,28,1] (NHWC), pixels scaled to [0,1]
  tensor train_labels;  ///< int32 [60000], classes 0..9
  tensor test_images;   ///< float32 [10000,28,28,1]
  tensor test_labels;   ///< int32 [10000]
};

/// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

/// Loads the four gzip files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
/// t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) from `dir`. A missing
/// directory or file gives an error that says to install dataset-fashion-mnist;
/// a file of the wrong shape, or labels outside 0..9, an error naming the file.
ACTORFLOW_API fashion_mnist load_fashion_mnist(const std::string& dir = fashion_mnist_dir);

}  // namespace actorflow
