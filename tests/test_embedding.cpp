// Variables split by rows and read with embedding_lookup (ops/embedding.hpp),
// in one process: the same values and the same training as one whole
// variable read with gather; clear errors; where the nodes are placed.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "actors/session.hpp"
#include "core/device_name.hpp"
#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/embedding.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/sync_replicas.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::contains;
using actorflow::testing::error_of;

namespace {

tensor table_values(int64_t rows, int64_t cols) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows * cols; ++i) v.push_back(0.01f * static_cast<float>(i) - 0.3f);
  return tensor::from_vector(v, shape{rows, cols});
}

// loss = sum((lookup(ids) - 1)^2), trained by SGD; `shards` = 0: one whole
// variable read with gather.
struct lookup_model {
  output ids, loss, table;
  operation init, train;
};

lookup_model build_lookup_model(graph& g, int shards,
                                partition_strategy strategy = partition_strategy::div) {
  lookup_model m;
  m.ids = placeholder(g, dtype::int64, {-1}, "ids");
  auto initial = constant(g, table_values(11, 4), "table_init");
  output rows;
  if (shards == 0) {
    auto whole = make_variable(initial, "table");
    rows = gather(whole, m.ids);
    m.table = whole.value();
  } else {
    auto parts = make_partitioned_variable(initial, shards, "table", {}, strategy);
    rows = embedding_lookup(parts, m.ids);
    m.table = parts.value();
  }
  m.loss = reduce_sum(square(sub(rows, scalar(g, 1.0f))));
  m.train = sgd(0.05).minimize(m.loss);
  m.init = global_variables_initializer(g);
  return m;
}

tensor ids_of(std::vector<int64_t> v) {
  auto n = static_cast<int64_t>(v.size());
  return tensor::from_vector(v, shape{n});
}

}  // namespace

