// Variables on an accelerator (the stand-in here; the same checks run on a GPU
// in tests/cuda/gpu_kernel_tests.cpp): their values and optimizer slots live
// in the device's memory, reads and updates run there in order, and only
// checkpoints copy them to the host.
#include <doctest/doctest.h>

#include <thread>

#include "actors/resources/resource_table.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "device_training.hpp"
#include "ops/array.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::cpu_only;
using actorflow::testing::entry_of;
using actorflow::testing::error_of;
using actorflow::testing::settled_bytes_in_use;
using actorflow::testing::stand_in_of;
using actorflow::testing::with_stand_in;

TEST_CASE("every optimizer trains with its variables and slots in the stand-in's memory") {
  auto rt = with_stand_in();
  testing::check_training_on(cpu_only(), rt, "/stand_in:0", 1e-5);
  CHECK(settled_bytes_in_use(stand_in_of(*rt)) == 0);  // each session's variables went with it
}

TEST_CASE("a snapshot of device variables restores into a session on the CPU or the device") {
  auto rt = with_stand_in();
  auto first = testing::train_mlp_on(rt, "/stand_in:0", "adam", 3);
  REQUIRE(first.variables.count("fc1/w") == 1);
  // Adam's step count comes back as the CPU keeps it: an int64 scalar slot.
  CHECK(first.variables.at("fc1/w").slots.at("adam/t").item<int64_t>() == 3);
  auto on_cpu = testing::train_mlp_on(cpu_only(), "", "adam", 3, &first.variables);
  auto on_device = testing::train_mlp_on(rt, "/stand_in:0", "adam", 3, &first.variables);
  for (size_t i = 0; i < on_cpu.losses.size(); ++i)
    CHECK(on_device.losses[i] == doctest::Approx(on_cpu.losses[i]).epsilon(1e-5));
  testing::check_same_variables(on_cpu.variables, on_device.variables, 1e-4);
  CHECK(on_device.variables.at("fc1/w").slots.at("adam/t").item<int64_t>() == 6);
  CHECK(settled_bytes_in_use(stand_in_of(*rt)) == 0);
}

TEST_CASE("device variables: bad restores, reads before initialization and missing devices") {
  auto rt = with_stand_in();
  graph g;
  auto x = placeholder(g, dtype::float32, {2, 3}, "x");
  variable w;
  output y;
  {
    auto d = g.device_scope("/stand_in:0");
    w = make_variable(fill(g, {3, 2}, 0.5), "w");
    y = matmul(x, w.value(), false, false, "y");
  }
  auto xs = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  session s(g, rt);

  SUBCASE("a read before initialization fails its step, naming the variable and the device") {
    auto e = error_of([&] { s.eval(y, {{x, xs}}); });
    CHECK_MESSAGE(e.find("variable 'w' is read before it was initialized") != std::string::npos, e);
    CHECK_MESSAGE(e.find("/stand_in:0") != std::string::npos, e);
    CHECK(testing::code_of_failure([&] {
            s.eval(y, {{x, xs}});
          }) == error_code::failed_precondition);
    s.run({global_variables_initializer(g)});
    CHECK(s.eval(y, {{x, xs}}).to_vector<float>() == std::vector<float>{3, 3, 7.5, 7.5});
  }
  SUBCASE("a restored slot of another shape is refused before anything changes") {
    s.run({global_variables_initializer(g)});
    variable_state bad;
    bad.value = tensor::from_vector<float>({1, 1, 1, 1, 1, 1}, {3, 2});
    bad.slots["adam/m"] = tensor::from_vector<float>({0, 0}, {2});
    auto e = error_of([&] { s.restore_variables({{"w", bad}}); });
    CHECK_MESSAGE(e.find("variable 'w' on /stand_in:0: slot 'adam/m'") != std::string::npos, e);
    CHECK(s.eval(y, {{x, xs}}).to_vector<float>() == std::vector<float>{3, 3, 7.5, 7.5});
    bad.slots.clear();
    s.restore_variables({{"w", bad}});
    CHECK(s.eval(y, {{x, xs}}).to_vector<float>() == std::vector<float>{6, 6, 15, 15});
  }
  SUBCASE("a value of another shape is refused naming both shapes") {
    s.run({global_variables_initializer(g)});
    variable_state bad;
    bad.value = tensor::from_vector<float>({1, 2}, {2});
    auto e = error_of([&] { s.restore_variables({{"w", bad}}); });
    CHECK_MESSAGE(e.find("variable 'w' is float32(3,2) in the graph") != std::string::npos, e);
    CHECK(s.eval(y, {{x, xs}}).to_vector<float>() == std::vector<float>{3, 3, 7.5, 7.5});
  }
  SUBCASE("a variable hinted to a GPU this process lacks is refused, naming both") {
    graph h;
    {
      auto d = h.device_scope("/gpu:0");
      make_variable(fill(h, {2}, 1.0), "v");
    }
    session t(h, rt);
    auto e = error_of([&] { t.run({global_variables_initializer(h)}); });
    CHECK_MESSAGE(e.find("node 'v' asks for device '/gpu:0'") != std::string::npos, e);
    CHECK_MESSAGE(e.find("/stand_in:0") != std::string::npos, e);  // the devices it has
  }
}

