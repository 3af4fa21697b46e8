// Array-op tests the case table cannot express: buffer sharing, build-time shape
// inference with unknown dims, kernels' own validation, and large inputs that
// take the parallel and tiled paths.
#include <numeric>

#include "core/graph.hpp"
#include "ops/array.hpp"
#include "ops/op_cases.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {
namespace {

using ints = std::vector<int64_t>;

tensor iota_f(shape dims) {
  tensor t(dtype::float32, dims);
  auto* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<float>(i);
  return t;
}

TEST_CASE("reshape, expand_dims, squeeze and trivial transposes share the buffer") {
  tensor x = iota_f({2, 3});
  auto r = run_kernel("reshape", {x}, {{"shape", ints{3, -1}}})[0];
  CHECK(r.shares_buffer_with(x));
  CHECK(r.dims() == shape{3, 2});
  auto e = run_kernel("expand_dims", {x}, {{"axis", int64_t{1}}})[0];
  CHECK(e.shares_buffer_with(x));
  CHECK(e.dims() == shape{2, 1, 3});
  auto s = run_kernel("squeeze", {e}, {})[0];
  CHECK(s.shares_buffer_with(x));
  CHECK(s.dims() == shape{2, 3});
  // Moving only a size-1 dim keeps the element order.
  auto t = run_kernel("transpose", {e}, {{"perm", ints{1, 0, 2}}})[0];
  CHECK(t.shares_buffer_with(x));
  CHECK(t.dims() == shape{1, 2, 3});
  auto t2 = run_kernel("transpose", {x}, {})[0];
  CHECK_FALSE(t2.shares_buffer_with(x));
}

TEST_CASE("array builders infer shapes with unknown dims") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 6}, "x");
  CHECK(reshape(x, {-1, 2, 3}).dims() == shape{-1, 2, 3});
  CHECK(reshape(x, {3, 4}).dims() == shape{3, 4});
  CHECK_THROWS_WITH_AS(reshape(x, {5, 5}), doctest::Contains("25 elements is not a multiple of 6"),
                       error);
  CHECK_THROWS_WITH_AS(reshape(x, {0, -1}), doctest::Contains("-1 is ambiguous"), error);
  CHECK(transpose(x).dims() == shape{6, -1});
  CHECK(expand_dims(x, -1).dims() == shape{-1, 6, 1});
  auto y = placeholder(g, dtype::float32, {-1, 1, 3}, "y");
  CHECK(squeeze(y, {1}).dims() == shape{-1, 3});
  CHECK(squeeze(y, {0}).dims() == shape{1, 3});  // checked again at run time
  CHECK_THROWS_WITH_AS(squeeze(y), doctest::Contains("name the axes to squeeze"), error);
  auto z = placeholder(g, dtype::float32, {-1, 2}, "z");
  CHECK(concat({x, z}, 1).dims() == shape{-1, 8});
  CHECK(concat({x, x}, 0).dims() == shape{-1, 6});
  CHECK_THROWS_WITH_AS(concat({x, reshape(x, {-1})}, 0), doctest::Contains("rank"), error);
  auto parts = split(x, 3, 1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].dims() == shape{-1, 2});
  CHECK(parts[1].name() == "split:1");
  auto sized = split_sizes(x, {-1, 4}, 1);
  CHECK(sized[0].dims() == shape{-1, 2});
  CHECK(split(x, 2, 0)[0].dims() == shape{-1, 6});
  CHECK(slice(x, {1, 2}, {-1, 3}).dims() == shape{-1, 3});
  CHECK(pad(x, {1, 1, 0, 2}).dims() == shape{-1, 8});
  CHECK(tile(x, {0, 2}).dims() == shape{0, 12});
  CHECK(tile(x, {2, 2}).dims() == shape{-1, 12});
  auto idx = placeholder(g, dtype::int64, {-1}, "idx");
  CHECK(gather(x, idx, 1).dims() == shape{-1, -1});
  auto oh = one_hot(idx, 10);
  CHECK(oh.type() == dtype::float32);
  CHECK(oh.dims() == shape{-1, 10});
  auto f = fill(g, {2, 3}, 1.5, dtype::float64);
  CHECK(f.type() == dtype::float64);
  CHECK(f.dims() == shape{2, 3});
  CHECK(zeros_like(x).dims() == shape{-1, 6});
  CHECK(ones_like(idx).type() == dtype::int64);
  auto sh = shape_of(x);  // only the rank is known at build time
  CHECK(sh.type() == dtype::int64);
  CHECK(sh.dims() == shape{2});
  CHECK(size(x).dims() == shape{});
  CHECK(broadcast_to(z, {4, 3, 2}).dims() == shape{4, 3, 2});
  auto like = placeholder(g, dtype::float32, {-1, -1}, "like");
  // An unknown target dim facing a known non-1 dim takes that size.
  CHECK(broadcast_like(x, like).dims() == shape{-1, 6});
  auto col = placeholder(g, dtype::float32, {-1, 1}, "col");
  CHECK_THROWS_WITH_AS(broadcast_like(x, col), doctest::Contains("cannot broadcast (?,6) to (?,1)"),
                       error);
  CHECK_THROWS_WITH_AS(broadcast_to(x, {-1, 6}), doctest::Contains("fully defined"), error);
}

