// A traced step's timeline (actors/trace/step_trace.hpp) in the Chrome trace-event
// JSON format, which Perfetto (ui.perfetto.dev) and chrome://tracing load:
// one process per cluster task, one track per thread that ran kernels (the
// actors' CAF workers and each device's TBB pool threads, named so), the
// launches on an accelerator and the requests to resource actors as async
// slices per device; flow arrows for the values between nodes (a send to its
// recv in another task too). Times are microseconds from the step's start.
#pragma once
#include <string>

#include "actors/trace/step_trace.hpp"
#include "core/export.hpp"

namespace actorflow {

/// The trace-event JSON of one step.
ACTORFLOW_API std::string chrome_trace_json(const run_metadata& step);

/// Writes chrome_trace_json(step) to `path` (atomically: a temporary file
/// renamed over it). Throws actorflow::error naming the file and the
/// system's reason when it cannot.
ACTORFLOW_API void write_chrome_trace(const std::string& path, const run_metadata& step);

}  // namespace actorflow
