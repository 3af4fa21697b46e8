// Exported models (actors/serving/export.hpp, schema/model_file.hpp): an
// export answers as the trained session did, holds only what its signatures
// need (no training ops, devices or variables), and a missing, truncated or
// corrupted one is refused with a clear error, never half-loaded.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "actors/serving/export.hpp"
#include "actors/session.hpp"
#include "apps/lib/lstm_lm.hpp"
#include "apps/lib/model_export.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "schema/graph_io.hpp"
#include "schema/model_file.hpp"
#include "serving_fixture.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::code_of_failure;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::mount_small_filesystem;
using actorflow::testing::temp_dir;
using actorflow::testing::trained_classifier;
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool no_temporaries_beside(const fs::path& dir) {
  for (auto& e : fs::directory_iterator(dir.parent_path()))
    if (contains(e.path().filename().string(), ".tmp-")) return false;
  return true;
}

}  // namespace

TEST_CASE("an export answers as the session that trained it did, with only what it needs") {
  trained_classifier m;
  temp_dir dir("export");
  std::string at = dir / "1";
  export_model(*m.s, at, {m.signature()});
  CHECK(fs::exists(at + "/MODEL"));
  CHECK(fs::exists(at + "/model.afg"));
  CHECK(no_temporaries_beside(at));

  auto expected =
      m.s->run({{m.features, trained_classifier::batch()}}, {m.probabilities, m.classes});
  auto model = load_model(at);
  auto out = model->predict("serving_default", {{"features", trained_classifier::batch()}});
  REQUIRE(out.size() == 2);
  CHECK(out.at("probabilities").to_vector<float>() == expected[0].to_vector<float>());
  CHECK(out.at("classes").to_vector<int64_t>() == expected[1].to_vector<int64_t>());

  // The weights are the trained ones, not the initial values, and frozen.
  auto& sig = model->signature("serving_default");
  CHECK(sig.inputs.at(0).dims == std::vector<int64_t>{-1, 4});
  CHECK(sig.outputs.at(0).type == dtype::float32);
  CHECK(sig.outputs.at(1).type == dtype::int64);
  auto g = load_graph(at + "/model.afg");
  for (auto& n : g->nodes()) {
    CHECK_MESSAGE(n.def->role != op_role::variable, n.name);
    CHECK_MESSAGE(n.def->role != op_role::resource_op, n.name);
    CHECK_MESSAGE(n.name != "labels", "the training labels are not needed");
    CHECK_MESSAGE(n.device.empty(), n.name);
  }
  REQUIRE(g->find("w"));
  CHECK(g->find("w")->op == "constant");
  CHECK(get_attr<tensor>(g->find("w")->attrs, "value", "w").to_vector<float>() ==
        m.s->eval(m.w).to_vector<float>());
}

TEST_CASE("an export drops device annotations: a model placed on a cluster's task serves here") {
  graph g;
  output x, y;
  variable w;
  {
    auto on_ps = g.device_scope("/job:ps/task:3/cpu:0");
    w = make_variable(constant(g, tensor::from_vector<float>({2.f, 3.f}, {2})), "w");
  }
  {
    auto colocated = g.colocate_with(operation(&g, w.value().ref().node));
    x = placeholder(g, dtype::float32, {-1, 2}, "x");
    y = mul(x, w.read("w_read"), "y");
  }
  // The session runs here, where the hints name a task that does not exist:
  // the variables' values come from a local session on an identical graph.
  graph local;
  make_variable(constant(local, tensor::from_vector<float>({2.f, 3.f}, {2})), "w");
  session s(local);
  s.run({global_variables_initializer(local)});
  auto frozen =
      inference_graph(g, {describe_signature({.inputs = {{"x", x}}, .outputs = {{"y", y}}})},
                      s.snapshot_variables());
  for (auto& n : frozen->nodes()) {
    CHECK(n.device.empty());
    CHECK_FALSE(n.attrs.count("_colocate_with"));
  }
  CHECK(frozen->find("w_read")->op == "identity");
  session served(*frozen);
  auto out = served.run(
      {{frozen->output_by_name("x"), tensor::from_vector<float>({1.f, 1.f, 2.f, 2.f}, {2, 2})}},
      {frozen->output_by_name("y")});
  CHECK(out[0].to_vector<float>() == std::vector<float>{2.f, 3.f, 4.f, 6.f});
}

