// Gradients through a session checked against central finite differences
// (float64), for graphs the eager gradient check cannot run (control flow).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "actors/session.hpp"

namespace actorflow::testing {

/// d loss / d x at `at` (x fed with shape `dims`, the rest of `feeds` as given).
inline std::vector<double> numeric_gradient(session& s, const output& loss, const output& x,
                                            std::vector<double> at, feed_list feeds,
                                            shape dims = {}) {
  if (dims.rank() == 0 && at.size() != 1) dims = shape{static_cast<int64_t>(at.size())};
  std::vector<double> grad;
  const double eps = 1e-6;
  for (size_t i = 0; i < at.size(); ++i) {
    auto value = [&](double delta) {
      auto moved = at;
      moved[i] += delta;
      auto f = feeds;
      f.push_back({x, tensor::from_vector<double>(moved, dims)});
      return *s.run(f, {loss})[0].data<double>();
    };
    grad.push_back((value(eps) - value(-eps)) / (2 * eps));
  }
  return grad;
}

inline void check_close(const std::vector<double>& got, const std::vector<double>& want,
                        double tolerance = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::abs(got[i] - want[i]) <= tolerance * (1 + std::abs(want[i])),
                  "element " << i << ": analytic " << got[i] << ", numeric " << want[i]);
}

/// A tensor's float64 elements.
inline std::vector<double> values_of(const tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.num_elements());
}

}  // namespace actorflow::testing
