#include "ops/geometry/reduce_plan.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ops/geometry/dims.hpp"

namespace actorflow {

std::vector<bool> reduced_dims(const shape& in, const std::vector<int64_t>& axes,
                               const std::string& op) {
  std::vector<bool> red(static_cast<size_t>(in.rank()), axes.empty());
  for (auto a : axes) {
    auto k = static_cast<size_t>(normalize_axis(a, in.rank(), op));
    if (red[k])
      fail(op, "duplicate axis " + std::to_string(a) + " in axes " + detail::list_to_string(axes));
    red[k] = true;
  }
  return red;
}

reduce_plan plan_reduction(const std::vector<int64_t>& dims, const std::vector<bool>& red) {
  reduce_plan p;
  for (size_t k = 0; k < dims.size(); ++k) (red[k] ? p.reduced_count : p.kept_count) *= dims[k];
  // The dims larger than 1, grouped into runs of kept and reduced dims.
  std::vector<int64_t> sizes;
  std::vector<bool> flags;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    if (!flags.empty() && flags.back() == red[k]) {
      sizes.back() *= dims[k];
    } else {
      sizes.push_back(dims[k]);
      flags.push_back(red[k]);
    }
  }
  p.reduces = std::find(flags.begin(), flags.end(), true) != flags.end();
  if (!p.reduces) return p;
  const size_t g = flags.size();
  // Runs alternate, so this is one of [R], [K R], [R K], [K R K].
  if (g <= 2 || (g == 3 && !flags[0])) {
    size_t r = flags[0] ? 0 : 1;
    for (size_t i = 0; i < r; ++i) p.outer *= sizes[i];
    p.reduced = sizes[r];
    for (size_t i = r + 1; i < g; ++i) p.inner *= sizes[i];
    return p;
  }
  // Kept runs first, then reduced runs: (O, R, 1) after one transposing copy.
  std::vector<int64_t> strides = detail::dense_strides(sizes);
  for (bool want_reduced : {false, true})
    for (size_t i = 0; i < g; ++i)
      if (flags[i] == want_reduced) {
        p.copy_dims.push_back(sizes[i]);
        p.copy_strides.push_back(strides[i]);
        (want_reduced ? p.reduced : p.outer) *= sizes[i];
      }
  return p;
}

}  // namespace actorflow
