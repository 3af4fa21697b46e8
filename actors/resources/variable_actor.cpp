#include "actors/resources/variable_actor.hpp"

#include "actors/run/messages.hpp"
#include "core/op_registry.hpp"
#include "devices/cpu/parallel.hpp"

namespace actorflow {

namespace {

struct variable_actor_state {
  std::string name;
  variable_state var;
  tbb::task_arena* arena = nullptr;
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

}  // namespace

caf::actor spawn_variable_actor(caf::actor_system& system, std::string name,
                                tbb::task_arena& arena) {
  // Arguments rather than captures: see spawn_cpu_device.
  return system.spawn(
      [](caf::stateful_actor<variable_actor_state>* self, std::string name,
         tbb::task_arena* pool) -> caf::behavior {
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
            [self](update_atom, variable_update& u) { return apply_update(self->state, u); },
            // Checkpoints. Both share buffers rather than copy them: updates
            // copy a value or slot that someone else still holds before writing.
            [self](snapshot_atom) { return self->state.var; },
            [self](restore_atom, variable_state& s) {
              self->state.var = std::move(s);
              return true;
            },
        };
      },
      std::move(name), &arena);
}

}  // namespace actorflow
