// Stragglers and backup workers (the paper's section 6.3; the long form is
// `actorflow-bench --only stragglers`): actorflow-train --straggler-delay's
// text and its errors, its draws (a pure function of seed, worker and step,
// from a heavy-tailed distribution), and a synchronous cluster of simulated
// stragglers whose backup worker is killed with -9 mid-run and never comes
// back: every global step is still made. Every process started here is
// stopped by the harness that starts it (tests/support/cluster_chaos.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "apps/lib/straggler_delay.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/cluster_chaos.hpp"
#include "tests/test_util.hpp"

using actorflow::apps::max_straggler_delay_ms;
using actorflow::apps::parse_straggler_delay;
using actorflow::apps::straggler_delay;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using namespace std::chrono_literals;

namespace {

// Worker w's draws of steps 1..n, for every worker below `workers`.
std::vector<double> draws(const straggler_delay& d, int workers, int64_t n) {
  std::vector<double> ms;
  for (int w = 0; w < workers; ++w)
    for (int64_t s = 1; s <= n; ++s) ms.push_back(d.draw_ms(7, w, s));
  std::sort(ms.begin(), ms.end());
  return ms;
}

double at_quantile(const std::vector<double>& sorted, double q) {
  return sorted[size_t(q * double(sorted.size() - 1))];
}

}  // namespace

TEST_CASE("--straggler-delay: off by default; a malformed text names what is wrong") {
  CHECK_FALSE(parse_straggler_delay("").enabled());
  auto d = parse_straggler_delay("lognormal:100:0.8");
  CHECK(d.distribution == straggler_delay::kind::lognormal);
  CHECK(d.scale_ms == 100);
  CHECK(d.shape == doctest::Approx(0.8));
  CHECK(parse_straggler_delay("pareto:20:1.5").distribution == straggler_delay::kind::pareto);
  auto why = [](const char* text) { return error_of([&] { parse_straggler_delay(text); }); };
  CHECK(contains(why("gamma:1:2"), "unknown distribution 'gamma'"));
  CHECK(contains(why("lognormal"), "lognormal takes 2 parameters, got 0"));
  CHECK(contains(why("pareto:1:2:3"), "pareto takes 2 parameters, got 3"));
  CHECK(contains(why("lognormal:abc:1"), "MEDIAN_MS must be a number (got 'abc')"));
  CHECK(contains(why("lognormal:100:"), "SIGMA must be a number (got '')"));
  CHECK(contains(why("lognormal:-5:1"), "MEDIAN_MS must be greater than 0"));
  CHECK(contains(why("lognormal:100:9"), "SIGMA must be greater than 0 and at most 5 (got 9)"));
  CHECK(contains(why("pareto:0:2"), "MIN_MS must be greater than 0"));
  CHECK(contains(why("pareto:10:0.1"), "ALPHA must be greater than 0.1"));
  CHECK(contains(why("pareto:10:inf"), "ALPHA must be a number"));
  CHECK(contains(why("lognormal:20000:1"), "at most 10000"));
}

TEST_CASE("actorflow-train refuses a bad --straggler-delay, and one outside a cluster") {
  actorflow::testing::child_process bad(
      {ACTORFLOW_TRAIN_BINARY, "--straggler-delay", "lognormal:ten:1"});
  CHECK(bad.wait_exit(30s) != 0);
  CHECK(contains(bad.output(), "--straggler-delay: 'lognormal:ten:1': MEDIAN_MS must be a number"));
  actorflow::testing::child_process alone(
      {ACTORFLOW_TRAIN_BINARY, "--straggler-delay", "lognormal:10:1", "--max-steps", "1"});
  CHECK(alone.wait_exit(30s) == 1);
  CHECK(
      contains(alone.output(), "--straggler-delay is for the workers of an image model's cluster"));
}

TEST_CASE("straggler draws: the same for (seed, worker, step) in every run, heavy-tailed") {
  auto d = parse_straggler_delay("lognormal:100:0.8");
  // A pure function: what a run with b = 0 draws for worker 3's step 41,
  // a run with b = 4 draws too.
  CHECK(d.draw_ms(1, 3, 41) == d.draw_ms(1, 3, 41));
  CHECK(d.draw_ms(1, 3, 41) != d.draw_ms(1, 3, 42));
  CHECK(d.draw_ms(1, 3, 41) != d.draw_ms(1, 4, 41));
  CHECK(d.draw_ms(1, 3, 41) != d.draw_ms(2, 3, 41));
  CHECK(straggler_delay{}.draw_ms(1, 3, 41) == 0);

  // Log-normal: median 100 ms, the 90th and 99th percentiles at
  // exp(0.8 z) times it (z = 1.2816, 2.3263): 279 and 643 ms.
  auto ln = draws(d, 16, 2000);
  CHECK(at_quantile(ln, 0.5) == doctest::Approx(100).epsilon(0.04));
  CHECK(at_quantile(ln, 0.9) == doctest::Approx(279).epsilon(0.05));
  CHECK(at_quantile(ln, 0.99) == doctest::Approx(643).epsilon(0.08));

  // Pareto: never below its minimum, and P(X > 10 x min) = 10^-alpha.
  auto pareto = draws(parse_straggler_delay("pareto:10:1.5"), 16, 2000);
  CHECK(pareto.front() >= 10);
  double beyond = double(pareto.end() - std::upper_bound(pareto.begin(), pareto.end(), 100.0));
  CHECK(beyond / double(pareto.size()) == doctest::Approx(std::pow(10, -1.5)).epsilon(0.15));

  // The far tail is cut at the cap (10 s).
  auto wild = draws(parse_straggler_delay("lognormal:5000:5"), 4, 500);
  CHECK(wild.back() == max_straggler_delay_ms);
}

TEST_CASE(
    "stragglers, sync 2 of 3 workers: a backup worker killed with -9 mid-run for good, every "
    "step is still made") {
  actorflow::testing::chaos_options o;
  o.train_binary = ACTORFLOW_TRAIN_BINARY;
  o.ps = 1, o.workers = 3;
  o.worker_flags = {
      "--sync",          "--backup-workers", "1", "--max-steps", "300", "--straggler-delay",
      "lognormal:20:0.5"};
  o.victims = {{"worker", 2}};
  o.restart = false;
  // One kill, 3 s after the first step (of some 12 s of steps).
  o.kill_every_min = o.kill_every_max = 3;
  o.chaos_seconds = 4;
  o.timeout_seconds = 120;
  auto r = actorflow::testing::run_chaos(o);
  MESSAGE(r.table());
  INFO(r.problems());
  CHECK(r.problems().empty());
  REQUIRE(r.kills.size() == 1);
  CHECK(r.kills[0].task.name() == "worker2");
  CHECK(r.kills[0].step_before < 250);  // mid-run
  CHECK(r.exit_status["worker0"] == 0);
  CHECK(r.exit_status["worker1"] == 0);
  // Every global step aggregated once, in order, up to the last.
  REQUIRE(r.aggregations.size() == 300);
  for (size_t i = 0; i < r.aggregations.size(); ++i)
    CHECK(r.aggregations[i].first == int64_t(i + 1));
  CHECK(r.test_acc > 0.7);
}
