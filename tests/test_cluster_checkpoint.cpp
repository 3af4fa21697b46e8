// Cluster checkpoints through the session-level API, across real ps task
// processes: one consistent cut, restored into another number of ps tasks
// (partitioned variables re-split) and into one process, and the errors of
// checkpoints that do not fit or are damaged.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "actors/checkpoint.hpp"
#include "actors/cluster/checkpoint_shards.hpp"
#include "actors/run/messages.hpp"
#include "actors/session.hpp"
#include "ops/array.hpp"
#include "ops/embedding.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "schema/checkpoint_io.hpp"
#include "tests/cluster_fixture.hpp"
#include "tests/test_util.hpp"

using namespace actorflow;
using actorflow::testing::child_process;
using actorflow::testing::temp_dir;
using actorflow::testing::test_cluster;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kRows = 13;  // not a multiple of 2 or 3: the parts differ in size

// An embedding table split by rows over `parts` (0: one plain variable), a
// dense layer after it, adagrad (whose accumulators are shaped like their
// variables, so they are re-split too), and the global step.
struct lookup_model {
  graph g;
  output ids, labels, loss;
  operation init, train;
  variable step;

  lookup_model(int parts, int ps_tasks, int64_t rows = kRows) {
    // Placed over the ps tasks, or (0) all in one process.
    auto placement =
        ps_tasks > 0
            ? g.device_function_scope(replica_device_setter(ps_tasks, "/job:worker/task:0"))
            : graph::scope_guard(std::function<void()>());
    ids = placeholder(g, dtype::int64, {6}, "ids");
    labels = placeholder(g, dtype::float32, {6, 3}, "labels");
    auto initial = constant(g, table(rows));
    output rows_of_ids;
    if (parts > 0) {
      auto emb = make_partitioned_variable(initial, parts, "emb", {}, partition_strategy::mod);
      rows_of_ids = embedding_lookup(emb, ids);
    } else {
      rows_of_ids = gather(make_variable(initial, "emb").value(), ids);
    }
    auto w =
        make_variable(constant(g, tensor::from_vector<float>({0.3f, -0.2f, 0.1f, 0.5f, 0.4f, -0.3f,
                                                              -0.1f, 0.2f, 0.6f, 0.2f, -0.5f, 0.3f},
                                                             shape{4, 3})),
                      "w");
    auto b = make_variable(constant(g, tensor::from_vector<float>({0.1f, 0.0f, -0.1f})), "b");
    auto logits = bias_add(matmul(rows_of_ids, w.value()), b.value());
    loss = reduce_mean(softmax_cross_entropy_with_logits(logits, labels).loss);
    train = adagrad(0.3).minimize(loss);
    step = global_step(g);
    init = global_variables_initializer(g);
  }

  static tensor table(int64_t rows) {
    std::vector<float> v;
    for (int64_t i = 0; i < rows * 4; ++i) v.push_back(std::sin(0.7f * float(i)));
    return tensor::from_vector(v, shape{rows, 4});
  }

  feed_list batch(int step) const {
    std::vector<int64_t> id;
    std::vector<float> y;
    for (int i = 0; i < 6; ++i) {
      id.push_back((step * 5 + i * 7) % kRows);
      for (int c = 0; c < 3; ++c) y.push_back((i + step) % 3 == c ? 1.0f : 0.0f);
    }
    return {{ids, tensor::from_vector(id, shape{6})},
            {labels, tensor::from_vector(y, shape{6, 3})}};
  }

  std::vector<float> train_steps(session& s, int first, int count) const {
    std::vector<float> losses;
    for (int i = first; i < first + count; ++i)
      losses.push_back(s.run(batch(i), {loss}, {train}).at(0).item<float>());
    return losses;
  }
};

std::vector<std::unique_ptr<child_process>> start_ps_tasks(test_cluster& c, int n) {
  c.with_ps_tasks(n);
  std::vector<std::unique_ptr<child_process>> tasks;
  for (int i = 0; i < n; ++i) tasks.push_back(c.start("ps", i));
  return tasks;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  }
}

std::string flip_a_byte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.get(c);
  f.seekp(std::streamoff(at));
  f.put(char(c ^ 0x20));
  return path;
}

}  // namespace

