// actorflow-train in a cluster, across real processes on 127.0.0.1: the
// synchronous accuracy against the single-process run, a worker killed with
// kill -9 under backup workers, ps tasks killed and restored from the chief's
// consistent checkpoint, a ps task stopped (SIGSTOP), and a diverged run
// stopped at its first non-finite loss. Every
// process started here is killed and reaped by the test.
#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "actors/serving/export.hpp"
#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"
#include "schema/event_file.hpp"
#include "tests/support/child_process.hpp"
#include "tests/test_util.hpp"
#include "tests/train_cluster.hpp"

using actorflow::event_file_reader;
using actorflow::testing::child_process;
using actorflow::testing::contains;
using actorflow::testing::free_port;
using actorflow::testing::train_cluster;
using actorflow::testing::wait_for_cluster_checkpoint;
using namespace std::chrono_literals;

namespace {

double final_accuracy(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("test_acc=([0-9.]+)"))) return -1;
  return std::stod(m[1]);
}

}  // namespace

TEST_CASE("2 ps + 2 workers, synchronous: the MLP reaches the single-process accuracy") {
  // The same number of updates: one epoch alone, two epochs' examples
  // aggregated two at a time.
  child_process single(
      {ACTORFLOW_TRAIN_BINARY, "--epochs", "1", "--threads", "2", "--out",
       (std::filesystem::temp_directory_path() / "actorflow-single-out").string()});
  REQUIRE(single.wait_exit(300s) == 0);
  double single_acc = final_accuracy(single.output());
  REQUIRE(single_acc > 0.8);

  train_cluster c(2, 2);
  auto ps0 = c.ps(0), ps1 = c.ps(1);
  auto w1 = c.worker(1, {"--sync", "--epochs", "2"});
  auto chief = c.worker(0, {"--sync", "--epochs", "2"});
  int status = chief->wait_exit(400s);
  INFO("chief:\n" << chief->output() << "\nworker 1:\n" << w1->output());
  REQUIRE(status == 0);
  CHECK(w1->wait_exit(30s) == 0);
  double acc = final_accuracy(chief->output());
  MESSAGE("single-process accuracy " << single_acc << ", 2 ps + 2 workers synchronous " << acc);
  CHECK(acc >= single_acc - 0.01);
  CHECK(std::filesystem::exists(c.out_dir + "/w0/metrics.csv"));
}

TEST_CASE("workers on the accelerator stand-in train with their variables on the ps tasks") {
  train_cluster c(1, 2);
  auto ps0 = c.ps(0);
  std::vector<std::string> flags{"--device", "stand_in", "--max-steps", "60", "--batch", "64"};
  auto w1 = c.worker(1, flags);
  auto chief = c.worker(0, flags);
  int status = chief->wait_exit(300s);
  INFO("chief:\n" << chief->output() << "\nworker 1:\n" << w1->output());
  REQUIRE(status == 0);
  CHECK(w1->wait_exit(60s) == 0);
  CHECK(final_accuracy(chief->output()) > 0.5);
  CHECK(chief->output().find("soft placement: 0 nodes moved") != std::string::npos);
  // A ps task serves its variables from host memory: --device is refused there.
  auto argv = c.args("ps", 0);
  argv.insert(argv.end(), {"--device", "stand_in"});
  child_process refused(argv);
  CHECK(refused.wait_exit(30s) != 0);
  CHECK_MESSAGE(refused.output().find("--device stand_in is for workers") != std::string::npos,
                refused.output());
}

TEST_CASE("kill -9 of a worker, synchronous with one backup worker: training completes") {
  train_cluster c(1, 3);
  auto ps = c.ps(0);
  std::vector<std::string> flags{"--sync", "--backup-workers", "1", "--max-steps", "240"};
  auto chief = c.worker(0, flags);
  auto w1 = c.worker(1, flags);
  auto w2 = c.worker(2, flags);
  REQUIRE(w2->wait_for("until step", 60s));
  std::this_thread::sleep_for(3s);
  w2->kill_now();
  // Restarted, it rejoins: it reads the global step and goes on with the others.
  std::this_thread::sleep_for(2s);
  auto again = c.worker(2, flags);
  int status = chief->wait_exit(400s);
  INFO("chief:\n" << chief->output() << "\nworker 2 again:\n" << again->output());
  REQUIRE(status == 0);
  CHECK(final_accuracy(chief->output()) > 0.7);
  CHECK(w1->wait_exit(60s) == 0);
  CHECK(again->wait_exit(60s) == 0);
  CHECK(again->output().find("done") != std::string::npos);
}

