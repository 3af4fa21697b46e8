// Internals shared by the math op family (ops/math_*.cpp): dtype sets and the
// element-wise drivers that split work with parallel_for.
//
// Broadcast kernels never divide per element: they walk a broadcasting plan
// (ops/geometry/broadcast.hpp) as a sequence of flat runs over its innermost
// dim, whose stride is 0 or 1 for each input; the outer index advances like an
// odometer. Same-shape and scalar-vs-tensor inputs collapse to a single run,
// which is split across threads directly.
#pragma once
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/op_registry.hpp"
#include "devices/cpu/parallel.hpp"
#include "ops/geometry/broadcast.hpp"

namespace actorflow::math_detail {

// ---- dtype sets ------------------------------------------------------------

enum class dtypes { all, numeric, signed_numeric, floating, boolean };

// No set holds bfloat16: these kernels have no code for it (cast, matmul and conv take it
// before they get here).
constexpr bool accepts(dtypes set, dtype t) {
  if (t == dtype::bfloat16) return false;
  switch (set) {
    case dtypes::all:
      return true;
    case dtypes::numeric:
      return t != dtype::boolean;
    case dtypes::signed_numeric:
      return t == dtype::float32 || t == dtype::float64 || t == dtype::int32 || t == dtype::int64;
    case dtypes::floating:
      return t == dtype::float32 || t == dtype::float64;
    case dtypes::boolean:
      return t == dtype::boolean;
  }
  return false;
}

template <dtypes Set, class T>
constexpr bool accepts_type() {
  return accepts(Set, dtype_of<T>());
}

inline const char* describe(dtypes set) {
  switch (set) {
    case dtypes::all:
      return "any dtype";
    case dtypes::numeric:
      return "a numeric dtype";
    case dtypes::signed_numeric:
      return "float32, float64, int32 or int64";
    case dtypes::floating:
      return "float32 or float64";
    case dtypes::boolean:
      return "bool";
  }
  return "?";
}

/// Throws "[op] expects <set>, got <dtype>" when t is not in the set ("[op] has no
/// bfloat16 kernel" for bfloat16).
inline void check_dtype(const std::string& op, dtypes set, dtype t) {
  if (t == dtype::bfloat16) fail_no_bfloat16_kernel(op);
  if (!accepts(set, t))
    fail(op, std::string("expects ") + describe(set) + ", got " + dtype_name(t));
}

/// Throws "[op] dtypes differ: a and b".
inline void check_same_dtype(const std::string& op, dtype a, dtype b) {
  if (a != b) fail(op, std::string("dtypes differ: ") + dtype_name(a) + " and " + dtype_name(b));
}

/// Calls f(T{}) for t when t is in Set; otherwise throws like check_dtype. Only the
/// accepted types are instantiated.
template <dtypes Set, class F>
void visit_set(dtype t, const std::string& op, F&& f) {
  if (t == dtype::bfloat16) fail_no_bfloat16_kernel(op);
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (accepts_type<Set, T>())
      f(tag);
    else
      check_dtype(op, Set, t);
  });
}

// ---- broadcasting ----------------------------------------------------------

// The plans themselves are geometry, shared with the CUDA glue.
using geometry::broadcast_partial;
using geometry::broadcast_plan;
using geometry::make_plan;

/// Runs run(out_offset, in_offsets, n) over the plan: n consecutive output elements
/// from out_offset, input k starting at in_offsets[k] and stepping by its innermost
/// stride (0 or 1). Runs are split across threads with at least ~grain elements per task.
template <size_t N, class F>
void for_each_run(const broadcast_plan<N>& p, int64_t grain, F&& run) {
  if (p.num_elements == 0) return;
  using offsets = std::array<int64_t, N>;
  const int r = static_cast<int>(p.dims.size());
  const int64_t inner = p.dims.back();
  if (r == 1) {
    parallel_for(inner, grain, [&](int64_t b, int64_t e) {
      offsets off;
      for (size_t k = 0; k < N; ++k) off[k] = b * p.strides[k][0];
      run(b, off, e - b);
    });
    return;
  }
  const int64_t rows = p.num_elements / inner;
  parallel_for(rows, std::max<int64_t>(1, grain / inner), [&](int64_t r0, int64_t r1) {
    // Index of the first row: one division per task, none per element.
    std::vector<int64_t> idx(static_cast<size_t>(r - 1));
    offsets off{};
    int64_t rem = r0;
    for (int d = r - 2; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = rem % p.dims[static_cast<size_t>(d)];
      rem /= p.dims[static_cast<size_t>(d)];
      for (size_t k = 0; k < N; ++k)
        off[k] += idx[static_cast<size_t>(d)] * p.strides[k][static_cast<size_t>(d)];
    }
    for (int64_t row = r0; row < r1; ++row) {
      run(row * inner, off, inner);
      for (int d = r - 2; d >= 0; --d) {
        auto du = static_cast<size_t>(d);
        for (size_t k = 0; k < N; ++k) off[k] += p.strides[k][du];
        if (++idx[du] < p.dims[du]) break;
        idx[du] = 0;
        for (size_t k = 0; k < N; ++k) off[k] -= p.strides[k][du] * p.dims[du];
      }
    }
  });
}

