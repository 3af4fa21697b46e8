#include "core/tensor.hpp"

#include "core/large_blocks.hpp"

#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <ostream>
#include <sstream>

namespace actorflow {

namespace {

// glibc hands blocks above a dynamic threshold straight back to the OS, so a
// training step that allocates the same large activations each step pays
// page faults every time (measured: ~12 ms per fresh 12.8 MB block under
// load). Keeping such blocks in the heap makes them reusable; 32 MiB is the
// largest threshold glibc accepts.
void keep_large_blocks_in_heap() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)done;
}

template <class T>
void print_value(std::ostream& os, T v) {
  if constexpr (std::is_same_v<T, bool>) os << (v ? "true" : "false");
  else if constexpr (std::is_same_v<T, uint8_t>) os << static_cast<int>(v);
  else os << v;
}

}  // namespace

// Layout of one allocation: [padding][ref count][block word][data...], with
// the data 64-byte aligned. malloc (16-byte aligned) plus padding instead of
// aligned_alloc: glibc's aligned path bypasses its per-thread cache and cost
// ~600 instructions a call (callgrind) against ~40 for malloc, for the small
// tensors that cheap nodes make on every step. The block word is the block's
// address, with large_block_bit set for a block from large_blocks.
namespace {
constexpr uintptr_t large_block_bit = 2;  // blocks are 16-byte aligned: low bits are free
}  // namespace

std::byte* tensor::allocate_buffer(size_t bytes) {
  keep_large_blocks_in_heap();
  static_assert(alignof(std::max_align_t) >= 16 && header_size % alignof(std::max_align_t) == 0);
  // header_size + the worst padding (alignment - header_size) = alignment.
  const size_t total = bytes + alignment;
  const bool large = total >= large_blocks::threshold;
  void* block = nullptr;
  try {
    block = large ? large_blocks::take(total) : std::malloc(total);
  } catch (const std::bad_alloc&) {
  }
  if (!block) fail("tensor", "out of memory allocating " + std::to_string(bytes) + " bytes");
  auto first = reinterpret_cast<uintptr_t>(block) + header_size;
  auto data = reinterpret_cast<std::byte*>((first + alignment - 1) / alignment * alignment);
  new (data - header_size) ref_count(1);
  uintptr_t word = reinterpret_cast<uintptr_t>(block) | (large ? large_block_bit : 0);
  std::memcpy(data - header_size + sizeof(ref_count), &word, sizeof word);
  return data;
}

void tensor::free_buffer(std::byte* data) {
  uintptr_t word;
  std::memcpy(&word, data - header_size + sizeof(ref_count), sizeof word);
  reinterpret_cast<ref_count*>(data - header_size)->~ref_count();
  void* block = reinterpret_cast<void*>(word & ~large_block_bit);
  if (word & large_block_bit) large_blocks::give_back(block);
  else std::free(block);
}

tensor::tensor(dtype type, shape dims)
    : shape_(std::move(dims)), num_elements_(shape_.num_elements()), type_(type), valid_(true) {
  if (!is_valid_dtype(static_cast<int>(type))) fail("tensor", "invalid dtype");
  size_t elem = dtype_size(type);
  if (num_elements_ > 0 && static_cast<uint64_t>(num_elements_) > (uint64_t{1} << 46) / elem)
    fail("tensor", "shape " + shape_.to_string() + " is too large to allocate");
  size_t bytes = static_cast<size_t>(num_elements_) * elem;
  if (bytes) data_ = allocate_buffer(bytes);
}

tensor tensor::zeros(dtype type, shape dims) {
  tensor t(type, std::move(dims));
  if (t.size_bytes()) std::memset(t.raw_mutable_data(), 0, t.size_bytes());
  return t;
}

tensor tensor::clone() const {
  if (!valid_) return {};
  tensor t(type_, shape_);
  if (size_bytes()) std::memcpy(t.raw_mutable_data(), raw_data(), size_bytes());
  return t;
}

tensor tensor::reshaped(shape dims) const {
  if (dims.num_elements() != num_elements_)
    fail("tensor", "cannot reshape " + shape_.to_string() + " to " + dims.to_string());
  tensor t = *this;
  t.shape_ = std::move(dims);
  return t;
}

void tensor::check_rank(int r) const {
  if (rank() != r)
    fail("tensor", "expected rank " + std::to_string(r) + ", got shape " + shape_.to_string());
}

bool tensor::equals(const tensor& other) const {
  if (valid_ != other.valid_) return false;
  if (!valid_) return true;
  if (type_ != other.type_ || shape_ != other.shape_) return false;
  return size_bytes() == 0 || std::memcmp(raw_data(), other.raw_data(), size_bytes()) == 0;
}

std::string tensor::to_string(int64_t max_elements) const {
  if (!valid_) return "tensor<empty>";
  std::ostringstream os;
  os << "tensor<" << dtype_name(type_) << " " << shape_.to_string() << "> ";
  visit_dtype(type_, [&](auto tag) {
    using T = decltype(tag);
    const T* p = data<T>();
    int64_t shown = 0;
    // Nested brackets, one level per dimension, row-major.
    auto rec = [&](auto& self, int dim, int64_t offset, int64_t stride) -> void {
      if (dim == rank()) {
        if (shown++ < max_elements) print_value(os, p[offset]);
        return;
      }
      int64_t n = shape_[dim];
      int64_t inner = n ? stride / n : 0;
      os << "[";
      for (int64_t i = 0; i < n; ++i) {
        if (shown >= max_elements) {
          os << "...";
          break;
        }
        if (i) os << ", ";
        self(self, dim + 1, offset + i * inner, inner);
      }
      os << "]";
    };
    rec(rec, 0, 0, num_elements_);
  });
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const tensor& t) { return os << t.to_string(); }

}  // namespace actorflow
