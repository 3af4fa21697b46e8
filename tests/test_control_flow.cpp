// Dynamic control flow: switch, merge and cond in the runtime (dead values),
// their gradients against finite differences, errors, and steps in flight.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "numeric_gradient.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "schema/graph_io.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::check_close;
using actorflow::testing::error_of;
using actorflow::testing::numeric_gradient;

namespace {

tensor doubles(std::vector<double> v) {
  auto n = static_cast<int64_t>(v.size());
  return tensor::from_vector<double>(v, shape{n});
}
tensor truth(bool b) { return tensor::scalar<bool>(b); }

struct branchy {
  graph g;
  output pred = placeholder(g, dtype::boolean, {}, "pred");
  output x = placeholder(g, dtype::float64, {-1}, "x");
};

}  // namespace

TEST_CASE("cond gives the taken branch's value") {
  branchy b;
  auto y = cond(
      b.pred, [&] { return b.x * 2.0; }, [&] { return b.x - 1.0; });
  session s(b.g);
  CHECK(s.run({{b.pred, truth(true)}, {b.x, doubles({1, 2})}}, {y})[0].to_vector<double>() ==
        std::vector<double>{2, 4});
  CHECK(s.run({{b.pred, truth(false)}, {b.x, doubles({1, 2})}}, {y})[0].to_vector<double>() ==
        std::vector<double>{0, 1});
}

TEST_CASE("constants made inside a branch run only with it; outside tensors may be returned") {
  branchy b;
  auto outside = b.x + 10.0;
  auto y = cond(
      b.pred, [&] { return scalar(b.g, 1.0); }, [&] { return scalar(b.g, 2.0); });
  auto z = cond(
      b.pred, [&] { return outside; }, [&] { return b.x; });
  session s(b.g);
  for (bool p : {true, false}) {
    auto out = s.run({{b.pred, truth(p)}, {b.x, doubles({5})}}, {y, z});
    CHECK(*out[0].data<double>() == (p ? 1.0 : 2.0));
    CHECK(*out[1].data<double>() == (p ? 15.0 : 5.0));
  }
}

TEST_CASE("an untaken branch runs no update and no kernel, so it cannot fail the step") {
  branchy b;
  auto v = make_variable(scalar(b.g, 0.0), "v");
  auto y = cond(
      b.pred,
      [&] {
        auto bumped = assign_add(v, scalar(b.g, 1.0));
        return reshape(b.x, {7}) * bumped;  // fails unless x has 7 elements
      },
      [&] { return b.x * 3.0; });
  session s(b.g);
  s.run({global_variables_initializer(b.g)});
  for (int i = 0; i < 5; ++i)
    CHECK(s.run({{b.pred, truth(false)}, {b.x, doubles({1, 2})}}, {y})[0].to_vector<double>() ==
          std::vector<double>{3, 6});
  CHECK(*s.eval(v.value()).data<double>() == 0.0);
  // Taken, the update runs and the bad reshape fails the step, naming it.
  auto e = error_of([&] { s.run({{b.pred, truth(true)}, {b.x, doubles({1, 2})}}, {y}); });
  CHECK_MESSAGE(e.find("reshape") != std::string::npos, e);
  CHECK(*s.eval(v.value()).data<double>() == 1.0);
  // The session goes on.
  CHECK(s.run({{b.pred, truth(false)}, {b.x, doubles({1})}}, {y})[0].to_vector<double>() ==
        std::vector<double>{3});
}

TEST_CASE("conds nest, and a cond returns several outputs") {
  graph g;
  auto p = placeholder(g, dtype::boolean, {}, "p");
  auto q = placeholder(g, dtype::boolean, {}, "q");
  auto x = placeholder(g, dtype::float64, {}, "x");
  auto ys = cond(
      p,
      [&] {
        auto inner = cond(
            q, [&] { return x + 1.0; }, [&] { return x + 2.0; }, "inner");
        return std::vector<output>{inner, x * 10.0};
      },
      [&] {
        return std::vector<output>{x + 3.0, x * 20.0};
      });
  REQUIRE(ys.size() == 2);
  session s(g);
  auto run = [&](bool pv, bool qv) {
    auto out = s.run({{p, truth(pv)}, {q, truth(qv)}, {x, tensor::scalar<double>(1)}}, ys);
    return std::make_pair(*out[0].data<double>(), *out[1].data<double>());
  };
  CHECK(run(true, true) == std::make_pair(2.0, 10.0));
  CHECK(run(true, false) == std::make_pair(3.0, 10.0));
  CHECK(run(false, true) == std::make_pair(4.0, 20.0));
  CHECK(run(false, false) == std::make_pair(4.0, 20.0));
}

