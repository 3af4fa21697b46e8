// GCC 12 reports false "may be used uninitialized" warnings inside its own AVX-512 intrinsics
// as Eigen's GEMM kernels inline them; the state of this pragma at the intrinsics' location
// is what counts, so it comes before any include.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "ops/linalg.hpp"

#include <immintrin.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "devices/cpu/gemm_library.hpp"
#include "ops/epilogue.hpp"
#include "ops/geometry/matmul_batch.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"

namespace actorflow {

namespace {

// ---------------------------------------------------------------------------------------------
// GEMM

template <class T>
using const_rows =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
               Eigen::OuterStride<>>;
template <class T>
using mutable_rows = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                                0, Eigen::OuterStride<>>;

// One product for rows [r0, r1) and columns [c0, c1) of c = op(a) x op(b), on this thread,
// written from `block` on with rows ldc apart: the CPU GEMM library's for floats where one was
// built in (devices/cpu/gemm_library.hpp), Eigen's otherwise. The operands are strided views
// into the full matrices; a transposed operand is a transposed view (both libraries pack either
// storage order, so nothing is copied to transpose).
template <class T>
void product_into(const T* a, const T* b, T* block, int64_t ldc, int64_t m, int64_t n, int64_t k,
                  bool ta, bool tb, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t rows = r1 - r0, cols = c1 - c0;
  if constexpr (std::is_same_v<T, float>)
    if (cpu::library_sgemm(ta, tb, rows, cols, k, ta ? a + r0 : a + r0 * k, ta ? m : k,
                           tb ? b + c0 * k : b + c0, tb ? k : n, block, ldc))
      return;
  mutable_rows<T> out(block, rows, cols, Eigen::OuterStride<>(ldc));
  if (!ta) {
    const_rows<T> lhs(a + r0 * k, rows, k, Eigen::OuterStride<>(k));
    if (!tb) {
      const_rows<T> rhs(b + c0, k, cols, Eigen::OuterStride<>(n));
      out.noalias() = lhs * rhs;
    } else {
      const_rows<T> rhs(b + c0 * k, cols, k, Eigen::OuterStride<>(k));
      out.noalias() = lhs * rhs.transpose();
    }
  } else {
    const_rows<T> lhs(a + r0, k, rows, Eigen::OuterStride<>(m));
    if (!tb) {
      const_rows<T> rhs(b + c0, k, cols, Eigen::OuterStride<>(n));
      out.noalias() = lhs.transpose() * rhs;
    } else {
      const_rows<T> rhs(b + c0 * k, cols, k, Eigen::OuterStride<>(k));
      out.noalias() = lhs.transpose() * rhs.transpose();
    }
  }
}

// The block of c itself.
template <class T>
void product_block(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                   int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  product_into(a, b, c + r0 * n + c0, n, m, n, k, ta, tb, r0, r1, c0, c1);
}

// Rows [r0, r1) and columns [c0, c1) of a bfloat16 product, on this thread. The products sum in
// float32 and round to bfloat16 once at the end, as TensorFlow's CPU kernels do: oneDNN's
// bfloat16 GEMM (AMX / AVX512_BF16) where it is built in and on, else Eigen's float product of
// the block's operands converted to float32.
void product_block(const bfloat16* a, const bfloat16* b, bfloat16* c, int64_t m, int64_t n,
                   int64_t k, bool ta, bool tb, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t rows = r1 - r0, cols = c1 - c0;
  // Per thread and kept: a block's float32 result (and operands) are allocated once.
  thread_local std::vector<float> acc, fa, fb;
  acc.resize(static_cast<size_t>(rows * cols));
  if (!cpu::library_gemm_bf16(ta, tb, rows, cols, k, ta ? a + r0 : a + r0 * k, ta ? m : k,
                              tb ? b + c0 * k : b + c0, tb ? k : n, acc.data(), cols)) {
    // The block's operands, packed densely in their own storage order.
    fa.resize(static_cast<size_t>(rows * k));
    fb.resize(static_cast<size_t>(k * cols));
    if (!ta)
      bfloat16_to_float(a + r0 * k, fa.data(), rows * k);
    else
      for (int64_t p = 0; p < k; ++p) bfloat16_to_float(a + p * m + r0, fa.data() + p * rows, rows);
    if (tb)
      bfloat16_to_float(b + c0 * k, fb.data(), cols * k);
    else
      for (int64_t p = 0; p < k; ++p) bfloat16_to_float(b + p * n + c0, fb.data() + p * cols, cols);
    product_block<float>(fa.data(), fb.data(), acc.data(), rows, cols, k, ta, tb, 0, rows, 0, cols);
  }
  for (int64_t r = 0; r < rows; ++r)
    float_to_bfloat16(acc.data() + r * cols, c + (r0 + r) * n + c0, cols);
}

// A fused op's epilogue over a block of its product (the fused ops take float32 and float64).
template <class T>
void apply_epilogue(const epilogue<T>& ep, T* c, int64_t rows, int64_t cols, int64_t ldc,
                    int64_t col0) {
  if constexpr (!std::is_same_v<T, bfloat16>) ep.apply(c, rows, cols, ldc, col0);
}

// The block, then a fused op's epilogue over it while it is in cache.
template <class T>
void gemm_block(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                int64_t r0, int64_t r1, int64_t c0, int64_t c1, const epilogue<T>& ep) {
  const int64_t rows = r1 - r0, cols = c1 - c0;
  product_block(a, b, c, m, n, k, ta, tb, r0, r1, c0, c1);
  apply_epilogue(ep, c + r0 * n + c0, rows, cols, n, c0);
}

#if defined(__AVX512F__)
// A small float product without packing: c = a x b, row-major, neither transposed. Eigen's GEMM
// packs both operands into panels on every call, which for a 64^3 product (a loop body's matmul)
// costs a third of the time; here rows of c are built in registers directly from rows of a and
// b: each tile of R rows by NV 16-float vectors keeps R x NV accumulators, and each step over k
// loads NV vectors of b's row once for the R rows. Each element is a plain FMA sum over k in
// order.
template <int R, int NV>
void small_gemm_tile(const float* a, const float* b, float* c, int64_t n, int64_t k,
                     __mmask16 last_mask) {
  // Fully unrolled, so that the accumulators live in registers (GCC spills
  // them to the stack otherwise).
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = v + 1 == NV ? _mm512_maskz_loadu_ps(last_mask, b + p * n + 16 * v)
                          : _mm512_loadu_ps(b + p * n + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(a[r * k + p]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (v + 1 == NV)
        _mm512_mask_storeu_ps(c + r * n + 16 * v, last_mask, acc[r][v]);
      else
        _mm512_storeu_ps(c + r * n + 16 * v, acc[r][v]);
    }
}

// Rows [0, m) of c for the columns [0, cols) of a tile of at most 64.
template <int NV>
void small_gemm_columns(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                        int64_t cols) {
  const int64_t tail = cols - 16 * (NV - 1);
  const __mmask16 mask = static_cast<__mmask16>(tail >= 16 ? 0xFFFF : (1u << tail) - 1);
  constexpr int rows = 6;  // 6 x 4 accumulators and 4 of b: 28 of the 32 registers
  int64_t i = 0;
  for (; i + rows <= m; i += rows) small_gemm_tile<rows, NV>(a + i * k, b, c + i * n, n, k, mask);
  for (; i < m; ++i) small_gemm_tile<1, NV>(a + i * k, b, c + i * n, n, k, mask);
}

void small_gemm(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k) {
  for (int64_t j = 0; j < n; j += 64) {
    const int64_t cols = std::min<int64_t>(64, n - j);
    switch ((cols + 15) / 16) {
      case 1:
        small_gemm_columns<1>(a, b + j, c + j, m, n, k, cols);
        break;
      case 2:
        small_gemm_columns<2>(a, b + j, c + j, m, n, k, cols);
        break;
      case 3:
        small_gemm_columns<3>(a, b + j, c + j, m, n, k, cols);
        break;
      default:
        small_gemm_columns<4>(a, b + j, c + j, m, n, k, cols);
        break;
    }
  }
}
#endif

// Up to this many multiply-adds in all, the whole product runs as one call on the calling thread:
// measured on 2 cores, splitting a 64^3 product is slower than one call and 96^3 gains little
// (waking a worker costs microseconds), while 128^3 gains 1.3-1.6x.
constexpr double serial_work = 96.0 * 96.0 * 96.0;
// Blocks are kept at least this large: each Eigen call packs its panels anew, so many small
// blocks would spend their time packing.
constexpr double min_block_work = 32.0 * 64.0 * 64.0;
// From this many matrices per thread on, whole matrices are the unit of work.
constexpr int64_t batch_only_factor = 4;
// Blocks per thread when a matrix is split: a little more than one evens out the load when a
// thread of the arena is late.
constexpr int64_t blocks_per_thread = 2;

// How batched_gemm splits a product of a batch: into `parts` blocks along the
// columns of c, or along its rows when the output is taller than wide (so the smaller
// operand is the one each block packs again); one part where the whole batch is small.
struct block_plan {
  bool serial = false;  // each product in one call, on the calling thread
  bool split_cols = false;
  int64_t dim = 0, align = 1, parts = 1;

  // Where block p starts (p == parts: the end).
  int64_t bound(int64_t p) const {
    if (p >= parts) return dim;
    int64_t x = dim * p / parts;
    return std::min(dim, (x + align - 1) / align * align);
  }
};

block_plan plan_blocks(int64_t batch, int64_t m, int64_t n, int64_t k, size_t element_size) {
  block_plan plan;
  const double work = double(m) * double(n) * double(k);
  // The runtime's arena has slots for joining scheduler threads beyond its
  // compute threads; blocks are planned for the threads the cores can run.
  const int64_t threads =
      std::min(tbb::this_task_arena::max_concurrency(), tbb::info::default_concurrency());
  plan.serial = threads <= 1 || work * double(batch) <= serial_work;
  plan.split_cols = n >= m;
  plan.dim = plan.split_cols ? n : m;
  // Column blocks start on a 64-byte boundary (whole SIMD registers); row blocks on 8 rows.
  plan.align = plan.split_cols ? std::max<int64_t>(1, 64 / int64_t(element_size)) : 8;
  if (!plan.serial && batch < batch_only_factor * threads) {
    // Enough blocks that batch * parts divides evenly among the threads.
    int64_t parts = threads / std::gcd(batch, threads) * blocks_per_thread;
    parts = std::min(parts, std::max<int64_t>(1, plan.dim / plan.align));
    plan.parts = std::min(parts, std::max<int64_t>(1, int64_t(work / min_block_work)));
  }
  return plan;
}

// c[i] = op(a[i]) x op(b[i]) for i < batch, where {a[i], b[i]} = {a, b} + offsets(i) in elements
// (a broadcast batch reads one matrix for several i), in the blocks plan_blocks gives.
template <class T, class Offsets>
void batched_gemm(const T* a, const T* b, T* c, int64_t batch, const Offsets& offsets, int64_t m,
                  int64_t n, int64_t k, bool ta, bool tb, const epilogue<T>& ep = {}) {
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + batch * m * n, T(0));
    for (int64_t i = 0; i < batch; ++i) apply_epilogue(ep, c + i * m * n, m, n, n, 0);
    return;
  }
  const double work = double(m) * double(n) * double(k);
  const block_plan plan = plan_blocks(batch, m, n, k, sizeof(T));
  if (plan.serial) {
    for (int64_t i = 0; i < batch; ++i) {
      const auto [ao, bo] = offsets(i);
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>)
        if (!ta && !tb && work <= serial_work) {  // one thread may still get a large one
          small_gemm(a + ao, b + bo, c + i * m * n, m, n, k);
          apply_epilogue(ep, c + i * m * n, m, n, n, 0);
          continue;
        }
#endif
      gemm_block(a + ao, b + bo, c + i * m * n, m, n, k, ta, tb, 0, m, 0, n, ep);
    }
    return;
  }
  const int64_t parts = plan.parts;
  const int64_t tasks = batch * parts;
  const int64_t grain = parts > 1 ? 1 : std::max<int64_t>(1, int64_t(min_block_work / work));
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, tasks, grain),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t t = r.begin(); t < r.end(); ++t) {
          const int64_t i = t / parts, p = t % parts;
          const int64_t lo = plan.bound(p), hi = plan.bound(p + 1);
          if (lo >= hi) continue;
          const auto [ao, bo] = offsets(i);
          const T* ai = a + ao;
          const T* bi = b + bo;
          T* ci = c + i * m * n;
          if (plan.split_cols)
            gemm_block(ai, bi, ci, m, n, k, ta, tb, 0, m, lo, hi, ep);
          else
            gemm_block(ai, bi, ci, m, n, k, ta, tb, lo, hi, 0, n, ep);
        }
      },
      tbb::simple_partitioner());
}

