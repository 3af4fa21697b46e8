#include "actors/run/tensor_wire.hpp"

#include <cstring>
#include <vector>

namespace actorflow {

caf::error save_tensor(caf::serializer& sink, tensor& x) {
  bool valid = x.valid();
  uint8_t type = valid ? static_cast<uint8_t>(x.type()) : 0;
  std::vector<int64_t> dims = valid ? x.dims().dims() : std::vector<int64_t>{};
  uint64_t num_bytes = valid ? x.size_bytes() : 0;
  if (auto err = sink(valid, type, dims, num_bytes)) return err;
  if (num_bytes == 0) return caf::none;
  // The serializer only reads from the pointer; apply_raw is shared with loading.
  return sink.apply_raw(num_bytes, const_cast<void*>(x.raw_data()));
}

namespace {

caf::error wire_error(const std::string& what) {
  return caf::make_error(caf::sec::invalid_argument, "tensor on the wire: " + what);
}

/// How many bytes the message still holds, where the deserializer can tell.
bool fits_in_message(caf::deserializer& source, uint64_t num_bytes) {
  if (auto binary = dynamic_cast<caf::binary_deserializer*>(&source))
    return num_bytes <= binary->remaining();
  return true;
}

}  // namespace

caf::error load_tensor(caf::deserializer& source, tensor& x) {
  bool valid = false;
  uint8_t type = 0;
  std::vector<int64_t> dims;
  uint64_t num_bytes = 0;
  if (auto err = source(valid, type, dims, num_bytes)) return err;
  if (!valid) {
    x = tensor();
    return caf::none;
  }
  if (!is_valid_dtype(type)) return wire_error("unknown dtype " + std::to_string(type));
  if (!fits_in_message(source, num_bytes))
    return wire_error("claims " + std::to_string(num_bytes) +
                      " bytes, more than the message holds");
  try {
    shape dims_checked(dims);
    auto elements = static_cast<uint64_t>(dims_checked.num_elements());
    auto element_size = dtype_size(static_cast<dtype>(type));
    // Compared by division: elements * element_size could overflow.
    if (num_bytes % element_size != 0 || num_bytes / element_size != elements)
      return wire_error("shape " + dims_checked.to_string() + " of " +
                        dtype_name(static_cast<dtype>(type)) + " does not match the " +
                        std::to_string(num_bytes) + " bytes the message says");
    tensor t(static_cast<dtype>(type), std::move(dims_checked));
    if (num_bytes > 0)
      if (auto err = source.apply_raw(num_bytes, t.raw_mutable_data())) return err;
    x = std::move(t);
  } catch (const std::exception& e) {
    return wire_error(e.what());
  }
  return caf::none;
}

std::string tensor_wire_summary(const tensor& x) {
  if (!x.valid()) return "<no tensor>";
  return std::string(dtype_name(x.type())) + x.dims().to_string();
}

}  // namespace actorflow