TEST_CASE("fetching a value of the untaken branch is an error naming it") {
  branchy b;
  output inside;
  auto y = cond(
      b.pred,
      [&] {
        inside = b.x * 2.0;
        return inside;
      },
      [&] { return b.x; });
  session s(b.g);
  auto e = error_of([&] { s.run({{b.pred, truth(false)}, {b.x, doubles({1})}}, {inside}); });
  CHECK_MESSAGE(
      e.find("fetch '" + inside.node().name + ":0' has no value in this step") != std::string::npos,
      e);
  CHECK(*s.run({{b.pred, truth(true)}, {b.x, doubles({1})}}, {inside})[0].data<double>() == 2.0);
  CHECK(*s.run({{b.pred, truth(false)}, {b.x, doubles({4})}}, {y})[0].data<double>() == 4.0);
}

TEST_CASE("a cond refuses a bad predicate and branches that disagree") {
  branchy b;
  auto same = [&] { return b.x; };
  CHECK(error_of([&] { cond(b.x, same, same); }) ==
        "[cond] the predicate must be a scalar bool, not float64(?)");
  auto vector_pred = placeholder(b.g, dtype::boolean, {2}, "vector_pred");
  CHECK(error_of([&] { cond(vector_pred, same, same); }).find("must be a scalar bool") !=
        std::string::npos);
  CHECK(error_of([&] {
          cond(b.pred, same, [&] { return cast(b.x, dtype::float32); });
        }).find("[cond] 'cond': output 0 is float64(?) in the true branch but float32(?)") == 0);
  CHECK(error_of([&] {
          cond(
              b.pred, [&] { return std::vector<output>{b.x}; },
              [&] {
                return std::vector<output>{b.x, b.x};
              });
        }) == "[cond] 'cond': the true branch returns 1 outputs, the false branch 2");
}

TEST_CASE("a switch refuses a predicate that is not a scalar bool as it is built") {
  branchy b;
  auto dyn = placeholder(b.g, dtype::boolean, {-1}, "dyn");
  auto e = error_of([&] { switch_op(b.x, dyn, "gate"); });
  CHECK_MESSAGE(e.find("[switch] the predicate must be a scalar bool, not bool(?)") == 0, e);
  CHECK(error_of([&] { merge({b.x, b.pred}); }).find("[merge] input 1 is bool()") == 0);
}

TEST_CASE("gradients through a cond agree with finite differences on both sides") {
  branchy b;
  auto w = placeholder(b.g, dtype::float64, {-1}, "w");
  // x is used in both branches and outside; w in one branch only.
  auto y = cond(
      b.pred, [&] { return b.x * b.x * w; }, [&] { return tanh(b.x) + b.x * 3.0; });
  auto loss = reduce_sum(y * 0.5 + b.x * 2.0);
  auto grads = gradients({loss}, {b.x, w});
  session s(b.g);
  std::vector<double> xv{0.3, -0.7, 1.1}, wv{0.5, 2.0, -1.5};
  for (bool p : {true, false}) {
    CAPTURE(p);
    feed_list feeds{{b.pred, truth(p)}, {b.x, doubles(xv)}, {w, doubles(wv)}};
    auto analytic = s.run(feeds, {grads[0], grads[1]});
    check_close(analytic[0].to_vector<double>(),
                numeric_gradient(s, loss, b.x, xv, {{b.pred, truth(p)}, {w, doubles(wv)}}));
    check_close(analytic[1].to_vector<double>(),
                numeric_gradient(s, loss, w, wv, {{b.pred, truth(p)}, {b.x, doubles(xv)}}));
  }
}

// Each input used by one branch only: the gradient of the branch not taken
// is a live zero. Known shapes (which the graph optimizer folds zeros_like
// of) and unknown ones; placeholders, variables and constants; nested two
// deep; every step twice, since a first run may differ from later ones.
struct one_branch_case {
  const char* label;
  std::function<output(output p, output q, output x, output w, output v)> build;
};

