// Nodes served by a resource's actor: a variable's read, and an op applied
// to a variable, a queue or an accumulator (actors/resources/). The actor
// may answer much later (a dequeue waits for an element); `then` keeps the
// node's actor free for other steps meanwhile.
#include "actors/run/node_runner.hpp"

namespace actorflow {

namespace {

void emit_actor_failure(node_runner& r, uint64_t step, const frame_tag& tag, const caf::error& e) {
  r.emit_error(step, tag, describe_failure(r.plan(), "resource actor failed: " + caf::to_string(e)),
               error_code::unavailable);
  r.host()->drain_local();
}

class variable_read_node final : public node_behaviour {
 public:
  void fire(node_runner& r, firing& f) override {
    r.host()
        ->request(r.plan().variable, caf::infinite, read_atom::value)
        .then(
            [&r, step = f.step, tag = f.tag, asked = now_if_tracing()](step_value& v) {
              std::vector<tensor> outs{std::move(v.value)};
              trace_resource(r.plan(), step, tag, asked, outs);
              r.emit(step, tag, outs, v.error, v.code);
              r.host()->drain_local();
            },
            [&r, step = f.step, tag = f.tag](caf::error& e) {
              emit_actor_failure(r, step, tag, e);
            });
  }
};

class resource_update_node final : public node_behaviour {
 public:
  void fire(node_runner& r, firing& f) override {
    const node_plan& plan = r.plan();
    variable_update u{plan.def, plan.name, &plan.attrs,
                      std::exchange(r.fill_inputs(f.slots, f.num_slots), {}),
                      step_key{plan.executable_id, f.step}};
    r.host()
        ->request(plan.variable, caf::infinite, update_atom::value, std::move(u))
        .then(
            [&r, step = f.step, tag = f.tag, asked = now_if_tracing()](update_result& res) {
              if (res.ok() && res.values.size() < r.plan().output_consumers.size())
                res = update_result::failure(
                    describe_failure(r.plan(), "update produced too few outputs"),
                    error_code::internal);
              trace_resource(r.plan(), step, tag, asked, res.values);
              r.emit(step, tag, res.values, res.error, res.code);
              r.host()->drain_local();
            },
            [&r, step = f.step, tag = f.tag](caf::error& e) {
              emit_actor_failure(r, step, tag, e);
            });
  }
};

}  // namespace

std::unique_ptr<node_behaviour> make_variable_read_node() {
  return std::make_unique<variable_read_node>();
}
std::unique_ptr<node_behaviour> make_resource_update_node() {
  return std::make_unique<resource_update_node>();
}

}  // namespace actorflow