// ---- element-wise drivers --------------------------------------------------

/// Element-wise tasks: plain arithmetic runs in big chunks, transcendental and
/// integer-division work (10-50x dearer per element) in smaller ones.
inline constexpr int64_t cheap_grain = parallel_grain;
inline constexpr int64_t costly_grain = parallel_grain / 8;

/// out[i] = f(a[i], b[i]) over one run; va/vb say whether a/b advance (else broadcast).
template <class R, class T, class F>
inline void binary_run(R* __restrict o, const T* __restrict a, bool va, const T* __restrict b,
                       bool vb, int64_t n, const F& f) {
  if (va && vb) {
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(a[i], b[i]));
  } else if (va) {
    const T y = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(a[i], y));
  } else if (vb) {
    const T x = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(x, b[i]));
  } else {
    std::fill(o, o + n, static_cast<R>(f(*a, *b)));
  }
}

/// The common cases that need no plan: equal shapes, or one side a single
/// element whose rank does not exceed the other's (so the output takes the
/// other's shape). They are one flat run; planning them cost more than a
/// scalar add itself. Returns false, doing nothing, for every other case.
template <class T, class R, class Run>
bool binary_flat(kernel_context& ctx, const tensor& a, const tensor& b, int64_t grain,
                 const Run& run) {
  bool va = true, vb = true;  // whether each input advances (else it broadcasts)
  if (a.dims() != b.dims()) {
    if (b.num_elements() == 1 && b.rank() <= a.rank())
      vb = false;
    else if (a.num_elements() == 1 && a.rank() <= b.rank())
      va = false;
    else
      return false;
  }
  // a and b are inputs 0 and 1; an input that advances has the output's shape.
  const size_t from = va && (!vb || ctx.inputs[0].is_unique()) ? 0 : 1;
  tensor& out = ctx.reuse_or_allocate_output(0, from, dtype_of<R>(), va ? a.dims() : b.dims());
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.mutable_data<R>();
  parallel_for(out.num_elements(), grain, [&](int64_t begin, int64_t end) {
    run(po + begin, pa + (va ? begin : 0), va, pb + (vb ? begin : 0), vb, end - begin);
  });
  return true;
}

/// Broadcasts inputs 0 and 1 of ctx (dtype T) into a new output 0 of dtype R;
/// run(R* out, const T* a, bool a_advances, const T* b, bool b_advances, n) fills one run.
template <class T, class R, class Run>
void binary_broadcast(kernel_context& ctx, int64_t grain, const Run& run) {
  const tensor& a = ctx.input(0);
  const tensor& b = ctx.input(1);
  check_same_dtype(ctx.op, a.type(), b.type());
  if (binary_flat<T, R>(ctx, a, b, grain, run)) return;
  auto plan = make_plan<2>({&a.dims(), &b.dims()}, ctx.op);
  tensor& out = ctx.allocate_output(0, dtype_of<R>(), plan.out);
  if (plan.num_elements == 0) return;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.mutable_data<R>();
  const bool va = plan.strides[0].back() != 0;
  const bool vb = plan.strides[1].back() != 0;
  for_each_run(plan, grain, [&](int64_t o, const std::array<int64_t, 2>& off, int64_t n) {
    run(po + o, pa + off[0], va, pb + off[1], vb, n);
  });
}

/// binary_broadcast with a scalar function f(T, T) -> R.
template <class T, class R, class F>
void binary_elementwise(kernel_context& ctx, int64_t grain, const F& f) {
  binary_broadcast<T, R>(ctx, grain,
                         [&](R* o, const T* a, bool va, const T* b, bool vb, int64_t n) {
                           binary_run(o, a, va, b, vb, n, f);
                         });
}