TEST_CASE("rows are split evenly, the first shards taking one more") {
  CHECK(even_row_offsets(11, 3) == std::vector<int64_t>{0, 4, 8, 11});
  CHECK(even_row_offsets(4, 4) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(even_row_offsets(5, 1) == std::vector<int64_t>{0, 5});
  CHECK(error_of([] { even_row_offsets(2, 3); }).find("2 rows cannot fill 3 shards") !=
        std::string::npos);
  CHECK(error_of([] { even_row_offsets(2, 0); }).find("at least one shard") != std::string::npos);
}

TEST_CASE("embedding_lookup over shards equals gather over the whole variable") {
  graph g;
  auto table = constant(g, table_values(11, 4));
  auto parts = make_partitioned_variable(table, 3, "emb");
  REQUIRE(parts.num_shards() == 3);
  CHECK(parts.shards[0].dims() == shape{4, 4});
  CHECK(parts.shards[2].dims() == shape{3, 4});
  CHECK(parts.shards[1].name() == "emb/part_1");
  auto ids = placeholder(g, dtype::int32, {2, -1}, "ids");
  auto looked_up = embedding_lookup(parts, ids);
  CHECK(looked_up.dims() == shape{2, -1, 4});
  auto expected = gather(table, ids);
  auto scalar_id = embedding_lookup(parts, scalar(g, int64_t{9}));
  CHECK(scalar_id.dims() == shape{4});
  session s(g);
  s.run({parts.initializer()});
  // Repeated ids, every shard, one shard left out of the second batch.
  for (auto v : {std::vector<int32_t>{10, 0, 4, 4, 7, 3}, std::vector<int32_t>{1, 2}}) {
    auto n = static_cast<int64_t>(v.size());
    feed_list feeds = {{ids, tensor::from_vector(v, shape{2, n / 2})}};
    auto got = s.run(feeds, {looked_up, expected});
    CHECK(got[0].to_string() == got[1].to_string());
  }
  CHECK(s.eval(scalar_id).to_string() == s.eval(gather(table, scalar(g, int64_t{9}))).to_string());
  CHECK(s.eval(parts.value()).to_string() == s.eval(table).to_string());
  // An id past the end fails the step, naming it; the session goes on.
  auto e = error_of([&] {
    s.run({{ids, tensor::from_vector<int32_t>({1, 11}, shape{2, 1})}}, {looked_up});
  });
  CHECK_MESSAGE(e.find("id 11 (at position 1) is out of range for a variable of 11 rows") !=
                    std::string::npos,
                e);
  CHECK(s.run({{ids, tensor::from_vector<int32_t>({1, 2}, shape{2, 1})}}, {looked_up})[0].dims() ==
        shape{2, 1, 4});
}

TEST_CASE("training through embedding_lookup updates each shard as training the whole would") {
  for (auto strategy : {partition_strategy::div, partition_strategy::mod}) {
    CAPTURE(std::string(partition_strategy_name(strategy)));
    graph whole_graph, split_graph;
    auto whole = build_lookup_model(whole_graph, 0);
    auto split = build_lookup_model(split_graph, 3, strategy);
    session whole_session(whole_graph), split_session(split_graph);
    whole_session.run({whole.init});
    split_session.run({split.init});
    std::vector<std::vector<int64_t>> batches = {{0, 5, 10, 5}, {3, 4}, {8, 9, 10, 0, 0}};
    for (int step = 0; step < 6; ++step) {
      feed_list wf = {{whole.ids, ids_of(batches[static_cast<size_t>(step % 3)])}};
      feed_list sf = {{split.ids, ids_of(batches[static_cast<size_t>(step % 3)])}};
      auto a = whole_session.run(wf, {whole.loss}, {whole.train});
      auto b = split_session.run(sf, {split.loss}, {split.train});
      CHECK(a[0].item<float>() == b[0].item<float>());  // bit for bit
    }
    CHECK(whole_session.eval(whole.table).to_string() ==
          split_session.eval(split.table).to_string());
    // Rows no batch named (1, 2, 6, 7) kept their initial values.
    auto table = split_session.eval(split.table);
    CHECK(table.data<float>()[1 * 4] == doctest::Approx(0.01f * 4 - 0.3f));
  }
}

namespace {

// Rows `rows` of a [n, cols] float tensor, in that order.
std::vector<float> rows_of(const tensor& t, const std::vector<int64_t>& rows) {
  const int64_t cols = t.dims()[1];
  std::vector<float> out;
  for (auto r : rows)
    for (int64_t c = 0; c < cols; ++c) out.push_back(t.data<float>()[r * cols + c]);
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(got[i] == doctest::Approx(want[i]).epsilon(1e-6), "element " << i);
}

}  // namespace

TEST_CASE("mod: id i lives on shard i % K at row i / K") {
  const auto mod = partition_strategy::mod;
  for (int shards : {1, 2, 3}) {  // 11 rows: not divisible by 2 or 3
    CAPTURE(shards);
    graph g;
    auto table = constant(g, table_values(11, 4));
    auto parts = make_partitioned_variable(table, shards, "emb", {}, mod);
    CHECK(parts.strategy == mod);
    CHECK(parts.row_offsets == even_row_offsets(11, shards));
    for (int k = 0; k < shards; ++k) {
      std::vector<int64_t> held;
      for (int64_t i = k; i < 11; i += shards) held.push_back(i);
      CHECK(parts.rows_of_shard(k) == held);
      CHECK(parts.shards[static_cast<size_t>(k)].dims() ==
            shape{static_cast<int64_t>(held.size()), 4});
    }
    auto ids = placeholder(g, dtype::int64, {-1}, "ids");
    auto looked_up = embedding_lookup(parts, ids);
    // Gradients of a weighted sum, so that each row's gradient differs.
    auto weights = cast(reshape(range(size(looked_up)), {-1, 4}), dtype::float32);
    auto shard_grads = gradients({reduce_sum(looked_up * weights)},
                                 std::vector<output>(parts.shards.begin(), parts.shards.end()));
    auto whole = make_variable(table, "whole");
    auto dense_grad = gradients({reduce_sum(gather(whole, ids) * weights)}, {whole})[0];
    session s(g);
    s.run({global_variables_initializer(g)});
    const tensor initial = table_values(11, 4);
    CHECK(s.eval(parts.value()).to_string() == initial.to_string());
    for (int k = 0; k < shards; ++k)
      CHECK(s.eval(parts.shards[static_cast<size_t>(k)]).to_vector<float>() ==
            rows_of(initial, parts.rows_of_shard(k)));
    feed_list feeds = {{ids, ids_of({10, 0, 4, 4, 7, 3, 9, 1})}};
    std::vector<output> fetches = {looked_up, gather(table, ids), dense_grad};
    fetches.insert(fetches.end(), shard_grads.begin(), shard_grads.end());
    auto got = s.run(feeds, fetches);
    CHECK(got[0].to_string() == got[1].to_string());
    for (int k = 0; k < shards; ++k)
      check_close(got[3 + static_cast<size_t>(k)].to_vector<float>(),
                  rows_of(got[2], parts.rows_of_shard(k)));
    auto e = error_of([&] { s.run({{ids, ids_of({1, 11})}}, {looked_up}); });
    CHECK_MESSAGE(contains(e, "id 11 (at position 1) is out of range for a variable of 11 rows"),
                  e);
  }
}

TEST_CASE("mod: an initializer fills shard k with rows k, k + K, ...; too many shards fail") {
  graph g;
  auto parts = make_partitioned_variable(
      g, shape{7, 2}, 3, [](graph& gr, shape dims, int k) { return fill(gr, dims, k); }, "w", {},
      partition_strategy::mod);
  session s(g);
  s.run({parts.initializer()});
  auto v = s.eval(parts.value());
  CHECK(v.dims() == shape{7, 2});
  for (int64_t i = 0; i < 7; ++i) CHECK(v.data<float>()[i * 2] == static_cast<float>(i % 3));
  auto small = constant(g, table_values(2, 2));
  CHECK(contains(
      error_of([&] { make_partitioned_variable(small, 3, "t", {}, partition_strategy::mod); }),
      "2 rows cannot fill 3 shards"));
}

namespace {

int count_ops(const graph& g, const std::string& op) {
  return static_cast<int>(
      std::count_if(g.nodes().begin(), g.nodes().end(), [&](const node& n) { return n.op == op; }));
}

// loss = sum((lookup(ids) - 1)^2) over a 3-shard table, trained by `opt`.
// With dense_gradients, each gradient passes through an identity first, so
// that nothing sees its rows: the updates are dense and clipping measures the
// dense tensor (an independent reference for the rows' norm).
struct row_model {
  graph g;
  output ids, loss, table;
  operation init, train;
  explicit row_model(optimizer& opt, bool dense_gradients = false) {
    ids = placeholder(g, dtype::int64, {-1}, "ids");
    auto parts = make_partitioned_variable(constant(g, table_values(11, 4)), 3, "table");
    loss = reduce_sum(square(sub(embedding_lookup(parts, ids), scalar(g, 1.0f))));
    auto pairs = opt.compute_gradients(loss);
    if (dense_gradients)
      for (auto& pair : pairs) pair.first = identity(pair.first);
    train = opt.apply_gradients(pairs);
    init = global_variables_initializer(g);
    table = parts.value();
  }
};

}  // namespace

TEST_CASE("embedding shards are updated in the named rows only, exactly as the dense update") {
  // Repeated ids (their gradients add up), every shard, and a batch that
  // leaves shards out.
  std::vector<std::vector<int64_t>> batches = {{0, 5, 10, 5}, {3, 4}, {8, 9, 10, 0, 0}, {6, 6, 6}};
  auto dense_options = optimizer_options{};
  dense_options.row_updates = false;
  for (std::string name : {"sgd", "adagrad"}) {
    CAPTURE(name);
    auto by_rows = make_optimizer(name, 0.1);
    auto dense = make_optimizer(name, 0.1, dense_options);
    row_model a(*by_rows), b(*dense);
    CHECK(count_ops(a.g, "apply_" + name + "_rows") == 3);
    CHECK(count_ops(a.g, "apply_" + name) == 0);
    CHECK(count_ops(b.g, "apply_" + name) == 3);
    session sa(a.g), sb(b.g);
    sa.run({a.init});
    sb.run({b.init});
    for (size_t step = 0; step < 8; ++step) {
      auto ids = ids_of(batches[step % batches.size()]);
      auto la = sa.run({{a.ids, ids}}, {a.loss}, {a.train})[0].item<float>();
      auto lb = sb.run({{b.ids, ids}}, {b.loss}, {b.train})[0].item<float>();
      CHECK(la == lb);  // bit for bit
    }
    CHECK(sa.eval(a.table).to_string() == sb.eval(b.table).to_string());
  }
}

TEST_CASE("row updates are used where the optimizer has one and no weight decay moves every row") {
  // Momentum, Adam and RMSProp move rows the batch did not name (their slots decay).
  for (std::string name : {"momentum", "adam", "rmsprop"}) {
    auto opt = make_optimizer(name, 0.1);
    row_model m(*opt);
    CHECK_MESSAGE(count_ops(m.g, "apply_" + name) == 3, name);
  }
  // Lazy Adam updates rows by design.
  lazy_adam lazy(0.1);
  row_model l(lazy);
  CHECK(count_ops(l.g, "apply_adam_rows") == 3);
  CHECK(count_ops(l.g, "apply_adam") == 0);
  // Weight decay moves every row.
  optimizer_options decay;
  decay.weight_decay = 0.01;
  for (std::string name : {"sgd", "lazy_adam"}) {
    auto with_decay = make_optimizer(name, 0.1, decay);
    row_model d(*with_decay);
    std::string dense = name == "sgd" ? "apply_sgd" : "apply_adam";
    CHECK_MESSAGE(count_ops(d.g, dense) == 3, name);
    CHECK_MESSAGE(count_ops(d.g, dense + "_rows") == 0, name);
  }
  // Clipping's scale goes into the row update, and the norm is the rows'.
  optimizer_options clip;
  clip.clip_global_norm = 1.0;
  adagrad clipped(0.1, 0.1, 1e-10, clip);
  row_model c(clipped);
  CHECK(count_ops(c.g, "apply_adagrad_rows") == 3);
  CHECK(count_ops(c.g, "apply_adagrad") == 0);
  CHECK(count_ops(c.g, "l2_loss_rows") == 3);
  CHECK(count_ops(c.g, "l2_loss") == 0);
  for (auto& n : c.g.nodes())
    if (n.op == "apply_adagrad_rows") CHECK(n.inputs.size() == 5);
}

namespace {

// Every batch names each of the 11 rows, some twice.
const std::vector<std::vector<int64_t>> all_rows_batches = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 5, 0},
    {10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0},
    {3, 3, 0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 3}};