TEST_CASE("a variable without a hint lives with its readers; a bfloat16 one stays on the CPU") {
  auto rt = with_stand_in();
  graph g;
  auto w = make_variable(fill(g, {3}, 2.0), "w");  // no hint
  auto low = cast(fill(g, {3}, 1.0), dtype::bfloat16);
  variable wide, narrow;
  output y, z;
  {
    auto d = g.device_scope("/stand_in:0");
    wide = make_variable(fill(g, {3}, 1.0), "wide");
    narrow = make_variable(low, "narrow");
    y = neg(w.value(), "y");
    z = cast(narrow.value(), dtype::float32) + wide.value();
  }
  auto step = assign_add(w, fill(g, {3}, 1.0));
  session s(g, rt);
  s.run({global_variables_initializer(g)});
  s.run({}, {step});
  CHECK(s.eval(y).to_vector<float>() == std::vector<float>{-3, -3, -3});
  CHECK(s.eval(z).to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(entry_of(s, "w").device == "/stand_in:0");
  CHECK(entry_of(s, "w").reason == "with its readers on /stand_in:0");
  CHECK(entry_of(s, "wide").device == "/stand_in:0");
  auto n = entry_of(s, "narrow");
  CHECK(n.device == "/cpu:0");
  CHECK(n.reason == "soft placement: /stand_in:0 holds no bfloat16 variable");
}

TEST_CASE("a freeze for a consistent cut refuses a variable whose updates run on a device") {
  auto rt = with_stand_in();
  graph g;
  auto v = make_variable(fill(g, {2}, 1.0), "v");
  resource_table table(*rt);
  const local_device* device = rt->find_device("stand_in", 0);
  auto ref = table.resource_for(g.at(v.value().ref().node), device);
  REQUIRE(ref.on_device != nullptr);
  CHECK(ref.on_device->name == "v");
  auto e = error_of([&] { table.freeze(1, std::chrono::seconds(1), std::chrono::seconds(10)); });
  CHECK_MESSAGE(e.find("variable 'v' lives on an accelerator") != std::string::npos, e);
  // Asked for on another device, it says where it lives.
  e = error_of([&] { table.resource_for(g.at(v.value().ref().node), &rt->devices().front()); });
  CHECK_MESSAGE(e.find("variable 'v' lives on /stand_in:0") != std::string::npos, e);
}

TEST_CASE(
    "a batch too large for the device's memory fails its step; the variables and the session go "
    "on") {
  auto rt = with_stand_in(size_t{16} << 20);  // the MLP's weights take 2.7 MB
  graph g;
  auto images = placeholder(g, dtype::float32, shape{-1, 28, 28, 1}, "images");
  auto labels = placeholder(g, dtype::int32, shape{-1}, "labels");
  auto net = models::make_classifier(g, "mlp", 5, {"/stand_in:0"});
  auto loss = models::mean_cross_entropy(net->logits(images), labels);
  auto train = make_optimizer("sgd", 0.05)->minimize(loss);
  session s(g, rt);
  s.run({global_variables_initializer(g)});
  testing::random_source rnd;
  auto batch = [&](int64_t n) {
    return feed_list{{images, rnd.uniform(dtype::float32, shape{n, 28, 28, 1}, 0, 1)},
                     {labels, rnd.uniform(dtype::int32, shape{n}, 0, 9)}};
  };
  auto before = s.snapshot_variables();
  auto huge = batch(8192);  // 25 MB of images alone
  auto e = error_of([&] { s.run(huge, {loss}, {train}); });
  CHECK_MESSAGE(e.find("[/stand_in:0] out of memory") != std::string::npos, e);
  CHECK_MESSAGE(e.find("node '") != std::string::npos, e);
  CHECK(testing::code_of_failure([&] { s.run(huge, {loss}, {train}); }) ==
        error_code::resource_exhausted);
  // The failed steps applied nothing; a batch that fits trains on.
  testing::check_same_variables(before, s.snapshot_variables(), 1e-12);
  auto fits = batch(16);
  float first = s.run(fits, {loss}, {train})[0].item<float>();
  for (int i = 0; i < 5; ++i) s.run(fits, {loss}, {train});
  CHECK(s.run(fits, {loss})[0].item<float>() < first);
}