TEST_CASE("an export refuses what it cannot hold, naming it, and leaves nothing behind") {
  trained_classifier m;
  temp_dir dir("export_bad");
  auto refused = [&](export_signature sig, const std::string& part) {
    std::string at = dir / "1";
    auto what = error_of([&] { export_model(*m.s, at, {sig}); });
    CHECK_MESSAGE(contains(what, part), what);
    CHECK_FALSE(fs::exists(at));
    CHECK(no_temporaries_beside(at));
  };
  // An output that needs a placeholder the signature does not take.
  auto loss = reduce_mean(sparse_softmax_cross_entropy_with_logits(m.logits, m.labels).loss);
  refused({.inputs = {{"features", m.features}}, .outputs = {{"loss", loss}}},
          "needs node 'labels', a placeholder that is not one of its inputs");
  // An output that updates a variable.
  auto bumped = assign_add(m.b, constant(m.g, tensor::from_vector<float>({1, 1, 1}, {3})));
  refused({.inputs = {{"features", m.features}}, .outputs = {{"b", bumped}}},
          "an op on a resource (assign_add)");
  // An input that is not a placeholder, aliases twice, no outputs.
  refused({.inputs = {{"logits", m.logits}}, .outputs = {{"p", m.probabilities}}},
          "input 'logits' names 'logits', a add, not a placeholder");
  refused(
      {.inputs = {{"features", m.features}}, .outputs = {{"p", m.probabilities}, {"p", m.classes}}},
      "output 'p' appears twice");
  refused({.inputs = {{"features", m.features}}}, "has no outputs");

  // An export is never written over another.
  std::string at = dir / "2";
  export_model(*m.s, at, {m.signature()});
  CHECK(code_of_failure([&] { export_model(*m.s, at, {m.signature()}); }) ==
        error_code::already_exists);
  CHECK(load_model(at)->signatures().size() == 1);

  // A variable that was never set has no value to freeze.
  graph g;
  auto x = placeholder(g, dtype::float32, {2}, "x");
  auto v = make_variable(g, dtype::float32, {2}, "unset");
  session s(g);
  auto what = error_of([&] {
    export_model(s, dir / "3", {{.inputs = {{"x", x}}, .outputs = {{"y", add(x, v.value())}}}});
  });
  CHECK_MESSAGE(contains(what, "unset"), what);
  CHECK_FALSE(fs::exists(dir / "3"));
}

TEST_CASE("an export to a full disk fails naming the file, leaves nothing, and the last one loads" *
          doctest::test_suite("small_filesystem")) {
  temp_dir dir("export_full");
  std::string small = dir / "models";
  fs::create_directories(small);
  if (!mount_small_filesystem(small, "4m")) return;  // before the session starts threads
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 1024}, "x");
  auto w = make_variable(fill(g, {1024, 640}, 0.5f), "w");  // 2.5 MiB: two do not fit
  auto y = matmul(x, w.value(), false, false, "y");
  session s(g);
  s.run({global_variables_initializer(g)});
  export_signature sig{.inputs = {{"x", x}}, .outputs = {{"y", y}}};
  export_model(s, small + "/1", {sig});
  auto e = error_of([&] { export_model(s, small + "/2", {sig}); });
  CHECK_MESSAGE(contains(e, small + "/2.tmp-"), e);
  CHECK_MESSAGE(contains(e, "No space left on device"), e);
  CHECK(code_of_failure([&] { export_model(s, small + "/2", {sig}); }) ==
        error_code::resource_exhausted);
  CHECK_FALSE(fs::exists(small + "/2"));
  CHECK(no_temporaries_beside(small + "/2"));
  CHECK(export_versions(small) == std::vector<int64_t>{1});
  auto answer =
      load_model(small + "/1")
          ->predict("serving_default",
                    {{"x", tensor::from_vector<float>(std::vector<float>(1024, 1.0f), {1, 1024})}});
  CHECK(answer.at("y").data<float>()[0] == doctest::Approx(512.0f));
  ::umount2(small.c_str(), MNT_DETACH);
}

