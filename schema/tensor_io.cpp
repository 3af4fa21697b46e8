#include "schema/tensor_io.hpp"

#include <bit>
#include <cstring>

namespace actorflow {

namespace {

[[noreturn]] void fail_in(const std::string& context, const std::string& what) {
  throw error(context + ": " + what);
}

// Elements are little-endian on the wire; a big-endian host swaps each element.
void swap_bytes_if_big_endian(std::byte* p, size_t bytes, size_t elem) {
  if constexpr (std::endian::native == std::endian::big) {
    if (elem == 1) return;
    for (size_t i = 0; i < bytes; i += elem)
      for (size_t a = i, b = i + elem - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
  }
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size() && i < 16; ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i]);
  }
  if (dims.size() > 16) s += ",... " + std::to_string(dims.size()) + " dims";
  return s + ")";
}

}  // namespace

std::string capnp_error_reason(const kj::Exception& e) {
  // kj writes "expected <condition> [<values>]; <reason>"; the values may hold
  // input bytes, the reason is what a reader wants.
  std::string d = e.getDescription().cStr();
  auto semi = d.rfind("; ");
  if (d.rfind("expected ", 0) == 0 && semi != std::string::npos) d = d.substr(semi + 2);
  return printable(d, 200);
}

std::string printable(std::string_view s, size_t max_shown) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_shown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > max_shown) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

uint64_t check_untrusted_shape(const std::vector<int64_t>& dims, dtype type, bool allow_unknown,
                               const std::string& context) {
  // Multiply by hand: the dims may be negative or their product may overflow
  // int64, and nothing may be allocated before the size is known to be sane.
  uint64_t elem = dtype_size(type), nonzero = 1;
  bool empty = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    if (d < 0 && !(allow_unknown && d == shape::unknown))
      fail_in(context, "shape " + dims_text(dims) + " has " +
                           (allow_unknown ? "invalid dim " : "negative dim ") + std::to_string(d) +
                           " at axis " + std::to_string(i));
    if (d <= 0) {
      empty |= d == 0;
      continue;
    }
    if (nonzero > max_tensor_bytes / elem / static_cast<uint64_t>(d))
      fail_in(context, "shape " + dims_text(dims) + " of " + dtype_name(type) + " is larger than " +
                           std::to_string(max_tensor_bytes) + " bytes");
    nonzero *= static_cast<uint64_t>(d);
  }
  return empty ? 0 : nonzero * elem;
}

schema::DType dtype_to_capnp(dtype t) {
  switch (t) {
    case dtype::float32:
      return schema::DType::FLOAT32;
    case dtype::float64:
      return schema::DType::FLOAT64;
    case dtype::int32:
      return schema::DType::INT32;
    case dtype::int64:
      return schema::DType::INT64;
    case dtype::uint8:
      return schema::DType::UINT8;
    case dtype::boolean:
      return schema::DType::BOOLEAN;
    case dtype::bfloat16:
      return schema::DType::BFLOAT16;
  }
  fail("tensor_io", "invalid dtype value " + std::to_string(static_cast<int>(t)));
}

dtype dtype_from_capnp(schema::DType t, const std::string& context) {
  switch (t) {
    case schema::DType::FLOAT32:
      return dtype::float32;
    case schema::DType::FLOAT64:
      return dtype::float64;
    case schema::DType::INT32:
      return dtype::int32;
    case schema::DType::INT64:
      return dtype::int64;
    case schema::DType::UINT8:
      return dtype::uint8;
    case schema::DType::BOOLEAN:
      return dtype::boolean;
    case schema::DType::BFLOAT16:
      return dtype::bfloat16;
  }
  // A newer writer or a corrupted file: Cap'n Proto hands out unknown enumerants as is.
  fail_in(context, "invalid dtype value " + std::to_string(static_cast<uint16_t>(t)));
}

void tensor_to_capnp(const tensor& t, schema::Tensor::Builder out) {
  if (!t.valid()) fail("tensor_io", "cannot serialize an empty tensor handle");
  check_untrusted_shape(t.dims().dims(), t.type(), false, "[tensor_io]");
  size_t bytes = t.size_bytes();
  if (bytes > max_capnp_data_bytes)
    fail("tensor_io", "tensor " + t.dims().to_string() + " holds " + std::to_string(bytes) +
                          " bytes, more than one Cap'n Proto Data field can (" +
                          std::to_string(max_capnp_data_bytes) + ")");
  out.setDtype(dtype_to_capnp(t.type()));
  auto& dims = t.dims().dims();
  auto shape = out.initShape(static_cast<unsigned>(dims.size()));
  for (size_t i = 0; i < dims.size(); ++i) shape.set(static_cast<unsigned>(i), dims[i]);
  auto data = out.initData(static_cast<unsigned>(bytes));
  if (bytes) {
    std::memcpy(data.begin(), t.raw_data(), bytes);
    swap_bytes_if_big_endian(reinterpret_cast<std::byte*>(data.begin()), bytes,
                             dtype_size(t.type()));
  }
}

tensor tensor_from_capnp(schema::Tensor::Reader in, const std::string& context) {
  try {
    dtype type = dtype_from_capnp(in.getDtype(), context);
    size_t elem = dtype_size(type);
    auto shape_list = in.getShape();
    std::vector<int64_t> dims;
    dims.reserve(shape_list.size());
    for (int64_t d : shape_list) dims.push_back(d);
    uint64_t bytes = check_untrusted_shape(dims, type, false, context);
    auto data = in.getData();
    if (data.size() != bytes)
      fail_in(context, "tensor " + std::string(dtype_name(type)) + dims_text(dims) + " needs " +
                           std::to_string(bytes) + " data bytes, got " +
                           std::to_string(data.size()));
    if (type == dtype::boolean) {
      // Any other byte would be an invalid bool object (undefined behaviour to read).
      for (size_t i = 0; i < bytes; ++i)
        if (data[i] > 1)
          fail_in(context, "bool tensor element " + std::to_string(i) + " has byte value " +
                               std::to_string(data[i]) + " (must be 0 or 1)");
    }
    tensor t(type, shape(std::move(dims)));
    if (bytes) {
      auto dst = static_cast<std::byte*>(t.raw_mutable_data());
      std::memcpy(dst, data.begin(), bytes);
      swap_bytes_if_big_endian(dst, bytes, elem);
    }
    return t;
  } catch (const kj::Exception& e) {
    fail_in(context, "malformed tensor: " + capnp_error_reason(e));
  }
}

}  // namespace actorflow