TEST_CASE("array kernels validate what only shows at run time") {
  // squeeze of an axis that was unknown at build time.
  CHECK_THROWS_WITH_AS(
      run_kernel_only("squeeze", {tensor(dtype::float32, {2, 3})}, {{"axes", ints{0}}}),
      doctest::Contains("[squeeze] cannot squeeze axis 0 of size 2 in (2,3)"), error);
  CHECK_THROWS_WITH_AS(
      run_kernel_only("reshape", {tensor(dtype::float32, {5, 6})}, {{"shape", ints{3, 4}}}),
      doctest::Contains("[reshape] cannot reshape (5,6) (30 elements) to (3,4)"), error);
  CHECK_THROWS_WITH_AS(run_kernel_only("broadcast_like", {tensor(dtype::float32, {3}),
                                                          tensor(dtype::float32, {4, 2})}),
                       doctest::Contains("[broadcast_like] cannot broadcast (3) to (4,2)"), error);
  CHECK_THROWS_WITH_AS(
      run_kernel_only("concat", {tensor(dtype::float32, {2, 3}), tensor(dtype::float32, {2, 4})},
                      {{"axis", int64_t{0}}}),
      doctest::Contains("outside axis 0"), error);
  CHECK_THROWS_WITH_AS(run_kernel_only("slice", {tensor(dtype::float32, {2, 3})},
                                       {{"begin", ints{3, 0}}, {"size", ints{-1, -1}}}),
                       doctest::Contains("begin 3 is past the end of dim 0"), error);
  CHECK_THROWS_WITH_AS(
      run_kernel_only("split", {tensor(dtype::float32, {5})}, {{"num_splits", int64_t{2}}}),
      doctest::Contains("not divisible"), error);
  auto sh = run_kernel_only("shape", {tensor(dtype::float32, {7, 0, 2})});
  CHECK(sh[0].to_vector<int64_t>() == ints{7, 0, 2});
}

// out[i] = x[src_index(i)] for a dense out of `dims`, in row-major order.
template <class F>
std::vector<float> reference(const shape& dims, F src_value) {
  std::vector<float> out;
  std::vector<int64_t> idx(static_cast<size_t>(dims.rank()), 0);
  int64_t n = dims.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(src_value(idx));
    for (int k = dims.rank(); k-- > 0;)
      if (++idx[static_cast<size_t>(k)] < dims[k])
        break;
      else
        idx[static_cast<size_t>(k)] = 0;
  }
  return out;
}

int64_t offset(const std::vector<int64_t>& idx, const shape& dims) {
  int64_t o = 0;
  for (int k = 0; k < dims.rank(); ++k) o = o * dims[k] + idx[static_cast<size_t>(k)];
  return o;
}

