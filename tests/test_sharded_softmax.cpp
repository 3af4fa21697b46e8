// Softmax layers over weights and biases split by rows (ops/embedding.hpp): sampled_softmax_loss
// over partitioned tables and sharded_softmax_cross_entropy (ops/sharded_softmax.hpp). Each
// equals its computation on the whole tables, losses and gradients, for both partition
// strategies and 1 to 3 shards; the sharded softmax keeps its work beside the shards.
#include <doctest/doctest.h>

#include <cmath>

#include "actors/session.hpp"
#include "core/device_name.hpp"
#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/embedding.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/sampled_softmax.hpp"
#include "ops/sharded_softmax.hpp"
#include "ops/softmax.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::contains;
using actorflow::testing::error_of;

namespace {

constexpr int64_t kClasses = 7, kDim = 3, kBatch = 5;

// Deterministic values in about [-1, 1].
tensor values(shape dims, float scale, float phase) {
  std::vector<float> v(static_cast<size_t>(dims.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.7f * float(i) + phase);
  return tensor::from_vector(v, dims);
}

tensor int64s(const std::vector<int64_t>& v) {
  return tensor::from_vector(v, shape{static_cast<int64_t>(v.size())});
}

// Rows `rows` of a [n, cols] (or [n]) float tensor, in that order.
std::vector<float> rows_of(const tensor& t, const std::vector<int64_t>& rows) {
  const int64_t cols = t.rank() == 2 ? t.dims()[1] : 1;
  std::vector<float> out;
  for (auto r : rows)
    for (int64_t c = 0; c < cols; ++c) out.push_back(t.data<float>()[r * cols + c]);
  return out;
}

void check_close(const tensor& got, const std::vector<float>& want, double tolerance) {
  auto g = got.to_vector<float>();
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    CHECK_MESSAGE(std::isfinite(g[i]), "element " << i);
    CHECK_MESSAGE(std::abs(g[i] - want[i]) <= tolerance * (1 + std::abs(want[i])),
                  "element " << i << ": " << g[i] << " vs " << want[i]);
  }
}

// Whole weights and biases beside the same values split into `shards` by `strategy`, inputs
// [batch, dim] fed at run time, and the gradients of sum(loss * row_weights) for each.
struct tables {
  graph g;
  variable w, b;
  partitioned_variable pw, pb;
  output x, row_weights;
  tables(int shards, partition_strategy strategy, const std::vector<std::string>& devices = {}) {
    auto w0 = constant(g, values({kClasses, kDim}, 1.0f, 0.3f), "w0");
    auto b0 = constant(g, values({kClasses}, 0.5f, 1.1f), "b0");
    w = make_variable(w0, "w");
    b = make_variable(b0, "b");
    pw = make_partitioned_variable(w0, shards, "pw", devices, strategy);
    pb = make_partitioned_variable(b0, shards, "pb", devices, strategy);
    x = placeholder(g, dtype::float32, {-1, kDim}, "x");
    row_weights = constant(g, tensor::from_vector<float>({0.7f, -1.3f, 0.4f, 1.0f, 0.2f}));
  }
  // d/d(x, w, b) of the dense loss, then d/d(x, pw shards..., pb shards...) of the split one.
  std::pair<std::vector<output>, std::vector<output>> grads(output dense, output split) {
    auto dense_grads = gradients({reduce_sum(dense * row_weights)}, {x, w, b});
    std::vector<output> xs = {x};
    for (auto& s : pw.shards) xs.push_back(s);
    for (auto& s : pb.shards) xs.push_back(s);
    return {dense_grads, gradients({reduce_sum(split * row_weights)}, xs)};
  }
};

// Runs both losses and their gradients; checks the split ones against the dense ones (each
// shard's gradient against the rows of the dense gradient it holds).
void check_same(tables& t, output dense, output split, const feed_list& feeds, double tolerance) {
  auto [dense_grads, split_grads] = t.grads(dense, split);
  session s(t.g);
  s.run({global_variables_initializer(t.g)});
  std::vector<output> fetches = {dense, split};
  fetches.insert(fetches.end(), dense_grads.begin(), dense_grads.end());
  fetches.insert(fetches.end(), split_grads.begin(), split_grads.end());
  auto got = s.run(feeds, fetches);
  const tensor &dx = got[2], &dw = got[3], &db = got[4];
  check_close(got[1], got[0].to_vector<float>(), tolerance);  // the losses
  check_close(got[5], dx.to_vector<float>(), tolerance);
  const auto shards = static_cast<size_t>(t.pw.num_shards());
  for (size_t k = 0; k < shards; ++k) {
    CAPTURE(k);
    auto held = t.pw.rows_of_shard(static_cast<int>(k));
    check_close(got[6 + k], rows_of(dw, held), tolerance);
    check_close(got[6 + shards + k], rows_of(db, held), tolerance);
  }
}

const std::vector<partition_strategy> kStrategies = {partition_strategy::div,
                                                     partition_strategy::mod};

}  // namespace

