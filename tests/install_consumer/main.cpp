// An outside application built against an installed actorflow (test_install):
// only <actorflow/...> headers. It registers an op of its own (definition,
// shape function, CPU kernel, gradient), trains through it with an
// optimizer, saves a checkpoint and restores it into a fresh session.
#include <actorflow/actorflow.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

namespace af = actorflow;

namespace {

// y = 2 * x, element-wise, float32 only.
const af::op_registrar times_two_op({
    .name = "times_two",
    .num_inputs = 1,
    .infer =
        [](const af::shape_context& c) {
          if (c.inputs[0].type != af::dtype::float32) c.fail("takes float32");
          return std::vector<af::tensor_spec>{c.inputs[0]};
        },
    .kernel =
        [](af::kernel_context& ctx) {
          const af::tensor& x = ctx.inputs[0];
          float* y = ctx.allocate_output(0, x.type(), x.dims()).mutable_data<float>();
          for (int64_t i = 0; i < x.num_elements(); ++i) y[i] = 2 * x.data<float>()[i];
        },
    .summary = "2 * x (an op registered by an application)",
    .gradient = [](af::grad_context& c) { c.input_grads = {c.grads[0] * 2.0}; },
});

af::output times_two(af::output x) {
  af::graph& g = x.owner();
  auto& n = g.add_node("times_two", {x}, {}, "times_two");
  return af::output(&g, {n.id, 0});
}

int fail(const std::string& what) {
  std::cerr << "consumer: " << what << "\n";
  return 1;
}

}  // namespace

int main() {
  af::graph g;
  auto x = af::placeholder(g, af::dtype::float32, {-1}, "x");
  auto w = af::make_variable(af::scalar(g, 1.0f), "w");
  // loss = sum((2 * w * x - 6)^2) through times_two: w goes to 3 for x = 1.
  auto pred = times_two(x * w.value());
  auto loss = af::reduce_sum(af::square(pred - 6.0));
  auto train = af::sgd(0.01).minimize(loss);
  af::session s(g);
  s.run({af::global_variables_initializer(g)});
  af::feed_list feeds{{x, af::tensor::from_vector<float>({1.0f}, {1})}};
  float first = s.run(feeds, {loss})[0].item<float>();
  for (int i = 0; i < 200; ++i) s.run(feeds, {}, {train});
  float last = s.run(feeds, {loss})[0].item<float>();
  float trained = s.eval(w).item<float>();
  if (!(last < 1e-4f && first > 3.9f)) return fail("did not train: " + std::to_string(last));
  // A checkpoint of the trained weights, restored into a fresh session.
  auto path = (std::filesystem::temp_directory_path() / "actorflow_consumer.ckpt").string();
  af::save_checkpoint(s, path, 200);
  af::session fresh(g);
  if (af::restore_checkpoint(fresh, path) != 200) return fail("wrong step restored");
  if (fresh.eval(w).item<float>() != trained) return fail("restored a different w");
  std::filesystem::remove(path);
  // A typed error, as the library reports it.
  try {
    af::session(g).eval(w);
    return fail("an uninitialized read did not fail");
  } catch (const af::error& e) {
    if (e.code() != af::error_code::failed_precondition) return fail("wrong error code");
  }
  std::cout << "consumer ok (actorflow " ACTORFLOW_VERSION "): w=" << trained << "\n";
  return 0;
}