// ---------------------------------------------------------------------------------------------
// matmul

struct matmul_geometry {
  std::vector<int64_t> batch;  // the output's batch dims (empty for rank 2)
  int64_t m = 0, n = 0, k = 0;
};

std::string flags_note(bool ta, bool tb) {
  if (ta && tb) return " (transpose_a, transpose_b)";
  if (ta) return " (transpose_a)";
  if (tb) return " (transpose_b)";
  return "";
}

std::string operands_of(const shape& a, const shape& b, bool ta, bool tb) {
  return a.to_string() + " x " + b.to_string() + flags_note(ta, tb);
}

// Merges two dims that must agree; -1 (unknown) yields to a known dim.
int64_t merge_dim(int64_t x, int64_t y) { return x < 0 ? y : x; }

// Validates a x b and computes the output geometry; dims may be unknown (-1) at build time.
// Batch dims broadcast (geometry/matmul_batch.hpp), as in TensorFlow's BatchMatMulV2.
matmul_geometry matmul_shapes(const shape& a, const shape& b, bool ta, bool tb) {
  if (a.rank() < 2 || b.rank() < 2)
    fail("matmul", "expects inputs of rank >= 2, got " + operands_of(a, b, ta, tb));
  matmul_geometry g;
  g.batch = geometry::matmul_batch_dims(a, b, operands_of(a, b, ta, tb));
  g.m = ta ? a.dim(-1) : a.dim(-2);
  const int64_t ka = ta ? a.dim(-2) : a.dim(-1);
  const int64_t kb = tb ? b.dim(-1) : b.dim(-2);
  g.n = tb ? b.dim(-2) : b.dim(-1);
  if (ka >= 0 && kb >= 0 && ka != kb)
    fail("matmul", "inner dimensions differ: " + operands_of(a, b, ta, tb));
  g.k = merge_dim(ka, kb);
  return g;
}

