// session::snapshot_variables and session::restore_variables: every variable's
// value and slots, taken from and given to the variable actors (checkpoints).
#include <string>
#include <vector>

#include "actors/cluster/cluster.hpp"
#include "actors/resources/resource_table.hpp"
#include "actors/run/messages.hpp"
#include "actors/session.hpp"
#include "core/device_name.hpp"

namespace actorflow {

namespace {

std::vector<const node*> variable_nodes(const graph& g) {
  std::vector<const node*> out;
  for (auto& n : g.nodes())
    if (n.def->role == op_role::variable) out.push_back(&n);
  return out;
}

std::string spec_text(const tensor& t) { return tensor_spec{t.type(), t.dims()}.to_string(); }

// A cluster session's variables placed on other tasks live in those tasks'
// processes: this one's actors would only shadow them. Saving or restoring
// them from here fails, naming them, rather than touching the shadows (a
// restore that seems to work and changes nothing). save_checkpoint and
// checkpoint_manager have each task save and restore its own shard instead.
void refuse_remote_variables(const graph& g, const cluster_connection* cluster, const char* what) {
  if (cluster == nullptr) return;
  std::vector<std::string> remote;
  std::string task;
  for (const node* n : variable_nodes(g)) {
    auto placed = device_name::parse(n->device).task_name(cluster->local_task());
    if (placed == cluster->local_task()) continue;
    remote.push_back(n->name);
    task = placed;
  }
  if (remote.empty()) return;
  fail("session", std::string(what) + ": " + (remote.size() == 1 ? "variable " : "variables ") +
                      quoted_list(remote) + " live on other tasks (" + task +
                      (remote.size() > 1 ? " and others" : "") +
                      "), not in this process; a cluster session cannot " + what +
                      " them from here: save_checkpoint, restore_checkpoint and "
                      "checkpoint_manager have each task save and restore its own shard");
}

}  // namespace

std::map<std::string, variable_state> session::snapshot_variables(
    std::chrono::milliseconds timeout) {
  refuse_remote_variables(graph_, cluster_.get(), "save");
  std::vector<std::string> names;
  for (const node* n : variable_nodes(graph_)) names.push_back(n->name);
  return resources_->snapshot(names, timeout);
}

void session::restore_variables(const std::map<std::string, variable_state>& states,
                                std::chrono::milliseconds timeout) {
  // Check everything before changing any actor.
  refuse_remote_variables(graph_, cluster_.get(), "restore");
  auto vars = variable_nodes(graph_);
  std::vector<std::string> missing, problems;
  for (const node* n : vars) {
    auto it = states.find(n->name);
    if (it == states.end()) {
      missing.push_back(n->name);
      continue;
    }
    const tensor_spec& spec = n->outputs[0];
    const variable_state& state = it->second;
    if (!state.value.valid())
      problems.push_back("variable '" + n->name + "' has no value to restore");
    else if (state.value.type() != spec.type || state.value.dims() != spec.dims)
      problems.push_back("variable '" + n->name + "' is " + spec.to_string() +
                         " in the graph but " + spec_text(state.value) + " in what is restored");
    for (auto& [slot, value] : state.slots)
      if (!value.valid())
        problems.push_back("variable '" + n->name + "' slot '" + slot + "' is an empty tensor");
  }
  if (!missing.empty())
    problems.insert(problems.begin(),
                    "no value for " +
                        std::string(missing.size() == 1 ? "variable " : "variables ") +
                        quoted_list(missing));
  if (!problems.empty()) {
    std::string text;
    for (auto& p : problems) text += (text.empty() ? "" : "; ") + p;
    fail("session", "restore: " + text + " (nothing was restored)");
  }

  std::map<std::string, variable_state> restored;
  for (const node* n : vars) restored.emplace(n->name, states.at(n->name));
  resources_->restore(restored, timeout);
}

}  // namespace actorflow
