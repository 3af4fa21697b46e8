// Training utilities: optimizers (against independent reference formulas),
// minimize and the global step, clipping, schedules, initializers, dropout.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <set>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;

namespace {

using vec = std::vector<double>;

tensor doubles(vec v) { return tensor::from_vector<double>(v, {int64_t(v.size())}); }

// loss = sum((w - target)^2), so the gradient is 2 (w - target).
const vec kStart = {1.0, -2.0, 0.5}, kTarget = {0.3, 0.7, -1.1};

vec quadratic_grad(const vec& w) {
  vec g(w.size());
  for (size_t i = 0; i < w.size(); ++i) g[i] = 2 * (w[i] - kTarget[i]);
  return g;
}

// Runs `steps` steps of `opt` on the quadratic and returns w after each step.
std::vector<vec> run_optimizer(optimizer& opt, int steps) {
  graph g;
  auto w = make_variable(constant(g, doubles(kStart)), "w");
  auto loss = reduce_sum(square(w.value() - constant(g, doubles(kTarget))));
  auto train = opt.minimize(loss);
  session s(g);
  s.run({global_variables_initializer(g)});
  std::vector<vec> trace;
  for (int i = 0; i < steps; ++i) {
    s.run({train});
    trace.push_back(s.eval(w).to_vector<double>());
  }
  CHECK(s.eval(global_step(g)).item<int64_t>() == steps);
  return trace;
}

// Runs the reference update `step(w, g, t)` (t counts from 1) for `steps` steps.
std::vector<vec> run_reference(const std::function<void(vec&, const vec&, int)>& step, int steps) {
  vec w = kStart;
  std::vector<vec> trace;
  for (int t = 1; t <= steps; ++t) {
    step(w, quadratic_grad(w), t);
    trace.push_back(w);
  }
  return trace;
}

void check_close(const std::vector<vec>& got, const std::vector<vec>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < got.size(); ++s)
    for (size_t i = 0; i < got[s].size(); ++i)
      CHECK(got[s][i] == doctest::Approx(want[s][i]).epsilon(1e-12));
}

}  // namespace

TEST_CASE("optimizers match their reference formulas") {
  const int steps = 5;
  SUBCASE("sgd with weight decay") {
    sgd opt(0.1, {.weight_decay = 0.01});
    check_close(run_optimizer(opt, steps), run_reference(
                                               [](vec& w, const vec& g, int) {
                                                 for (size_t i = 0; i < w.size(); ++i)
                                                   w[i] -= 0.1 * (g[i] + 0.01 * w[i]);
                                               },
                                               steps));
  }
  SUBCASE("momentum and nesterov") {
    for (bool nesterov : {false, true}) {
      momentum opt(0.05, 0.9, nesterov);
      vec buf(3, 0.0);
      check_close(run_optimizer(opt, steps),
                  run_reference(
                      [&](vec& w, const vec& g, int) {
                        for (size_t i = 0; i < w.size(); ++i) {
                          buf[i] = 0.9 * buf[i] + g[i];
                          w[i] -= 0.05 * (nesterov ? g[i] + 0.9 * buf[i] : buf[i]);
                        }
                      },
                      steps));
    }
  }
  SUBCASE("adam, and lazy_adam on a dense gradient") {
    adam dense(0.01, 0.8, 0.95, 1e-6);
    lazy_adam lazy(0.01, 0.8, 0.95, 1e-6);
    for (adam* opt : {&dense, static_cast<adam*>(&lazy)}) {
      vec m(3, 0.0), v(3, 0.0);
      check_close(run_optimizer(*opt, steps), run_reference(
                                                  [&](vec& w, const vec& g, int t) {
                                                    for (size_t i = 0; i < w.size(); ++i) {
                                                      m[i] = 0.8 * m[i] + 0.2 * g[i];
                                                      v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
                                                      double mhat = m[i] / (1 - std::pow(0.8, t));
                                                      double vhat = v[i] / (1 - std::pow(0.95, t));
                                                      w[i] -=
                                                          0.01 * mhat / (std::sqrt(vhat) + 1e-6);
                                                    }
                                                  },
                                                  steps));
    }
  }
  SUBCASE("rmsprop with and without momentum") {
    for (double mu : {0.0, 0.5}) {
      rmsprop opt(0.01, 0.9, 1e-7, mu);
      vec ms(3, 0.0), mom(3, 0.0);
      check_close(run_optimizer(opt, steps), run_reference(
                                                 [&](vec& w, const vec& g, int) {
                                                   for (size_t i = 0; i < w.size(); ++i) {
                                                     ms[i] = 0.9 * ms[i] + 0.1 * g[i] * g[i];
                                                     double d = g[i] / (std::sqrt(ms[i]) + 1e-7);
                                                     mom[i] = mu * mom[i] + d;
                                                     w[i] -= 0.01 * (mu != 0 ? mom[i] : d);
                                                   }
                                                 },
                                                 steps));
    }
  }
  SUBCASE("adagrad") {
    adagrad opt(0.1, 0.1, 1e-10);
    vec acc(3, 0.1);
    check_close(run_optimizer(opt, steps), run_reference(
                                               [&](vec& w, const vec& g, int) {
                                                 for (size_t i = 0; i < w.size(); ++i) {
                                                   acc[i] += g[i] * g[i];
                                                   w[i] -= 0.1 * g[i] / (std::sqrt(acc[i]) + 1e-10);
                                                 }
                                               },
                                               steps));
  }
}

