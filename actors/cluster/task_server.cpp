#include "actors/cluster/task_server.hpp"

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>

#include "actors/cluster/checkpoint_shards.hpp"
#include "actors/resources/resource_table.hpp"
#include "actors/run/executable.hpp"
#include "actors/run/messages.hpp"
#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"
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
  // Checkpoints: when each freeze began (for the pause it reports), and the
  // values of a restore prepared but not yet committed.
  struct freeze_time {
    double began = 0, hold_s = 0;
  };
  std::map<uint64_t, freeze_time> frozen_at;
  std::map<uint64_t, std::map<std::string, variable_state>> staged;
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
        [resources](const node& n, const local_device& d) {
          return resources->resource_for(n, &d);
        },
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

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Holds every variable's updates for a consistent snapshot; answers how many.
caf::result<uint64_t> prepare_snapshot(server_actor* self, uint64_t id, int64_t hold_ms) {
  auto& st = self->state;
  try {
    st.frozen_at[id] = {seconds_now(), double(hold_ms) / 1000.0};
    return uint64_t(
        st.resources->freeze(id, std::chrono::milliseconds(hold_ms), std::chrono::seconds(30)));
  } catch (const std::exception& e) {
    st.frozen_at.erase(id);
    return refusal("task " + st.options.task + ": " + e.what());
  }
}

constexpr double min_write_bytes_per_second = double(uint64_t{1} << 20);

// The task's part of a cluster checkpoint, written off the server's thread.
struct shard_write {
  std::string task, path;
  checkpoint_data data;
  double pause_ms = 0;
  double bytes_per_second = 0;
};

// Writes the shard and answers its manifest fragment (serialize_manifest:
// one shard, its variables), then ends.
caf::behavior shard_writer(caf::event_based_actor* self, std::shared_ptr<shard_write> w) {
  return {[self, w](write_atom) -> caf::result<std::string> {
    self->quit();
    try {
      written_file written = save_checkpoint_file(w->data, w->path, default_checkpoint_chunk_bytes,
                                                  w->bytes_per_second);
      checkpoint_manifest fragment;
      fragment.step = w->data.global_step;
      fragment.pause_ms = w->pause_ms;
      manifest_shard shard;
      shard.file = std::filesystem::path(w->path).filename().string();
      shard.bytes = written.bytes;
      shard.crc32 = written.crc32;
      shard.task = w->task;
      fragment.shards.push_back(shard);
      for (auto& [name, state] : w->data.variables)
        fragment.variables.push_back(
            {name, state.value.type(), state.value.dims().dims(), 0, partition_info{}});
      return serialize_manifest(fragment);
    } catch (const std::exception& e) {
      return refusal("task " + w->task + ": writing its shard failed: " + e.what());
    }
  }};
}

// Takes the frozen variables (references, no copies), lets updates go on,
// and writes the shard in the background; answers when it is written.
caf::result<std::string> commit_snapshot(server_actor* self, uint64_t id,
                                         const std::string& step_dir, int64_t step,
                                         double bytes_per_second) {
  auto& st = self->state;
  // A pace so slow that the write would outlive any timeout is no pace.
  if (!(bytes_per_second == 0 || bytes_per_second >= min_write_bytes_per_second)) {
    st.resources->thaw(id);
    st.frozen_at.erase(id);
    return refusal("task " + st.options.task + ": a shard write rate of " +
                   std::to_string(bytes_per_second) + " bytes/s (0, or at least 1 MiB/s)");
  }
  auto frozen = st.frozen_at.find(id);
  if (frozen == st.frozen_at.end())
    return refusal("task " + st.options.task + ": no snapshot " + std::to_string(id) +
                   " was prepared (it restarted meanwhile?)");
  const auto began = frozen->second;
  st.frozen_at.erase(frozen);
  // The variables thaw by themselves when the freeze's hold ends: a commit
  // after that would take a cut that is no longer consistent.
  if (seconds_now() - began.began > 0.8 * began.hold_s) {
    st.resources->thaw(id);
    return refusal("task " + st.options.task + ": the commit of snapshot " + std::to_string(id) +
                   " came after its freeze had (nearly) ended");
  }
  auto w = std::make_shared<shard_write>();
  w->task = st.options.task;
  w->bytes_per_second = bytes_per_second;
  try {
    w->path = step_dir + "/" + shard_file_name(st.options.task);
    w->data.global_step = step;
    w->data.variables = st.resources->snapshot_frozen(id, std::chrono::seconds(30));
  } catch (const std::exception& e) {
    return refusal("task " + st.options.task + ": " + e.what());
  }
  w->pause_ms = 1000.0 * (seconds_now() - began.began);
  auto writer = self->spawn<caf::detached>(shard_writer, w);
  self->delegate(writer, write_atom::value);  // the writer answers the client
  return caf::delegated<std::string>{};
}

caf::result<uint64_t> prepare_restore(server_actor* self, uint64_t id, const std::string& step_dir,
                                      const std::string& targets) {
  auto& st = self->state;
  st.staged.clear();  // one restore at a time: an earlier one was abandoned
  try {
    auto m = load_manifest(step_dir + "/" + std::string(manifest_file_name));
    auto wanted = deserialize_targets(targets, "the restore request");
    auto values = assemble_variables(step_dir, m, wanted);
    uint64_t n = values.size();
    st.staged[id] = std::move(values);
    return n;
  } catch (const std::exception& e) {
    return refusal("task " + st.options.task + ": " + e.what());
  }
}

caf::result<bool> commit_restore(server_actor* self, uint64_t id) {
  auto& st = self->state;
  auto it = st.staged.find(id);
  if (it == st.staged.end())
    return refusal("task " + st.options.task + ": no restore " + std::to_string(id) +
                   " was prepared (it restarted meanwhile?)");
  try {
    st.resources->restore(it->second, std::chrono::seconds(60));
  } catch (const std::exception& e) {
    st.staged.erase(it);
    return refusal("task " + st.options.task + ": " + e.what());
  }
  st.staged.erase(it);
  return true;
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
      [self](snap_prepare_atom, uint64_t id, int64_t hold_ms) {
        return prepare_snapshot(self, id, hold_ms);
      },
      [self](snap_commit_atom, uint64_t id, const std::string& step_dir, int64_t step,
             double bytes_per_second) {
        return commit_snapshot(self, id, step_dir, step, bytes_per_second);
      },
      [self](snap_abort_atom, uint64_t id) {
        self->state.frozen_at.erase(id);
        self->state.resources->thaw(id);
      },
      [self](restore_prepare_atom, uint64_t id, const std::string& step_dir,
             const std::string& targets) { return prepare_restore(self, id, step_dir, targets); },
      [self](restore_commit_atom, uint64_t id) { return commit_restore(self, id); },
      [self](restore_abort_atom, uint64_t id) { self->state.staged.erase(id); },
      [self](ping_atom) { return self->state.options.task; },
  };
}

}  // namespace

caf::actor spawn_task_server(runtime& rt, const task_server_options& options) {
  auto resources = std::make_shared<resource_table>(rt);
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
