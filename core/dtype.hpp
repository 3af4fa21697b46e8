// Element types of tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/bfloat16.hpp"
#include "core/error.hpp"
#include "core/export.hpp"

namespace actorflow {

// The numbering is stored in checkpoints, graph files and messages: only append.
enum class dtype : uint8_t { float32, float64, int32, int64, uint8, boolean, bfloat16 };

/// The last enumerator (for loaders and loops over every dtype).
inline constexpr dtype last_dtype = dtype::bfloat16;

/// Bytes per element.
ACTORFLOW_API size_t dtype_size(dtype t);
/// "float32", "int64", "bool", ...
ACTORFLOW_API const char* dtype_name(dtype t);
/// Inverse of dtype_name; nullopt for an unknown name.
ACTORFLOW_API std::optional<dtype> parse_dtype(std::string_view name);
/// True when the numeric value is a valid enumerator (for loaders).
ACTORFLOW_API bool is_valid_dtype(int value);

/// float32, float64 and bfloat16.
ACTORFLOW_API bool is_floating(dtype t);
ACTORFLOW_API bool is_integer(dtype t);

template <class T>
constexpr dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return dtype::float32;
  else if constexpr (std::is_same_v<T, double>)
    return dtype::float64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return dtype::int32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return dtype::int64;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return dtype::uint8;
  else if constexpr (std::is_same_v<T, bool>)
    return dtype::boolean;
  else if constexpr (std::is_same_v<T, actorflow::bfloat16>)
    return dtype::bfloat16;
  else
    static_assert(sizeof(T) == 0, "no actorflow dtype for this C++ type");
}

/// The error of a kernel that meets a bfloat16 it has no code for.
[[noreturn]] ACTORFLOW_API void fail_no_bfloat16_kernel(const std::string& op);

/// Calls f(T{}) with the C++ type of t, bfloat16 included: for code that moves or
/// prints elements (the storage type has no arithmetic).
template <class F>
decltype(auto) visit_storage_type(dtype t, F&& f) {
  switch (t) {
    case dtype::float32:
      return f(float{});
    case dtype::float64:
      return f(double{});
    case dtype::int32:
      return f(int32_t{});
    case dtype::int64:
      return f(int64_t{});
    case dtype::uint8:
      return f(uint8_t{});
    case dtype::boolean:
      return f(bool{});
    case dtype::bfloat16:
      return f(actorflow::bfloat16{});
  }
  throw error("[dtype] invalid dtype value " + std::to_string(static_cast<int>(t)));
}

/// Calls f(T{}) with the C++ type of t. Kernels use it to instantiate per dtype:
/// bfloat16 is not among them (it throws "has no bfloat16 kernel"); the few kernels
/// that take bfloat16 check for it before they get here.
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::float32:
      return f(float{});
    case dtype::float64:
      return f(double{});
    case dtype::int32:
      return f(int32_t{});
    case dtype::int64:
      return f(int64_t{});
    case dtype::uint8:
      return f(uint8_t{});
    case dtype::boolean:
      return f(bool{});
    case dtype::bfloat16:
      fail_no_bfloat16_kernel("kernel");
  }
  throw error("[dtype] invalid dtype value " + std::to_string(static_cast<int>(t)));
}

/// Like visit_dtype, limited to the numeric types (no bool); `op` names the caller in errors.
template <class F>
decltype(auto) visit_numeric(dtype t, const char* op, F&& f) {
  if (t == dtype::boolean) fail(op, "bool is not a numeric type");
  if (t == dtype::bfloat16) fail_no_bfloat16_kernel(op);
  return visit_dtype(t, std::forward<F>(f));
}

/// Like visit_dtype, limited to float32 and float64.
template <class F>
decltype(auto) visit_floating(dtype t, const char* op, F&& f) {
  switch (t) {
    case dtype::float32:
      return f(float{});
    case dtype::float64:
      return f(double{});
    case dtype::bfloat16:
      fail_no_bfloat16_kernel(op);
    default:
      fail(op, std::string("expects float32 or float64, got ") + dtype_name(t));
  }
}

}  // namespace actorflow
