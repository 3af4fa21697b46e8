// What every device actor understands: a task to run on its pool or stream.
#pragma once
#include <caf/all.hpp>
#include <functional>

#include "core/export.hpp"

namespace actorflow {

/// A piece of work for a device; it sends its own results when done.
struct ACTORFLOW_API device_task {
  std::function<void()> run;
};

using run_atom = caf::atom_constant<caf::atom("run")>;

}  // namespace actorflow

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::device_task)