TEST_CASE(
    "kill -9 of the chief, synchronous with one backup worker: restarted, steps flow at once") {
  train_cluster c(1, 3);
  auto ps = c.ps(0);
  // Killed after its first epoch (468 steps), with more than 500 to go: a
  // machine that trains 600 steps in 4 s finished the run before the kill.
  std::vector<std::string> flags{"--sync", "--backup-workers", "1", "--max-steps", "1000"};
  auto w1 = c.worker(1, flags);
  auto w2 = c.worker(2, flags);
  auto chief = c.worker(0, flags);
  REQUIRE(chief->wait_for("epoch   1", 120s));
  chief->kill_now();
  // The workers wait for the token the dead chief never handed out, and its
  // steps' requests (a take, a dequeue) are gone with it: the new chief
  // hands out fresh tokens and aggregates at once, instead of waiting out
  // the step timeout (60 s) and failing.
  std::this_thread::sleep_for(2s);
  auto restarted_at = std::chrono::steady_clock::now();
  auto again = c.worker(0, flags);
  int status = again->wait_exit(300s);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - restarted_at).count();
  INFO("chief again:\n" << again->output() << "\nworker 1:\n" << w1->output());
  REQUIRE(status == 0);
  MESSAGE("the restarted chief finished the run in " << seconds << " s");
  CHECK(seconds < 45);
  CHECK(again->output().find("variables restored by the ps tasks") != std::string::npos);
  CHECK(final_accuracy(again->output()) > 0.7);
  CHECK(w1->wait_exit(60s) == 0);
  CHECK(w2->wait_exit(60s) == 0);
  // Restarted once more after the run ended (the tokens closed): it says so
  // and reports the trained model, where it failed on the closed token queue.
  auto after_the_end = c.worker(0, flags);
  CHECK(after_the_end->wait_exit(120s) == 0);
  INFO("chief after the end:\n" << after_the_end->output());
  CHECK(after_the_end->output().find("the run has ended") != std::string::npos);
  CHECK(final_accuracy(after_the_end->output()) > 0.7);
}

TEST_CASE("a ps task restarted without its shard: the chief sets only the variables it lost") {
  train_cluster c(2, 1);
  auto ps0 = c.ps(0), ps1 = c.ps(1);
  auto chief = c.worker(0, {"--max-steps", "1500"});
  REQUIRE(chief->wait_for("until step", 60s));
  std::this_thread::sleep_for(3s);
  ps1->kill_now();
  std::this_thread::sleep_for(1s);
  ps1 = c.ps(1);  // no --checkpoint-dir: it comes back empty
  int status = chief->wait_exit(300s);
  const std::string out = chief->output();
  INFO(out);
  REQUIRE(status == 0);
  // The lost variables are ps task 1's (round-robin: the biases); the
  // weights and the global step on ps task 0 keep their training.
  std::smatch lost;
  REQUIRE(std::regex_search(out, lost, std::regex("were lost [^:]*: ([^\n]*)")));
  MESSAGE("set again: " << lost[1].str());
  CHECK(lost[1].str().find("/b") != std::string::npos);
  CHECK(lost[1].str().find("/w") == std::string::npos);
  CHECK(lost[1].str().find("global_step") == std::string::npos);
  CHECK(final_accuracy(out) > 0.8);
}

TEST_CASE(
    "kill -9 of a ps task: restarted, the chief restores its checkpoint; training completes") {
  train_cluster c(1, 2);
  auto checkpoints = c.out_dir + "/ckpt";
  auto ps = c.ps(0);
  std::vector<std::string> flags{"--max-steps", "700", "--checkpoint-every", "25"};
  auto chief_flags = flags;
  chief_flags.insert(chief_flags.end(), {"--checkpoint-dir", checkpoints});
  auto chief = c.worker(0, chief_flags);
  auto w1 = c.worker(1, flags);
  REQUIRE(chief->wait_for("until step", 60s));
  // Wait for a checkpoint, then kill the ps task mid-run and start it again.
  REQUIRE(wait_for_cluster_checkpoint(checkpoints, 120s));
  ps->kill_now();
  std::this_thread::sleep_for(1s);
  ps = c.ps(0);
  int status = chief->wait_exit(400s);
  INFO("chief:\n" << chief->output() << "\nps:\n" << ps->output());
  REQUIRE(status == 0);
  CHECK(final_accuracy(chief->output()) > 0.7);
  CHECK(w1->wait_exit(60s) == 0);
  std::smatch restored;
  REQUIRE(std::regex_search(chief->output(), restored,
                            std::regex("recovery: restored checkpoint step=(\\d+) \\(global step "
                                       "was (\\d+): (\\d+) steps lost\\)")));
  // What is lost is at most the steps since the checkpoint before the kill
  // (every 25 global steps), and the one step in flight of each worker.
  CHECK(std::stoll(restored[3]) <= 25 + 2);
  // A worker with a step in flight sees it fail, waits and goes on; one
  // between steps just reconnects on its next step.
  CHECK(chief->output().find("error") == std::string::npos);
}