bool is_matmul_type(dtype t) {
  return t == dtype::float32 || t == dtype::float64 || t == dtype::bfloat16 || t == dtype::int32 ||
         t == dtype::int64;
}

const char* matmul_types = "float32, float64, bfloat16, int32 or int64";

std::vector<tensor_spec> matmul_infer(const shape_context& c) {
  auto& a = c.inputs[0];
  auto& b = c.inputs[1];
  if (a.type != b.type)
    c.fail("operands have different dtypes: " + a.to_string() + " x " + b.to_string());
  if (!is_matmul_type(a.type))
    c.fail(std::string("expects ") + matmul_types + ", got " + dtype_name(a.type));
  auto g = matmul_shapes(a.dims, b.dims, c.attr_or<bool>("transpose_a", false),
                         c.attr_or<bool>("transpose_b", false));
  auto dims = g.batch;
  dims.push_back(g.m);
  dims.push_back(g.n);
  return {{a.type, shape(std::move(dims))}};
}

// The product of concrete operands into out, its matrices read where the plan says.
template <class T>
void run_matmul(const tensor& a, const tensor& b, tensor& out, const matmul_geometry& g,
                const geometry::matmul_batch_plan& plan, bool ta, bool tb) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = out.mutable_data<T>();
  if (plan.runs() == 1 && plan.a_step == 1 && plan.b_step == 0 && !ta) {
    // a's matrices in order against one b: one [batch * M, K] x [K, N] product.
    auto shared = [](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; };
    batched_gemm(pa, pb, pc, 1, shared, plan.count * g.m, g.n, g.k, false, tb);
    return;
  }
  const int64_t a_size = g.m * g.k, b_size = g.k * g.n;
  auto offsets = [&](int64_t i) {
    return std::pair<int64_t, int64_t>{plan.a_index(i) * a_size, plan.b_index(i) * b_size};
  };
  batched_gemm(pa, pb, pc, plan.count, offsets, g.m, g.n, g.k, ta, tb);
}

