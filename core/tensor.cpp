#include "core/tensor.hpp"

#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <ostream>
#include <sstream>

#include "core/large_blocks.hpp"

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
  if constexpr (std::is_same_v<T, bool>)
    os << (v ? "true" : "false");
  else if constexpr (std::is_same_v<T, uint8_t>)
    os << static_cast<int>(v);
  else if constexpr (std::is_same_v<T, bfloat16>)
    os << to_float(v);  // as TensorFlow prints it
  else
    os << v;
}

}  // namespace

// ---- buffers ---------------------------------------------------------------
//
// Layout of one allocation: [padding][ref count][block word][data...], with
// the data 64-byte aligned. malloc (16-byte aligned) plus padding instead of
// aligned_alloc: glibc's aligned path bypasses its per-thread cache and cost
// ~600 instructions a call (callgrind) against ~40 for malloc. The block word
// is the block's address; blocks are 16-byte aligned, so its low bits are free
// to say where the block came from: small_block_bit for the per-thread free
// list below, large_block_bit for large_blocks.
//
// Cheap nodes make and drop one tiny tensor per firing (a scalar add: 4
// bytes), so blocks for at most small_bytes of data are recycled through a
// per-thread free list (a push or pop is a few instructions; malloc and free
// cost ~140 together). A block freed on another thread joins that thread's
// list, as in tcmalloc; a list holds at most max_cached blocks.

namespace {

constexpr uintptr_t small_block_bit = 1;
constexpr uintptr_t large_block_bit = 2;
constexpr uintptr_t block_bits = small_block_bit | large_block_bit;

constexpr size_t small_bytes = 64;
constexpr uint32_t max_cached = 1024;

// Trivially destructible, so it stays usable while the thread's other
// thread_local objects are destroyed; initial-exec: a plain %fs access
// instead of a __tls_get_addr call (the library is linked, not dlopen'ed).
struct free_list {
  void* head = nullptr;  // a free block's first word links to the next
  uint32_t count = 0;
  bool drain_registered = false;
  bool closed = false;  // the thread is exiting: free blocks at once
};
[[gnu::tls_model("initial-exec")]] thread_local free_list small_blocks;

// Returns a thread's cached blocks to malloc when the thread exits.
struct free_list_drain {
  ~free_list_drain() {
    small_blocks.closed = true;
    while (void* block = small_blocks.head) {
      std::memcpy(&small_blocks.head, block, sizeof(void*));
      std::free(block);
    }
    small_blocks.count = 0;
  }
};
thread_local free_list_drain drain_at_exit;

void* take_small_block() {
  free_list& list = small_blocks;
  void* block = list.head;
  if (!block) return std::malloc(small_bytes + tensor::alignment);
  std::memcpy(&list.head, block, sizeof(void*));
  --list.count;
  return block;
}

void give_back_small_block(void* block) {
  free_list& list = small_blocks;
  if (list.closed || list.count >= max_cached) return std::free(block);
  if (!list.drain_registered) {
    (void)&drain_at_exit;  // constructs it, so its destructor runs at thread exit
    list.drain_registered = true;
  }
  std::memcpy(block, &list.head, sizeof(void*));
  list.head = block;
  ++list.count;
}

}  // namespace

std::byte* tensor::allocate_buffer(size_t bytes) {
  keep_large_blocks_in_heap();
  static_assert(alignof(std::max_align_t) >= 16 && header_size % alignof(std::max_align_t) == 0);
  const bool small = bytes <= small_bytes;
  // header_size + the worst padding (alignment - header_size) = alignment.
  const size_t total = bytes + alignment;
  const bool large = total >= large_blocks::threshold;
  void* block = nullptr;
  try {
    block = small ? take_small_block() : large ? large_blocks::take(total) : std::malloc(total);
  } catch (const std::bad_alloc&) {
  }
  if (!block) fail("tensor", "out of memory allocating " + std::to_string(bytes) + " bytes");
  auto first = reinterpret_cast<uintptr_t>(block) + header_size;
  auto data = reinterpret_cast<std::byte*>((first + alignment - 1) / alignment * alignment);
  new (data - header_size) ref_count(1);
  uintptr_t word = reinterpret_cast<uintptr_t>(block) | (small   ? small_block_bit
                                                         : large ? large_block_bit
                                                                 : 0);
  std::memcpy(data - header_size + sizeof(ref_count), &word, sizeof word);
  return data;
}

void tensor::free_buffer(std::byte* data) {
  uintptr_t word;
  std::memcpy(&word, data - header_size + sizeof(ref_count), sizeof word);
  reinterpret_cast<ref_count*>(data - header_size)->~ref_count();
  void* block = reinterpret_cast<void*>(word & ~block_bits);
  if (word & small_block_bit)
    give_back_small_block(block);
  else if (word & large_block_bit)
    large_blocks::give_back(block);
  else
    std::free(block);
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

void tensor::fail_access(dtype asked) const {
  if (!valid_) fail("tensor", "access to an empty tensor");
  fail("tensor",
       std::string("accessed as ") + dtype_name(asked) + " but holds " + dtype_name(type_));
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
  visit_storage_type(type_, [&](auto tag) {
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