TEST_CASE("predict checks its inputs against the signature, naming what is wrong") {
  trained_classifier m;
  temp_dir dir("export_predict");
  export_model(*m.s, dir / "1", {m.signature()});
  auto model = load_model(dir / "1");
  auto batch = trained_classifier::batch();
  auto what = [&](const std::string& key, std::map<std::string, tensor> in) {
    return error_of([&] { model->predict(key, in); });
  };
  CHECK(contains(what("classify", {{"features", batch}}),
                 "no signature 'classify' (the model has 'serving_default')"));
  CHECK(code_of_failure([&] {
          model->predict("classify", {{"features", batch}});
        }) == error_code::not_found);
  CHECK(contains(what("serving_default", {}), "input 'features' is missing"));
  CHECK(contains(what("serving_default", {{"features", batch}, {"extra", batch}}),
                 "no input 'extra' (its inputs are 'features')"));
  CHECK(contains(what("serving_default", {{"features", tensor::zeros(dtype::int32, {3, 4})}}),
                 "input 'features' must be float32, not int32"));
  CHECK(contains(what("serving_default", {{"features", tensor::zeros(dtype::float32, {3, 5})}}),
                 "input 'features' must have shape (?,4), not (3,5)"));
  CHECK(contains(what("serving_default", {{"features", tensor::zeros(dtype::float32, {4})}}),
                 "must have shape (?,4), not (4)"));
  // Still answering after each.
  CHECK(model->predict("serving_default", {{"features", batch}}).at("classes").num_elements() == 3);
}

TEST_CASE("a missing, truncated or corrupted export is refused, naming the file") {
  trained_classifier m;
  temp_dir dir("export_corrupt");
  std::string at = dir / "1";
  export_model(*m.s, at, {m.signature()});
  std::string model_bytes = read_file(at + "/MODEL");
  std::string graph_bytes = read_file(at + "/model.afg");
  auto restore = [&] {
    write_file(at + "/MODEL", model_bytes);
    write_file(at + "/model.afg", graph_bytes);
  };
  auto refusal = [&] { return error_of([&] { load_model(at); }); };

  CHECK(contains(error_of([&] { load_model(dir / "none"); }), "[load_model]"));
  CHECK(code_of_failure([&] { load_model(dir / "none"); }) == error_code::not_found);

  // One flipped bit in the graph: its CRC32 differs from MODEL's record.
  std::string flipped = graph_bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  write_file(at + "/model.afg", flipped);
  CHECK_MESSAGE(contains(refusal(), "model.afg: the file holds"), refusal());
  CHECK(code_of_failure([&] { load_model(at); }) == error_code::data_loss);
  restore();

  // Cut short, each file at several places.
  for (size_t keep : {size_t{0}, size_t{7}, size_t{31}, size_t{40}, model_bytes.size() - 1}) {
    write_file(at + "/MODEL", model_bytes.substr(0, keep));
    CHECK_MESSAGE(contains(refusal(), "[load_model]"), refusal());
  }
  restore();
  write_file(at + "/model.afg", graph_bytes.substr(0, graph_bytes.size() / 2));
  CHECK(contains(refusal(), "model.afg"));
  restore();

  // Random bytes over MODEL: refused or (never) loaded, never a crash.
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string bad = model_bytes;
    for (int k = 0; k < 1 + round % 4; ++k)
      bad[rng() % bad.size()] = static_cast<char>(rng() & 0xff);
    write_file(at + "/MODEL", bad);
    error_of([&] { load_model(at); });
  }
  restore();
  CHECK(load_model(at)
            ->predict("serving_default", {{"features", trained_classifier::batch()}})
            .size() == 2);
}

