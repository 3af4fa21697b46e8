// One line of a session's placement log: where a node runs and why
// (actors/placement.hpp makes them). Apart, so that session.hpp needs
// nothing of the runtime.
#pragma once
#include <string>
#include <vector>

#include "core/export.hpp"

namespace actorflow {

/// Where one node runs, and why (the placement log).
struct ACTORFLOW_API placement_entry {
  std::string node;
  std::string op;
  std::string device;  // "/cpu:1"
  std::string reason;  // "hint '/cpu:1'", "with its resource 'w'", "default", ...
};

/// "node (op) -> device: reason", one line per entry.
ACTORFLOW_API std::string to_string(const std::vector<placement_entry>& log);

}  // namespace actorflow