TEST_CASE("every optimizer converges on a float32 least-squares problem") {
  for (std::string name :
       {"sgd", "momentum", "nesterov", "adam", "lazy_adam", "rmsprop", "adagrad"}) {
    CAPTURE(name);
    graph g;
    auto w = make_variable(constant(g, tensor::from_vector<float>({3.0f, -3.0f}, {2})), "w");
    auto loss =
        reduce_sum(square(w.value() - constant(g, tensor::from_vector<float>({1, 2}, {2}))));
    double lr = name == "adagrad" ? 0.5 : name == "sgd" ? 0.1 : 0.05;
    auto train = make_optimizer(name, lr)->minimize(loss);
    session s(g);
    s.run({global_variables_initializer(g)});
    float first = s.eval(loss).item<float>();
    for (int i = 0; i < 400; ++i) s.run({train});
    CHECK(s.eval(loss).item<float>() < 1e-3f * first);
  }
}

TEST_CASE("optimizer slots live in the variable actor, one set per variable") {
  graph g;
  auto a = make_variable(constant(g, doubles({1, 2})), "a");
  auto b = make_variable(constant(g, doubles({3})), "b");
  auto loss = reduce_sum(square(a.value())) + reduce_sum(b.value() * 2.0);
  adam opt(0.1);
  auto train = opt.minimize(loss);
  session s(g);
  s.run({global_variables_initializer(g)});
  s.run({train});
  // Adam's first step moves every element by about lr, whatever the gradient's size.
  auto av = s.eval(a).to_vector<double>();
  CHECK(av[0] == doctest::Approx(0.9).epsilon(1e-6));
  CHECK(av[1] == doctest::Approx(1.9).epsilon(1e-6));
  CHECK(s.eval(b).item<double>() == doctest::Approx(2.9).epsilon(1e-6));
}

TEST_CASE("clip_by_global_norm scales all gradients together") {
  graph g;
  auto x = constant(g, doubles({3, 4}));
  auto y = constant(g, doubles({12}));
  auto clipped = clip_by_global_norm({x, y}, 6.5);  // global norm 13
  session s(g);
  auto out = s.run({}, {clipped.grads[0], clipped.grads[1], clipped.global_norm});
  CHECK(out[2].item<double>() == doctest::Approx(13));
  CHECK(out[0].to_vector<double>() == vec{1.5, 2.0});
  CHECK(out[1].to_vector<double>() == vec{6.0});
  auto loose = clip_by_global_norm({x}, 100);
  CHECK(s.eval(loose.grads[0]).to_vector<double>() == vec{3, 4});
  CHECK(error_of([&] { clip_by_global_norm({x}, 0); }).find("positive") != std::string::npos);
}