void check_near(const tensor& got, const tensor& want, double tolerance = 1e-6) {
  auto a = got.to_vector<float>(), b = want.to_vector<float>();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i)
    CHECK_MESSAGE(std::abs(double(a[i]) - double(b[i])) <= tolerance,
                  "element " << i << ": " << a[i] << " vs " << b[i]);
}

}  // namespace

TEST_CASE("lazy_adam equals dense Adam bit for bit where every row is named") {
  lazy_adam lazy(0.05);
  adam dense(0.05);
  row_model a(lazy), b(dense);
  CHECK(count_ops(a.g, "apply_adam_rows") == 3);
  CHECK(count_ops(b.g, "apply_adam") == 3);
  session sa(a.g), sb(b.g);
  sa.run({a.init});
  sb.run({b.init});
  for (size_t step = 0; step < 6; ++step) {
    auto ids = ids_of(all_rows_batches[step % all_rows_batches.size()]);
    auto la = sa.run({{a.ids, ids}}, {a.loss}, {a.train})[0].item<float>();
    auto lb = sb.run({{b.ids, ids}}, {b.loss}, {b.train})[0].item<float>();
    CHECK(la == lb);
  }
  CHECK(sa.eval(a.table).equals(sb.eval(b.table)));
}

TEST_CASE("lazy_adam moves the named rows by Adam's step and leaves the others, moments too") {
  graph g;
  const int64_t rows = 6, cols = 2;
  auto w = make_variable(constant(g, table_values(rows, cols)), "w");
  auto ids = placeholder(g, dtype::int32, {-1}, "ids");
  auto loss = reduce_sum(square(sub(gather(w.value(), ids), scalar(g, 1.0f))));
  const double lr = 0.1, b1 = 0.8, b2 = 0.95, eps = 1e-6;
  auto train = lazy_adam(lr, b1, b2, eps).minimize(loss);
  session s(g);
  s.run({global_variables_initializer(g)});
  // The reference in doubles: w, m and v move in the named rows only, with
  // the gradients of repeated ids summed; t counts the applies.
  auto init = table_values(rows, cols).to_vector<float>();
  std::vector<double> ref(init.begin(), init.end()), m(ref.size(), 0.0), v(ref.size(), 0.0);
  // Row 1 is named, left out, named again (its moments waited, undecayed);
  // row 3 is named twice at once; row 5 never.
  std::vector<std::vector<int32_t>> batches = {{1, 3, 3}, {0, 2}, {1, 4, 0, 1}, {2}};
  for (size_t step = 0; step < batches.size(); ++step) {
    CAPTURE(step);
    const auto& batch = batches[step];
    auto before = s.eval(w).to_vector<float>();
    s.run({{ids, tensor::from_vector(batch, shape{int64_t(batch.size())})}}, {}, {train});
    auto after = s.eval(w).to_vector<float>();
    const double t = double(step + 1);
    std::vector<double> grad(ref.size(), 0.0);
    std::vector<bool> named(rows, false);
    for (int32_t r : batch) {
      named[size_t(r)] = true;
      for (int64_t c = 0; c < cols; ++c) {
        size_t i = size_t(r * cols + c);
        grad[i] += 2 * (ref[i] - 1);
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        size_t i = size_t(r * cols + c);
        if (!named[size_t(r)]) {
          CHECK(after[i] == before[i]);
          continue;
        }
        m[i] = b1 * m[i] + (1 - b1) * grad[i];
        v[i] = b2 * v[i] + (1 - b2) * grad[i] * grad[i];
        ref[i] -=
            lr * (m[i] / (1 - std::pow(b1, t))) / (std::sqrt(v[i] / (1 - std::pow(b2, t))) + eps);
        CHECK(std::abs(after[i] - ref[i]) <= 1e-6);
      }
  }
  CHECK(s.eval(w).to_vector<float>()[5 * cols] == init[5 * cols]);
}

TEST_CASE("row updates with clipping equal the dense update with clipping, repeats summed") {
  // The dense reference measures the dense gradients (l2_loss), the row
  // updates their rows (l2_loss_rows, repeats summed first).
  std::vector<std::vector<int64_t>> batches = {{0, 5, 10, 5}, {3, 4}, {8, 9, 10, 0, 0}, {6, 6, 6}};
  optimizer_options clip;
  clip.clip_global_norm = 1.0;  // the gradients' norm is above 2: every step clips
  optimizer_options dense_clip = clip;
  dense_clip.row_updates = false;
  // lazy_adam equals dense Adam where every row is named.
  for (std::string name : {"sgd", "adagrad", "lazy_adam"}) {
    CAPTURE(name);
    const auto& feed = name == "lazy_adam" ? all_rows_batches : batches;
    auto by_rows = make_optimizer(name, 0.1, clip);
    auto dense = make_optimizer(name, 0.1, dense_clip);
    auto unclipped = make_optimizer(name, 0.1);
    row_model a(*by_rows), b(*dense, true), c(*unclipped);
    std::string update = name == "lazy_adam" ? "apply_adam" : "apply_" + name;
    CHECK(count_ops(a.g, update + "_rows") == 3);
    CHECK(count_ops(a.g, "l2_loss_rows") == 3);
    CHECK(count_ops(b.g, update) == 3);
    CHECK(count_ops(b.g, "l2_loss") == 3);
    session sa(a.g), sb(b.g), sc(c.g);
    sa.run({a.init});
    sb.run({b.init});
    sc.run({c.init});
    for (size_t step = 0; step < 6; ++step) {
      auto ids = ids_of(feed[step % feed.size()]);
      auto la = sa.run({{a.ids, ids}}, {a.loss}, {a.train})[0].item<float>();
      auto lb = sb.run({{b.ids, ids}}, {b.loss}, {b.train})[0].item<float>();
      sc.run({{c.ids, ids}}, {}, {c.train});
      CHECK(la == doctest::Approx(lb).epsilon(1e-6));
    }
    check_near(sa.eval(a.table), sb.eval(b.table));
    CHECK(sa.eval(a.table).to_string() != sc.eval(c.table).to_string());  // it clipped
  }
}

namespace {

// The row model trained synchronously by two replicas in one session: both
// apply the gradients of their batches, then the chief averages and applies.
struct sync_row_model {
  graph g;
  output ids, loss, table;
  sync_replicas_ops sync;
  operation init;
  explicit sync_row_model(optimizer& opt) {
    ids = placeholder(g, dtype::int64, {-1}, "ids");
    auto parts = make_partitioned_variable(constant(g, table_values(11, 4)), 3, "table");
    loss = reduce_sum(square(sub(embedding_lookup(parts, ids), scalar(g, 1.0f))));
    sync = sync_replicas(opt, loss, 2, 2, "");
    init = global_variables_initializer(g);
    table = parts.value();
  }
  // One synchronous step; the losses of the two replicas.
  std::pair<float, float> step(session& s, const tensor& ids_a, const tensor& ids_b) {
    auto a = s.run_async({{ids, ids_a}}, {loss}, {sync.worker_train});
    auto b = s.run_async({{ids, ids_b}}, {loss}, {sync.worker_train});
    s.run({sync.chief_update});
    return {a.get()[0].item<float>(), b.get()[0].item<float>()};
  }
};

}  // namespace

TEST_CASE("synchronous training accumulates embedding gradients as rows, exactly as densely") {
  std::vector<std::vector<int64_t>> batches = {{0, 5, 10, 5}, {3, 4}, {8, 9, 10, 0, 0}, {6, 6, 6}};
  optimizer_options dense_options;
  dense_options.row_updates = false;
  // sgd and adagrad then update the averaged rows; momentum updates every row
  // from the rows scattered back into the shard's shape.
  for (std::string name : {"sgd", "adagrad", "momentum"}) {
    CAPTURE(name);
    auto by_rows = make_optimizer(name, 0.1);
    auto dense = make_optimizer(name, 0.1, dense_options);
    sync_row_model a(*by_rows), b(*dense);
    CHECK(count_ops(a.g, "sparse_accumulator_apply_gradient") == 3);
    CHECK(count_ops(a.g, "accumulator_apply_gradient") == 0);
    CHECK(count_ops(b.g, "accumulator_apply_gradient") == 3);
    CHECK(count_ops(b.g, "sparse_accumulator_apply_gradient") == 0);
    if (name != "momentum") CHECK(count_ops(a.g, "apply_" + name + "_rows") == 3);
    session sa(a.g), sb(b.g);
    for (auto [s, m] : {std::pair{&sa, &a}, std::pair{&sb, &b}}) {
      s->run({m->init});
      s->run({m->sync.local_step_init});
    }
    for (size_t step = 0; step < 6; ++step) {
      auto ids_a = ids_of(batches[step % batches.size()]);
      auto ids_b = ids_of(batches[(step + 1) % batches.size()]);
      CHECK(a.step(sa, ids_a, ids_b) == b.step(sb, ids_a, ids_b));  // bit for bit
    }
    CHECK(sa.eval(a.table).to_string() == sb.eval(b.table).to_string());
    CHECK(sa.eval(a.sync.global_step.value()).item<int64_t>() == 6);
    CHECK(sa.eval(a.table).to_string() != table_values(11, 4).to_string());  // it trained
  }
}

TEST_CASE(
    "synchronous training with lazy_adam applies the averaged rows, with and without clipping") {
  // The two replicas' batches name every row between them: lazy Adam's rows
  // are then dense Adam's (bit for bit unclipped; clipping's norm is the same
  // rows', within rounding).
  std::vector<std::vector<int64_t>> first = {{0, 1, 2, 3, 4, 5, 5}, {6, 7, 8, 9, 10, 0}};
  std::vector<std::vector<int64_t>> second = {{6, 7, 8, 9, 10, 10}, {0, 1, 2, 3, 4, 5, 1}};
  for (double clip_norm : {0.0, 1.0}) {
    CAPTURE(clip_norm);
    optimizer_options o;
    o.clip_global_norm = clip_norm;
    auto lazy = make_optimizer("lazy_adam", 0.05, o);
    auto dense = make_optimizer("adam", 0.05, o);
    sync_row_model a(*lazy), b(*dense);
    CHECK(count_ops(a.g, "sparse_accumulator_apply_gradient") == 3);
    CHECK(count_ops(a.g, "apply_adam_rows") == 3);
    CHECK(count_ops(a.g, "apply_adam") == 0);
    CHECK(count_ops(b.g, "apply_adam") == 3);
    CHECK(count_ops(a.g, "l2_loss_rows") == (clip_norm > 0 ? 3 : 0));
    for (auto& n : a.g.nodes())
      if (n.op == "apply_adam_rows") CHECK(n.inputs.size() == (clip_norm > 0 ? 5u : 4u));
    session sa(a.g), sb(b.g);
    for (auto [s, m] : {std::pair{&sa, &a}, std::pair{&sb, &b}}) {
      s->run({m->init});
      s->run({m->sync.local_step_init});
    }
    for (size_t step = 0; step < 4; ++step) {
      auto ids_a = ids_of(first[step % 2]);
      auto ids_b = ids_of(second[step % 2]);
      auto la = a.step(sa, ids_a, ids_b);
      auto lb = b.step(sb, ids_a, ids_b);
      if (clip_norm == 0) {
        CHECK(la == lb);
      } else {
        CHECK(la.first == doctest::Approx(lb.first).epsilon(1e-6));
        CHECK(la.second == doctest::Approx(lb.second).epsilon(1e-6));
      }
    }
    if (clip_norm == 0)
      CHECK(sa.eval(a.table).equals(sb.eval(b.table)));
    else
      check_near(sa.eval(a.table), sb.eval(b.table));
    CHECK(sa.eval(a.sync.global_step.value()).item<int64_t>() == 4);
  }
  // A row neither replica names keeps its value under lazy Adam, though its
  // shard is updated; dense Adam moves it once its moment is not zero.
  lazy_adam lazy(0.05);
  sync_row_model c(lazy);
  session sc(c.g);
  sc.run({c.init});
  sc.run({c.sync.local_step_init});
  c.step(sc, ids_of({7, 6}), ids_of({0}));
  for (int step = 0; step < 3; ++step) c.step(sc, ids_of({6, 8}), ids_of({0}));
  auto before = sc.eval(c.table).to_vector<float>();
  c.step(sc, ids_of({6}), ids_of({8}));
  auto after = sc.eval(c.table).to_vector<float>();
  for (int64_t k = 0; k < 4; ++k) {
    CHECK(after[size_t(7 * 4 + k)] == before[size_t(7 * 4 + k)]);
    CHECK(after[size_t(6 * 4 + k)] != before[size_t(6 * 4 + k)]);
  }
}

TEST_CASE("row updates check their rows and indices, naming the node") {
  graph g;
  auto v = make_variable(constant(g, table_values(5, 2)), "v");
  auto rows = placeholder(g, dtype::float32, {-1, 2}, "rows");
  auto indices = placeholder(g, dtype::int32, {-1}, "indices");
  auto lr = scalar(g, 0.5f);
  auto update = make_op("apply_sgd_rows", {v.value(), rows, indices, lr}, {}, "update");
  // At build time: a row shape or an index dtype that cannot fit.
  auto wide = placeholder(g, dtype::float32, {-1, 3});
  CHECK(error_of([&] {
          make_op("apply_sgd_rows", {v.value(), wide, indices, lr});
        })
            .find("gradient rows float32(?,3) do not match indices int32(?) into variable "
                  "float32(5,2)") != std::string::npos);
  auto floats = placeholder(g, dtype::float32, {-1});
  CHECK(error_of([&] {
          make_op("apply_sgd_rows", {v.value(), rows, floats, lr});
        }).find("indices must be int32 or int64") != std::string::npos);
  session s(g);
  s.run({v.initializer()});
  auto before = s.eval(v).to_string();
  auto run = [&](std::vector<float> r, std::vector<int32_t> i) {
    auto n = static_cast<int64_t>(i.size());
    return error_of([&] {
      s.run({{rows, tensor::from_vector(r, shape{static_cast<int64_t>(r.size()) / 2, 2})},
             {indices, tensor::from_vector(i, shape{n})}},
            {update});
    });
  };
  auto e = run({1, 1, 1, 1}, {0, 5});
  CHECK_MESSAGE(e.find("node 'update' (apply_sgd_rows)") != std::string::npos, e);
  CHECK_MESSAGE(
      e.find("index 5 (at position 1) is out of range for axis 0 of size 5") != std::string::npos,
      e);
  e = run({1, 1, 1, 1}, {0});
  CHECK_MESSAGE(e.find("gradient rows float32(2,2) do not match indices (1)") != std::string::npos,
                e);
  CHECK(s.eval(v).to_string() == before);  // a failed update changes nothing
  // Repeated rows add up: row 1 moves by 0.5 * (1 + 2).
  CHECK(run({1, 1, 2, 2}, {1, 1}).empty());
  auto after = s.eval(v);
  CHECK(after.data<float>()[2] == doctest::Approx(table_values(5, 2).data<float>()[2] - 1.5f));
  CHECK(after.data<float>()[0] == table_values(5, 2).data<float>()[0]);
  // The optional gradient scale multiplies the summed rows: row 1 moves by
  // 0.5 * 0.25 * (1 + 3) more.
  auto scale = placeholder(g, dtype::float32, {}, "scale");
  auto scaled = make_op("apply_sgd_rows", {v.value(), rows, indices, lr, scale}, {}, "scaled");
  s.run({{rows, tensor::from_vector<float>({1, 1, 3, 3}, shape{2, 2})},
         {indices, tensor::from_vector<int32_t>({1, 1}, shape{2})},
         {scale, tensor::scalar<float>(0.25f)}},
        {scaled});
  CHECK(s.eval(v).data<float>()[2] == doctest::Approx(after.data<float>()[2] - 0.5f));
  // A scale that is not a float scalar is refused, named, at build time.
  for (const char* op : {"apply_sgd_rows", "apply_adagrad_rows", "apply_adam_rows"}) {
    CAPTURE(op);
    auto int_scale = scalar(g, int32_t{1});
    auto vector_scale = constant(g, tensor::from_vector<float>({1, 1}, shape{2}));
    CHECK(error_of([&] {
            make_op(op, {v.value(), rows, indices, lr, int_scale});
          }).find("gradient scale must be a float scalar, got int32()") != std::string::npos);
    CHECK(error_of([&] {
            make_op(op, {v.value(), rows, indices, lr, vector_scale});
          }).find("gradient scale must be a float scalar, got float32(2)") != std::string::npos);
    CHECK(error_of([&] {
            make_op(op, {v.value(), rows, indices, lr, lr, lr});
          }).find("takes at most 5 inputs, got 6") != std::string::npos);
  }
}

TEST_CASE("clipped synchronous training measures the averaged rows on each shard's ps task") {
  graph g;
  auto setter = g.device_function_scope(replica_device_setter(2, "/job:worker/task:0"));
  auto parts = make_partitioned_variable(
      g, shape{10, 3}, 3,
      [](graph& gr, shape dims, int k) {
        return random_normal(gr, dims, dtype::float32, 0, 1, 7, k);
      },
      "emb");
  auto ids = placeholder(g, dtype::int64, {-1}, "ids");
  auto loss = reduce_sum(square(embedding_lookup(parts, ids)));
  lazy_adam opt(0.1, 0.9, 0.999, 1e-8, {.clip_global_norm = 1.0});
  sync_replicas(opt, loss, 2, 2, "/job:worker/task:0");
  // Each shard's averaged rows are measured where the accumulator gives them
  // (the shard's task); the sum of the three scalars, the norm and the scale
  // on the worker; each row update reads the scale.
  std::set<std::string> measured_on;
  for (auto& n : g.nodes()) {
    if (n.op == "l2_loss_rows") {
      CHECK(n.device == g.at(n.inputs[0].node).device);
      measured_on.insert(n.device);
    }
    if (n.op == "sqrt") CHECK(n.device == "/job:worker/task:0");
    if (n.op == "apply_adam_rows") {
      REQUIRE(n.inputs.size() == 5);
      CHECK(g.at(n.inputs[4].node).device == "/job:worker/task:0");
    }
  }
  CHECK(measured_on == std::set<std::string>{"/job:ps/task:0", "/job:ps/task:1"});
  CHECK(count_ops(g, "l2_loss_rows") == 3);
  CHECK(count_ops(g, "apply_adam_rows") == 3);
}

TEST_CASE("shards spread over ps tasks; lookups and their gradients run beside each shard") {
  graph g;
  auto setter = g.device_function_scope(replica_device_setter(2, "/job:worker/task:0"));
  auto parts = make_partitioned_variable(
      g, shape{10, 3}, 3,
      [](graph& gr, shape dims, int k) {
        return random_normal(gr, dims, dtype::float32, 0, 1, 7, k);
      },
      "emb");
  CHECK(parts.shards[0].value().node().device == "/job:ps/task:0");
  CHECK(parts.shards[1].value().node().device == "/job:ps/task:1");
  CHECK(parts.shards[2].value().node().device == "/job:ps/task:0");
  auto ids = placeholder(g, dtype::int64, {-1}, "ids");
  auto loss = reduce_sum(embedding_lookup(parts, ids));
  sgd(0.1).minimize(loss);
  // The gathers from the shards and their gradients (scatters into each
  // shard's shape) run on the ps tasks; the stitch's gradient (gathers of the
  // incoming gradient) on the worker.
  int on_ps = 0, on_worker = 0;
  for (auto& n : g.nodes()) {
    if (n.op != "gather" && n.op != "scatter_add_like") continue;
    bool reads_shard = g.at(n.inputs[n.op == "gather" ? 0 : 2].node).op == "variable";
    auto job = device_name::parse(n.device).job;
    CHECK_MESSAGE(job == (reads_shard ? "ps" : "worker"), n.name << " on " << n.device);
    (job == "ps" ? on_ps : on_worker)++;
  }
  CHECK(on_ps == 6);
  CHECK(on_worker == 3);
  auto stitch = std::find_if(g.nodes().begin(), g.nodes().end(),
                             [](const node& n) { return n.op == "dynamic_stitch"; });
  REQUIRE(stitch != g.nodes().end());
  CHECK(stitch->device == "/job:worker/task:0");
}

TEST_CASE("bad partitioned variables are refused at build time, naming them") {
  graph g;
  auto unknown = placeholder(g, dtype::float32, {-1, 3});
  CHECK(error_of([&] {
          make_partitioned_variable(unknown, 2, "bad");
        }).find("'bad' needs an initial value of known shape") != std::string::npos);
  auto table = constant(g, table_values(4, 2));
  CHECK(error_of([&] {
          make_partitioned_variable(table, 2, "t", {"/job:ps/task:0"});
        }).find("'t' has 2 shards but 1 devices") != std::string::npos);
  CHECK(error_of([&] {
          make_partitioned_variable(
              g, shape{4, 2}, 2,
              [](graph& gr, shape, int) {
                return fill(gr, {3, 2}, 0.0);
              },
              "w");
        }).find("'w' shard 0 gave (3,2), not (2,2)") != std::string::npos);
  auto parts = make_partitioned_variable(table, 2, "ok");
  auto ids = placeholder(g, dtype::int32, {-1, -1});
  CHECK(error_of([&] { embedding_lookup(parts, ids); }).find("at most one unknown dim") !=
        std::string::npos);
  auto float_ids = placeholder(g, dtype::float32, {2});
  CHECK(error_of([&] { embedding_lookup(parts, float_ids); }).find("ids must be int32 or int64") !=
        std::string::npos);
}