TEST_CASE("a ps task takes no --checkpoint-dir: the error says where checkpoints go") {
  train_cluster c(1, 1);
  auto argv = c.args("ps", 0);
  argv.insert(argv.end(), {"--checkpoint-dir", c.out_dir + "/ps0"});
  child_process ps(argv);
  CHECK(ps.wait_exit(30s) != 0);
  CHECK_MESSAGE(
      ps.output().find("the chief (worker 0) keeps the cluster's checkpoints") != std::string::npos,
      ps.output());
}

TEST_CASE("two runs into one checkpoint directory: the second chief is refused, naming the lock") {
  train_cluster c(1, 1), d(1, 1);
  d.out_dir += "-second";  // its own --out; the checkpoints are c's
  auto checkpoints = c.out_dir + "/shared-ckpt";
  auto ps_c = c.ps(0), ps_d = d.ps(0);
  auto first = c.worker(
      0, {"--max-steps", "100000", "--checkpoint-dir", checkpoints, "--checkpoint-every", "50"});
  REQUIRE(wait_for_cluster_checkpoint(checkpoints, 120s));
  auto second = d.worker(0, {"--max-steps", "100", "--checkpoint-dir", checkpoints});
  CHECK(second->wait_exit(60s) != 0);
  CHECK_MESSAGE(second->output().find("LOCK") != std::string::npos, second->output());
  CHECK_MESSAGE(second->output().find(std::to_string(first->pid())) != std::string::npos,
                second->output());
  first->stop();
}

TEST_CASE("4 ps tasks, two killed at once: the chief restores both, every task at one step") {
  train_cluster c(4, 2);
  auto checkpoints = c.out_dir + "/ckpt";
  std::vector<std::unique_ptr<child_process>> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(c.ps(i));
  std::vector<std::string> flags{"--sync", "--max-steps", "500", "--recovery-seconds", "60"};
  auto chief_flags = flags;
  chief_flags.insert(chief_flags.end(), {"--checkpoint-dir", checkpoints, "--checkpoint-every",
                                         "20", "--keep-checkpoints", "1000"});
  auto chief = c.worker(0, chief_flags);
  auto w1 = c.worker(1, flags);
  REQUIRE(wait_for_cluster_checkpoint(checkpoints, 120s));
  ps[1]->kill_now();
  ps[3]->kill_now();
  std::this_thread::sleep_for(2s);
  ps[1] = c.ps(1);
  ps[3] = c.ps(3);
  int status = chief->wait_exit(400s);
  INFO("chief:\n" << chief->output());
  REQUIRE(status == 0);
  CHECK(w1->wait_exit(60s) == 0);
  std::smatch restored;
  REQUIRE(std::regex_search(chief->output(), restored,
                            std::regex("recovery: restored checkpoint step=(\\d+)")));
  // Each ps task's shard of the checkpoint restored holds that step: every
  // task went back to one global step, not each to its own newest shard.
  auto manifest =
      actorflow::load_manifest(checkpoints + "/ckpt-" + restored[1].str() + "/MANIFEST");
  CHECK(manifest.shards.size() == 4);
  for (auto& shard : manifest.shards)
    CHECK(actorflow::load_checkpoint_file(checkpoints + "/ckpt-" + restored[1].str() + "/" +
                                          shard.file)
              .global_step == std::stoll(restored[1]));
  CHECK(final_accuracy(chief->output()) > 0.7);
}

// The newest global step in `output`'s progress lines (--progress-every), or -1.
int64_t last_progress_step(const std::string& output) {
  static const std::regex progress("progress step=([0-9]+)");
  int64_t step = -1;
  for (std::sregex_iterator it(output.begin(), output.end(), progress), end; it != end; ++it)
    step = std::stoll((*it)[1]);
  return step;
}

