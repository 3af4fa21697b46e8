// cluster_options::transfer_precision: float32 tensors crossing between real
// processes as bfloat16 (half the bytes), rounded as cast rounds, and only
// float32 ones; the partitions carry bfloat16 recvs between the casts.
#include <doctest/doctest.h>

#include <limits>

#include "actors/compile/partition.hpp"
#include "actors/session.hpp"
#include "cluster_fixture.hpp"
#include "ops/math.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;
using actorflow::testing::test_cluster;

namespace {

float rounded(float v) { return to_float(to_bfloat16(v)); }

struct ps_model {
  output x, n, y, m;
};

// y = 3x and m = n + n on the ps task, fed and fetched by the client (worker 0).
ps_model build(graph& g) {
  ps_model s;
  s.x = placeholder(g, dtype::float32, {5}, "x");
  s.n = placeholder(g, dtype::int32, {2}, "n");
  auto on_ps = g.device_scope("/job:ps/task:0");
  s.y = mul(s.x, scalar(g, 3.0f), "y");
  s.m = add(s.n, s.n, "m");
  return s;
}

const std::vector<float> xs{1.0f, 1.00390625f, 0.1f, -3e38f, 1e-40f};

TEST_CASE("float32 values cross between tasks as bfloat16 when transfer_precision says so") {
  test_cluster c;
  auto ps = c.start("ps", 0);
  graph g;
  auto s = build(g);
  feed_list feeds{{s.x, tensor::from_vector<float>(xs)},
                  {s.n, tensor::from_vector<int32_t>({7, -(1 << 30)})}};

  session exact(g, c.connect());
  auto e = exact.run(feeds, {s.y, s.m});
  cluster_options options;
  options.transfer_precision = dtype::bfloat16;
  session narrow(g, c.connect(options));
  auto r = narrow.run(feeds, {s.y, s.m});

  REQUIRE(r[0].type() == dtype::float32);  // widened back on arrival
  for (size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(xs[i]);
    CHECK(e[0].data<float>()[i] == 3.0f * xs[i]);
    // x rounded on its way to the ps, y on its way back.
    CHECK(r[0].data<float>()[i] == rounded(3.0f * rounded(xs[i])));
  }
  CHECK(r[0].data<float>()[1] == 3.0f);  // 1 + 2^-8 is a tie: it rounds to 1
  // int32 crosses as it is.
  CHECK(r[1].to_vector<int32_t>() == std::vector<int32_t>{14, std::numeric_limits<int32_t>::min()});
  CHECK(r[1].equals(e[1]));
}

TEST_CASE("the partitions narrow float32 cut edges only, with a cast on each side") {
  graph g;
  auto s = build(g);
  run_signature sig;
  sig.feeds = {s.x.ref(), s.n.ref()};
  sig.fetches = {s.y.ref(), s.m.ref()};
  auto parts = partition_graph(g, sig, "/job:worker/task:0", dtype::bfloat16);
  REQUIRE(parts.parts.size() == 2);
  int narrowed = 0, exact = 0;
  for (auto& p : parts.parts)
    for (auto& n : p.g->nodes()) {
      if (n.op != "recv") continue;
      const dtype t = get_attr<dtype>(n.attrs, "dtype", "recv");
      if (t == dtype::bfloat16) {
        ++narrowed;
        CHECK(p.g->find(n.name + "/widen")->op == "cast");
      } else {
        ++exact;
        CHECK(t == dtype::int32);
      }
    }
  CHECK(narrowed == 2);  // x to the ps, y back
  CHECK(exact == 2);     // n and m
  // float32 (the default) keeps every edge as it is.
  for (auto& p : partition_graph(g, sig, "/job:worker/task:0").parts)
    for (auto& n : p.g->nodes()) CHECK(n.op != "cast");
  // Other dtypes are refused when the connection is made.
  cluster_options bad;
  bad.transfer_precision = dtype::int32;
  test_cluster c;
  CHECK(error_of([&] { c.connect(bad); }) ==
        "[cluster] transfer_precision must be float32 or bfloat16, got int32");
}

}  // namespace