TEST_CASE("sampled_softmax_loss over partitioned tables equals it over the whole tables") {
  for (auto strategy : kStrategies)
    for (int shards : {1, 2, 3}) {
      CAPTURE(std::string(partition_strategy_name(strategy)));
      CAPTURE(shards);
      tables t(shards, strategy);
      // Sampled classes on every shard; label 4 is also sampled (an accidental hit).
      candidate_sample s{constant(t.g, int64s({4, 2, 5})),
                         constant(t.g, tensor::from_vector<float>({0.3f, 0.2f, 0.5f, 0.4f, 0.25f},
                                                                  shape{kBatch, 1})),
                         constant(t.g, tensor::from_vector<float>({0.2f, 0.4f, 0.1f}))};
      auto labels = constant(t.g, tensor::from_vector<int64_t>({1, 4, 0, 6, 3}, shape{kBatch, 1}));
      auto dense = sampled_softmax_loss(t.w, t.b, labels, t.x, s, kClasses);
      auto split = sampled_softmax_loss(t.pw, t.pb, labels, t.x, s, kClasses);
      // Each shard's gradient is the gather adjoint of its rows: row updates.
      auto [dense_grads, split_grads] = t.grads(dense, split);
      for (size_t k = 1; k < split_grads.size(); ++k)
        CHECK(split_grads[k].node().op == "scatter_add_like");
      check_same(t, dense, split, {{t.x, values({kBatch, kDim}, 1.0f, 0.0f)}}, 1e-6);
    }
}

TEST_CASE("sharded_softmax_cross_entropy equals the full softmax on the whole tables") {
  for (auto strategy : kStrategies)
    for (int shards : {1, 2, 3}) {
      for (float scale : {1.0f, 50.0f}) {  // 50: logits in the hundreds stay finite
        CAPTURE(std::string(partition_strategy_name(strategy)));
        CAPTURE(shards);
        CAPTURE(scale);
        tables t(shards, strategy);
        // Labels on every shard, one repeated; int32 labels work too.
        auto labels = constant(t.g, tensor::from_vector<int32_t>({6, 0, 3, 3, 5}));
        auto logits = matmul(t.x, t.w, false, true) + t.b;
        auto dense = sparse_softmax_cross_entropy_with_logits(logits, labels).loss;
        auto split = sharded_softmax_cross_entropy(t.pw, t.pb, t.x, labels);
        CHECK(split.dims() == shape{kBatch});  // the labels know the batch
        check_same(t, dense, split, {{t.x, values({kBatch, kDim}, scale, 0.0f)}}, 1e-5);
      }
    }
}

TEST_CASE("sharded_softmax_cross_entropy: a label outside the classes fails the run") {
  tables t(2, partition_strategy::mod);
  auto labels = placeholder(t.g, dtype::int64, {-1}, "labels");
  auto loss = sharded_softmax_cross_entropy(t.pw, t.pb, t.x, labels);
  session s(t.g);
  s.run({global_variables_initializer(t.g)});
  auto e = error_of([&] {
    s.run({{t.x, values({2, kDim}, 1, 0)}, {labels, int64s({1, 7})}}, {loss});
  });
  CHECK_MESSAGE(contains(e, "id 7 (at position 1) is out of range for a variable of 7 rows"), e);
}

namespace {

bool on_ps(const node& n) { return device_name::parse(n.device).job == "ps"; }

}  // namespace