TEST_CASE("clipping inside the update equals clipping the gradients first, for every optimizer") {
  // The gradient's norm starts near 5.4: clip_norm 1 scales every step.
  for (std::string name :
       {"sgd", "momentum", "nesterov", "adam", "lazy_adam", "rmsprop", "adagrad"}) {
    INFO(name);
    auto folded = make_optimizer(name, 0.05, {.clip_global_norm = 1.0});
    auto folded_trace = run_optimizer(*folded, 4);
    graph g;
    auto w = make_variable(constant(g, doubles(kStart)), "w");
    auto loss = reduce_sum(square(w.value() - constant(g, doubles(kTarget))));
    auto plain = make_optimizer(name, 0.05);
    auto pairs = plain->compute_gradients(loss);
    auto clipped = clip_by_global_norm({pairs[0].first}, 1.0);
    auto train = plain->apply_gradients({{clipped.grads[0], pairs[0].second}});
    session s(g);
    s.run({global_variables_initializer(g)});
    std::vector<vec> trace;
    for (int i = 0; i < 4; ++i) {
      s.run({train});
      trace.push_back(s.eval(w).to_vector<double>());
    }
    check_close(folded_trace, trace);
    CHECK(folded_trace[0] != run_optimizer(*make_optimizer(name, 0.05), 1)[0]);  // it clipped
  }
}

// With variables on parameter servers, clipping measures each gradient
// where it is made (beside its variable here), so that only scalars cross to
// the sum; the sum, the norm and the scale run where the optimizer is built,
// and each update reads the scale.
TEST_CASE("clipping measures each gradient on its producer's device") {
  graph g;
  auto on_ps = [&](const std::string& task, const std::string& name) {
    auto scope = g.device_scope(task);
    auto v = make_variable(constant(g, doubles({1, -2, 3})), name);
    return std::pair{v, reduce_sum(square(v.value()))};
  };
  auto [a, loss_a] = on_ps("/job:ps/task:0", "a");
  auto [b, loss_b] = on_ps("/job:ps/task:1", "b");
  auto on_worker = g.device_scope("/job:worker/task:0");
  momentum(0.1, 0.9, false, {.clip_global_norm = 1.0}).minimize(loss_a + loss_b);
  std::set<std::string> measured_on;
  int updates = 0;
  for (auto& n : g.nodes()) {
    if (n.op == "l2_loss") {
      CHECK(n.device == g.at(n.inputs[0].node).device);
      measured_on.insert(n.device);
    }
    if (n.op == "sqrt") CHECK(n.device == "/job:worker/task:0");
    if (n.op == "add" && g.at(n.inputs[0].node).op == "l2_loss")
      CHECK(n.device == "/job:worker/task:0");
    if (n.op == "apply_momentum") {
      REQUIRE(n.inputs.size() == 4);
      CHECK(g.at(n.inputs[3].node).device == "/job:worker/task:0");
      ++updates;
    }
  }
  CHECK(measured_on == std::set<std::string>{"/job:ps/task:0", "/job:ps/task:1"});
  CHECK(updates == 2);
}

TEST_CASE("learning-rate schedules follow the global step") {
  graph g;
  auto step = global_step(g);
  auto exp_lr = exponential_decay(step, 0.1, 10, 0.5);
  auto stair = exponential_decay(step, 0.1, 10, 0.5, true);
  auto piece = piecewise_constant(step, {5, 10}, {1.0, 0.5, 0.25});
  auto cos_lr = cosine_decay(step, 1.0, 20, 0.1);
  auto bump = assign_add(step, scalar<int64_t>(g, 5));
  session s(g);
  s.run({global_variables_initializer(g)});
  auto at = [&] { return s.run({}, {exp_lr, stair, piece, cos_lr}); };
  auto v = at();  // step 0
  CHECK(v[0].item<float>() == doctest::Approx(0.1));
  CHECK(v[2].item<float>() == 1.0f);
  CHECK(v[3].item<float>() == doctest::Approx(1.0));
  s.eval(bump);  // step 5
  v = at();
  CHECK(v[0].item<float>() == doctest::Approx(0.1 * std::pow(0.5, 0.5)));
  CHECK(v[1].item<float>() == doctest::Approx(0.1));
  CHECK(v[2].item<float>() == 0.5f);
  s.eval(bump);
  s.eval(bump);  // step 15
  v = at();
  CHECK(v[1].item<float>() == doctest::Approx(0.05));
  CHECK(v[2].item<float>() == 0.25f);
  CHECK(v[3].item<float>() == doctest::Approx(0.9 * 0.5 * (1 + std::cos(M_PI * 0.75)) + 0.1));
  s.eval(bump);
  s.eval(bump);  // step 25: past decay_steps, cosine holds at alpha
  CHECK(at()[3].item<float>() == doctest::Approx(0.1));
  CHECK(error_of([&] { piecewise_constant(step, {5}, {1.0}); }).find("one more value") !=
        std::string::npos);
  CHECK(error_of([&] {
          piecewise_constant(step, {5, 5}, {1, 2, 3});
        }).find("increase") != std::string::npos);
}

