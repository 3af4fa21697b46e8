// NumPy broadcasting of partial and concrete shapes, shared by the CPU
// kernels (ops/math_detail.hpp) and the CUDA glue (ops/cuda/glue.hpp).
//
// Concrete shapes are reduced to a "plan": size-1 dims dropped, adjacent dims
// merged where every input stays contiguous or stays broadcast, so that the
// innermost dim has stride 0 or 1 for each input and the rank is small.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/shape.hpp"

namespace actorflow::geometry {

/// "(2,3) and (2,5)", "(2), (3) and (4)".
inline std::string join_shapes(const std::vector<shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) s += i + 1 == shapes.size() ? " and " : ", ";
    s += shapes[i].to_string();
  }
  return s;
}

[[noreturn]] inline void fail_broadcast(const std::string& op, const std::vector<shape>& shapes) {
  fail(op, "shapes " + join_shapes(shapes) + " cannot broadcast");
}

/// NumPy broadcasting of partial shapes (-1 = unknown): 1 vs ? -> ?, ? vs 5 -> 5,
/// ? vs ? -> ?. Throws "[op] shapes ... cannot broadcast" on a known conflict.
inline shape broadcast_partial(const std::vector<shape>& shapes, const std::string& op) {
  int rank = 0;
  for (auto& s : shapes) rank = std::max(rank, s.rank());
  std::vector<int64_t> out(static_cast<size_t>(rank), 1);
  for (auto& s : shapes) {
    for (int i = 0; i < s.rank(); ++i) {
      int64_t d = s[i];
      int64_t& o = out[static_cast<size_t>(rank - s.rank() + i)];
      if (d == 1 || d == o) continue;
      if (o == 1)
        o = d;  // also takes an unknown dim: 1 vs ? is ?
      else if (d == shape::unknown)
        continue;  // o is known (not 1) or already unknown
      else if (o == shape::unknown)
        o = d;  // ? vs 5 is 5 (a valid graph needs ? = 1 or 5)
      else
        fail_broadcast(op, shapes);
    }
  }
  return shape(std::move(out));
}

/// Iteration plan for N concrete inputs broadcast to one output.
template <size_t N>
struct broadcast_plan {
  shape out;                  // the broadcast output shape
  int64_t num_elements = 0;   // of out
  std::vector<int64_t> dims;  // reduced dims (at least one); their product is num_elements
  std::array<std::vector<int64_t>, N> strides;  // element strides per reduced dim, 0 = broadcast
};

/// Broadcasts concrete shapes and reduces them to a plan; throws naming all shapes.
template <size_t N>
broadcast_plan<N> make_plan(const std::array<const shape*, N>& in, const std::string& op) {
  auto fail_here = [&]() {
    std::vector<shape> all;
    for (auto* s : in) all.push_back(*s);
    fail_broadcast(op, all);
  };
  int rank = 0;
  for (auto* s : in) rank = std::max(rank, s->rank());
  std::vector<int64_t> out(static_cast<size_t>(rank), 1);
  for (auto* s : in) {
    for (int i = 0; i < s->rank(); ++i) {
      int64_t d = (*s)[i];
      if (d < 0) fail(op, "run-time shape " + s->to_string() + " has an unknown dim");
      int64_t& o = out[static_cast<size_t>(rank - s->rank() + i)];
      if (d == o || d == 1) continue;
      if (o == 1)
        o = d;
      else
        fail_here();
    }
  }
  broadcast_plan<N> p;
  p.out = shape(out);
  p.num_elements = p.out.num_elements();
  if (p.num_elements == 0) {
    p.dims = {0};
    for (auto& s : p.strides) s = {0};
    return p;
  }
  // Full strides per input, aligned right; 0 where the input broadcasts.
  std::array<std::vector<int64_t>, N> full;
  for (size_t k = 0; k < N; ++k) {
    full[k].assign(static_cast<size_t>(rank), 0);
    int64_t stride = 1;
    for (int i = in[k]->rank() - 1; i >= 0; --i) {
      int64_t d = (*in[k])[i];
      if (d != 1) full[k][static_cast<size_t>(rank - in[k]->rank() + i)] = stride;
      stride *= d;
    }
  }
  // Drop size-1 output dims; merge a dim into the kept dim before it when every
  // input steps through both as one (contiguous, or broadcast in both).
  for (int j = 0; j < rank; ++j) {
    int64_t n = out[static_cast<size_t>(j)];
    if (n == 1) continue;
    bool merge = !p.dims.empty();
    for (size_t k = 0; merge && k < N; ++k)
      merge = p.strides[k].back() == full[k][static_cast<size_t>(j)] * n;
    if (merge) {
      p.dims.back() *= n;
      for (size_t k = 0; k < N; ++k) p.strides[k].back() = full[k][static_cast<size_t>(j)];
    } else {
      p.dims.push_back(n);
      for (size_t k = 0; k < N; ++k) p.strides[k].push_back(full[k][static_cast<size_t>(j)]);
    }
  }
  if (p.dims.empty()) {  // one element
    p.dims = {1};
    for (auto& s : p.strides) s = {0};
  }
  return p;
}

}  // namespace actorflow::geometry