/// Maps input 0 (dtype T, flat) to a new output 0 of dtype R and the same shape;
/// seg(const T* in, R* out, n) fills one contiguous segment.
template <class T, class R, class Seg>
void unary_map(kernel_context& ctx, int64_t grain, const Seg& seg) {
  const tensor& x = ctx.input(0);
  tensor& out = ctx.reuse_or_allocate_output(0, 0, dtype_of<R>(), x.dims());
  const int64_t n = x.num_elements();
  if (n == 0) return;
  const T* px = x.data<T>();
  R* po = out.mutable_data<R>();
  parallel_for(n, grain, [&](int64_t b, int64_t e) { seg(px + b, po + b, e - b); });
}

/// Elements per block of packet_seg: a whole number of SIMD packets.
template <class T>
inline constexpr int64_t simd_block = 4 * Eigen::internal::packet_traits<T>::size;

/// Whether any of x[0, simd_block) lies outside [lo, hi] or is NaN, a packet at a
/// time (a scalar loop with a bool result did not vectorize: 3x slower than exp).
template <class T>
bool any_outside(const T* x, T lo, T hi) {
  namespace ei = Eigen::internal;
  using packet = typename ei::packet_traits<T>::type;
  const packet plo = ei::pset1<packet>(lo), phi = ei::pset1<packet>(hi);
  packet out = ei::pzero(plo);
  for (int64_t k = 0; k < simd_block<T>; k += ei::packet_traits<T>::size) {
    const packet v = ei::ploadu<packet>(x + k);
    out = ei::por(out, ei::por(ei::pcmp_lt_or_nan(v, plo), ei::pcmp_lt(phi, v)));
  }
  return ei::predux_any(out);
}

/// A segment function from run(x, y), which fills y[0, simd_block) from x: whole
/// blocks in place, the tail through a block padded with ones (inside every range).
template <class T, class Run>
auto block_seg(Run run) {
  return [run](const T* in, T* out, int64_t n) {
    constexpr int64_t B = simd_block<T>;
    int64_t i = 0;
    for (; i + B <= n; i += B) run(in + i, out + i);
    if (i == n) return;
    alignas(64) T x[B];
    alignas(64) T y[B];
    std::fill(std::copy(in + i, in + n, x), x + B, T(1));
    run(x, y);
    std::copy(y, y + (n - i), out + i);
  };
}

/// A segment function from an Eigen array expression f(x) (an expression of x), run
/// a fixed-size block at a time so that every element, the tail's too, takes Eigen's
/// SIMD path (a fixed-size map, aligned or not, is evaluated with packets only). Over
/// a dynamic-size map Eigen does the unaligned head and the tail with the scalar std::
/// function, which differs from the packet one in the last bits and at special
/// values: an element's result then depended on the tensor's size and on where a
/// thread's chunk began.
template <class T, class F>
auto packet_seg(F f) {
  using block = Eigen::Array<T, simd_block<T>, 1>;
  return block_seg<T>([f](const T* x, T* y) {
    Eigen::Map<block> out(y);  // in place is fine: each packet is read before written
    out = f(Eigen::Map<const block>(x));
  });
}

/// packet_seg for a function whose packet path is right only for inputs in [lo, hi]:
/// the others and NaN get exact(x) (Eigen's fast functions flush denormal results to
/// 0, give exp(-inf) = 5.6e-309 in float64, ...). Blocks without such an input,
/// nearly all, pay a vectorized compare.
template <class T, class F, class Exact>
auto packet_seg(F f, T lo, T hi, Exact exact) {
  using block = Eigen::Array<T, simd_block<T>, 1>;
  return block_seg<T>([f, lo, hi, exact](const T* x, T* y) {
    if (!any_outside(x, lo, hi)) {
      Eigen::Map<block> out(y);
      out = f(Eigen::Map<const block>(x));
      return;
    }
    alignas(64) T fast[simd_block<T>];  // x may be y: keep x until the fixups have read it
    Eigen::Map<block> out(fast);
    out = f(Eigen::Map<const block>(x));
    for (int64_t k = 0; k < simd_block<T>; ++k)
      y[k] = x[k] >= lo && x[k] <= hi ? fast[k] : exact(x[k]);
  });
}

/// A segment function from a scalar function f(T) -> R (simple enough to auto-vectorize).
template <class T, class R = T, class F>
auto scalar_seg(F f) {
  return [f](const T* __restrict in, R* __restrict out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<R>(f(in[i]));
  };
}

/// Integer arithmetic that wraps (two's complement) instead of overflowing into UB.
template <class T, bool = std::is_integral_v<T> && !std::is_same_v<T, bool>>
struct wrap {
  using type = T;
};
template <class T>
struct wrap<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using wrap_t = typename wrap<T>::type;

}  // namespace actorflow::math_detail
