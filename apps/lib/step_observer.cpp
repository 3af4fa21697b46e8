#include "apps/lib/step_observer.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "actors/trace/chrome_trace.hpp"

namespace actorflow::apps {

step_observer::step_observer(observer_options options)
    : options_(std::move(options)),
      pending_(options_.trace_steps.begin(), options_.trace_steps.end()) {}

std::vector<tensor> step_observer::run(session& s, int64_t n, const feed_list& feeds,
                                       const std::vector<output>& fetches,
                                       const std::vector<operation>& targets) {
  const bool wanted = pending_.count(n) > 0;
  if (!wanted && !options_.profile) return s.run(feeds, fetches, targets);
  run_metadata md;
  std::vector<tensor> result;
  try {
    result = s.run(run_options{.trace = true}, feeds, fetches, targets, &md);
  } catch (...) {
    if (wanted) write_trace(n, md);  // a failed step's timeline helps most
    throw;
  }
  if (wanted) write_trace(n, md);
  if (options_.profile) profile_.add(md);
  return result;
}

void step_observer::write_trace(int64_t n, const run_metadata& md) {
  pending_.erase(n);
  std::string path =
      (std::filesystem::path(options_.out) / fmt::format("{}{}.json", options_.file_prefix, n))
          .string();
  try {
    std::filesystem::create_directories(options_.out);
    write_chrome_trace(path, md);
    written_.push_back(path);
  } catch (const std::exception& e) {
    // Training goes on: the timeline is not worth the run.
    if (!warned_) fmt::print(stderr, "warning: step {}'s timeline not written: {}\n", n, e.what());
    warned_ = true;
  }
}

void step_observer::finish(int64_t last_step, std::ostream& out) {
  if (!pending_.empty()) {
    std::string missed;
    for (auto n : pending_) missed += (missed.empty() ? "" : ",") + std::to_string(n);
    out << fmt::format("note: --trace-steps {}: the run ended at step {}, before them\n", missed,
                       last_step);
  }
  for (auto& path : written_) out << "timeline: " << path << "\n";
  if (options_.profile && profile_.steps() > 0)
    out << "profile of " << profile_.steps() << " steps (--profile):\n" << profile_.table();
}

}  // namespace actorflow::apps