void matmul_kernel(kernel_context& ctx, bool ta, bool tb) {
  const tensor& a = ctx.input(0);
  const tensor& b = ctx.input(1);
  if (a.type() != b.type())
    ctx.fail(std::string("operands have different dtypes: ") + dtype_name(a.type()) + " x " +
             dtype_name(b.type()));
  auto g = matmul_shapes(a.dims(), b.dims(), ta, tb);
  auto plan =
      geometry::plan_matmul_batch(a.dims(), b.dims(), operands_of(a.dims(), b.dims(), ta, tb));
  auto dims = g.batch;
  dims.push_back(g.m);
  dims.push_back(g.n);
  tensor& out = ctx.allocate_output(0, a.type(), shape(dims));
  switch (a.type()) {
    case dtype::float32:
      return run_matmul<float>(a, b, out, g, plan, ta, tb);
    case dtype::float64:
      return run_matmul<double>(a, b, out, g, plan, ta, tb);
    case dtype::int32:
      return run_matmul<int32_t>(a, b, out, g, plan, ta, tb);
    case dtype::int64:
      return run_matmul<int64_t>(a, b, out, g, plan, ta, tb);
    case dtype::bfloat16:
      return run_matmul<bfloat16>(a, b, out, g, plan, ta, tb);
    default:
      ctx.fail(std::string("expects ") + matmul_types + ", got " + dtype_name(a.type()));
  }
}