TEST_CASE("an export's MODEL and graph belong together: another export's graph is refused") {
  temp_dir dir("export_mismatch");
  auto save = [&](const std::string& sub, const std::string& output_name) {
    graph g;
    auto x = placeholder(g, dtype::float32, {-1, 4}, "features");
    auto y = identity(x, output_name);
    fs::create_directories(dir / sub);
    save_model_files(g, {describe_signature({.inputs = {{"features", x}}, .outputs = {{"y", y}}})},
                     dir / sub);
  };
  save("a", "y_of_a");
  save("b", "y_of_b");
  fs::copy_file(dir / "a/model.afg", dir / "b/model.afg", fs::copy_options::overwrite_existing);
  auto what = error_of([&] { load_model(dir / "b"); });
  CHECK_MESSAGE(contains(what, "not this export's graph"), what);
}

TEST_CASE("the language model's export gives the next word's log-probabilities of any batch") {
  lm::lm_config config{.vocab = 40, .embedding = 6, .hidden = 5, .steps = 4, .seed = 3};
  graph g;
  auto vars = lm::make_lm_variables(g, config);
  // The training graph's recurrence (a while loop over a tensor array) on a
  // batch of 3 prefixes from a zero state: the reference.
  auto ids = placeholder(g, dtype::int64, {3, config.steps}, "ids");
  auto zeros = constant(g, tensor::zeros(dtype::float32, {3, config.hidden}));
  auto forward = lm::run_lm(vars, ids, ids, {zeros, zeros});
  auto expected = log_softmax(
      bias_add(matmul(forward.final_state.h, vars.softmax_w.shards[0].value(), false, true),
               vars.softmax_b.shards[0].value()));
  session s(g);
  s.run({global_variables_initializer(g)});
  temp_dir dir("export_lm");
  auto at = apps::export_language_model(s, vars, config, dir.path.string());
  CHECK(at == dir / "1");
  auto prefixes = tensor::from_vector<int64_t>({1, 2, 3, 4, 39, 0, 7, 7, 5, 9, 11, 13}, {3, 4});
  auto want = s.run({{ids, prefixes}}, {expected})[0].to_vector<float>();
  auto model = load_model(at);
  auto& sig = model->signature("serving_default");
  CHECK(sig.inputs.at(0).dims == std::vector<int64_t>{-1, config.steps});
  CHECK(sig.outputs.at(0).dims == std::vector<int64_t>{-1, config.vocab});
  auto got = model->predict("serving_default", {{"words", prefixes}})
                 .at("log_probabilities")
                 .to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  // One prefix alone answers as it does in the batch.
  auto one = model->predict("serving_default",
                            {{"words", tensor::from_vector<int64_t>({5, 9, 11, 13}, {1, 4})}});
  auto row = one.at("log_probabilities").to_vector<float>();
  for (size_t k = 0; k < row.size(); ++k)
    CHECK(row[k] == doctest::Approx(want[2 * size_t(config.vocab) + k]).epsilon(1e-5));
}

TEST_CASE("predict with a timeout gives up on a step that takes longer, and the model goes on") {
  // A model that counts to n: its steps take as long as n says.
  graph g;
  auto n = placeholder(g, dtype::int32, {}, "n");
  auto counted = while_loop([&](const std::vector<output>& v) { return less(v[0], n); },
                            [&](const std::vector<output>& v) {
                              return std::vector<output>{v[0] + scalar<int32_t>(g, 1)};
                            },
                            {scalar<int32_t>(g, 0)})[0];
  session s(g);
  temp_dir dir("export_timeout");
  export_model(s, dir / "1", {{.inputs = {{"n", n}}, .outputs = {{"counted", counted}}}});
  auto model = load_model(dir / "1");
  auto slow = [&] {
    model->predict("serving_default", {{"n", tensor::scalar<int32_t>(300000)}},
                   std::chrono::milliseconds(5));
  };
  CHECK(code_of_failure(slow) == error_code::deadline_exceeded);
  CHECK(contains(error_of(slow), "took longer than 5 ms"));
  auto quick = model->predict("serving_default", {{"n", tensor::scalar<int32_t>(7)}},
                              std::chrono::seconds(30));
  CHECK(quick.at("counted").item<int32_t>() == 7);
}
