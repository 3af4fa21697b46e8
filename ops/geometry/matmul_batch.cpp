#include "ops/geometry/matmul_batch.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace actorflow::geometry {

namespace {

// x's batch dims right-aligned to `rank` dims, the missing leading ones as 1.
std::vector<int64_t> aligned_batch(const shape& x, size_t rank) {
  std::vector<int64_t> d(rank, 1);
  const auto own = static_cast<size_t>(x.rank() - 2);
  for (size_t i = 0; i < own; ++i) d[rank - own + i] = x[static_cast<int>(i)];
  return d;
}

std::string batch_string(const shape& x) {
  const auto& d = x.dims();
  return shape(std::vector<int64_t>(d.begin(), d.end() - 2)).to_string();
}

// x's stride in matrices along each batch dim of the output; 0 where x broadcasts.
std::vector<int64_t> matrix_strides(const std::vector<int64_t>& x,
                                    const std::vector<int64_t>& batch) {
  std::vector<int64_t> s(x.size(), 0);
  int64_t stride = 1;
  for (size_t i = x.size(); i-- > 0;) {
    s[i] = x[i] == 1 && batch[i] != 1 ? 0 : stride;
    stride *= x[i];
  }
  return s;
}

// Whether an operand with stride s along a dim keeps the run's fixed step: it either
// advances through the whole run (s == run) or repeats one matrix (s == 0). step is
// -1 while no dim of the run has decided it.
bool keeps_step(int64_t s, int64_t run, int64_t& step) {
  const int64_t want = s == 0 ? 0 : 1;
  if ((step >= 0 && step != want) || (want == 1 && s != run)) return false;
  step = want;
  return true;
}

}  // namespace

std::vector<int64_t> matmul_batch_dims(const shape& a, const shape& b,
                                       const std::string& operands) {
  const auto rank = static_cast<size_t>(std::max(a.rank(), b.rank()) - 2);
  const auto da = aligned_batch(a, rank), db = aligned_batch(b, rank);
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = da[i], y = db[i];
    if (x == y || y == 1)
      out[i] = x;  // also ? vs 1: unknown
    else if (x == 1 || x == shape::unknown)
      out[i] = y;  // ? vs 5 is 5: a valid graph has ? = 1 or 5
    else if (y == shape::unknown)
      out[i] = x;
    else
      fail("matmul", "batch dimensions " + batch_string(a) + " and " + batch_string(b) +
                         " do not broadcast: " + operands);
  }
  return out;
}

matmul_batch_plan plan_matmul_batch(const shape& a, const shape& b, const std::string& operands) {
  matmul_batch_plan p;
  p.batch = matmul_batch_dims(a, b, operands);
  p.count = shape(p.batch).num_elements();
  if (p.count == 0) {
    p.run = 0;
    return p;
  }
  const size_t rank = p.batch.size();
  const auto sa = matrix_strides(aligned_batch(a, rank), p.batch);
  const auto sb = matrix_strides(aligned_batch(b, rank), p.batch);
  // The run: the innermost batch dims over which both operands keep a fixed step.
  size_t inner = rank;
  p.a_step = p.b_step = -1;
  for (; inner > 0; --inner) {
    const size_t i = inner - 1;
    if (p.batch[i] == 1) continue;
    if (!keeps_step(sa[i], p.run, p.a_step) || !keeps_step(sb[i], p.run, p.b_step)) break;
    p.run *= p.batch[i];
  }
  p.a_step = std::max<int64_t>(p.a_step, 0);
  p.b_step = std::max<int64_t>(p.b_step, 0);
  // Each run's first matrices: an odometer over the outer dims [0, inner).
  std::vector<int64_t> idx(inner, 0);
  int64_t a0 = 0, b0 = 0;
  for (int64_t r = 0; r < p.runs(); ++r) {
    p.a_start.push_back(a0);
    p.b_start.push_back(b0);
    for (size_t d = inner; d-- > 0;) {
      a0 += sa[d];
      b0 += sb[d];
      if (++idx[d] < p.batch[d]) break;
      a0 -= sa[d] * p.batch[d];
      b0 -= sb[d] * p.batch[d];
      idx[d] = 0;
    }
  }
  return p;
}

}  // namespace actorflow::geometry