// ---------------------------------------------------------------------------------------------
// bias_add, bias_add_grad

std::vector<tensor_spec> bias_add_infer(const shape_context& c) {
  auto& v = c.inputs[0];
  auto& bias = c.inputs[1];
  if (v.type != bias.type)
    c.fail("value and bias have different dtypes: " + v.to_string() + " and " + bias.to_string());
  if (v.type == dtype::boolean) c.fail("bool is not a numeric type");
  if (v.dims.rank() < 1) c.fail("value must have rank >= 1, got " + v.dims.to_string());
  if (bias.dims.rank() != 1) c.fail("bias must be 1-D, got " + bias.dims.to_string());
  int64_t last = v.dims.dim(-1);
  if (last >= 0 && bias.dims[0] >= 0 && last != bias.dims[0])
    c.fail("bias " + bias.dims.to_string() + " does not match the last dimension of value " +
           v.dims.to_string());
  tensor_spec out = v;
  out.dims[out.dims.rank() - 1] = merge_dim(last, bias.dims[0]);
  return {out};
}

void bias_add_kernel(kernel_context& ctx) {
  const tensor& v = ctx.input(0);
  const tensor& bias = ctx.input(1);
  if (v.type() != bias.type() || v.rank() < 1 || bias.rank() != 1 ||
      v.dims().dim(-1) != bias.dims()[0])
    ctx.fail("bias " + tensor_spec{bias.type(), bias.dims()}.to_string() +
             " does not match value " + tensor_spec{v.type(), v.dims()}.to_string());
  tensor& out = ctx.allocate_output(0, v.type(), v.dims());
  const int64_t cols = bias.num_elements();
  if (cols == 0) return;
  const int64_t rows = v.num_elements() / cols;
  visit_numeric(v.type(), "bias_add", [&](auto tag) {
    using T = decltype(tag);
    using vec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    using mvec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
    const T* src = v.data<T>();
    T* dst = out.mutable_data<T>();
    vec b(bias.data<T>(), cols);
    parallel_for(rows, std::max<int64_t>(1, parallel_grain / cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) mvec(dst + r * cols, cols) = vec(src + r * cols, cols) + b;
    });
  });
}