const one_branch_case one_branch_cases[] = {
    {"x * w | x + v",
     [](output p, output, output x, output w, output v) {
       return cond(
           p, [&] { return x * w; }, [&] { return x + v; });
     }},
    {"x * w | v passed straight through",
     [](output p, output, output x, output w, output v) {
       return cond(
           p, [&] { return x * w; }, [&] { return v; });
     }},
    {"w passed straight through | tanh(v) * x",
     [](output p, output, output x, output w, output v) {
       return cond(
           p, [&] { return w; }, [&] { return tanh(v) * x; });
     }},
    {"nested: (q ? x * w : exp(v)) | v * 3",
     [](output p, output q, output x, output w, output v) {
       return cond(
           p,
           [&] {
             return cond(
                 q, [&] { return x * w; }, [&] { return exp(v); }, "inner");
           },
           [&] { return v * 3.0; });
     }},
    {"nested, the inner predicate computed inside the outer branch from x",
     [](output p, output, output x, output w, output v) {
       return cond(
           p,
           [&] {
             auto inner = greater(reduce_sum(x), scalar_like(x, 0.0));
             return cond(
                 inner, [&] { return w * x; }, [&] { return v; }, "inner");
           },
           [&] { return x * 2.0; });
     }},
    {"nested in the false branch: x | (q ? w : v * x)",
     [](output p, output q, output x, output w, output v) {
       return cond(
           p, [&] { return x; },
           [&] {
             return cond(
                 q, [&] { return w; }, [&] { return v * x; }, "inner");
           });
     }},
};

TEST_CASE("gradients through a cond reach inputs used by one branch only, as live zeros") {
  std::vector<double> xv{0.3, -0.7, 1.1}, wv{0.5, 2.0, -1.5}, vv{0.25, -0.5, 0.75};
  for (auto& c : one_branch_cases)
    for (int64_t dim : {int64_t{3}, int64_t{-1}}) {
      CAPTURE(c.label);
      CAPTURE(dim);
      graph g;
      auto p = placeholder(g, dtype::boolean, {}, "p");
      auto q = placeholder(g, dtype::boolean, {}, "q");
      auto x = placeholder(g, dtype::float64, {dim}, "x");
      auto w = placeholder(g, dtype::float64, {dim}, "w");
      auto v = placeholder(g, dtype::float64, {dim}, "v");
      auto loss = reduce_sum(c.build(p, q, x, w, v) * x);
      auto grads = gradients({loss}, {x, w, v});
      session s(g);
      for (int run = 0; run < 2; ++run)
        for (bool pv : {true, false})
          for (bool qv : {true, false}) {
            CAPTURE(run);
            CAPTURE(pv);
            CAPTURE(qv);
            feed_list flags{{p, truth(pv)}, {q, truth(qv)}};
            auto with = [&](std::vector<std::pair<output, std::vector<double>>> values) {
              auto f = flags;
              for (auto& [o, d] : values) f.push_back({o, doubles(d)});
              return f;
            };
            auto got = s.run(with({{x, xv}, {w, wv}, {v, vv}}), grads);
            check_close(got[0].to_vector<double>(),
                        numeric_gradient(s, loss, x, xv, with({{w, wv}, {v, vv}})));
            check_close(got[1].to_vector<double>(),
                        numeric_gradient(s, loss, w, wv, with({{x, xv}, {v, vv}})));
            check_close(got[2].to_vector<double>(),
                        numeric_gradient(s, loss, v, vv, with({{x, xv}, {w, wv}})));
          }
    }
}

TEST_CASE("gradients through a cond reach variables and constants that one branch reads") {
  graph g;
  auto p = placeholder(g, dtype::boolean, {}, "p");
  auto x = make_variable(constant(g, doubles({1, 2})), "x").value();
  auto w = make_variable(constant(g, doubles({3, 4})), "w").value();
  auto v = constant(g, doubles({5, 6}));
  auto c = constant(g, doubles({7, 8}));
  auto y = cond(
      p, [&] { return x * w; }, [&] { return x * c + v; });
  auto grads = gradients({reduce_sum(y)}, {x, w, v, c});
  session s(g);
  s.run({global_variables_initializer(g)});
  for (int run = 0; run < 2; ++run)
    for (bool pv : {true, false}) {
      CAPTURE(pv);
      auto got = s.run({{p, truth(pv)}}, grads);
      using d = std::vector<double>;
      CHECK(got[0].to_vector<double>() == (pv ? d{3, 4} : d{7, 8}));
      CHECK(got[1].to_vector<double>() == (pv ? d{1, 2} : d{0, 0}));
      CHECK(got[2].to_vector<double>() == (pv ? d{0, 0} : d{1, 1}));
      CHECK(got[3].to_vector<double>() == (pv ? d{0, 0} : d{1, 2}));
    }
}

