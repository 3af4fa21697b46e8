// Which edges carry a value in an accelerator's memory rather than a host
// copy. A kernel on an accelerator takes its inputs either way (it copies a
// host one in). A node that passes values on (a loop's enter, merge, switch
// and exit, a cond's switch and merge, a loop gradient's history) runs on
// the host and passes on what it gets, device memory included, so that a
// loop body on an accelerator launches iteration after iteration without a
// copy; it may take device memory only where everything it passes to, in
// turn, can: its consumers on that device, kernels or nodes that pass on in
// their turn. Where one cannot (a fetch of a loop's output, a consumer on
// another device), the values reach it as host copies, made by the kernel
// that produced them. A predicate always comes to the host: only what
// decides the control flow leaves the device.
#pragma once
#include <memory>
#include <vector>

#include "actors/run/chains.hpp"
#include "actors/run/node_plan.hpp"

namespace actorflow {

/// For each edge: whether it carries device memory. `plans` by node id
/// (null for nodes with no actor); `on_accelerator` by node id: whether the
/// node runs on an accelerator (a kernel of integers placed there runs on
/// the host: actors/compile/placement.hpp's runs_in_host_memory); `device_of` by node id.
std::vector<bool> device_edges(const std::vector<plan_edge>& edges,
                               const std::vector<std::shared_ptr<node_plan>>& plans,
                               const std::vector<int>& device_of,
                               const std::vector<bool>& on_accelerator);

}  // namespace actorflow