std::vector<tensor_spec> bias_add_grad_infer(const shape_context& c) {
  auto& dy = c.inputs[0];
  if (dy.type == dtype::boolean) c.fail("bool is not a numeric type");
  if (dy.dims.rank() < 1) c.fail("dy must have rank >= 1, got " + dy.dims.to_string());
  return {{dy.type, shape{dy.dims.dim(-1)}}};
}

// Sums rows in fixed chunks (independent of the thread count), then adds the chunk sums in
// order, so the result is the same however the work was split.
void bias_add_grad_kernel(kernel_context& ctx) {
  const tensor& dy = ctx.input(0);
  if (dy.rank() < 1) ctx.fail("dy must have rank >= 1, got " + dy.dims().to_string());
  const int64_t cols = dy.dims().dim(-1);
  tensor& out = ctx.allocate_output(0, dy.type(), shape{cols});
  visit_numeric(dy.type(), "bias_add_grad", [&](auto tag) {
    using T = decltype(tag);
    using array = Eigen::Array<T, Eigen::Dynamic, 1>;
    using vec = Eigen::Map<const array>;
    auto sum = out.mutable_flat<T>();
    sum.setZero();
    if (cols == 0) return;
    const int64_t rows = dy.num_elements() / cols;
    const T* src = dy.data<T>();
    const int64_t chunk_rows = std::max<int64_t>(1, parallel_grain / cols);
    const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    if (chunks <= 1) {
      for (int64_t r = 0; r < rows; ++r) sum += vec(src + r * cols, cols);
      return;
    }
    std::vector<array> partial(static_cast<size_t>(chunks));
    tbb::parallel_for(int64_t{0}, chunks, [&](int64_t ch) {
      array& acc = partial[static_cast<size_t>(ch)];
      acc.setZero(cols);
      const int64_t end = std::min(rows, (ch + 1) * chunk_rows);
      for (int64_t r = ch * chunk_rows; r < end; ++r) acc += vec(src + r * cols, cols);
    });
    for (auto& p : partial) sum += p;
  });
}

// ---------------------------------------------------------------------------------------------
// fused_matmul (made by the graph optimizer, actors/compile/graph_optimizer.hpp)

// The bias of a fused op: 1-D, the output's last dim, the operands' dtype.
void check_fused_bias(const std::string& op, const tensor_spec& bias, const tensor_spec& out) {
  if (bias.type != out.type)
    fail(op, "bias " + bias.to_string() + " differs in dtype from the product " + out.to_string());
  const int64_t cols = out.dims.dim(-1);
  if (bias.dims.rank() != 1 || (bias.dims[0] >= 0 && cols >= 0 && bias.dims[0] != cols))
    fail(op, "bias " + bias.to_string() + " does not match the product " + out.to_string());
}