TEST_CASE("gradients through nested conds agree with finite differences") {
  graph g;
  auto p = placeholder(g, dtype::boolean, {}, "p");
  auto q = placeholder(g, dtype::boolean, {}, "q");
  auto x = placeholder(g, dtype::float64, {-1}, "x");
  auto y = cond(
      p,
      [&] {
        return cond(
            q, [&] { return x * x; }, [&] { return exp(x); }, "inner");
      },
      [&] { return x * 5.0; });
  auto loss = reduce_sum(y);
  auto grad = gradients({loss}, {x})[0];
  session s(g);
  std::vector<double> xv{0.2, -0.4};
  for (bool pv : {true, false})
    for (bool qv : {true, false}) {
      CAPTURE(pv);
      CAPTURE(qv);
      feed_list rest{{p, truth(pv)}, {q, truth(qv)}};
      auto feeds = rest;
      feeds.push_back({x, doubles(xv)});
      check_close(s.run(feeds, {grad})[0].to_vector<double>(),
                  numeric_gradient(s, loss, x, xv, rest));
    }
}

TEST_CASE("many steps in flight from several threads take their own branches") {
  branchy b;
  auto v = make_variable(scalar(b.g, 0.0), "count");
  auto y = cond(
      b.pred,
      [&] {
        auto bumped = assign_add(v, scalar(b.g, 1.0));
        auto ready = b.g.control_dependencies({operation(&b.g, bumped.ref().node)});
        return b.x + 100.0;
      },
      [&] { return b.x - 100.0; });
  session s(b.g);
  s.run({global_variables_initializer(b.g)});
  std::atomic<int> taken{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::future<std::vector<tensor>>> inflight;
      std::vector<std::pair<bool, double>> asked;
      for (int i = 0; i < 50; ++i) {
        bool p = rng() % 2 == 0;
        double xv = t * 1000 + i;
        if (p) ++taken;
        inflight.push_back(s.run_async({{b.pred, truth(p)}, {b.x, doubles({xv})}}, {y}));
        asked.emplace_back(p, xv);
      }
      for (size_t i = 0; i < inflight.size(); ++i) {
        double got = *inflight[i].get()[0].data<double>();
        if (got != asked[i].second + (asked[i].first ? 100.0 : -100.0)) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(*s.eval(v.value()).data<double>() == static_cast<double>(taken.load()));
}

TEST_CASE("a graph with a cond is saved and loaded, and runs the same") {
  branchy b;
  auto y = cond(
      b.pred, [&] { return b.x * 2.0; }, [&] { return b.x - 1.0; });
  auto loss = reduce_sum(y * y);
  auto grad = gradients({loss}, {b.x})[0];
  auto loaded = deserialize_graph(serialize_graph(b.g), "a cond");
  session s(*loaded);
  auto px = loaded->output_by_name(b.x.node().name);
  auto pp = loaded->output_by_name(b.pred.node().name);
  auto out =
      s.run({{pp, truth(false)}, {px, doubles({3})}},
            {loaded->output_by_name(y.node().name),
             loaded->output_by_name(grad.node().name + ":" + std::to_string(grad.ref().index))});
  CHECK(*out[0].data<double>() == 2.0);
  CHECK(*out[1].data<double>() == 4.0);  // d (x-1)^2 / dx at 3
}

TEST_CASE("conds on one predicate in both branches of an outer cond gate their inputs apart") {
  graph g;
  auto p = placeholder(g, dtype::boolean, {}, "p");
  auto q = placeholder(g, dtype::boolean, {}, "q");
  auto x = placeholder(g, dtype::float64, {}, "x");
  auto inner = [&](double a, double b) {
    return cond(
        p, [&] { return x + a; }, [&] { return x + b; }, "inner");
  };
  auto y = cond(
      q, [&] { return inner(1, 2); }, [&] { return inner(3, 4); });
  session s(g);
  for (bool qv : {true, false})
    for (bool pv : {true, false}) {
      CAPTURE(qv);
      CAPTURE(pv);
      auto out = s.run({{p, truth(pv)}, {q, truth(qv)}, {x, tensor::scalar<double>(10)}}, {y});
      CHECK(*out[0].data<double>() == 10 + (qv ? (pv ? 1 : 2) : (pv ? 3 : 4)));
    }
}

TEST_CASE("an error on a merge's control input fails the step") {
  branchy b;
  auto bad = reshape(b.x, {7});  // fails unless x has 7 elements
  output y;
  {
    auto after = b.g.control_dependencies({operation(&b.g, bad.ref().node)});
    y = cond(
        b.pred, [&] { return b.x * 2.0; }, [&] { return b.x; });
  }
  session s(b.g);
  auto e = error_of([&] { s.run({{b.pred, truth(true)}, {b.x, doubles({1})}}, {y}); });
  CHECK_MESSAGE(e.find("reshape") != std::string::npos, e);
}
