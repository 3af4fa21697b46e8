// An op's kernel: inline on the node's actor when cheap, on its device's
// pool when expensive, or launched on its accelerator.
#include "actors/run/node_runner.hpp"
#include "devices/cpu/parallel.hpp"

namespace actorflow {

namespace {

// Kernels on fewer input elements than this run inline on the actor's thread:
// handing them to the pool would cost more than the work.
constexpr int64_t inline_element_limit = parallel_grain;
// Expensive kernels (matmul, conv) go to the pool unless their inputs are
// small: a 64x64 matmul takes a few microseconds, while the hop to the pool
// and back costs tens (two thread wake-ups), which a chain of small
// products would pay at every node. (A loop's kernels all run inline: see
// run_kernel.)
constexpr int64_t expensive_inline_limit = 16 * 1024;

class kernel_node final : public node_behaviour {
 public:
  void fire(node_runner& r, firing& f) override {
    const node_plan& plan = r.plan();
    // On an accelerator, each firing goes to the device actor, which
    // answers with gpu_done once the device has run it.
    if (plan.accel)
      return launches_.start(r.host(), plan, r.member(), f.step, f.tag,
                             make_launch(plan, f.slots, f.num_slots, invocations_++));
    run_kernel(r, f.step, f.tag, r.fill_inputs(f.slots, f.num_slots));
  }

  void launch_done(node_runner& r, uint64_t id, const std::string& error) override {
    launches_.finish(r.host(), r.plan(), id, error);
  }
  void drop(node_runner&, uint64_t step) override { launches_.drop(step); }

 private:
  // Runs the kernel on `inputs`: inline when cheap, reusing the runner's
  // vectors; otherwise on the device's pool, which gets its own. A loop's
  // kernels run inline whatever their size: its nodes run one after another
  // on its actor anyway, and a hop to the pool and back costs two thread
  // wake-ups per node and iteration (an LSTM trained 1.3x faster without
  // them). A large kernel still spreads its work over the pool's threads
  // (parallel_for, within the runtime's thread limit): the actor's thread
  // joins the device's arena for it, where those threads are, and splits
  // finer than elsewhere (fine_grain_scope) so that they stay awake between
  // the loop's products.
  void run_kernel(node_runner& r, uint64_t step, const frame_tag& tag,
                  std::vector<tensor>& inputs) {
    const node_plan& plan = r.plan();
    uint64_t invocation = invocations_++;
    int64_t elements = 0;
    for (auto& t : inputs) elements += t.num_elements();
    int64_t limit = plan.def->expensive ? expensive_inline_limit : inline_element_limit;
    if (plan.in_loop) {
      fine_grain_scope keep_pool_awake;
      auto run = [&] { run_and_emit(r.host(), plan, step, tag, inputs, r.outputs(), invocation); };
      // Joining costs about 0.1 us: only for kernels large enough to split.
      if (plan.arena && (plan.def->expensive || elements > fine_grain))
        plan.arena->execute(run);
      else
        run();
      return;
    }
    if (elements < limit) {
      run_and_emit(r.host(), plan, step, tag, inputs, r.outputs(), invocation);
      return;
    }
    r.host()->send(plan.device, run_atom::value,
                   device_task{[plan = r.plan_ptr(), step, tag, inputs = std::exchange(inputs, {}),
                                invocation, ready = now_if_tracing()]() mutable {
                     std::vector<tensor> outputs;
                     run_and_emit(nullptr, *plan, step, tag, inputs, outputs, invocation, ready);
                   }});
  }

  uint64_t invocations_ = 0;
  accelerator_launches launches_;
};

}  // namespace

std::unique_ptr<node_behaviour> make_kernel_node() { return std::make_unique<kernel_node>(); }

}  // namespace actorflow