std::vector<tensor_spec> fused_matmul_infer(const shape_context& c) {
  if (c.inputs[0].dims.rank() != 2 || c.inputs[1].dims.rank() != 2)
    c.fail("expects matrices, got " + c.inputs[0].to_string() + " x " + c.inputs[1].to_string());
  auto out = matmul_infer(c);
  if (!is_floating(out[0].type)) c.fail("expects float operands, got " + out[0].to_string());
  check_fused_bias(c.op, c.inputs[2], out[0]);
  parse_activation(c.attr<std::string>("activation"), c.op);
  return out;
}

void fused_matmul_kernel(kernel_context& ctx, bool ta, bool tb, activation act) {
  const tensor &a = ctx.input(0), &b = ctx.input(1), &bias = ctx.input(2);
  if (a.type() != b.type() || a.rank() != 2 || b.rank() != 2)
    ctx.fail("expects two matrices of one dtype, got " + operands_of(a.dims(), b.dims(), ta, tb));
  auto g = matmul_shapes(a.dims(), b.dims(), ta, tb);
  check_fused_bias(ctx.op, {bias.type(), bias.dims()}, {a.type(), shape{g.m, g.n}});
  tensor& out = ctx.allocate_output(0, a.type(), shape{g.m, g.n});
  visit_floating(a.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    auto one = [](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; };
    batched_gemm(a.data<T>(), b.data<T>(), out.mutable_data<T>(), 1, one, g.m, g.n, g.k, ta, tb,
                 epilogue<T>{bias.data<T>(), act});
  });
}

// The transposes (and a fused product's activation) are read once per node.
kernel_fn make_matmul_kernel(const attr_map& attrs) {
  bool ta = get_attr_or<bool>(attrs, "transpose_a", "matmul", false);
  bool tb = get_attr_or<bool>(attrs, "transpose_b", "matmul", false);
  return [ta, tb](kernel_context& ctx) { matmul_kernel(ctx, ta, tb); };
}

kernel_fn make_fused_matmul_kernel(const attr_map& attrs) {
  bool ta = get_attr_or<bool>(attrs, "transpose_a", "fused_matmul", false);
  bool tb = get_attr_or<bool>(attrs, "transpose_b", "fused_matmul", false);
  activation act =
      parse_activation(get_attr<std::string>(attrs, "activation", "fused_matmul"), "fused_matmul");
  return [ta, tb, act](kernel_context& ctx) { fused_matmul_kernel(ctx, ta, tb, act); };
}

// Whether an operand's batch dims are known to be the output's: then its
// gradient needs no sum over broadcast matrices.
bool same_batch(const shape& x, const shape& out) {
  if (x.rank() != out.rank()) return false;
  for (int i = 0; i < x.rank() - 2; ++i)
    if (x[i] < 0 || x[i] != out[i]) return false;
  return true;
}

// d(a b) = dy b^T and a^T dy, with the transpose flags folded into the
// products so that nothing is transposed in memory.
void matmul_grad(grad_context& c) {
  bool ta = c.attr_or<bool>("transpose_a", false), tb = c.attr_or<bool>("transpose_b", false);
  auto a = c.input(0), b = c.input(1), dy = c.grad();
  if (!ta && !tb)
    c.input_grads = {matmul(dy, b, false, true), matmul(a, dy, true, false)};
  else if (!ta && tb)
    c.input_grads = {matmul(dy, b), matmul(dy, a, true, false)};
  else if (ta && !tb)
    c.input_grads = {matmul(b, dy, false, true), matmul(a, dy)};
  else
    c.input_grads = {matmul(b, dy, true, true), matmul(dy, a, true, true)};
  // An operand whose batch dims broadcast gets the sum over the matrices that
  // shared it, in its own shape (TensorFlow's BatchMatMulV2 gradient).
  for (size_t i = 0; i < 2; ++i)
    if (!same_batch(c.input(i).dims(), dy.dims()))
      c.input_grads[i] = sum_to_shape_of(c.input_grads[i], c.input(i));
}