TEST_CASE("saved by 3 ps tasks, restored into 2 and into one process: the losses go on") {
  auto dir = temp_dir("ckpt-3-to-2");
  std::vector<float> expected;
  std::string saved;
  {
    test_cluster c;
    auto ps = start_ps_tasks(c, 3);
    lookup_model m(3, 3);
    session s(m.g, c.connect());
    s.run({m.init});
    m.train_steps(s, 0, 5);
    checkpoint_manager ckpt(dir);
    saved = ckpt.save(s, 5);
    expected = m.train_steps(s, 5, 5);  // the uninterrupted run
    auto manifest = load_manifest(saved + "/MANIFEST");
    CHECK(manifest.step == 5);
    CHECK(manifest.shards.size() == 3);
    CHECK(manifest.cluster.at("ps") == 3);
    const auto* part = manifest.find("emb/part_2");
    REQUIRE(part != nullptr);
    CHECK(part->partition.of == "emb");
    CHECK(part->partition.count == 3);
    CHECK(part->partition.strategy == "mod");
  }
  SUBCASE("2 ps tasks, the table in 2 parts") {
    test_cluster c;
    auto ps = start_ps_tasks(c, 2);
    lookup_model m(2, 2);
    session s(m.g, c.connect());
    CHECK(restore_checkpoint(s, saved) == 5);
    CHECK(s.eval(m.step.value()).item<int64_t>() == 5);
    check_close(m.train_steps(s, 5, 5), expected);
  }
  SUBCASE("one process, the table whole") {
    lookup_model m(0, 0);
    session s(m.g);
    checkpoint_manager ckpt(dir);
    auto r = ckpt.restore_latest(s);
    CHECK(r.restored);
    CHECK(r.step == 5);
    check_close(m.train_steps(s, 5, 5), expected);
  }
  SUBCASE("one process, the table in 4 parts") {
    lookup_model m(4, 0);
    session s(m.g);
    CHECK(restore_checkpoint(s, saved) == 5);
    check_close(m.train_steps(s, 5, 5), expected);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoints that do not fit or are damaged: errors naming the file, nothing changed") {
  auto dir = temp_dir("ckpt-bad");
  test_cluster c;
  auto ps = start_ps_tasks(c, 2);
  lookup_model m(2, 2);
  session s(m.g, c.connect());
  s.run({m.init});
  m.train_steps(s, 0, 3);
  checkpoint_manager ckpt(dir, 5);
  auto older = ckpt.save(s, 3);
  m.train_steps(s, 3, 2);
  auto newer = ckpt.save(s, 5);
  const float loss_now = s.run(m.batch(9), {m.loss}).at(0).item<float>();

  SUBCASE("another model: a table of other size") {
    lookup_model other(2, 2, kRows + 4);
    session s2(other.g, c.connect());
    auto e = testing::error_of([&] { restore_checkpoint(s2, newer); });
    CHECK_MESSAGE(
        e.find("'emb' has 17 rows in the graph but 13 in the checkpoint") != std::string::npos, e);
    CHECK_MESSAGE(e.find("nothing was restored") != std::string::npos, e);
    // The ps tasks' variables (the first session's) are as they were.
    CHECK(s.run(m.batch(9), {m.loss}).at(0).item<float>() == loss_now);
  }
  SUBCASE("a variable the checkpoint lacks") {
    lookup_model wider(2, 2);
    {
      auto on = wider.g.device_scope("/job:ps/task:1");
      make_variable(constant(wider.g, tensor::scalar<float>(1.0f)), "extra");
    }
    session s2(wider.g, c.connect());
    auto e = testing::error_of([&] { restore_checkpoint(s2, newer); });
    CHECK_MESSAGE(e.find("variable 'extra' is not in the checkpoint") != std::string::npos, e);
  }
  SUBCASE("a corrupted shard: restore_latest names it and takes the older checkpoint") {
    flip_a_byte(newer + "/ps-1.afck", 100);
    auto e = testing::error_of([&] { restore_checkpoint(s, newer); });
    CHECK_MESSAGE(e.find(newer + "/ps-1.afck") != std::string::npos, e);
    CHECK_MESSAGE(e.find("CRC32") != std::string::npos, e);
    CHECK(s.run(m.batch(9), {m.loss}).at(0).item<float>() == loss_now);
    auto r = ckpt.restore_latest(s);
    CHECK(r.restored);
    CHECK(r.step == 3);
    REQUIRE(r.errors.size() == 1);
    CHECK_MESSAGE(r.errors[0].find("ps-1.afck") != std::string::npos, r.errors[0]);
    CHECK(s.eval(m.step.value()).item<int64_t>() == 3);
  }
  SUBCASE("a manifest naming a missing shard") {
    std::filesystem::remove(newer + "/ps-0.afck");
    auto e = testing::error_of([&] { restore_checkpoint(s, newer); });
    CHECK_MESSAGE(e.find(newer + "/ps-0.afck") != std::string::npos, e);
    CHECK(s.run(m.batch(9), {m.loss}).at(0).item<float>() == loss_now);
  }
  SUBCASE("a save that did not finish (no manifest) is not a checkpoint") {
    std::filesystem::remove(newer + "/MANIFEST");
    auto r = ckpt.restore_latest(s);
    CHECK(r.step == 3);
    REQUIRE(r.errors.size() == 1);
    CHECK_MESSAGE(r.errors[0].find("MANIFEST") != std::string::npos, r.errors[0]);
    // The next save cleans the stale shards away.
    ckpt.save(s, 7);
    CHECK_FALSE(std::filesystem::exists(newer));
  }
  SUBCASE("a second writer of the directory is refused while the first holds it") {
    checkpoint_manager second(dir);
    auto e = testing::error_of([&] { second.save(s, 8); });
    CHECK_MESSAGE(e.find("LOCK") != std::string::npos, e);
    CHECK_FALSE(std::filesystem::exists(dir + "/ckpt-8"));
  }
  std::filesystem::remove_all(dir);
}

namespace {

// Three counters, one per ps task, and a step that adds 1 to each.
struct counters_model {
  graph g;
  operation step;
  counters_model() {
    std::vector<operation> bumps;
    for (int k = 0; k < 3; ++k) {
      auto on = g.device_scope("/job:ps/task:" + std::to_string(k));
      auto counter =
          make_variable(constant(g, tensor::scalar<int64_t>(0)), "counter" + std::to_string(k));
      bumps.push_back(
          operation(&g, assign_add(counter, constant(g, tensor::scalar<int64_t>(1))).ref().node));
    }
    step = group(g, bumps);
  }
};

std::vector<int64_t> counters_in(const std::string& dir, const std::vector<std::string>& files) {
  std::vector<int64_t> out;
  for (auto& f : files)
    for (auto& [name, state] : load_checkpoint_file(dir + "/" + f).variables)
      out.push_back(state.value.item<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("the two phases: prepared tasks hold every update until the commit, or the hold ends") {
  auto dir = temp_dir("ckpt-phases");
  std::filesystem::create_directories(dir);
  test_cluster c;
  auto ps = start_ps_tasks(c, 3);
  counters_model m;
  auto cluster = c.connect();
  session s(m.g, cluster);
  s.run({global_variables_initializer(m.g)});
  for (int i = 0; i < 5; ++i) s.run({m.step});
  const std::vector<std::string> tasks{"/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2"};
  caf::scoped_actor self{cluster->rt()->system()};
  // A request's error, "" when it was answered (prepare: a count; commit:
  // the shard's manifest).
  auto ask = [&](const std::string& task, auto answer, auto... request) {
    std::string failure;
    self->request(cluster->server(task), 10s, request...)
        .receive([](decltype(answer)) {}, [&](caf::error& e) { failure = caf::to_string(e); });
    return failure;
  };
  std::atomic<int> steps{0};
  std::atomic<bool> stop{false};
  auto run_steps = [&] {
    while (!stop) {
      s.run({m.step});
      ++steps;
    }
  };

  SUBCASE("held until the commit, and the cut is the step before") {
    for (auto& t : tasks)
      CHECK(ask(t, uint64_t{}, snap_prepare_atom::value, uint64_t{11}, int64_t{5000}) == "");
    std::thread trainer(run_steps);
    std::this_thread::sleep_for(300ms);
    CHECK(steps == 0);  // every update waits behind the freeze
    for (auto& t : tasks)
      CHECK(ask(t, std::string(), snap_commit_atom::value, uint64_t{11}, dir, int64_t{5}, 0.0) ==
            "");
    std::this_thread::sleep_for(200ms);
    stop = true;
    trainer.join();
    CHECK(steps > 0);  // and go on after it
    CHECK(counters_in(dir, {"ps-0.afck", "ps-1.afck", "ps-2.afck"}) ==
          std::vector<int64_t>{5, 5, 5});
  }
  SUBCASE("a restore prepared, then aborted: its commit is refused, nothing changed") {
    auto saved = dir + "/saved";
    save_checkpoint(s, saved, 5);  // the counters at 5
    s.run({m.step});               // at 6
    std::vector<manifest_variable> wanted{{"counter0", dtype::int64, {}, 0, {}}};
    CHECK(ask(tasks[0], uint64_t{}, restore_prepare_atom::value, uint64_t{21}, saved,
              serialize_targets(wanted)) == "");
    caf::anon_send(cluster->server(tasks[0]), restore_abort_atom::value, uint64_t{21});
    auto refused = ask(tasks[0], bool{}, restore_commit_atom::value, uint64_t{21});
    CHECK_MESSAGE(refused.find("no restore 21 was prepared") != std::string::npos, refused);
    save_checkpoint(s, dir + "/after", 6);
    CHECK(counters_in(dir + "/after", {"ps-0.afck"}) == std::vector<int64_t>{6});
  }
  SUBCASE("a commit asking for a write rate that would never finish is refused, and thaws") {
    for (auto& t : tasks)
      CHECK(ask(t, uint64_t{}, snap_prepare_atom::value, uint64_t{13}, int64_t{5000}) == "");
    for (double rate : {1.0, -5.0, std::nan("")}) {
      auto refused = ask(tasks[0], std::string(), snap_commit_atom::value, uint64_t{13}, dir,
                         int64_t{6}, rate);
      CHECK_MESSAGE(refused.find("a shard write rate of") != std::string::npos, refused);
    }
    for (auto& t : tasks) caf::anon_send(cluster->server(t), snap_abort_atom::value, uint64_t{13});
    auto start = std::chrono::steady_clock::now();
    s.run({m.step});  // nothing holds it
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    CHECK_FALSE(std::filesystem::exists(dir + "/ps-0.afck"));
  }
  SUBCASE("a client that never commits: the freeze ends by itself, a late commit is refused") {
    for (auto& t : tasks)
      CHECK(ask(t, uint64_t{}, snap_prepare_atom::value, uint64_t{12}, int64_t{400}) == "");
    auto start = std::chrono::steady_clock::now();
    s.run({m.step});  // waits out the hold, then runs
    CHECK(std::chrono::steady_clock::now() - start >= 300ms);
    auto refused =
        ask(tasks[0], std::string(), snap_commit_atom::value, uint64_t{12}, dir, int64_t{6}, 0.0);
    CHECK_MESSAGE(refused.find("freeze had (nearly) ended") != std::string::npos, refused);
    CHECK_FALSE(std::filesystem::exists(dir + "/ps-0.afck"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a save while steps run: one cut across the ps tasks, training goes on") {
  // Every step adds 1 to a counter on each of 3 ps tasks. One thread runs
  // steps without pause; saves taken meanwhile hold counters at most one
  // step apart (the one step in flight).
  auto dir = temp_dir("ckpt-cut");
  test_cluster c;
  auto ps = start_ps_tasks(c, 3);
  counters_model m;
  session s(m.g, c.connect());
  s.run({global_variables_initializer(m.g)});
  std::atomic<bool> stop{false};
  std::atomic<int64_t> steps{0};
  std::thread trainer([&] {
    while (!stop) {
      s.run({m.step});
      ++steps;
    }
  });
  checkpoint_manager ckpt(dir, 20);
  std::vector<std::string> saved;
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(50ms);
    saved.push_back(ckpt.start_save(s, i).get());
  }
  int64_t before = steps;
  std::this_thread::sleep_for(300ms);
  stop = true;
  trainer.join();
  CHECK(steps > before);  // the saves stopped nothing
  for (auto& path : saved) {
    auto manifest = load_manifest(path + "/MANIFEST");
    std::vector<int64_t> counters;
    for (auto& shard : manifest.shards) {
      auto data = load_checkpoint_file(path + "/" + shard.file);
      for (auto& [name, state] : data.variables) counters.push_back(state.value.item<int64_t>());
    }
    REQUIRE(counters.size() == 3);
    auto [lo, hi] = std::minmax_element(counters.begin(), counters.end());
    CAPTURE(path);
    CHECK(*hi - *lo <= 1);
    MESSAGE(path << ": counters " << counters[0] << " " << counters[1] << " " << counters[2]
                 << ", updates held " << manifest.pause_ms << " ms");
  }
  std::filesystem::remove_all(dir);
}
