// --straggler-delay: stragglers injected into a cluster worker's steps, for
// the paper's backup-worker experiment (section 6.3, Figure 8). Before each
// of its steps a worker sleeps for a draw from a heavy-tailed distribution,
// as if that step's computation had been slow. A draw is a pure function of
// (--seed, the worker's index, the worker's own step number), so every run of
// the same flags, whatever its number of backup workers, delays worker i's
// s-th step alike.
//
// The flag's text (off when empty):
//   lognormal:MEDIAN_MS:SIGMA   exp(N(ln MEDIAN_MS, SIGMA^2)) ms
//   pareto:MIN_MS:ALPHA         MIN_MS * U^(-1/ALPHA) ms (U uniform in (0, 1])
// Each draw is capped at max_straggler_delay_ms (10 s).
#pragma once
#include <cstdint>
#include <string>

namespace actorflow::apps {

/// The longest delay one step gets (ms): the distributions' far tails are
/// cut here, so that the chief's wait for a delayed gradient stays well
/// below the cluster's step timeout (60 s, or --recovery-seconds if less:
/// keep that above 10 s with stragglers).
constexpr double max_straggler_delay_ms = 10000;

struct straggler_delay {
  enum class kind { none, lognormal, pareto };
  kind distribution = kind::none;
  double scale_ms = 0;  ///< lognormal: the median; pareto: the minimum
  double shape = 0;     ///< lognormal: sigma of the logarithm; pareto: alpha

  bool enabled() const { return distribution != kind::none; }
  /// Worker `worker`'s delay before its `step`-th own step (from 1), in ms.
  double draw_ms(int64_t seed, int worker, int64_t step) const;
  /// Sleeps the calling thread for draw_ms (nothing when disabled). Called
  /// from a worker's training loop, a thread of its own: no actor waits.
  void sleep_before(int64_t seed, int worker, int64_t step) const;
};

/// Parses the flag's text ("" is none). Throws actorflow::error naming what
/// is wrong: the distribution, the number of fields, or which parameter.
straggler_delay parse_straggler_delay(const std::string& text);

/// The flag's check for CLI11: "" when `text` parses, else why not.
std::string straggler_delay_error(const std::string& text);

}  // namespace actorflow::apps
