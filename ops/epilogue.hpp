// What a fused kernel (fused_matmul, fused_conv2d) applies to each tile of its
// product while the tile is still in cache: out = act(out + bias). The float
// operations are those bias_add and relu make in their own passes over memory,
// in the same order, so fusing changes no bit of the result.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace actorflow {

enum class activation { none, relu };

/// "none" or "relu" (the fused ops' `activation` attribute); throws naming `op` otherwise.
inline activation parse_activation(const std::string& name, const std::string& op) {
  if (name == "none") return activation::none;
  if (name == "relu") return activation::relu;
  fail(op, "unknown activation '" + name + "' (expected none or relu)");
}

template <class T>
struct epilogue {
  const T* bias = nullptr;  // one per output column; null: none
  activation act = activation::none;

  bool empty() const { return bias == nullptr && act == activation::none; }

  /// Rows [0, rows) x columns [col0, col0 + cols) of a product whose rows are
  /// ldc apart; `c` points at the tile's first element.
  void apply(T* c, int64_t rows, int64_t cols, int64_t ldc, int64_t col0) const {
    if (empty()) return;
    const T* b = bias ? bias + col0 : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      T* row = c + r * ldc;
      if (b && act == activation::relu) {
        for (int64_t j = 0; j < cols; ++j) {
          const T v = row[j] + b[j];
          row[j] = v < T(0) ? T(0) : v;  // NaN passes, as relu's
        }
      } else if (b) {
        for (int64_t j = 0; j < cols; ++j) row[j] += b[j];
      } else {
        for (int64_t j = 0; j < cols; ++j) row[j] = row[j] < T(0) ? T(0) : row[j];
      }
    }
  }
};

}  // namespace actorflow