TEST_CASE("large transposes match a reference (tiled and row paths)") {
  struct tcase {
    shape dims;
    ints perm;
  };
  for (auto& tc : std::vector<tcase>{{{300, 517}, {1, 0}},
                                     {{3, 70, 90, 5}, {0, 2, 1, 3}},
                                     {{20, 30, 40}, {2, 1, 0}},
                                     {{20, 30, 40}, {1, 2, 0}},
                                     {{64, 3, 100}, {2, 0, 1}}}) {
    INFO("dims " << tc.dims.to_string() << " perm " << tc.perm.size());
    tensor x = iota_f(tc.dims);
    auto out = run_kernel("transpose", {x}, {{"perm", tc.perm}})[0];
    std::vector<int64_t> od;
    for (auto p : tc.perm) od.push_back(tc.dims[static_cast<int>(p)]);
    auto expected = reference(shape(od), [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> src(i.size());
      for (size_t k = 0; k < i.size(); ++k) src[static_cast<size_t>(tc.perm[k])] = i[k];
      return static_cast<float>(offset(src, tc.dims));
    });
    CHECK(out.to_vector<float>() == expected);
  }
  // 8-byte and 1-byte elements take other tile kernels; edges not multiples of 8.
  tensor wide(dtype::int64, {37, 203});
  tensor narrow(dtype::uint8, {37, 203});
  for (int64_t i = 0; i < 37 * 203; ++i) {
    wide.mutable_data<int64_t>()[i] = i;
    narrow.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  }
  auto tw = run_kernel("transpose", {wide}, {})[0];
  auto tn = run_kernel("transpose", {narrow}, {})[0];
  for (int64_t r = 0; r < 203; ++r)
    for (int64_t c = 0; c < 37; ++c) {
      REQUIRE(tw.data<int64_t>()[r * 37 + c] == c * 203 + r);
      REQUIRE(tn.data<uint8_t>()[r * 37 + c] == static_cast<uint8_t>((c * 203 + r) * 7));
    }
}

TEST_CASE("large tile, slice, pad, concat, split, gather and broadcast match references") {
  tensor x = iota_f({130, 257});
  shape xd = x.dims();
  auto val = [&](int64_t r, int64_t c) { return static_cast<float>(r * 257 + c); };

  auto t = run_kernel("tile", {x}, {{"multiples", ints{2, 3}}})[0];
  CHECK(t.to_vector<float>() ==
        reference({260, 771}, [&](auto& i) { return val(i[0] % 130, i[1] % 257); }));

  auto s = run_kernel("slice", {x}, {{"begin", ints{5, 7}}, {"size", ints{100, -1}}})[0];
  CHECK(s.to_vector<float>() ==
        reference({100, 250}, [&](auto& i) { return val(i[0] + 5, i[1] + 7); }));

  auto p = run_kernel("pad", {x}, {{"paddings", ints{1, 2, 3, 4}}, {"value", -1.0}})[0];
  CHECK(p.to_vector<float>() == reference({133, 264}, [&](auto& i) {
          bool inside = i[0] >= 1 && i[0] < 131 && i[1] >= 3 && i[1] < 260;
          return inside ? val(i[0] - 1, i[1] - 3) : -1.0f;
        }));

  tensor y = iota_f({130, 250});
  auto c = run_kernel("concat", {x, y}, {{"axis", int64_t{1}}})[0];
  CHECK(c.dims() == shape{130, 507});
  CHECK(c.to_vector<float>() == reference({130, 507}, [&](auto& i) {
          return i[1] < 257 ? val(i[0], i[1]) : static_cast<float>(i[0] * 250 + i[1] - 257);
        }));

  auto parts = run_kernel("split", {c}, {{"axis", int64_t{1}}, {"sizes", ints{257, -1}}});
  CHECK(parts[0].equals(x));
  CHECK(parts[1].equals(y));

  std::vector<int32_t> idx(500);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>((i * 37) % 257);
  auto g = run_kernel("gather", {x, make<int32_t>({500}, idx)}, {{"axis", int64_t{1}}})[0];
  CHECK(g.to_vector<float>() ==
        reference({130, 500}, [&](auto& i) { return val(i[0], idx[static_cast<size_t>(i[1])]); }));

  auto b = run_kernel("broadcast_to", {x.reshaped({130, 1, 257})},
                      {{"shape", ints{2, 130, 40, 257}}})[0];
  CHECK(b.to_vector<float>() ==
        reference({2, 130, 40, 257}, [&](auto& i) { return val(i[1], i[3]); }));
}

}  // namespace
}  // namespace actorflow::testing
