// Cases for log_uniform_candidate_sampler (the harness table: distribution, expected counts,
// bad arguments) and tests of sampled_softmax_loss (a composite, so outside the table): against
// a direct computation, against TensorFlow's numbers, accidental hits, and its gradients
// against central finite differences.
#include <cfloat>
#include <cmath>
#include <map>
#include <set>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/math.hpp"
#include "ops/op_cases.hpp"
#include "ops/reduce.hpp"
#include "ops/sampled_softmax.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {
namespace {

constexpr const char* kSampler = "log_uniform_candidate_sampler";

// P(k) written out independently of the kernel: (log(k + 2) - log(k + 1)) / log(range + 1).
double log_uniform_p(int64_t k, int64_t range) {
  return (std::log(double(k) + 2) - std::log(double(k) + 1)) / std::log(double(range) + 1);
}

attr_map sampler_attrs(int64_t num_true, int64_t num_sampled, bool unique, int64_t range,
                       int64_t seed = 1) {
  return {{"num_true", num_true},
          {"num_sampled", num_sampled},
          {"unique", unique},
          {"range_max", range},
          {"seed", seed}};
}

std::vector<tensor> sample(const tensor& classes, const attr_map& attrs, int64_t counter) {
  return run_kernel_only(kSampler, {classes, scalar_of<int64_t>(counter)}, attrs);
}

const tensor classes_0_3_9 = make<int64_t>({3, 1}, {0, 3, 9});

// Empirical frequencies of 200k draws with replacement against P(k); the standard error of a
// frequency is at most 0.0012 here, the tolerance over 4 of them.
void check_frequencies(const std::vector<tensor>& outs) {
  REQUIRE(outs.size() == 3);
  auto v = outs[0].to_vector<int64_t>();
  REQUIRE(v.size() == 200000);
  std::map<int64_t, double> freq;
  int64_t out_of_range = 0;
  for (auto k : v) {
    out_of_range += k < 0 || k >= 10;
    freq[k] += 1.0 / double(v.size());
  }
  CHECK(out_of_range == 0);
  for (int64_t k = 0; k < 10; ++k)
    CHECK_MESSAGE(std::abs(freq[k] - log_uniform_p(k, 10)) < 0.005,
                  "class " << k << ": " << freq[k] << " vs " << log_uniform_p(k, 10));
}

// With unique, every count is -expm1(tries * log1p(-p)) for one whole number of tries >=
// num_sampled, the same for the true and the sampled classes.
void check_unique_counts(const std::vector<tensor>& outs, int64_t range) {
  auto s = outs[0].to_vector<int64_t>();
  CHECK(std::set<int64_t>(s.begin(), s.end()).size() == s.size());
  auto sc = outs[2].to_vector<float>();
  const double p0 = log_uniform_p(s[0], range);
  const double tries = std::round(std::log1p(-double(sc[0])) / std::log1p(-p0));
  CHECK(tries >= double(s.size()));
  for (size_t i = 0; i < s.size(); ++i) {
    CHECK(s[i] >= 0);
    CHECK(s[i] < range);
    const double p = log_uniform_p(s[i], range);
    const double want = tries == double(s.size()) ? p * tries : -std::expm1(tries * std::log1p(-p));
    CHECK(double(sc[i]) == doctest::Approx(want).epsilon(1e-5));
  }
}

const op_case_registrar sampler_cases({
    // TensorFlow 2.21 (sampled_softmax_tf.py): tf.random.log_uniform_candidate_sampler(
    // [[0], [3], [9]], 1, 4, False, 10) gives the true expected counts 4 * P(k) below (they do not
    // depend on the draws).
    {.op = kSampler,
     .label = "expected counts without unique: num_sampled * P(k), TensorFlow's values",
     .inputs = {classes_0_3_9, scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 4, false, 10),
     .tolerance = 1e-6,
     .check =
         [](const std::vector<tensor>& outs) {
           REQUIRE(outs.size() == 3);
           CHECK(outs[0].dims() == shape({4}));
           CHECK(outs[1].dims() == shape({3, 1}));
           CHECK(outs[2].dims() == shape({4}));
           auto t = outs[1].to_vector<float>();
           CHECK(t[0] == doctest::Approx(1.156259298324585).epsilon(1e-6));
           CHECK(t[1] == doctest::Approx(0.3722323477268219).epsilon(1e-6));
           CHECK(t[2] == doctest::Approx(0.15898972749710083).epsilon(1e-6));
           auto s = outs[0].to_vector<int64_t>();
           auto c = outs[2].to_vector<float>();
           for (size_t i = 0; i < s.size(); ++i)
             CHECK(c[i] == doctest::Approx(4 * log_uniform_p(s[i], 10)).epsilon(1e-6));
         }},
    {.op = kSampler,
     .label = "range_max 1: every draw is class 0, P(0) = 1",
     .inputs = {make<int32_t>({2, 1}, {0, 0}), scalar_of<int64_t>(7)},
     .attrs = sampler_attrs(1, 3, false, 1),
     .expected = {make<int64_t>({3}, {0, 0, 0}), make<float>({2, 1}, {3, 3}),
                  make<float>({3}, {3, 3, 3})}},
    {.op = kSampler,
     .label = "frequencies of 200k draws follow P(k)",
     .inputs = {classes_0_3_9, scalar_of<int64_t>(3)},
     .attrs = sampler_attrs(1, 200000, false, 10),
     .check = check_frequencies},
    {.op = kSampler,
     .label = "unique: distinct classes, counts from the number of tries",
     .inputs = {make<int64_t>({2, 2}, {0, 1, 5, 40}), scalar_of<int64_t>(11)},
     .attrs = sampler_attrs(2, 30, true, 50),
     .check = [](const std::vector<tensor>& outs) { check_unique_counts(outs, 50); }},
    {.op = kSampler,
     .label = "unique with num_sampled = range_max: every class once",
     .inputs = {make<int64_t>({1, 1}, {2}), scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 6, true, 6),
     .check =
         [](const std::vector<tensor>& outs) {
           auto s = outs[0].to_vector<int64_t>();
           CHECK(std::set<int64_t>(s.begin(), s.end()) == std::set<int64_t>{0, 1, 2, 3, 4, 5});
         }},
    {.op = kSampler,
     .label = "unique and num_sampled > range_max",
     .inputs = {classes_0_3_9, scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 11, true, 10),
     .expect_error = "cannot draw 11 distinct classes from range_max 10"},
    {.op = kSampler,
     .label = "true class outside the range",
     .inputs = {make<int64_t>({2, 1}, {3, 10}), scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 2, false, 10),
     .expect_error = "true class 10 (element 1) is outside [0, range_max = 10)"},
    {.op = kSampler,
     .label = "negative true class",
     .inputs = {make<int32_t>({1, 1}, {-1}), scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 2, false, 10),
     .expect_error = "true class -1"},
    {.op = kSampler,
     .label = "true_classes of rank 1",
     .inputs = {make<int64_t>({2}, {1, 2}), scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 2, false, 10),
     .expect_error = "true_classes must be [batch, num_true]"},
    {.op = kSampler,
     .label = "num_true disagrees with true_classes",
     .inputs = {make<int64_t>({1, 2}, {1, 2}), scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 2, false, 10),
     .expect_error = "must have num_true = 1 columns"},
    {.op = kSampler,
     .label = "float true_classes",
     .inputs = {make<float>({1, 1}, {1}), scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 2, false, 10),
     .expect_error = "true_classes must be int32 or int64"},
    {.op = kSampler,
     .label = "int32 counter",
     .inputs = {classes_0_3_9, scalar_of<int32_t>(0)},
     .attrs = sampler_attrs(1, 2, false, 10),
     .expect_error = "the counter must be an int64 scalar"},
    {.op = kSampler,
     .label = "num_sampled 0",
     .inputs = {classes_0_3_9, scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 0, false, 10),
     .expect_error = "num_sampled must be at least 1"},
    {.op = kSampler,
     .label = "range_max 0",
     .inputs = {classes_0_3_9, scalar_of<int64_t>(0)},
     .attrs = sampler_attrs(1, 1, false, 0),
     .expect_error = "range_max must be at least 1"},
});

TEST_CASE("log_uniform_candidate_sampler draws depend only on the seed and the counter") {
  const auto attrs = sampler_attrs(1, 64, true, 10000, 5);
  auto a = sample(classes_0_3_9, attrs, 42);
  auto b = sample(classes_0_3_9, attrs, 42);
  CHECK(a[0].to_vector<int64_t>() == b[0].to_vector<int64_t>());
  CHECK(a[1].to_vector<float>() == b[1].to_vector<float>());
  CHECK(a[2].to_vector<float>() == b[2].to_vector<float>());
  auto next = sample(classes_0_3_9, attrs, 43);
  CHECK(a[0].to_vector<int64_t>() != next[0].to_vector<int64_t>());
  auto other_seed = sample(classes_0_3_9, sampler_attrs(1, 64, true, 10000, 6), 42);
  CHECK(a[0].to_vector<int64_t>() != other_seed[0].to_vector<int64_t>());
}

TEST_CASE("log_uniform_candidate_sampler: unique counts equal TensorFlow's for the same tries") {
  // TensorFlow 2.21, tf.random.log_uniform_candidate_sampler([[0], [3], [9]], 1, 4, True, 10,
  // seed=1) took 5 tries (its sampled counts say so) and gave these true expected counts.
  // Our generator differs, so find a counter whose draw also took 5 tries.
  const auto attrs = sampler_attrs(1, 4, true, 10);
  bool found = false;
  for (int64_t counter = 0; counter < 1000 && !found; ++counter) {
    auto outs = sample(classes_0_3_9, attrs, counter);
    const double p0 = log_uniform_p(outs[0].to_vector<int64_t>()[0], 10);
    const double tries = std::log1p(-double(outs[2].to_vector<float>()[0])) / std::log1p(-p0);
    if (std::abs(tries - 5) > 1e-3) continue;
    found = true;
    auto t = outs[1].to_vector<float>();
    CHECK(t[0] == doctest::Approx(0.8183857202529907).epsilon(1e-6));
    CHECK(t[1] == doctest::Approx(0.3863830268383026).epsilon(1e-6));
    CHECK(t[2] == doctest::Approx(0.18355414271354675).epsilon(1e-6));
  }
  CHECK(found);
}

// ---- sampled_softmax_loss -------------------------------------------------------------------

// weights [6, 3], biases [6], inputs [3, 3] and fixed candidates; sampled_softmax_tf.py beside
// this file computed TensorFlow's losses for them.
const std::vector<double> W = {0.1, -0.2, 0.3, 0.4, 0.5, -0.6, -0.7, 0.8, 0.9,
                               1.0, -1.1, 0.2, 0.3, 0.4, -0.5, -0.6, 0.7, 0.8};
const std::vector<double> B = {0.01, -0.02, 0.03, -0.04, 0.05, -0.06};
const std::vector<double> X = {0.5, -1.0, 2.0, 1.5, 0.25, -0.75, -0.5, 0.5, 1.0};
const std::vector<int64_t> S = {4, 2, 5};
const std::vector<double> SC = {0.2, 0.4, 0.1};

template <class T>
tensor typed(shape dims, const std::vector<double>& v) {
  return make<T>(std::move(dims), std::vector<T>(v.begin(), v.end()));
}

struct loss_fixture {
  graph g;
  dtype type;
  output w, b, x;
  feed_list feeds;
  output loss;

