#include "actors/resources/variable_actor.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>

#include "actors/run/messages.hpp"
#include "core/op_registry.hpp"
#include "devices/cpu/parallel.hpp"

namespace actorflow {

namespace {

struct held_update {
  variable_update update;
  caf::typed_response_promise<update_result> promise;
};

struct variable_actor_state {
  std::string name;
  variable_state var;
  tbb::task_arena* arena = nullptr;
  // A freeze (freeze_atom) in effect: its id, and the updates it holds.
  uint64_t frozen_by = 0;
  std::deque<held_update> held;
};

update_result apply_update(variable_actor_state& st, variable_update& u) {
  update_result result;
  try {
    auto& attrs = *u.attrs;
    kernel_context ctx{u.def->name, u.node_name, attrs, std::move(u.inputs), {}, 0};
    int64_t elements = st.var.initialized() ? st.var.value.num_elements() : 0;
    // Large updates split across the pool; they still finish before the next
    // message, which keeps updates to this variable serialized.
    if (elements >= parallel_grain)
      st.arena->execute([&] { u.def->update(st.var, ctx); });
    else
      u.def->update(st.var, ctx);
    result.values = std::move(ctx.outputs);
  } catch (const std::exception& e) {
    result = update_result::failure("node '" + u.node_name + "' (" + u.def->name +
                                        ") on variable '" + st.name + "': " + e.what(),
                                    code_of(e));
  }
  return result;
}

using variable_actor = caf::stateful_actor<variable_actor_state>;

caf::result<update_result> update_or_hold(variable_actor* self, variable_update& u) {
  auto& st = self->state;
  if (st.frozen_by == 0) return apply_update(st, u);
  auto promise = self->make_response_promise<update_result>();
  st.held.push_back({std::move(u), promise});
  return promise;
}

// Ends freeze `id` (a later freeze replaced it: nothing to do) and applies
// the updates it held, in the order they came.
void thaw(variable_actor* self, uint64_t id) {
  auto& st = self->state;
  if (st.frozen_by != id) return;
  st.frozen_by = 0;
  while (!st.held.empty()) {
    auto h = std::move(st.held.front());
    st.held.pop_front();
    h.promise.deliver(apply_update(st, h.update));
  }
}

void freeze(variable_actor* self, uint64_t id, int64_t hold_ms) {
  self->state.frozen_by = id;
  // Answers nobody (a reply to an asynchronous message would come back here).
  self->delayed_send(self, std::chrono::milliseconds(std::max<int64_t>(hold_ms, 0)),
                     thaw_atom::value, id, false);
}

struct device_variable_actor_state {
  variable_on_device home;
  uint64_t last_work = 0;
  // Work sent to the device actor, by id: what to do once the stream ran it.
  std::map<uint64_t, std::function<void(const std::string& error)>> pending;
};

using device_variable_actor = caf::stateful_actor<device_variable_actor_state>;

// Runs `work` on the device's stream 0, after the launches sent before it,
// then done(error) here ("" on success). Work that throws fails only itself:
// its error is kept and handed to done (a stand-in stream would stop).
void on_device(device_variable_actor* self, std::function<void()> work,
               std::function<void(const std::string&)> done) {
  auto& st = self->state;
  auto work_error = std::make_shared<std::string>();
  const uint64_t id = ++st.last_work;
  st.pending.emplace(id, [work_error, done = std::move(done)](const std::string& stream_error) {
    done(stream_error.empty() ? *work_error : stream_error);
  });
  auto guarded = [work = std::move(work), work_error] {
    try {
      work();
    } catch (const std::exception& e) {
      *work_error = e.what();
    }
  };
  self->send(st.home.device_actor, run_atom::value, gpu::gpu_task{0, std::move(guarded), id});
}

std::string where(const device_variable_actor* self) {
  return "variable '" + self->state.home.variable->name + "' on " + self->state.home.device->name();
}

caf::result<variable_state> snapshot_on_device(device_variable_actor* self) {
  auto promise = self->make_response_promise<variable_state>();
  auto out = std::make_shared<variable_state>();
  auto& home = self->state.home;
  on_device(
      self,
      [device = home.device, var = home.variable, out] { device->enqueue_snapshot(0, *var, *out); },
      [promise, out, what = where(self)](const std::string& error) mutable {
        if (!error.empty())
          promise.deliver(caf::make_error(caf::sec::runtime_error, what + ": " + error));
        else
          promise.deliver(std::move(*out));
      });
  return promise;
}

caf::result<bool> restore_on_device(device_variable_actor* self, variable_state& in) {
  auto promise = self->make_response_promise<bool>();
  auto& home = self->state.home;
  on_device(
      self,
      [device = home.device, var = home.variable, in = std::move(in)] {
        device->enqueue_restore(0, *var, in);
      },
      [promise, what = where(self)](const std::string& error) mutable {
        if (!error.empty())
          promise.deliver(caf::make_error(caf::sec::runtime_error, what + ": " + error));
        else
          promise.deliver(true);
      });
  return promise;
}

}  // namespace

caf::actor spawn_device_variable_actor(caf::actor_system& system, variable_on_device home) {
  return system.spawn(
      [](device_variable_actor* self, variable_on_device home) -> caf::behavior {
        self->state.home = std::move(home);
        return {
            // Its nodes on the device read and update it there; these come
            // only from a node placed elsewhere, which placement prevents.
            [self](read_atom) {
              return step_value::failure(where(self) + " is read on its device only",
                                         error_code::internal);
            },
            [self](update_atom, variable_update& u) {
              return update_result::failure(
                  "node '" + u.node_name + "': " + where(self) + " is updated on its device only",
                  error_code::internal);
            },
            [self](snapshot_atom) { return snapshot_on_device(self); },
            [self](restore_atom, variable_state& s) { return restore_on_device(self, s); },
            // Its updates do not pass through here, so a freeze cannot hold
            // them: false, which a consistent cut reports.
            [](freeze_atom, uint64_t, int64_t) { return false; },
            [](thaw_atom, uint64_t) { return true; },
            [](thaw_atom, uint64_t, bool) {},
            [self](gpu::gpu_done_atom, uint64_t id, std::string& error) {
              auto& pending = self->state.pending;
              auto it = pending.find(id);
              if (it == pending.end()) return;
              auto done = std::move(it->second);
              pending.erase(it);
              done(error);
            },
        };
      },
      std::move(home));
}

caf::actor spawn_variable_actor(caf::actor_system& system, std::string name,
                                tbb::task_arena& arena) {
  // Arguments rather than captures: see spawn_cpu_device.
  return system.spawn(
      [](variable_actor* self, std::string name, tbb::task_arena* pool) -> caf::behavior {
        self->state.name = name;
        self->state.arena = pool;
        return {
            [self](read_atom) {
              auto& st = self->state;
              if (!st.var.initialized())
                return step_value::failure(
                    "variable '" + st.name + "' is read before it was initialized or restored",
                    error_code::failed_precondition);
              return step_value{st.var.value, ""};
            },
            [self](update_atom, variable_update& u) { return update_or_hold(self, u); },
            // Checkpoints. Both share buffers rather than copy them: updates
            // copy a value or slot that someone else still holds before writing.
            [self](snapshot_atom) { return self->state.var; },
            [self](restore_atom, variable_state& s) {
              self->state.var = std::move(s);
              return true;
            },
            [self](freeze_atom, uint64_t id, int64_t hold_ms) {
              freeze(self, id, hold_ms);
              return true;
            },
            [self](thaw_atom, uint64_t id) {
              thaw(self, id);
              return true;
            },
            [self](thaw_atom, uint64_t id, bool) { thaw(self, id); },
        };
      },
      std::move(name), &arena);
}

}  // namespace actorflow