TEST_CASE("sharded_softmax_cross_entropy works beside each shard; [batch] values leave it") {
  const std::vector<std::string> ps = {"/job:ps/task:0", "/job:ps/task:1"};
  for (auto strategy : kStrategies) {
    CAPTURE(std::string(partition_strategy_name(strategy)));
    tables t(2, strategy, ps);
    auto on_worker = t.g.device_scope("/job:worker/task:0");
    auto labels = placeholder(t.g, dtype::int64, {-1}, "labels");
    auto loss = sharded_softmax_cross_entropy(t.pw, t.pb, t.x, labels, "xent");
    std::vector<output> xs = {t.x, t.pw.shards[0], t.pw.shards[1], t.pb.shards[0]};
    auto grads = gradients({reduce_sum(loss)}, xs);
    const graph& g = t.g;
    // Every node of shard k's part, forward ("xent/shard_k/...") and backward
    // ("gradients/xent/shard_k/..."), runs on shard k's task: its matmul, its log-sum-exp.
    int shard_nodes = 0;
    for (auto& n : g.nodes())
      for (size_t k = 0; k < 2; ++k)
        if (contains(n.name, "xent/shard_" + std::to_string(k) + "/")) {
          CHECK_MESSAGE(n.device == ps[k], n.name << " (" << n.op << ") on " << n.device);
          ++shard_nodes;
        }
    CHECK(shard_nodes > 20);
    // The gradients of W_k are matmuls on W_k's task; b_k's a reduction there.
    CHECK(grads[1].node().op == "matmul");
    CHECK(grads[1].node().device == ps[0]);
    CHECK(grads[2].node().device == ps[1]);
    CHECK(grads[3].node().device == ps[0]);
    // What crosses from the ps tasks to the worker: per-example values [batch], and in the
    // backward pass d(inputs) [batch, dim] from each shard's gradient matmul.
    int batch_edges = 0, dx_edges = 0;
    for (auto& n : g.nodes()) {
      if (on_ps(n)) continue;
      for (auto& in : n.inputs) {
        const node& from = g.at(in.node);
        if (!on_ps(from)) continue;
        const shape& dims = from.outputs[static_cast<size_t>(in.index)].dims;
        CAPTURE(from.name);
        CAPTURE(n.name);
        if (dims == shape{-1}) {
          ++batch_edges;
        } else {
          CHECK(dims == shape{-1, kDim});
          CHECK(from.op == "matmul");
          CHECK(contains(from.name, "gradients/"));
          ++dx_edges;
        }
      }
    }
    CHECK(batch_edges >= 4);  // each shard's log-sum-exp and true logit
    CHECK(dx_edges == 2);
  }
}

TEST_CASE("sharded_softmax_cross_entropy: bad arguments are clear errors") {
  tables t(2, partition_strategy::div);
  auto labels = placeholder(t.g, dtype::int64, {-1});
  auto float_labels = placeholder(t.g, dtype::float32, {4});
  CHECK_THROWS_WITH(sharded_softmax_cross_entropy(t.pw, t.pb, t.x, float_labels),
                    doctest::Contains("labels must be int32 or int64 [batch], got float32(4)"));
  auto x5 = placeholder(t.g, dtype::float32, {4, 5});
  CHECK_THROWS_WITH(sharded_softmax_cross_entropy(t.pw, t.pb, x5, labels),
                    doctest::Contains("inputs (4,5) and weights (7,3) disagree on dim"));
  auto xd = placeholder(t.g, dtype::float64, {4, 3});
  CHECK_THROWS_WITH(sharded_softmax_cross_entropy(t.pw, t.pb, xd, labels),
                    doctest::Contains("inputs must be float32 [batch, dim], got float64(4,3)"));
  auto x4 = placeholder(t.g, dtype::float32, {4, 3});
  auto short_labels = placeholder(t.g, dtype::int64, {3});
  CHECK_THROWS_WITH(sharded_softmax_cross_entropy(t.pw, t.pb, x4, short_labels),
                    doctest::Contains("labels (3) and inputs (4,3) disagree on batch"));
  auto b6 = make_partitioned_variable(constant(t.g, values({6}, 1, 0)), 2, "b6");
  CHECK_THROWS_WITH(sharded_softmax_cross_entropy(t.pw, b6, t.x, labels),
                    doctest::Contains("weights (7,3) and biases (6) must have the same rows"));
  auto b_mod = make_partitioned_variable(constant(t.g, values({7}, 1, 0)), 2, "b_mod", {},
                                         partition_strategy::mod);
  CHECK_THROWS_WITH(sharded_softmax_cross_entropy(t.pw, b_mod, t.x, labels),
                    doctest::Contains("weights (2 shards, split by div) and biases (2 shards, "
                                      "split by mod) must be split alike"));
  auto b3 = make_partitioned_variable(constant(t.g, values({7}, 1, 0)), 3, "b3");
  CHECK_THROWS_WITH(sharded_softmax_cross_entropy(t.pw, b3, t.x, labels),
                    doctest::Contains("biases (3 shards, split by div)"));
  // The partitioned sampled softmax checks the same.
  auto l2 = placeholder(t.g, dtype::int64, {-1, 1});
  candidate_sample s{constant(t.g, int64s({1})), constant(t.g, values({1, 1}, 1, 0)),
                     constant(t.g, values({1}, 1, 0))};
  CHECK_THROWS_WITH(sampled_softmax_loss(t.pw, b6, l2, t.x, s, 7),
                    doctest::Contains("partitioned weights (7,3) and biases (6) must have the "
                                      "same rows"));
  CHECK_THROWS_WITH(sampled_softmax_loss(t.pw, b_mod, l2, t.x, s, 7),
                    doctest::Contains("partitioned weights (split by div) and biases (split by "
                                      "mod) must share a partition strategy"));
  CHECK_THROWS_WITH(sampled_softmax_loss(t.pw, t.pb, l2, x5, s, 7),
                    doctest::Contains("disagree on dim"));
}
