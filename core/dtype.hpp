// Element types of tensors.
#pragma once
#include "core/export.hpp"
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.hpp"

namespace actorflow {

enum class dtype : uint8_t { float32, float64, int32, int64, uint8, boolean };

/// Bytes per element.
ACTORFLOW_API size_t dtype_size(dtype t);
/// "float32", "int64", "bool", ...
ACTORFLOW_API const char* dtype_name(dtype t);
/// Inverse of dtype_name; nullopt for an unknown name.
ACTORFLOW_API std::optional<dtype> parse_dtype(std::string_view name);
/// True when the numeric value is a valid enumerator (for loaders).
ACTORFLOW_API bool is_valid_dtype(int value);

ACTORFLOW_API bool is_floating(dtype t);
ACTORFLOW_API bool is_integer(dtype t);

template <class T>
constexpr dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>) return dtype::float32;
  else if constexpr (std::is_same_v<T, double>) return dtype::float64;
  else if constexpr (std::is_same_v<T, int32_t>) return dtype::int32;
  else if constexpr (std::is_same_v<T, int64_t>) return dtype::int64;
  else if constexpr (std::is_same_v<T, uint8_t>) return dtype::uint8;
  else if constexpr (std::is_same_v<T, bool>) return dtype::boolean;
  else static_assert(sizeof(T) == 0, "no actorflow dtype for this C++ type");
}

/// Calls f(T{}) with the C++ type of t. Kernels use it to instantiate per dtype.
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::float32: return f(float{});
    case dtype::float64: return f(double{});
    case dtype::int32: return f(int32_t{});
    case dtype::int64: return f(int64_t{});
    case dtype::uint8: return f(uint8_t{});
    case dtype::boolean: return f(bool{});
  }
  throw error("[dtype] invalid dtype value " + std::to_string(static_cast<int>(t)));
}

/// Like visit_dtype, limited to the numeric types (no bool); `op` names the caller in errors.
template <class F>
decltype(auto) visit_numeric(dtype t, const char* op, F&& f) {
  if (t == dtype::boolean) fail(op, "bool is not a numeric type");
  return visit_dtype(t, std::forward<F>(f));
}

/// Like visit_dtype, limited to float32 and float64.
template <class F>
decltype(auto) visit_floating(dtype t, const char* op, F&& f) {
  switch (t) {
    case dtype::float32: return f(float{});
    case dtype::float64: return f(double{});
    default: fail(op, std::string("expects float32 or float64, got ") + dtype_name(t));
  }
}

}  // namespace actorflow