TEST_CASE(
    "a worker stopped (SIGSTOP) past the recovery time: the others go on, and woken it "
    "changes nothing it missed") {
  // 3 workers, 1 backup: the aggregate needs 2. The stopped worker's
  // gradient, when it wakes, is for a step long past: the accumulators drop
  // it (TensorFlow's semantics for a late backup worker), and the worker
  // takes the next token and trains on.
  train_cluster c(1, 3);
  auto ps = c.ps(0);
  std::vector<std::string> flags{"--sync", "--backup-workers",   "1", "--max-steps",
                                 "2000",   "--recovery-seconds", "6", "--progress-every",
                                 "1"};
  auto chief = c.worker(0, flags);
  auto w1 = c.worker(1, flags), w2 = c.worker(2, flags);
  REQUIRE(chief->wait_for("progress step=", 60s));
  std::this_thread::sleep_for(1s);
  ::kill(w2->pid(), SIGSTOP);
  int64_t at_stop = last_progress_step(chief->output());
  std::this_thread::sleep_for(9s);
  int64_t at_wake = last_progress_step(chief->output());
  int64_t w2_at_wake = last_progress_step(w2->output());
  ::kill(w2->pid(), SIGCONT);
  int status = chief->wait_exit(300s);
  INFO("chief:\n" << chief->output() << "\nworker 2:\n" << w2->output());
  CHECK(status == 0);
  MESSAGE("global steps while worker 2 was stopped: " << at_stop << " to " << at_wake);
  CHECK(at_wake > at_stop + 50);  // the others went on without it
  CHECK(w1->wait_exit(60s) == 0);
  CHECK(w2->wait_exit(60s) == 0);
  // Woken, it trained on: steps it completed after the wake-up.
  CHECK(last_progress_step(w2->output()) > at_wake);
  CHECK(w2_at_wake <= at_stop + 1);
  CHECK(final_accuracy(chief->output()) > 0.7);
}

TEST_CASE("a ps task stopped (SIGSTOP), not dead: a short stop is ridden out, a long one fails") {
  train_cluster c(1, 2);
  auto ps = c.ps(0);
  // Enough steps that the stop lands mid-run however fast the machine is.
  std::vector<std::string> flags{"--sync", "--max-steps", "3000", "--recovery-seconds", "6"};
  auto chief = c.worker(0, flags);
  auto w1 = c.worker(1, flags);
  REQUIRE(chief->wait_for("until step", 60s));
  std::this_thread::sleep_for(2s);
  SUBCASE("stopped for 3 s, then woken: training completes") {
    ::kill(ps->pid(), SIGSTOP);
    std::this_thread::sleep_for(3s);
    ::kill(ps->pid(), SIGCONT);
    int status = chief->wait_exit(300s);
    INFO("chief:\n" << chief->output());
    CHECK(status == 0);
    CHECK(w1->wait_exit(60s) == 0);
    CHECK(final_accuracy(chief->output()) > 0.7);
  }
  SUBCASE("stopped for good: the chief fails within its recovery time, naming the task") {
    ::kill(ps->pid(), SIGSTOP);
    auto stopped_at = std::chrono::steady_clock::now();
    int status = chief->wait_exit(60s);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
    ::kill(ps->pid(), SIGCONT);
    INFO("chief:\n" << chief->output());
    CHECK(status != 0);
    CHECK(chief->output().find("/job:ps/task:0") != std::string::npos);
    // A step given up after 6 s, retried for 6 s more: no 60 s hang.
    MESSAGE("the chief failed " << seconds << " s after the stop");
    CHECK(seconds < 25);
    // The worker ends too, whether its own step gave up first or the
    // chief's closing of the token queue reached it (after the wake-up).
    CHECK(w1->wait_exit(60s) != -1);
  }
}

TEST_CASE(
    "a ps task that never comes back: the synchronous chief fails cleanly within its recovery "
    "time") {
  train_cluster c(1, 2);
  auto ps = c.ps(0);
  std::vector<std::string> flags{"--sync", "--max-steps", "100000", "--recovery-seconds", "3"};
  auto chief = c.worker(0, flags);
  auto w1 = c.worker(1, flags);
  REQUIRE(chief->wait_for("until step", 60s));
  std::this_thread::sleep_for(2s);
  ps->kill_now();
  // An error and exit status 1; before, the aggregation thread's end killed
  // the process with SIGABRT.
  int status = chief->wait_exit(120s);
  INFO("chief:\n" << chief->output());
  CHECK(status == 1);
  CHECK(chief->output().find("error:") != std::string::npos);
  CHECK(chief->output().find("terminate called") == std::string::npos);
  w1->kill_now();
}

