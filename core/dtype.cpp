#include "core/dtype.hpp"

namespace actorflow {

size_t dtype_size(dtype t) {
  return visit_storage_type(t, [](auto v) { return sizeof(v); });
}

const char* dtype_name(dtype t) {
  switch (t) {
    case dtype::float32:
      return "float32";
    case dtype::float64:
      return "float64";
    case dtype::int32:
      return "int32";
    case dtype::int64:
      return "int64";
    case dtype::uint8:
      return "uint8";
    case dtype::boolean:
      return "bool";
    case dtype::bfloat16:
      return "bfloat16";
  }
  return "invalid";
}

std::optional<dtype> parse_dtype(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(last_dtype); ++i)
    if (name == dtype_name(static_cast<dtype>(i))) return static_cast<dtype>(i);
  return std::nullopt;
}

bool is_valid_dtype(int value) { return value >= 0 && value <= static_cast<int>(last_dtype); }

bool is_floating(dtype t) {
  return t == dtype::float32 || t == dtype::float64 || t == dtype::bfloat16;
}

bool is_integer(dtype t) { return t == dtype::int32 || t == dtype::int64 || t == dtype::uint8; }

void fail_no_bfloat16_kernel(const std::string& op) {
  fail(op, "has no bfloat16 kernel (cast to float32 around it)");
}

}  // namespace actorflow
