// The language model across parameter servers (apps/lib/lm_cluster_training.hpp),
// on the real corpus and across real processes on 127.0.0.1: the sharded
// model's losses against the single-process run's, the bytes a step moves,
// the actorflow-train command line in a cluster (sync with a backup worker,
// async with a ps task killed and restarted, every task stopped and resumed),
// and the errors at start for sizes that cannot work. Every process started
// here is stopped by the test that starts it.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <thread>

#include "actors/caf_ext/guarded_connection.hpp"
#include "actors/input/fortunes.hpp"
#include "apps/lib/lm_cluster_training.hpp"
#include "apps/lib/lm_training.hpp"
#include "schema/event_file.hpp"
#include "tests/cluster_fixture.hpp"
#include "tests/test_util.hpp"
#include "tests/train_cluster.hpp"

using namespace actorflow;
using actorflow::testing::child_process;
using actorflow::testing::train_cluster;
using actorflow::testing::wait_for_cluster_checkpoint;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Without the corpus: the model's own checks and the shard loads' arithmetic.

TEST_CASE("the model refuses sizes it cannot build, naming them") {
  auto error_of = [](lm::lm_config c) {
    graph g;
    try {
      lm::make_lm_variables(g, c);
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  lm::lm_config c;
  c.vocab = 6;
  c.vocab_shards = 7;
  CHECK(error_of(c).find("7 vocabulary shards cannot split 6 words: choose 1 to 6") !=
        std::string::npos);
  c.vocab_shards = 0;
  CHECK(error_of(c).find("0 vocabulary shards") != std::string::npos);
  c = {};
  c.hidden = 0;
  CHECK(error_of(c).find("hidden 0") != std::string::npos);
  c = {};
  c.vocab_shards = 3;
  CHECK(error_of(c).empty());
  CHECK(lm::describe_sizes(lm::model_sizes(c)) ==
        "vocab 10001, embedding 256, hidden 256, 3 vocabulary shards");
}

TEST_CASE("shard loads: word i on shard i % K against contiguous ranges") {
  // The frequent words first, as in a vocabulary sorted by frequency: word 0
  // three times, word 1 twice, word 2 once; 6 words over 3 shards.
  auto loads = apps::vocabulary_shard_loads({0, 0, 0, 1, 1, 2}, 6, 3);
  CHECK(loads.mod == std::vector<double>{3.0 / 6, 2.0 / 6, 1.0 / 6});     // {0,3} {1,4} {2,5}
  CHECK(loads.contiguous == std::vector<double>{5.0 / 6, 1.0 / 6, 0.0});  // {0,1} {2,3} {4,5}
}

TEST_SUITE_BEGIN("fortunes");

namespace {

std::vector<int64_t> head(const std::vector<int64_t>& ids, int64_t n) {
  return {ids.begin(), ids.begin() + std::min<int64_t>(n, int64_t(ids.size()))};
}

lm::lm_config small_config(const fortunes_corpus& corpus, bool full, int64_t shards) {
  lm::lm_config c;
  c.vocab = corpus.vocab_size();
  c.streams = 8;
  c.full_softmax = full;
  c.seed = 3;
  c.optimizer = "lazy_adam";
  c.vocab_shards = shards;
  return c;
}

// 8 streams x 35 steps x 24 segments.
constexpr int64_t tokens = 8 * 35 * 24 + 1;

std::vector<float> single_process_losses(const fortunes_corpus& corpus, bool full, int64_t shards,
                                         int steps) {
  apps::lm_trainer lm(small_config(corpus, full, shards), head(corpus.train, tokens),
                      head(corpus.valid, tokens));
  lm.sess().run({global_variables_initializer(lm.g())});
  std::vector<float> losses;
  for (int64_t step = 0; step < steps; ++step) losses.push_back(lm.run_step(step));
  return losses;
}

bool close(float a, float b, double rel) {
  return std::fabs(double(a) - double(b)) <= rel * std::max(1.0, std::fabs(double(b)));
}

}  // namespace

TEST_CASE(
    "the vocabulary's mod split spreads the Zipfian lookups evenly; contiguous ranges do not") {
  if (!testing::have_fortunes()) return;
  auto corpus = load_fortunes();
  auto loads = apps::vocabulary_shard_loads(corpus.train, corpus.vocab_size(), 4);
  MESSAGE("mod: " << loads.mod[0] << " " << loads.mod[1] << " " << loads.mod[2] << " "
                  << loads.mod[3] << "; contiguous: " << loads.contiguous[0] << " "
                  << loads.contiguous[1] << " " << loads.contiguous[2] << " "
                  << loads.contiguous[3]);
  for (double share : loads.mod) CHECK(share < 0.4);
  CHECK(loads.contiguous[0] > 0.8);  // the frequent words are the first ids
}

TEST_CASE("1 worker and 2 ps tasks: the sharded LM's losses are the single-process run's") {
  if (!testing::have_fortunes()) return;
  auto corpus = load_fortunes();
  const int steps = 20;
  for (bool full : {false, true}) {
    CAPTURE(full);
    auto sharded = single_process_losses(corpus, full, 2, steps);
    auto plain = single_process_losses(corpus, full, 1, steps);

    testing::test_cluster c;
    auto ps0 = c.start("ps", 0), ps1 = c.start("ps", 1);
    apps::lm_trainer lm(small_config(corpus, full, 0), head(corpus.train, tokens),
                        head(corpus.valid, tokens),
                        {.cluster = c.connect(), .num_ps = 2, .worker = 0, .workers = 1});
    REQUIRE(lm.config().vocab_shards == 2);
    lm.sess().run({lm.cluster().init});
    apps::step_observer none({});
    std::vector<float> cluster;
    traffic_bytes before;
    for (int64_t step = 0; step < steps; ++step) {
      if (step == steps / 2) before = traffic_total();
      auto r = lm.run_segment(step, step + 1, none);
      CHECK(r.global_step == step + 1);
      cluster.push_back(r.loss);
    }
    auto after = traffic_total();
    int bit_for_bit = 0;
    for (int i = 0; i < steps; ++i) {
      CAPTURE(i);
      CHECK(close(cluster[size_t(i)], sharded[size_t(i)], 1e-5));
      CHECK(close(sharded[size_t(i)], plain[size_t(i)], 1e-4));
      bit_for_bit += cluster[size_t(i)] == sharded[size_t(i)];
    }
    MESSAGE(std::string(full ? "full" : "sampled")
            << " softmax: first loss " << cluster[0] << ", last " << cluster.back() << "; "
            << bit_for_bit << " of " << steps << " losses bit for bit the single process's");
    // What a step moves: the LSTM's dense weights and their gradients, the
    // state, and rows of the vocabulary's tables; never a whole table.
    const auto& cfg = lm.config();
    const double table = double(cfg.vocab * cfg.hidden * 4);
    const double lstm = double((cfg.embedding + cfg.hidden + 1) * 4 * cfg.hidden * 4);
    const double sent = double(after.sent - before.sent) / (steps / 2);
    const double received = double(after.received - before.received) / (steps / 2);
    MESSAGE("per step: sent " << sent << " bytes, received " << received << " bytes; the LSTM's "
                              << lstm << ", one vocabulary table " << table);
    CHECK(sent < lstm + 0.3 * table);
    CHECK(received < lstm + 0.3 * table);
  }
}

namespace {

// The first segment's batch of 8 streams over `ids`.
std::vector<tensor> first_batch(const std::vector<int64_t>& ids) {
  bptt_batcher b(ids, {.streams = 8, .steps = 35});
  return b.batch(b.position_at_step(0));
}

// Two int64 [8, T] batches stacked into one [16, T].
tensor stacked(const tensor& a, const tensor& b) {
  std::vector<int64_t> rows(a.data<int64_t>(), a.data<int64_t>() + a.num_elements());
  rows.insert(rows.end(), b.data<int64_t>(), b.data<int64_t>() + b.num_elements());
  return tensor::from_vector<int64_t>(rows, {a.dims()[0] + b.dims()[0], a.dims()[1]});
}

tensor value_of(apps::lm_trainer& lm, const std::string& name) {
  const node* n = lm.g().find(name);
  REQUIRE(n != nullptr);
  return lm.sess().eval(output(&lm.g(), {n->id, 0}));
}

}  // namespace

TEST_CASE("a worker on the accelerator stand-in: the sharded LM's losses are a CPU worker's") {
  if (!testing::have_fortunes()) return;
  auto corpus = load_fortunes();
  const int steps = 6;
  auto run = [&](const std::string& device) {
    testing::test_cluster c;
    auto ps0 = c.start("ps", 0), ps1 = c.start("ps", 1);
    apps::lm_trainer lm(
        small_config(corpus, false, 0), head(corpus.train, tokens), head(corpus.valid, tokens),
        {.cluster = c.connect({}, {.stand_in_devices = 1}), .device = device, .num_ps = 2});
    lm.sess().run({lm.cluster().init});
    apps::step_observer none({});
    std::vector<float> losses;
    for (int64_t step = 0; step < steps; ++step)
      losses.push_back(lm.run_segment(step, step + 1, none).loss);
    for (auto& e : lm.sess().placement_log()) {  // this worker's part
      INFO(e.node << " (" << e.op << "): " << e.reason);
      CHECK(e.reason.rfind("soft placement", 0) == std::string::npos);
    }
    return losses;
  };
  auto on_cpu = run(""), on_stand_in = run("/stand_in:0");
  for (int i = 0; i < steps; ++i) {
    CAPTURE(i);
    CHECK(close(on_stand_in[size_t(i)], on_cpu[size_t(i)], 1e-5));
  }
}

TEST_CASE("2 workers, synchronous: one step applies the single-process gradient of both batches") {
  if (!testing::have_fortunes()) return;
  auto corpus = load_fortunes();
  auto train = head(corpus.train, 2 * tokens);
  for (bool full : {false, true}) {
    CAPTURE(full);
    // SGD: the update is the (clipped) gradient itself, so the variables
    // after one step show the gradient the chief applied.
    auto config = small_config(corpus, full, 2);
    config.optimizer = "sgd";
    config.lr = 0.5;
    // The two workers' batches side by side are one 16-stream batch: its
    // mean loss is the mean of theirs, its gradient the mean of theirs. Both
    // workers draw the same candidates (the sampler's counter is the step).
    auto a = first_batch(apps::worker_share(train, 0, 2)),
         b = first_batch(apps::worker_share(train, 1, 2));
    auto single_config = config;
    single_config.streams = 16;
    apps::lm_trainer single(single_config, train, head(corpus.valid, tokens));
    single.sess().run({global_variables_initializer(single.g())});
    const auto& t = single.training_graph();
    single.sess().run({{t.inputs, stacked(a[0], b[0])}, {t.targets, stacked(a[1], b[1])}}, {t.loss},
                      {t.train});

    testing::test_cluster c;
    auto ps0 = c.start("ps", 0), ps1 = c.start("ps", 1);
    auto spec = cluster_spec::from_hosts(c.ps_hosts(), c.worker_hosts());
    std::vector<std::unique_ptr<apps::lm_trainer>> workers;
    for (int w = 0; w < 2; ++w) {
      auto connection = std::make_shared<cluster_connection>(
          std::make_shared<runtime>(), spec, task_name("worker", w), cluster_options{});
      workers.push_back(std::make_unique<apps::lm_trainer>(
          config, apps::worker_share(train, w, 2), head(corpus.valid, tokens),
          apps::lm_placement{.cluster = connection,
                             .num_ps = 2,
                             .worker = w,
                             .workers = 2,
                             .sync_aggregated = 2}));
    }
    auto& chief = *workers[0];
    chief.sess().run({chief.cluster().init});
    for (auto& w : workers) w->sess().run({w->cluster().sync->local_step_init});
    apps::step_observer none({});
    std::vector<std::thread> steps;
    for (auto& w : workers) steps.emplace_back([&w, &none] { w->run_segment(0, 1, none); });
    auto r = chief.sess().run({}, {chief.cluster().sync->chief_step},
                              {chief.cluster().sync->chief_update});
    for (auto& s : steps) s.join();
    CHECK(r[0].item<int64_t>() == 1);
    for (const char* name :
         {"lstm_kernel", "lstm_bias", "embedding/part_0", "embedding/part_1", "softmax_w/part_0",
          "softmax_w/part_1", "softmax_b/part_0", "softmax_b/part_1"}) {
      CAPTURE(std::string(name));
      auto ours = value_of(chief, name), theirs = value_of(single, name);
      REQUIRE(ours.dims() == theirs.dims());
      double worst = 0;
      for (int64_t i = 0; i < ours.num_elements(); ++i)
        worst = std::max(
            worst, std::fabs(double(ours.data<float>()[i]) - double(theirs.data<float>()[i])));
      CHECK(worst < 1e-6);
    }
  }
}

namespace {

// A small model on a slice of the corpus; `extra` adds flags or, for a flag
// given here already, replaces its value.
std::vector<std::string> lm_flags(std::vector<std::string> extra) {
  std::vector<std::pair<std::string, std::string>> flags{
      {"--model", "lstm_lm"},        {"--batch", "8"},
      {"--embedding", "64"},         {"--hidden", "64"},
      {"--vocab", "2000"},           {"--max-train-tokens", "40000"},
      {"--max-valid-tokens", "4000"}};
  std::vector<std::string> argv;
  for (auto& [flag, value] : flags) {
    auto given = std::find(extra.begin(), extra.end(), flag);
    argv.push_back(flag);
    if (given == extra.end() || given + 1 == extra.end()) {
      argv.push_back(value);
      continue;
    }
    argv.push_back(*(given + 1));
    extra.erase(given, given + 2);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// The chief's last line's perplexity (the epoch lines have one too).
double valid_ppl(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("valid_ppl=([0-9.]+) words_per_s="))) return -1;
  return std::stod(m[1]);
}

// Whether `dir` holds a whole shard (a save in progress is a .tmp file).
// The chief's train/loss summaries by global step.
std::map<int64_t, float> losses_in(const std::string& logdir) {
  std::map<int64_t, float> losses;
  for (auto& f : fs::directory_iterator(logdir))
    if (f.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      for (auto& e : event_file_reader(f.path().string()).read_all())
        for (auto& v : e.summary)
          if (v.tag == "train/loss") losses[e.step] = v.simple_value;
  return losses;
}

}  // namespace

TEST_CASE(
    "2 ps + 3 workers, synchronous with a backup worker: kill -9 of a worker mid-epoch, "
    "restarted") {
  if (!testing::have_fortunes()) return;
  // Restarted 2 s later, the worker rejoins with the others' step and trains
  // its share of the corpus again.
  auto flags = lm_flags({"--sync", "--backup-workers", "1", "--epochs", "3"});
  auto train = [&](bool kill) {
    train_cluster c(2, 3);
    auto ps0 = c.ps(0), ps1 = c.ps(1);
    auto w1 = c.worker(1, flags), w2 = c.worker(2, flags);
    auto chief = c.worker(0, flags);
    if (kill) {
      REQUIRE(w2->wait_for("until step", 60s));
      std::this_thread::sleep_for(1500ms);
      w2->kill_now();
      std::this_thread::sleep_for(2s);
      w2 = c.worker(2, flags);
    }
    int status = chief->wait_exit(400s);
    INFO("chief:\n"
         << chief->output() << "\nworker 1:\n"
         << w1->output() << "\nworker 2:\n"
         << w2->output());
    REQUIRE(status == 0);
    // A worker whose step failed near the end retries for up to
    // --recovery-seconds (120 s) before it gives up with an error.
    CHECK(w1->wait_exit(150s) == 0);
    CHECK(w2->wait_exit(150s) == 0);
    CHECK(chief->output().find("vocabulary shards' share") != std::string::npos);
    CHECK(fs::exists(c.out_dir + "/w0/metrics.csv"));
    return valid_ppl(chief->output());
  };
  double undisturbed = train(false), killed = train(true);
  MESSAGE("validation perplexity: undisturbed " << undisturbed << ", a worker killed and restarted "
                                                << killed);
  CHECK(undisturbed > 1);
  CHECK(undisturbed < 400);  // of 2001 words: it learned
  // Which gradients the backup worker's aggregation drops depends on timing:
  // killed / undisturbed was 0.98-1.03 alone and 1.08 once under ctest -j2 on
  // 2 cores. A restart that lost state would be far above.
  CHECK(killed < undisturbed * 1.15);
}

TEST_CASE("every task stopped, then started again: the losses go on as an uninterrupted run's") {
  if (!testing::have_fortunes()) return;
  // Uninterrupted: 12 steps. Interrupted: 6 steps, every task stopped, the
  // chief restores the ps tasks from its checkpoint, 6 more. One worker,
  // asynchronous: the worker's position in its stream is the global step.
  auto run = [&](train_cluster& c, const std::string& tag, int64_t until,
                 const std::string& checkpoints) {
    auto flags = lm_flags({"--max-steps", std::to_string(until), "--checkpoint-every", "6",
                           "--checkpoint-dir", checkpoints, "--logdir", c.out_dir + "/logs-" + tag,
                           "--summary-every", "1"});
    auto chief = c.worker(0, flags);
    int status = chief->wait_exit(300s);
    INFO(chief->output());
    REQUIRE(status == 0);
    return chief->output();
  };
  std::map<int64_t, float> whole, resumed;
  {
    train_cluster c(2, 1);
    auto ps0 = c.ps(0), ps1 = c.ps(1);
    run(c, "a", 12, c.out_dir + "/ckpt-a");
    whole = losses_in(c.out_dir + "/logs-a");
  }
  {
    train_cluster c(2, 1);
    {
      auto ps0 = c.ps(0), ps1 = c.ps(1);
      run(c, "b", 6, c.out_dir + "/ckpt-b");
    }  // every task stopped
    auto ps0 = c.ps(0), ps1 = c.ps(1);
    auto out = run(c, "c", 12, c.out_dir + "/ckpt-b");
    CHECK(out.find("recovery: restored checkpoint step=6") != std::string::npos);
    resumed = losses_in(c.out_dir + "/logs-c");
  }
  REQUIRE(whole.size() == 12);
  REQUIRE(resumed.size() == 6);
  for (auto& [step, loss] : resumed) {
    CAPTURE(step);
    CHECK(loss == whole[step]);  // bit for bit
  }
}

TEST_CASE("kill -9 of a ps task, asynchronous: restarted after 5 s, training finishes as well") {
  if (!testing::have_fortunes()) return;
  // The chief sets every ps task back to its newest checkpoint, one step
  // across both: frequent checkpoints keep what is lost small.
  auto flags = lm_flags({"--epochs", "3"});
  double undisturbed = 0;
  {
    train_cluster c(2, 1);
    auto ps0 = c.ps(0), ps1 = c.ps(1);
    auto chief = c.worker(0, flags);
    REQUIRE(chief->wait_exit(300s) == 0);
    undisturbed = valid_ppl(chief->output());
  }
  train_cluster c(2, 1);
  auto checkpoints = c.out_dir + "/ckpt";
  auto ps0 = c.ps(0), ps1 = c.ps(1);
  flags.insert(flags.end(), {"--checkpoint-every", "2", "--checkpoint-dir", checkpoints});
  auto chief = c.worker(0, flags);
  REQUIRE(wait_for_cluster_checkpoint(checkpoints, 120s));
  ps1->kill_now();
  std::this_thread::sleep_for(5s);
  ps1 = c.ps(1);
  int status = chief->wait_exit(400s);
  INFO("chief:\n" << chief->output() << "\nps 1:\n" << ps1->output());
  REQUIRE(status == 0);
  CHECK(chief->output().find("recovery: restored checkpoint") != std::string::npos);
  double ppl = valid_ppl(chief->output());
  MESSAGE("validation perplexity: undisturbed " << undisturbed << ", ps task killed " << ppl);
  CHECK(ppl < undisturbed * 1.05);
}

TEST_CASE("sizes that cannot work fail at start, naming the values; the ps tasks keep serving") {
  if (!testing::have_fortunes()) return;
  auto out =
      (fs::temp_directory_path() / ("actorflow-lm-bad-" + std::to_string(getpid()))).string();
  auto single = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{ACTORFLOW_TRAIN_BINARY, "--out", out};
    auto flags = lm_flags(std::move(extra));
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto p = std::make_unique<child_process>(argv);
    CHECK(p->wait_exit(60s) != 0);
    return p->output();
  };
  CHECK(single({"--vocab", "40000"}).find("--vocab 40000 asks for more words") !=
        std::string::npos);
  CHECK(single({"--vocab", "0"}).find("--vocab") != std::string::npos);
  CHECK(
      single({"--vocab", "5", "--vocab-shards", "7"}).find("7 vocabulary shards cannot split 6") !=
      std::string::npos);

  // A worker whose sizes differ from the model the ps tasks hold.
  train_cluster c(1, 2);
  auto ps = c.ps(0);
  auto chief = c.worker(0, lm_flags({"--max-steps", "2"}));
  REQUIRE(chief->wait_exit(300s) == 0);
  auto other = c.worker(1, lm_flags({"--max-steps", "4", "--hidden", "32"}));
  int status = other->wait_exit(120s);
  INFO(other->output());
  CHECK(status != 0);
  CHECK(other->output().find("hidden 32") != std::string::npos);
  CHECK(other->output().find("hidden 64") != std::string::npos);
  CHECK(!ps->exited());
  fs::remove_all(out);
}

TEST_SUITE_END();