TEST_CASE("initializers have the variance they promise") {
  graph g;
  auto gu = glorot_uniform(g, {400, 600}, 1);
  auto hn = he_normal(g, {5, 5, 32, 64}, 2);
  session s(g);
  auto out = s.run({}, {gu, hn});
  auto stats = [](const tensor& t) {
    auto v = t.to_vector<float>();
    double sum = 0, sq = 0, max_abs = 0;
    for (float x : v) {
      sum += x;
      sq += double(x) * x;
      max_abs = std::max(max_abs, double(std::abs(x)));
    }
    double mean = sum / double(v.size());
    return std::array<double, 3>{mean, std::sqrt(sq / double(v.size()) - mean * mean), max_abs};
  };
  auto u = stats(out[0]);
  double limit = std::sqrt(6.0 / 1000);
  CHECK(std::abs(u[0]) < 0.002);
  CHECK(u[1] == doctest::Approx(limit / std::sqrt(3.0)).epsilon(0.02));
  CHECK(u[2] <= limit);
  auto h = stats(out[1]);
  double stddev = std::sqrt(2.0 / (5 * 5 * 32));
  CHECK(std::abs(h[0]) < 0.005);
  CHECK(h[1] == doctest::Approx(stddev).epsilon(0.03));
  CHECK(h[2] <= 2 * stddev / 0.87962566103423978 + 1e-6);
  CHECK(error_of([&] { he_normal(g, {-1, 3}, 0); }).find("fully defined") != std::string::npos);
}

TEST_CASE("dropout: rate, scale, reproducible masks and the gradient") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 1000}, "x");
  auto counter = placeholder(g, dtype::int64, {}, "counter");
  auto y = dropout(x, 0.25, counter, 7);
  auto dx = gradients({reduce_sum(y * 3.0)}, {x})[0];
  session s(g);
  tensor ones(dtype::float32, {100, 1000});
  std::fill_n(ones.mutable_data<float>(), ones.num_elements(), 1.0f);
  auto run = [&](int64_t c) {
    return s.run({{x, ones}, {counter, tensor::scalar<int64_t>(c)}}, {y, dx});
  };
  auto a = run(1), b = run(1), c = run(2);
  auto ya = a[0].to_vector<float>();
  int64_t kept = 0;
  for (float v : ya) {
    CHECK((v == 0.0f || v == doctest::Approx(1 / 0.75)));
    kept += v != 0.0f;
  }
  CHECK(double(kept) / double(ya.size()) == doctest::Approx(0.75).epsilon(0.01));
  CHECK(a[0].to_vector<float>() == b[0].to_vector<float>());
  CHECK(a[0].to_vector<float>() != c[0].to_vector<float>());
  // d/dx sum(3 y) = 3 * mask
  auto ga = a[1].to_vector<float>();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == doctest::Approx(3 * ya[i]));
  CHECK(error_of([&] { dropout(x, 1.0, counter, 0); }).find("rate must be in [0, 1)") !=
        std::string::npos);
}

TEST_CASE("minimize: errors name what is wrong") {
  graph g;
  auto x = placeholder(g, dtype::float32, {2}, "x");
  auto w = make_variable(constant(g, tensor::from_vector<float>({1, 2}, {2})), "w");
  auto other = make_variable(constant(g, tensor::from_vector<float>({1}, {1})), "other");
  auto loss = reduce_sum(x * w.value());
  CHECK(error_of([&] { sgd(0.1).minimize(reduce_sum(x)); }).find("depends on no float variable") !=
        std::string::npos);
  CHECK(error_of([&] {
          sgd(0.1).minimize(loss, {w, other});
        }).find("variable 'other' does not affect") != std::string::npos);
  CHECK(error_of([&] { make_optimizer("adamw", 0.1); })
            .find("unknown optimizer 'adamw' (choose sgd, momentum, nesterov, adam, lazy_adam, "
                  "rmsprop or adagrad)") != std::string::npos);
  auto grad = constant(g, tensor::from_vector<float>({1, 1}, {2}));
  auto lr = scalar(g, 0.1f);
  CHECK(error_of([&] {
          make_op("apply_adam", {w.value(), grad, lr, grad});
        }).find("gradient scale must be a float scalar") != std::string::npos);
  CHECK(error_of([&] {
          make_op("apply_adam", {w.value(), grad, lr, lr, lr});
        }).find("at most 4") != std::string::npos);
  // Updates of an uninitialized variable fail the step with the variable's name.
  auto train = sgd(0.1).minimize(loss, {w});
  session s(g);
  auto e = error_of([&] { s.run({{x, tensor::from_vector<float>({1, 1}, {2})}}, {}, {train}); });
  CHECK(e.find("initialized") != std::string::npos);
}