const op_registrar registrations[] = {
    op_registrar({.name = "matmul",
                  .num_inputs = 2,
                  .infer = matmul_infer,
                  .make_kernel = make_matmul_kernel,
                  .expensive = true,
                  .summary = "matrix product over the last two dims, batched over the rest",
                  .gradient = matmul_grad}),
    op_registrar({.name = "bias_add",
                  .num_inputs = 2,
                  .infer = bias_add_infer,
                  .kernel = bias_add_kernel,
                  .summary = "adds a 1-D bias along the last dim",
                  .gradient =
                      [](grad_context& c) {
                        c.input_grads = {c.grad(), bias_add_grad(c.grad())};
                      }}),
    op_registrar({.name = "bias_add_grad",
                  .num_inputs = 1,
                  .infer = bias_add_grad_infer,
                  .kernel = bias_add_grad_kernel,
                  .summary = "sums over all but the last dim (the gradient of bias_add)",
                  .not_differentiable = true}),
    op_registrar({.name = "fused_matmul",
                  .num_inputs = 3,
                  .infer = fused_matmul_infer,
                  .make_kernel = make_fused_matmul_kernel,
                  .expensive = true,
                  .summary = "act(a x b + bias) on matrices, made by the graph optimizer after "
                             "gradients are built (so it has none of its own)",
                  .not_differentiable = true}),
};

}  // namespace

template <class T>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool transpose_a,
          bool transpose_b) {
  gemm(a, b, c, m, n, k, transpose_a, transpose_b, epilogue<T>{});
}

template <class T>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool transpose_a,
          bool transpose_b, const epilogue<T>& ep) {
  auto one = [](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; };
  batched_gemm(a, b, c, 1, one, m, n, k, transpose_a, transpose_b, ep);
}

template void gemm<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, bool,
                          bool);
template void gemm<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, bool, bool,
                          const epilogue<float>&);

std::vector<int64_t> gemm_row_blocks(int64_t m, int64_t n, int64_t k) {
  const block_plan plan = plan_blocks(1, m, n, k, sizeof(float));
  if (plan.serial) return {0, m};
  if (plan.split_cols) return {};
  std::vector<int64_t> bounds;
  for (int64_t p = 0; p <= plan.parts; ++p)
    if (bounds.empty() || plan.bound(p) > bounds.back()) bounds.push_back(plan.bound(p));
  return bounds;
}

void gemm_rows(const float* a, const float* b, float* rows, int64_t m, int64_t n, int64_t k,
               bool transpose_a, bool transpose_b, int64_t r0, int64_t r1) {
#if defined(__AVX512F__)
  // The product gemm runs unblocked, by its small kernel (batched_gemm's choice).
  if (!transpose_a && !transpose_b && double(m) * double(n) * double(k) <= serial_work)
    return small_gemm(a + r0 * k, b, rows, r1 - r0, n, k);
#endif
  product_into(a, b, rows, n, m, n, k, transpose_a, transpose_b, r0, r1, 0, n);
}
template void gemm<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, bool,
                           bool);
template void gemm<int32_t>(const int32_t*, const int32_t*, int32_t*, int64_t, int64_t, int64_t,
                            bool, bool);
template void gemm<int64_t>(const int64_t*, const int64_t*, int64_t*, int64_t, int64_t, int64_t,
                            bool, bool);

output matmul(output a, output b, bool transpose_a, bool transpose_b, const std::string& name) {
  return make_op("matmul", {a, b}, {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}},
                 name);
}

output bias_add(output value, output bias, const std::string& name) {
  return make_op("bias_add", {value, bias}, {}, name);
}

output bias_add_grad(output dy, const std::string& name) {
  return make_op("bias_add_grad", {dy}, {}, name);
}

}  // namespace actorflow
