// What actorflow-train sees inside its steps: --trace-steps writes the named
// steps' timelines (Chrome trace JSON, actors/trace/chrome_trace.hpp) to --out, and
// --profile traces every step and prints the per-op table at the end
// (actors/trace/op_profile.hpp). A timeline that cannot be written is a warning:
// training goes on.
#pragma once
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "actors/session.hpp"
#include "actors/trace/op_profile.hpp"

namespace actorflow::apps {

struct observer_options {
  std::string out;  // where trace-<step>.json go
  std::string file_prefix = "trace-";
  std::vector<int64_t> trace_steps;  // 1-based: the Nth step of this run
  bool profile = false;
};

class step_observer {
 public:
  explicit step_observer(observer_options options);

  /// Runs this run's step `n` (1-based) of `s`, traced when asked.
  std::vector<tensor> run(session& s, int64_t n, const feed_list& feeds,
                          const std::vector<output>& fetches,
                          const std::vector<operation>& targets);
  /// Whether any step is traced (a caller may skip the observer otherwise).
  bool active() const { return options_.profile || !pending_.empty(); }
  /// The end of the run at step `last_step`: prints the profile table and
  /// says which --trace-steps never came.
  void finish(int64_t last_step, std::ostream& out);
  const op_profile& profile() const { return profile_; }
  /// The timeline files written so far.
  const std::vector<std::string>& written() const { return written_; }

 private:
  void write_trace(int64_t n, const run_metadata& md);

  observer_options options_;
  std::set<int64_t> pending_;
  op_profile profile_;
  std::vector<std::string> written_;
  bool warned_ = false;
};

}  // namespace actorflow::apps