// An update finding its variable's value still held by a reader of the same
// step copies it first (copy-on-write); the update therefore waits for those
// readers: here w2's update waits for the product that carries the gradient
// back through w2 to w1. Results are unchanged.
TEST_CASE("an update waits for its step's readers of the variable") {
  graph g;
  auto x = placeholder(g, dtype::float32, {4, 3}, "x");
  auto w1 = make_variable(
      constant(g, tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f}, {3, 2})),
      "w1");
  auto w2 = make_variable(constant(g, tensor::from_vector<float>({0.7f, -0.8f}, {2, 1})), "w2");
  auto loss = reduce_sum(square(matmul(tanh(matmul(x, w1.value())), w2.value())));
  auto train = sgd(0.1).minimize(loss);
  auto readers_of = [&](const variable& v) {
    std::set<int> readers;
    for (auto& n : g.nodes())
      for (auto& in : n.inputs)
        if (in.node == v.value().ref().node && n.op == "matmul") readers.insert(n.id);
    return readers;
  };
  auto update_of = [&](const variable& v) {
    const node* update = nullptr;
    for (auto& n : g.nodes())
      if (n.op == "apply_sgd" && n.inputs[0].node == v.value().ref().node) update = &n;
    REQUIRE(update != nullptr);
    return update;
  };
  auto waits_for = [&](const variable& v) {
    std::set<std::string> names;
    for (int c : update_of(v)->control_inputs) names.insert(g.at(c).name);
    return names;
  };
  // w2: the forward product and the one carrying the gradient back to h.
  for (int r : readers_of(w2)) CHECK_MESSAGE(waits_for(w2).count(g.at(r).name) == 1, g.at(r).name);
  CHECK(readers_of(w2).size() == 2);
  // w1: the forward product; not the gradient for the placeholder x, which
  // the step does not compute (a dependency would make it run).
  int waited = 0;
  for (int r : readers_of(w1)) {
    bool forward = g.at(r).inputs[0].node == x.ref().node;
    CHECK_MESSAGE(waits_for(w1).count(g.at(r).name) == (forward ? 1u : 0u), g.at(r).name);
    waited += forward;
  }
  CHECK(waited == 1);
  // Training still follows plain SGD.
  session s(g);
  s.run({global_variables_initializer(g)});
  feed_list feeds{{x, tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3})}};
  float first = s.run(feeds, {loss})[0].item<float>();
  for (int i = 0; i < 20; ++i) s.run(feeds, {}, {train});
  CHECK(s.run(feeds, {loss})[0].item<float>() < 0.5f * first);
}

// A rows-only update (an embedding's gathered rows) waits for no node that
// only the dense gradient would need: none is pulled into the step.
TEST_CASE("a rows-only update waits for no node of the dense gradient") {
  graph g;
  auto w = make_variable(constant(g, tensor::from_vector<float>({1, 2, 3, 4}, {4, 1})), "w");
  auto ids = placeholder(g, dtype::int32, {2}, "ids");
  auto loss = reduce_sum(square(gather(w.value(), ids)));
  auto train = sgd(0.1, optimizer_options{.row_updates = true}).minimize(loss);
  for (auto& n : g.nodes())
    if (n.op == "apply_sgd_rows")
      for (int c : n.control_inputs) CHECK(g.at(c).op != "scatter_add_like");
  session s(g);
  s.run({global_variables_initializer(g)});
  s.run({{ids, tensor::from_vector<int32_t>({1, 3}, {2})}}, {}, {train});
  auto after = s.eval(w.value());
  CHECK(after.data<float>()[0] == 1.0f);
  CHECK(after.data<float>()[1] == doctest::Approx(2.0f - 0.1f * 4.0f));
}
