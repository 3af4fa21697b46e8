#include "actors/compile/signature.hpp"

#include <string>
#include <unordered_map>

namespace actorflow {

namespace {

// A loop merge's back edge is an attribute of its next_iteration (the graph
// keeps topological order), so the walk from the fetches adds it by hand.
std::unordered_map<std::string, int> next_iteration_of_merge(const graph& g) {
  std::unordered_map<std::string, int> back;
  for (auto& n : g.nodes())
    if (n.def->role == op_role::next_iteration)
      back[get_attr_or<std::string>(n.attrs, "merge", n.op, "")] = n.id;
  return back;
}

}  // namespace

std::vector<bool> needed_nodes(const graph& g, const run_signature& sig, bool follow_resources) {
  std::vector<bool> needed(g.size(), false);
  auto back_edges = next_iteration_of_merge(g);
  std::unordered_map<std::string, std::vector<int>> pushes;
  for (auto& n : g.nodes())
    if (n.def->role == op_role::history_push)
      pushes[get_attr<std::string>(n.attrs, "history", n.op)].push_back(n.id);
  std::vector<int> stack;
  for (auto& f : sig.fetches) stack.push_back(f.node);
  for (int t : sig.targets) stack.push_back(t);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[static_cast<size_t>(id)]) continue;
    needed[static_cast<size_t>(id)] = true;
    auto& n = g.at(id);
    size_t first = !follow_resources && n.def->acts_on_resource() ? 1 : 0;
    for (size_t i = first; i < n.inputs.size(); ++i) stack.push_back(n.inputs[i].node);
    for (int c : n.control_inputs) stack.push_back(c);
    if (n.def->role == op_role::merge_values && n.attrs.count("frame"))
      if (auto it = back_edges.find(n.name); it != back_edges.end()) stack.push_back(it->second);
    if (n.def->role == op_role::history_read)  // it reads what the pushes of its history save
      for (int push : pushes[get_attr<std::string>(n.attrs, "history", n.op)])
        stack.push_back(push);
  }
  return needed;
}

}  // namespace actorflow
