// Direct-loop references for conv2d's tests (conv_cases.cpp,
// conv_winograd_cases.cpp): a convolution described by conv_cfg, every
// multiply-add it makes, and its three results summed in float64.
#pragma once
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/op_cases.hpp"

namespace actorflow::testing {

inline attr_map conv_attrs(std::vector<int64_t> strides, std::string padding) {
  return {{"strides", std::move(strides)}, {"padding", std::move(padding)}};
}

struct conv_cfg {
  int64_t n, h, w, c, kh, kw, k, sh, sw;
  bool same;
};

struct ref_geometry {
  int64_t oh, ow, pt, pl;
};

inline ref_geometry ref_geom(const conv_cfg& c) {
  auto axis = [&](int64_t in, int64_t k, int64_t s, int64_t& out, int64_t& pad) {
    if (c.same) {
      out = (in + s - 1) / s;
      pad = std::max<int64_t>((out - 1) * s + k - in, 0) / 2;
    } else {
      out = (in - k) / s + 1;
      pad = 0;
    }
  };
  ref_geometry g{};
  axis(c.h, c.kh, c.sh, g.oh, g.pt);
  axis(c.w, c.kw, c.sw, g.ow, g.pl);
  return g;
}

// Calls f(x index, filter index, output index) for every multiply-add of the conv.
template <class F>
void for_each_tap(const conv_cfg& c, F&& f) {
  auto g = ref_geom(c);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t i = 0; i < c.kh; ++i)
          for (int64_t j = 0; j < c.kw; ++j) {
            int64_t iy = oy * c.sh - g.pt + i, ix = ox * c.sw - g.pl + j;
            if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
            for (int64_t ci = 0; ci < c.c; ++ci)
              for (int64_t co = 0; co < c.k; ++co)
                f(((n * c.h + iy) * c.w + ix) * c.c + ci, ((i * c.kw + j) * c.c + ci) * c.k + co,
                  ((n * g.oh + oy) * g.ow + ox) * c.k + co);
          }
}

template <class T>
tensor random_tensor(shape s, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  tensor t(dtype_of<T>(), s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<T>()[i] = T(u(rng));
  return t;
}

inline attr_map attrs_of(const conv_cfg& c) {
  return conv_attrs({c.sh, c.sw}, c.same ? "SAME" : "VALID");
}

inline shape out_shape(const conv_cfg& c) {
  auto g = ref_geom(c);
  return {c.n, g.oh, g.ow, c.k};
}

// conv2d's output and its two gradients for x, w and dy, summed in float64
// by direct loops.
template <class T>
std::array<std::vector<double>, 3> reference_sums(const conv_cfg& c, const tensor& x,
                                                  const tensor& w, const tensor& dy) {
  std::vector<double> y(dy.num_elements()), dx(x.num_elements()), dw(w.num_elements());
  const T *xp = x.data<T>(), *wp = w.data<T>(), *dyp = dy.data<T>();
  for_each_tap(c, [&](int64_t xi, int64_t wi, int64_t yi) {
    y[yi] += double(xp[xi]) * wp[wi];
    dx[xi] += double(dyp[yi]) * wp[wi];
    dw[wi] += double(dyp[yi]) * xp[xi];
  });
  return {std::move(y), std::move(dx), std::move(dw)};
}

template <class T>
void check_against_reference(const conv_cfg& c, double tol) {
  INFO("n,h,w,c=" << c.n << "," << c.h << "," << c.w << "," << c.c << " filter " << c.kh << "x"
                  << c.kw << "x" << c.k << " strides " << c.sh << "," << c.sw
                  << (c.same ? " SAME" : " VALID") << " " << dtype_name(dtype_of<T>()));
  std::mt19937 rng(99);
  auto attrs = attrs_of(c);
  tensor x = random_tensor<T>({c.n, c.h, c.w, c.c}, rng);
  tensor w = random_tensor<T>({c.kh, c.kw, c.c, c.k}, rng);
  tensor dy = random_tensor<T>(out_shape(c), rng);
  const auto [y, dx, dw] = reference_sums<T>(c, x, w, dy);
  auto expect = [&](const tensor& got, const std::vector<double>& want, const char* what) {
    REQUIRE(got.num_elements() == int64_t(want.size()));
    int bad = 0;
    for (size_t i = 0; i < want.size() && bad < 5; ++i)
      if (std::abs(double(got.data<T>()[i]) - want[i]) > tol * (1 + std::abs(want[i]))) {
        ++bad;
        FAIL_CHECK(what << " element " << i << ": " << got.data<T>()[i] << " vs " << want[i]);
      }
  };
  expect(run_kernel("conv2d", {x, w}, attrs)[0], y, "conv2d");
  expect(run_kernel("conv2d_backprop_input", {x, w, dy}, attrs)[0], dx, "backprop_input");
  expect(run_kernel("conv2d_backprop_filter", {x, w, dy}, attrs)[0], dw, "backprop_filter");
}

}  // namespace actorflow::testing