TEST_CASE("a diverged cluster run stops at the first non-finite loss with a non-zero status") {
  train_cluster c(1, 1);
  auto ps = c.ps(0);
  auto chief = c.worker(0, {"--optimizer", "sgd", "--lr", "1e30", "--max-steps", "500"});
  int status = chief->wait_exit(120s);
  INFO("chief:\n" << chief->output());
  CHECK(status == 1);  // an error, not a crash, nor still running (-1)
  CHECK(std::regex_search(chief->output(),
                          std::regex("\\[train\\] /job:worker/task:0: the loss is -?(nan|inf) at "
                                     "global step [0-9]+: training diverged")));
  CHECK(chief->output().find("test_acc=") == std::string::npos);
}

TEST_CASE("a cluster worker's timelines hold the ps task's nodes; the chief writes summaries") {
  train_cluster c(1, 1);
  auto ps = c.ps(0);
  const std::string logdir = c.out_dir + "/logs";
  auto chief = c.worker(
      0, {"--max-steps", "30", "--trace-steps", "5", "--logdir", logdir, "--summary-every", "10"});
  int status = chief->wait_exit(300s);
  INFO("chief:\n" << chief->output());
  REQUIRE(status == 0);
  // The timeline of the worker's 5th step, with the ps task's records merged in.
  std::ifstream trace(c.out_dir + "/w0/trace-worker0-5.json");
  REQUIRE(trace.good());
  auto doc = nlohmann::json::parse(trace);
  std::map<int, std::string> processes;
  for (auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name")
      processes[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
  int ps_pid = 0;
  for (auto& [pid, name] : processes)
    if (name == "/job:ps/task:0") ps_pid = pid;
  REQUIRE(ps_pid != 0);
  int ps_events = 0;
  for (auto& e : doc["traceEvents"])
    if (e.contains("pid") && e["pid"] == ps_pid && e["ph"] != "M") ++ps_events;
  CHECK(ps_events > 0);  // the variables' updates and the sends on the ps task
  // The chief's event file: the graph, and the loss every 10 steps.
  std::string events;
  for (auto& f : std::filesystem::directory_iterator(logdir))
    if (f.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events = f.path();
  REQUIRE(!events.empty());
  bool graph = false;
  std::vector<int64_t> loss_steps;
  for (auto& e : event_file_reader(events).read_all()) {
    graph |= !e.graph_def.empty();
    for (auto& v : e.summary)
      if (v.tag == "train/loss") loss_steps.push_back(e.step);
  }
  CHECK(graph);
  CHECK(loss_steps.size() == 3);
}

TEST_CASE("a cluster-trained model exports from its checkpoint into a single-process export") {
  train_cluster c(2, 1);
  auto ps0 = c.ps(0), ps1 = c.ps(1);
  std::string checkpoints = c.out_dir + "/ckpt", exported = c.out_dir + "/export";
  auto chief = c.worker(0, {"--max-steps", "40", "--checkpoint-dir", checkpoints});
  REQUIRE_MESSAGE(chief->wait_exit(300s) == 0, chief->output());
  double cluster_acc = final_accuracy(chief->output());
  // One process, the same model: restores the cluster's cut (its variables
  // gathered from both ps tasks' shards), trains nothing more, exports.
  child_process single({ACTORFLOW_TRAIN_BINARY, "--max-steps", "40", "--threads", "1",
                        "--checkpoint-dir", checkpoints, "--resume", "--export", exported, "--out",
                        c.out_dir + "/single"});
  REQUIRE_MESSAGE(single.wait_exit(300s) == 0, single.output());
  CHECK(contains(single.output(), "exported the model to " + exported + "/1"));
  CHECK(final_accuracy(single.output()) == cluster_acc);
  using namespace actorflow;
  auto model = load_model(exported + "/1");
  auto out = model->predict("serving_default",
                            {{"images", tensor::zeros(dtype::float32, {2, 28, 28, 1})}});
  CHECK(out.at("probabilities").dims() == shape{2, 10});
  // Exporting from a cluster process itself is refused, saying how instead.
  auto refused = c.worker(0, {"--max-steps", "1", "--export", exported});
  CHECK(refused->wait_exit(60s) != 0);
  CHECK(contains(refused->output(), "--export is for a model trained in one process"));
}