  loss_fixture(dtype t, const std::vector<int64_t>& labels, int64_t num_true,
               const std::vector<double>& true_counts, bool remove_hits)
      : type(t) {
    const bool f32 = t == dtype::float32;
    const int64_t batch = int64_t(labels.size()) / num_true;
    w = placeholder(g, t, {6, 3}, "w");
    b = placeholder(g, t, {6}, "b");
    x = placeholder(g, t, {-1, 3}, "x");  // the batch known at run time only
    feeds = {{w, f32 ? typed<float>({6, 3}, W) : typed<double>({6, 3}, W)},
             {b, f32 ? typed<float>({6}, B) : typed<double>({6}, B)},
             {x, f32 ? typed<float>({3, 3}, X) : typed<double>({3, 3}, X)}};
    candidate_sample s{constant(g, make<int64_t>({3}, S)),
                       constant(g, typed<float>({batch, num_true}, true_counts)),
                       constant(g, typed<float>({3}, SC))};
    auto l = constant(g, make<int64_t>({batch, num_true}, labels));
    loss = sampled_softmax_loss(w, b, l, x, s, 6,
                                {.num_true = num_true, .remove_accidental_hits = remove_hits});
  }
  std::vector<double> run() {
    session s(g);
    auto t = s.run(feeds, {loss})[0];
    if (t.type() == dtype::float32) {
      auto v = t.to_vector<float>();
      return {v.begin(), v.end()};
    }
    return t.to_vector<double>();
  }
};

// The loss written out for num_true = 1: -log softmax at the true column of
// [z_true - log q_true, z_s - log q_s (hits removed)].
std::vector<double> direct_loss(const std::vector<int64_t>& labels, const std::vector<double>& tc,
                                bool remove_hits) {
  auto logit = [](int64_t row, int64_t cls) {
    double z = B[size_t(cls)];
    for (size_t d = 0; d < 3; ++d) z += X[size_t(row) * 3 + d] * W[size_t(cls) * 3 + d];
    return z;
  };
  std::vector<double> out;
  for (int64_t r = 0; r < int64_t(labels.size()); ++r) {
    // The counts go through float32, as the graph's constants do.
    const double t = logit(r, labels[size_t(r)]) - std::log(double(float(tc[size_t(r)])));
    double sum = std::exp(t);
    for (size_t j = 0; j < S.size(); ++j)
      if (!(remove_hits && S[j] == labels[size_t(r)]))
        sum += std::exp(logit(r, S[j]) - std::log(double(float(SC[j]))));
    out.push_back(std::log(sum) - t);
  }
  return out;
}

TEST_CASE("sampled_softmax_loss equals the loss written out, with and without hit removal") {
  const std::vector<int64_t> labels = {1, 4, 0};  // row 1's label 4 is also sampled
  const std::vector<double> tc = {0.3, 0.2, 0.5};
  for (bool remove : {true, false}) {
    loss_fixture f(dtype::float64, labels, 1, tc, remove);
    auto got = f.run();
    auto want = direct_loss(labels, tc, remove);
    REQUIRE(got.size() == 3);
    for (size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  }
  // The hit matters for row 1 only: removing it lowers that row's loss.
  auto with = loss_fixture(dtype::float64, labels, 1, tc, true).run();
  auto without = loss_fixture(dtype::float64, labels, 1, tc, false).run();
  CHECK(with[1] < without[1] - 0.5);
  CHECK(with[0] == doctest::Approx(without[0]).epsilon(1e-15));
}

TEST_CASE("sampled_softmax_loss equals TensorFlow's on fixed candidates") {
  // Produced by tests/ops/sampled_softmax_tf.py with TensorFlow 2.21 (tensorflow-cpu from PyPI,
  // in a venv; never needed to build or test): tf.nn.sampled_softmax_loss on the fixture above
  // in float32, sampled_values = ([4, 2, 5], the true counts, [0.2, 0.4, 0.1]).
  struct tf_case {
    std::vector<int64_t> labels;
    int64_t num_true;
    std::vector<double> true_counts;
    bool remove;
    std::vector<double> tf_loss;
  };
  const std::vector<tf_case> cases = {
      {{1, 4, 0},
       1,
       {0.3, 0.2, 0.5},
       true,
       {3.507728099822998, 0.20793487131595612, 3.228804349899292}},
      {{1, 4, 0},
       1,
       {0.3, 0.2, 0.5},
       false,
       {3.507728099822998, 0.8025095462799072, 3.228804349899292}},
      {{1, 3, 4, 0, 0, 0},
       2,
       {0.3, 0.6, 0.2, 0.5, 0.5, 0.5},
       true,
       {2.5106091499328613, 1.314753532409668, 3.2676451206207275}},
  };
  for (auto& c : cases) {
    for (dtype t : {dtype::float32, dtype::float64}) {
      CAPTURE(c.num_true);
      CAPTURE(c.remove);
      auto got = loss_fixture(t, c.labels, c.num_true, c.true_counts, c.remove).run();
      REQUIRE(got.size() == 3);
      for (size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(c.tf_loss[i]).epsilon(2e-6));
    }
  }
}

TEST_CASE("sampled_softmax_loss gradients agree with finite differences") {
  const std::vector<int64_t> labels = {1, 3, 4, 0, 0, 0};
  loss_fixture f(dtype::float64, labels, 2, {0.3, 0.6, 0.2, 0.5, 0.5, 0.5}, true);
  const auto row_weights = make<double>({3}, {0.7, -1.3, 0.4});
  auto total = reduce_sum(f.loss * constant(f.g, row_weights));
  auto grads = gradients({total}, {f.w, f.b, f.x});
  // Each table's gradient is one gather adjoint, which the optimizers turn into row updates.
  CHECK(grads[0].node().op == "scatter_add_like");
  CHECK(grads[1].node().op == "scatter_add_like");
  session s(f.g);
  auto analytic = s.run(f.feeds, {grads[0], grads[1], grads[2]});
  const double eps = 1e-6;
  for (size_t k = 0; k < 3; ++k) {
    auto base = f.feeds[k].second.to_vector<double>();
    auto a = analytic[k].to_vector<double>();
    REQUIRE(a.size() == base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      auto at = [&](double delta) {
        auto v = base;
        v[i] += delta;
        feed_list feeds = f.feeds;
        feeds[k].second = make<double>(f.feeds[k].second.dims(), v);
        return s.run(feeds, {total})[0].to_vector<double>()[0];
      };
      const double numeric = (at(eps) - at(-eps)) / (2 * eps);
      CAPTURE(k);
      CAPTURE(i);
      CHECK(std::abs(a[i] - numeric) <= 1e-6 * (1 + std::abs(numeric)));
    }
  }
}

TEST_CASE("sampled_softmax_loss: classes neither true nor sampled get no gradient") {
  graph g;
  auto w = constant(g, typed<double>({6, 3}, W));
  auto b = constant(g, typed<double>({6}, B));
  auto x = constant(g, typed<double>({3, 3}, X));
  candidate_sample s{constant(g, make<int64_t>({2}, {2, 5})),
                     constant(g, make<float>({3, 1}, {0.3f, 0.2f, 0.5f})),
                     constant(g, make<float>({2}, {0.4f, 0.1f}))};
  auto labels = constant(g, make<int32_t>({3, 1}, {1, 4, 1}));
  auto loss = reduce_sum(sampled_softmax_loss(w, b, labels, x, s, 6));
  auto db = gradients({loss}, {b})[0];
  session sess(g);
  auto v = sess.eval(db).to_vector<double>();
  CHECK(v[0] == 0);
  CHECK(v[3] == 0);
  CHECK(v[1] < 0);  // a true class: its logit is pushed up
  CHECK(v[2] > 0);  // a sampled class: pushed down
}

TEST_CASE("sampled_softmax_loss with its sampler: same counter, same loss; next counter, new") {
  graph g;
  auto w = constant(g, make<float>({1000, 4}, std::vector<float>(4000, 0.01f)));
  std::vector<float> bias(1000);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(i % 7) * 0.1f;
  auto b = constant(g, make<float>({1000}, bias));
  auto x = constant(g, make<float>({2, 4}, {1, 2, 3, 4, -1, 0, 1, 0}));
  auto labels = constant(g, make<int64_t>({2, 1}, {3, 700}));
  auto counter = placeholder(g, dtype::int64, {}, "counter");
  auto loss = sampled_softmax_loss(w, b, labels, x, 16, 1000, counter, {.seed = 9});
  CHECK(loss.dims() == shape({2}));
  session s(g);
  auto at = [&](int64_t c) {
    return s.run({{counter, scalar_of<int64_t>(c)}}, {loss})[0].to_vector<float>();
  };
  auto first = at(0);
  CHECK(first == at(0));
  CHECK(first != at(1));
  for (float v : first) CHECK(std::isfinite(v));
}

TEST_CASE("sampled_softmax_loss: bad arguments are clear errors") {
  graph g;
  auto w = placeholder(g, dtype::float32, {6, 3});
  auto b = placeholder(g, dtype::float32, {6});
  auto x = placeholder(g, dtype::float32, {2, 3});
  auto labels = placeholder(g, dtype::int64, {2, 1});
  auto counter = placeholder(g, dtype::int64, {});
  CHECK_THROWS_WITH(sampled_softmax_loss(w, b, labels, x, 7, 6, counter),
                    doctest::Contains("cannot draw 7 distinct classes from range_max 6"));
  CHECK_THROWS_WITH(sampled_softmax_loss(w, b, labels, x, 2, 5, counter),
                    doctest::Contains("must have num_classes = 5 rows"));
  auto x4 = placeholder(g, dtype::float32, {2, 4});
  CHECK_THROWS_WITH(sampled_softmax_loss(w, b, labels, x4, 2, 6, counter),
                    doctest::Contains("disagree on dim"));
  auto xd = placeholder(g, dtype::float64, {2, 3});
  CHECK_THROWS_WITH(sampled_softmax_loss(w, b, labels, xd, 2, 6, counter),
                    doctest::Contains("inputs must be float32 [batch, dim]"));
  CHECK_THROWS_WITH(sampled_softmax_loss(w, b, labels, x, 2, 6, counter, {.num_true = 2}),
                    doctest::Contains("true_classes (2,1) must have num_true = 2 columns"));
  CHECK_THROWS_WITH(sampled_softmax_loss(w, b, labels, x, {counter, counter, counter}, 6),
                    doctest::Contains("sampled candidates must be a vector of known length"));
}

}  // namespace
}  // namespace actorflow::testing
