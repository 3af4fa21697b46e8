#include "actors/cluster/task_server.hpp"

#include <iostream>
#include <map>

#include "actors/resources/resource_table.hpp"
#include "actors/run/executable.hpp"
#include "actors/run/messages.hpp"
#include "schema/checkpoint_dir.hpp"
#include "schema/graph_io.hpp"

namespace actorflow {

namespace {

struct registered_partition {
  std::unique_ptr<graph> g;
  std::shared_ptr<executable> exe;
  caf::actor_addr owner;
};

struct task_server_state {
  runtime* rt = nullptr;
  task_server_options options;
  std::shared_ptr<resource_table> resources;
  std::map<uint64_t, registered_partition> partitions;
  uint64_t next_id = 1;
};

using server_actor = caf::stateful_actor<task_server_state, caf::event_based_actor>;

caf::error refusal(const std::string& text) {
  return caf::make_error(caf::sec::runtime_error, text);
}

using register_reply =
    caf::result<uint64_t, caf::actor, std::vector<std::string>, std::vector<caf::actor>>;

register_reply register_partition(server_actor* self, const caf::actor& owner,
                                  const std::string& bytes, const std::vector<std::string>& feeds,
                                  const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets) {
  auto& st = self->state;
  if (!owner) return refusal("register: no owner actor");
  registered_partition p;
  try {
    p.g = deserialize_graph(bytes, "partition for " + st.options.task);
    run_signature sig;
    for (auto& f : feeds) sig.feeds.push_back(p.g->output_by_name(f).ref());
    for (auto& f : fetches) sig.fetches.push_back(p.g->output_by_name(f).ref());
    for (auto& t : targets) sig.targets.push_back(p.g->operation_by_name(t).id());
    auto* resources = st.resources.get();
    p.exe = std::make_shared<executable>(
        *p.g, sig, *st.rt,
        [resources](const node& n, const local_device& d) { return resources->actor_for(n, &d); },
        st.options.task);
  } catch (const std::exception& e) {
    return refusal("task " + st.options.task + ": " + e.what());
  }
  std::vector<std::string> names;
  std::vector<caf::actor> actors;
  for (auto& [name, actor] : p.exe->recvs()) {
    names.push_back(name);
    actors.push_back(actor);
  }
  uint64_t id = st.next_id++;
  auto coordinator = p.exe->coordinator();
  p.owner = owner.address();
  self->monitor(owner);
  st.partitions.emplace(id, std::move(p));
  return {id, coordinator, std::move(names), std::move(actors)};
}

caf::result<bool> connect_sends(server_actor* self, uint64_t id,
                                const std::vector<std::string>& sends,
                                const std::vector<caf::actor>& recvs) {
  auto it = self->state.partitions.find(id);
  if (it == self->state.partitions.end())
    return refusal("task " + self->state.options.task + ": no partition " + std::to_string(id));
  if (sends.size() != recvs.size()) return refusal("connect: names and actors differ in number");
  try {
    for (size_t i = 0; i < sends.size(); ++i) it->second.exe->connect(sends[i], recvs[i]);
  } catch (const std::exception& e) {
    return refusal("task " + self->state.options.task + ": " + e.what());
  }
  return true;
}

caf::result<std::string> save_shard(server_actor* self, int64_t step) {
  auto& st = self->state;
  if (st.options.checkpoint_dir.empty())
    return refusal("task " + st.options.task + " has no checkpoint directory (--checkpoint-dir)");
  try {
    checkpoint_data data;
    data.global_step = step;
    std::vector<std::string> names;
    for (auto& [name, actor] : st.resources->variables()) names.push_back(name);
    data.variables = st.resources->snapshot(names, std::chrono::seconds(60));
    checkpoint_directory shards(st.options.checkpoint_dir, st.options.keep_checkpoints);
    return shards.save_data(data, step);
  } catch (const std::exception& e) {
    return refusal("task " + st.options.task + ": saving its shard failed: " + e.what());
  }
}

void restore_latest_shard(resource_table& resources, const task_server_options& options) {
  if (options.checkpoint_dir.empty()) return;
  checkpoint_directory shards(options.checkpoint_dir, options.keep_checkpoints);
  std::vector<std::string> errors;
  std::string path;
  auto data = shards.load_latest(errors, &path);
  for (auto& e : errors) std::cerr << "[task_server] " << options.task << ": " << e << "\n";
  if (!data) {
    if (!errors.empty())
      fail("task_server",
           options.task + ": no readable checkpoint shard in '" + options.checkpoint_dir + "'");
    return;
  }
  resources.restore(data->variables, std::chrono::seconds(60));
  std::cerr << "[task_server] " << options.task << " restored " << data->variables.size()
            << " variables from " << path << " (step " << data->global_step << ")\n";
}

// CAF's defaults end an actor on an error message and print every unknown
// message: a peer could stop the server with one message (even by making it
// answer itself) or flood the log. (An exception in a handler ends an actor
// in CAF 0.17 whatever its handler says: the handlers below catch them.)
void survive_any_message(server_actor* self) {
  self->set_default_handler(caf::drop);
  self->set_error_handler([self](caf::error& e) {
    std::cerr << "[task_server] " << self->state.options.task
              << " ignored an error sent to it: " << error_text(e) << "\n";
  });
}

caf::behavior task_server(server_actor* self, runtime* rt, task_server_options options,
                          std::shared_ptr<resource_table> resources) {
  auto& st = self->state;
  st.rt = rt;
  st.options = std::move(options);
  st.resources = std::move(resources);
  survive_any_message(self);
  // A client that goes away takes its partitions with it.
  self->set_down_handler([self](caf::down_msg& down) {
    auto& parts = self->state.partitions;
    for (auto it = parts.begin(); it != parts.end();)
      it = it->second.owner == down.source ? parts.erase(it) : std::next(it);
  });
  return {
      [self](hello_atom) { return self->state.options.task; },
      [self](register_atom, const caf::actor& owner, const std::string& bytes,
             const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
             const std::vector<std::string>& targets) -> register_reply {
        return register_partition(self, owner, bytes, feeds, fetches, targets);
      },
      [self](connect_atom, uint64_t id, const std::vector<std::string>& sends,
             const std::vector<caf::actor>& recvs) -> caf::result<bool> {
        return connect_sends(self, id, sends, recvs);
      },
      [self](release_atom, uint64_t id) { self->state.partitions.erase(id); },
      [self](save_atom, int64_t step) -> caf::result<std::string> {
        return save_shard(self, step);
      },
      [self](ping_atom) { return self->state.options.task; },
  };
}

}  // namespace

caf::actor spawn_task_server(runtime& rt, const task_server_options& options) {
  auto resources = std::make_shared<resource_table>(rt);
  restore_latest_shard(*resources, options);
  return rt.system().spawn<caf::detached>(task_server, &rt, options, std::move(resources));
}

std::string error_text(const caf::error& e) {
  if (e.category() == caf::atom("system") && !e.context().empty() &&
      e.context().match_element<std::string>(0))
    return e.context().get_as<std::string>(0);
  if (e == caf::sec::request_timeout) return "no answer in time";
  return caf::to_string(e);
}

error_code error_code_of(const caf::error& e) {
  if (e == caf::sec::runtime_error) return error_code::invalid_argument;  // a refusal
  return error_code::unavailable;
}

}  // namespace actorflow
