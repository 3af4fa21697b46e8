// session::snapshot_variables and session::restore_variables: every variable's
// value and slots, taken from and given to the variable actors (checkpoints).
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/session.hpp"

namespace actorflow {

namespace {

std::vector<const node*> variable_nodes(const graph& g) {
  std::vector<const node*> out;
  for (auto& n : g.nodes())
    if (n.op == "variable") out.push_back(&n);
  return out;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (auto& name : names) s += (s.empty() ? "'" : ", '") + name + "'";
  return s;
}

std::string spec_text(const tensor& t) { return tensor_spec{t.type(), t.dims()}.to_string(); }

}  // namespace

std::map<std::string, variable_state> session::snapshot_variables(
    std::chrono::milliseconds timeout) {
  std::vector<std::pair<std::string, caf::actor>> actors;
  std::vector<std::string> uninitialized;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const node* n : variable_nodes(graph_)) {
      auto it = variables_.find(n->name);
      // No actor yet: no step has touched it, so nothing set it.
      if (it == variables_.end())
        uninitialized.push_back(n->name);
      else
        actors.emplace_back(n->name, it->second);
    }
  }
  std::map<std::string, variable_state> out;
  caf::scoped_actor self{runtime_->system()};
  for (auto& [name, actor] : actors) {
    std::string failure;
    self->request(actor, timeout, snapshot_atom::value)
        .receive(
            [&](variable_state& state) {
              if (!state.initialized())
                uninitialized.push_back(name);
              else
                out.emplace(name, std::move(state));
            },
            [&](caf::error& e) { failure = caf::to_string(e); });
    if (!failure.empty())
      fail("session", "snapshot: the actor of variable '" + name + "' did not answer: " + failure);
  }
  if (!uninitialized.empty())
    fail("session",
         "snapshot: " + std::string(uninitialized.size() == 1 ? "variable " : "variables ") +
             quoted_list(uninitialized) + " not initialized (run the initializers first)");
  return out;
}

void session::restore_variables(const std::map<std::string, variable_state>& states,
                                std::chrono::milliseconds timeout) {
  // Check everything before changing any actor.
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

  std::vector<std::pair<std::string, caf::actor>> actors;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const node* n : vars) actors.emplace_back(n->name, variable_actor(n->name));
  }
  caf::scoped_actor self{runtime_->system()};
  for (auto& [name, actor] : actors) {
    std::string failure;
    self->request(actor, timeout, restore_atom::value, states.at(name))
        .receive([](bool) {}, [&](caf::error& e) { failure = caf::to_string(e); });
    if (!failure.empty())
      fail("session", "restore: the actor of variable '" + name + "' did not answer (" + failure +
                          "); the variables may be partly restored");
  }
}

}  // namespace actorflow
