#include "actors/cluster/cluster_checkpoint.hpp"

#include <atomic>

#include "actors/cluster/checkpoint_shards.hpp"
#include "actors/cluster/task_server.hpp"
#include "actors/run/messages.hpp"

namespace actorflow {

namespace {

// Ids tell one snapshot or restore from another on a task; a task outlives
// its clients, so ids from two clients must not meet: a random base.
uint64_t next_request_id() {
  static std::atomic<uint64_t> next{
      uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 2654435761u};
  return ++next;
}

// Sends the same request to every task at once and gathers the answers, in
// the tasks' order; the first failure, naming its task, is thrown after
// every answer came (so that none is left in flight).
template <class Answer, class... Ts>
std::vector<Answer> ask_all(cluster_connection& cluster, const std::vector<std::string>& tasks,
                            std::chrono::milliseconds timeout, const std::string& what,
                            Ts... request) {
  caf::scoped_actor self{cluster.rt()->system()};
  using handle = decltype(self->request(caf::actor(), timeout, request...));
  std::vector<handle> pending;
  std::string failure;
  for (auto& task : tasks)
    pending.push_back(self->request(cluster.server(task), timeout, request...));
  std::vector<Answer> answers(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i)
    pending[i].receive([&](Answer& a) { answers[i] = std::move(a); },
                       [&](caf::error& e) {
                         if (failure.empty())
                           failure = "task " + tasks[i] + " " + what + ": " + error_text(e);
                         if (error_code_of(e) == error_code::unavailable) cluster.forget(tasks[i]);
                       });
  if (!failure.empty()) fail("checkpoint", failure);
  return answers;
}

// The shards' fragments, one manifest: shard i is task i's.
checkpoint_manifest merge_fragments(const std::vector<std::string>& fragments, int64_t step,
                                    const std::vector<std::string>& tasks) {
  checkpoint_manifest m;
  m.step = step;
  for (size_t i = 0; i < fragments.size(); ++i) {
    auto part = deserialize_manifest(fragments[i], "the shard manifest of " + tasks[i]);
    if (part.shards.size() != 1 || part.step != step)
      fail("checkpoint", "task " + tasks[i] + " answered a shard of another save");
    m.pause_ms = std::max(m.pause_ms, part.pause_ms);
    for (auto& v : part.variables) {
      v.shard = uint32_t(m.shards.size());
      m.variables.push_back(std::move(v));
    }
    m.shards.push_back(part.shards.front());
  }
  return m;
}

// The commits of one save and where their answers go.
struct shard_commit {
  std::vector<std::string> tasks;
  std::vector<caf::actor> servers;
  std::string step_dir;
  int64_t step = 0;
  uint64_t id = 0;
  std::chrono::milliseconds timeout{};
  double bytes_per_second = 0;
  std::shared_ptr<std::promise<checkpoint_manifest>> result;
};

struct gather_state {
  std::vector<std::string> fragments;
  size_t answered = 0;
  bool done = false;
};

// Sends every commit, then waits for each shard's fragment; the first
// failure, a task going down included, ends the save.
caf::behavior gather_shards(caf::stateful_actor<gather_state>* self, shard_commit c) {
  auto& st = self->state;
  st.fragments.resize(c.tasks.size());
  auto finish = [self, c](const std::string& failure) {
    if (self->state.done) return;
    self->state.done = true;
    try {
      if (!failure.empty()) fail("checkpoint", failure);
      c.result->set_value(merge_fragments(self->state.fragments, c.step, c.tasks));
    } catch (...) {
      c.result->set_exception(std::current_exception());
    }
    self->quit();
  };
  self->set_down_handler([self, c, finish](caf::down_msg& down) {
    for (size_t i = 0; i < c.servers.size(); ++i)
      if (c.servers[i].address() == down.source && self->state.fragments[i].empty())
        finish("task " + c.tasks[i] + " went down while it saved its shard");
  });
  for (size_t i = 0; i < c.tasks.size(); ++i) {
    self->monitor(c.servers[i]);
    self->request(c.servers[i], c.timeout, snap_commit_atom::value, c.id, c.step_dir, c.step,
                  c.bytes_per_second)
        .then(
            [self, i, finish, n = c.tasks.size()](std::string& fragment) {
              self->state.fragments[i] = std::move(fragment);
              if (++self->state.answered == n) finish("");
            },
            [c, i, finish](caf::error& e) {
              finish("task " + c.tasks[i] + " did not save its shard: " + error_text(e));
            });
  }
  return {[](caf::unit_t) {}};
}

}  // namespace

std::future<checkpoint_manifest> start_cluster_snapshot(cluster_connection& cluster,
                                                        const std::vector<std::string>& tasks,
                                                        const std::string& step_dir, int64_t step,
                                                        const cluster_snapshot_options& options) {
  const uint64_t id = next_request_id();
  // A failure lets every task's updates go at once, not after the hold.
  auto abort_all = [&] {
    for (auto& task : tasks) {
      try {
        caf::anon_send(cluster.server(task), snap_abort_atom::value, id);
      } catch (const error&) {
        // A task that is down holds no freeze.
      }
    }
  };
  try {
    ask_all<uint64_t>(cluster, tasks, options.prepare_timeout, "did not freeze its variables",
                      snap_prepare_atom::value, id, int64_t(options.hold.count()));
  } catch (const error&) {
    abort_all();
    throw;
  }
  std::vector<caf::actor> servers;
  try {
    for (auto& task : tasks) servers.push_back(cluster.server(task));
  } catch (const error&) {
    abort_all();  // a task went down between the phases
    throw;
  }
  // The commits go out now, while the freeze holds; a helper actor gathers
  // the answers and watches the tasks, so that a task that dies while it
  // writes fails the save at once rather than after the write timeout.
  auto result = std::make_shared<std::promise<checkpoint_manifest>>();
  auto written = result->get_future();
  cluster.rt()->system().spawn(
      gather_shards, shard_commit{tasks, servers, step_dir, step, id, options.write_timeout,
                                  options.write_bytes_per_second, result});
  return std::async(std::launch::deferred,
                    [written = std::move(written)]() mutable { return written.get(); });
}

void restore_cluster(cluster_connection& cluster,
                     const std::map<std::string, std::vector<manifest_variable>>& targets,
                     const std::string& step_dir, std::chrono::milliseconds timeout) {
  const uint64_t id = next_request_id();
  std::vector<std::string> tasks;
  for (auto& [task, vars] : targets) tasks.push_back(task);
  // A failure drops what the tasks staged (a staged copy of a large model
  // would otherwise stay in memory until the next restore).
  auto abort_all = [&] {
    for (auto& task : tasks) {
      try {
        caf::anon_send(cluster.server(task), restore_abort_atom::value, id);
      } catch (const error&) {
        // A task that is down holds nothing.
      }
    }
  };
  // Phase one, per task: its own targets; then, only if all staged, commit.
  caf::scoped_actor self{cluster.rt()->system()};
  std::string failure;
  for (auto& [task, vars] : targets) {
    try {
      self->request(cluster.server(task), timeout, restore_prepare_atom::value, id, step_dir,
                    serialize_targets(vars))
          .receive([](uint64_t) {},
                   [&, t = task](caf::error& e) {
                     if (failure.empty()) failure = "task " + t + ": " + error_text(e);
                   });
    } catch (const error& e) {
      failure = e.what();  // the task is down
    }
    if (!failure.empty()) {
      abort_all();
      fail("checkpoint", "restore from " + step_dir + " failed: " + failure);
    }
  }
  try {
    ask_all<bool>(cluster, tasks, timeout, "did not set its restored variables",
                  restore_commit_atom::value, id);
  } catch (const error&) {
    abort_all();
    throw;
  }
}

}  // namespace actorflow
