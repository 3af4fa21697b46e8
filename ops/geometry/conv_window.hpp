// Window geometry shared by the convolution and pooling families, CPU and
// CUDA (NHWC, TensorFlow semantics): attribute parsing for strides / ksize /
// padding and TensorFlow's exact output-size and padding arithmetic.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/attr.hpp"
#include "core/shape.hpp"

namespace actorflow::conv_detail {

inline std::string list_to_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

/// Reads a spatial pair attribute ("strides", "ksize"): [h, w] or TF's [1, h, w, 1].
inline std::array<int64_t, 2> spatial_pair(const attr_map& attrs, const std::string& name,
                                           const std::string& op) {
  auto v = get_attr<std::vector<int64_t>>(attrs, name, op);
  bool ok = false;
  std::array<int64_t, 2> hw{0, 0};
  if (v.size() == 2) {
    hw = {v[0], v[1]};
    ok = true;
  } else if (v.size() == 4 && v[0] == 1 && v[3] == 1) {
    hw = {v[1], v[2]};
    ok = true;
  }
  if (!ok || hw[0] < 1 || hw[1] < 1)
    fail(op,
         name + " must be [h, w] or [1, h, w, 1] with positive h and w, got " + list_to_string(v));
  return hw;
}

/// Reads "padding": true for "SAME", false for "VALID".
inline bool same_padding(const attr_map& attrs, const std::string& op) {
  auto p = get_attr<std::string>(attrs, "padding", op);
  if (p == "SAME") return true;
  if (p == "VALID") return false;
  fail(op, "padding must be \"SAME\" or \"VALID\", got \"" + p + "\"");
}

/// One spatial axis of a windowed op.
struct axis_window {
  int64_t out = shape::unknown;  // output size; unknown when the input size is
  int64_t pad_before = 0;        // padding on the top / left (the extra goes after)
};

/// TensorFlow's arithmetic: VALID out = ceil((in - k + 1) / s); SAME out = ceil(in / s)
/// with max((out - 1) * s + k - in, 0) padding, the odd one on the bottom / right.
/// `in` or `k` may be unknown (-1). Throws when a VALID window does not fit the input.
inline axis_window compute_axis(int64_t in, int64_t k, int64_t s, bool same, const std::string& op,
                                const std::string& what) {
  axis_window a;
  if (in < 0 || k < 0) return a;
  if (same) {
    a.out = (in + s - 1) / s;
    int64_t needed = std::max<int64_t>((a.out - 1) * s + k - in, 0);
    a.pad_before = needed / 2;
  } else {
    if (k > in) fail(op, what + " with VALID padding");
    a.out = (in - k) / s + 1;
  }
  return a;
}

/// Full geometry of a 2-D windowed op: input [n,h,w,c], window kh x kw, output [n,oh,ow,*].
struct geometry {
  int64_t n, h, w, c;
  int64_t kh, kw;
  int64_t sh, sw;
  int64_t oh, ow;
  int64_t pad_top, pad_left;
};

/// Geometry for input dims `in` (rank 4, dims may be unknown) and a kh x kw window.
/// `window_desc` names the window in the VALID error ("filter (5,5)", "ksize (3,3)").
inline geometry make_geometry(const shape& in, int64_t kh, int64_t kw, const attr_map& attrs,
                              const char* stride_attr, const std::string& op,
                              const std::string& window_desc) {
  auto st = spatial_pair(attrs, stride_attr, op);
  bool same = same_padding(attrs, op);
  std::string what = window_desc + " is larger than the input " + in.to_string();
  auto ah = compute_axis(in[1], kh, st[0], same, op, what);
  auto aw = compute_axis(in[2], kw, st[1], same, op, what);
  return {.n = in[0],
          .h = in[1],
          .w = in[2],
          .c = in[3],
          .kh = kh,
          .kw = kw,
          .sh = st[0],
          .sw = st[1],
          .oh = ah.out,
          .ow = aw.out,
          .pad_top = ah.pad_before,
          .pad_left = aw.pad_before};
}

}  // namespace actorflow::conv_detail
