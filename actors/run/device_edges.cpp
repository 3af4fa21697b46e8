#include "actors/run/device_edges.hpp"

#include <algorithm>
#include <map>

namespace actorflow {

namespace {

bool passes_on(node_kind k) {
  switch (k) {
    case node_kind::enter_frame:
    case node_kind::exit_frame:
    case node_kind::switch_value:
    case node_kind::merge_values:
    case node_kind::loop_merge:
    case node_kind::history_push:
    case node_kind::history_read:
      return true;
    default:
      return false;
  }
}

// Whether slot `slot` of `plan` takes the value the node passes on (not a
// predicate, an index or a control input).
bool passed_slot(const node_plan& plan, int32_t slot) {
  switch (plan.kind) {
    case node_kind::loop_merge:
      return slot == 0 || slot == 1;  // from its enter; from the body
    case node_kind::merge_values:
      return plan.slot_input[static_cast<size_t>(slot)] >= 0;
    case node_kind::history_read:
      return false;  // its inputs are iteration indices
    default:
      return plan.slot_input[static_cast<size_t>(slot)] == 0;
  }
}

// Whether output `index` of `plan` is the value it passes on (a switch's
// both; a merge's index and an exit's count are made on the host).
bool passed_output(const node_plan& plan, int index) {
  return plan.kind == node_kind::switch_value || index == 0;
}

class device_edge_rule {
 public:
  device_edge_rule(const std::vector<plan_edge>& edges,
                   const std::vector<std::shared_ptr<node_plan>>& plans,
                   const std::vector<int>& device_of, const std::vector<bool>& on_accelerator)
      : edges_(edges),
        plans_(plans),
        device_of_(device_of),
        on_accelerator_(on_accelerator),
        out_edges_(plans.size()) {
    for (size_t e = 0; e < edges.size(); ++e)
      out_edges_[static_cast<size_t>(edges[e].from.node)].push_back(e);
    for (auto& plan : plans)
      if (plan && plan->history) readers_of_[plan->history.get()];
    for (size_t id = 0; id < plans.size(); ++id)
      if (plans[id] && plans[id]->kind == node_kind::history_read)
        readers_of_[plans[id]->history.get()].push_back(static_cast<int>(id));
  }

  std::vector<bool> solve() {
    // The greatest fixed point: every node that passes on may take device
    // memory until one of its consumers cannot.
    passes_device_.assign(plans_.size(), false);
    for (size_t id = 0; id < plans_.size(); ++id)
      passes_device_[id] = plans_[id] && on_accelerator_[id] && passes_on(plans_[id]->kind);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t id = 0; id < plans_.size(); ++id)
        if (passes_device_[id] && !all_consumers_take_device(static_cast<int>(id))) {
          passes_device_[id] = false;
          changed = true;
        }
    }
    std::vector<bool> carries(edges_.size());
    for (size_t e = 0; e < edges_.size(); ++e) carries[e] = takes_device(edges_[e]);
    return carries;
  }

 private:
  // Whether the edge's consumer takes device memory: a kernel on the
  // producer's accelerator, or a node there that passes it on to such.
  bool takes_device(const plan_edge& ed) const {
    auto from = static_cast<size_t>(ed.from.node);
    if (ed.control || ed.to_node < 0 || !on_accelerator_[from]) return false;
    auto to = static_cast<size_t>(ed.to_node);
    if (device_of_[to] != device_of_[from] || !plans_[to]) return false;
    const node_plan& consumer = *plans_[to];
    if (consumer.kind == node_kind::kernel) {
      if (!consumer.accel) return false;  // it runs in host memory
      int input = consumer.slot_input[static_cast<size_t>(ed.slot)];
      const auto& on_host = consumer.def->host_memory_inputs;
      return std::find(on_host.begin(), on_host.end(), input) == on_host.end();
    }
    return passes_device_[to] && passed_slot(consumer, ed.slot);
  }

  bool all_consumers_take_device(int id) const {
    const node_plan& plan = *plans_[static_cast<size_t>(id)];
    // An exit copies its value out itself, once, for consumers off the
    // device (loop_nodes.cpp): the loop need not copy every iteration.
    if (plan.kind == node_kind::exit_frame) return true;
    if (plan.kind == node_kind::history_push) {  // what it saves, its readers pass on
      for (int reader : readers_of_.at(plan.history.get()))
        if (device_of_[static_cast<size_t>(reader)] != device_of_[static_cast<size_t>(id)] ||
            !passes_device_[static_cast<size_t>(reader)])
          return false;
      return true;
    }
    for (size_t e : out_edges_[static_cast<size_t>(id)]) {
      const plan_edge& ed = edges_[e];
      if (!ed.control && passed_output(plan, ed.from.index) && !takes_device(ed)) return false;
    }
    return true;
  }

  const std::vector<plan_edge>& edges_;
  const std::vector<std::shared_ptr<node_plan>>& plans_;
  const std::vector<int>& device_of_;
  const std::vector<bool>& on_accelerator_;
  std::vector<std::vector<size_t>> out_edges_;  // by producer
  std::map<const loop_history*, std::vector<int>> readers_of_;
  std::vector<bool> passes_device_;
};

}  // namespace

std::vector<bool> device_edges(const std::vector<plan_edge>& edges,
                               const std::vector<std::shared_ptr<node_plan>>& plans,
                               const std::vector<int>& device_of,
                               const std::vector<bool>& on_accelerator) {
  return device_edge_rule(edges, plans, device_of, on_accelerator).solve();
}

}  // namespace actorflow
