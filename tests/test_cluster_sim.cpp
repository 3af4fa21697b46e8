// cluster-sim (perf/cluster_sim.hpp): a cluster on an emulated network, one
// network namespace per task. Its rates' parsing everywhere; where this
// machine lets a test make namespaces (root), the doctest suite "netns":
// nothing is left behind after 20 runs, after SIGINT, after a task
// crashes; the shaped link carries what it was shaped to; and a small
// actorflow cluster (1 ps, 2 workers) trains across namespaces, on
// addresses other than 127.0.0.1. Every process a case starts, it stops.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "perf/cluster_sim.hpp"
#include "tests/support/child_process.hpp"
#include "tests/test_util.hpp"

using namespace actorflow::bench;
using actorflow::testing::child_process;
using actorflow::testing::skip_check;
using actorflow::testing::temp_dir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const std::string sim_binary = CLUSTER_SIM_BINARY;

// The namespaces cluster-sim makes (afsim-...) on this machine now.
std::vector<std::string> sim_namespaces() {
  std::vector<std::string> out;
  for (auto& ns : list_namespaces())
    if (ns.rfind("afsim-", 0) == 0) out.push_back(ns);
  return out;
}

// Processes whose command line holds `marker` (a unique argument).
int processes_with(const std::string& marker) {
  int n = 0;
  for (auto& entry : fs::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd.find(marker) != std::string::npos && cmd.find("cluster-sim") == std::string::npos) ++n;
  }
  return n;
}

bool can_make_namespaces() {
  auto why = namespaces_unavailable();
  if (why.empty()) return true;
  skip_check("netns", why);
  return false;
}

std::vector<std::string> sim(std::vector<std::string> flags, std::vector<std::string> command) {
  std::vector<std::string> argv{sim_binary};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace

TEST_CASE("link rates: parsed with their unit, refused without one") {
  CHECK(parse_rate("10gbit") == 1e10);
  CHECK(parse_rate("200mbit") == 2e8);
  CHECK(parse_rate("1.5gbit") == 1.5e9);
  CHECK(parse_rate("800kbit") == 8e5);
  for (auto bad : {"", "gbit", "10", "10gb", "-1gbit", "0mbit", "1e400gbit", "x1gbit"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_rate(bad), doctest::Contains("is not a link rate"),
                         std::runtime_error);
  }
  CHECK(rate_text(1e10) == "10gbit");
  CHECK(rate_text(1.5e9) == "1.5gbit");
  CHECK(rate_text(2e8) == "200mbit");
}

TEST_CASE("bad flags: exit 2 naming the flag") {
  for (auto [flags, says] :
       {std::pair{std::vector<std::string>{"--tasks", "ps:x"}, "--tasks 'ps:x'"},
        std::pair{std::vector<std::string>{"--link", "fast"}, "'fast' is not a link rate"},
        std::pair{std::vector<std::string>{"--bogus"}, "unknown flag '--bogus'"}}) {
    child_process p(sim(flags, {"/bin/true"}));
    CHECK(p.wait_exit(10s) == 2);
    CHECK_MESSAGE(p.output().find(says) != std::string::npos, p.output());
  }
  child_process none({sim_binary, "--link", "1gbit"});
  CHECK(none.wait_exit(10s) == 2);
  CHECK(none.output().find("no command") != std::string::npos);
}

TEST_CASE("without root: a clear message and exit 3" * doctest::test_suite("netns")) {
  if (!can_make_namespaces()) return;
  child_process p({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                   sim_binary, "--tasks", "ps:1,worker:1", "--", "/bin/true"});
  CHECK(p.wait_exit(10s) == 3);
  CHECK_MESSAGE(p.output().find("need root") != std::string::npos, p.output());
}

TEST_CASE("20 runs, SIGINT, a crashing task: nothing left behind" * doctest::test_suite("netns")) {
  if (!can_make_namespaces()) return;
  remove_stale_namespaces();
  auto before = sim_namespaces();
  temp_dir out;
  SUBCASE("20 runs") {
    for (int run = 0; run < 20; ++run) {
      child_process p(
          sim({"--tasks", "ps:1,worker:2", "--link", "1gbit", "--out", out.path.string()},
              {"/bin/sh", "-c",
               // A ps task serves until stopped: one that exits is a crash.
               "echo {job}{index} at {ip}, ps {ps_hosts}; [ {job} = ps ] && exec sleep 64.5; "
               "exit 0"}));
      REQUIRE(p.wait_exit(60s) == 0);
      CHECK(p.output().find("worker1 ip=10.233.0.3 status=0") != std::string::npos);
    }
    std::ifstream log(out.path / "worker1.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    CHECK(text == "worker1 at 10.233.0.3, ps 10.233.0.1:7000\n");
    CHECK(processes_with("64.5") == 0);
  }
  SUBCASE("SIGINT while the tasks run") {
    child_process p(
        sim({"--tasks", "ps:2,worker:2", "--out", out.path.string()}, {"/bin/sleep", "61.25"}));
    REQUIRE(p.wait_for("cluster-sim: 2 ps tasks", 60s));
    std::this_thread::sleep_for(300ms);
    CHECK(processes_with("61.25") == 4);
    p.signal(SIGINT);
    CHECK(p.wait_exit(30s) == 130);
    CHECK(p.output().find("interrupted") != std::string::npos);
    CHECK(processes_with("61.25") == 0);
  }
  SUBCASE("a ps task that crashes ends the run with its log's tail") {
    child_process p(sim(
        {"--tasks", "ps:1,worker:2", "--out", out.path.string()},
        {"/bin/sh", "-c",
         "if [ {job} = ps ]; then echo ps going down; sleep 0.5; exit 3; fi; exec sleep 62.5"}));
    CHECK(p.wait_exit(60s) == 1);
    CHECK_MESSAGE(p.output().find("ps0 exited with status 3") != std::string::npos, p.output());
    CHECK(p.output().find("ps going down") != std::string::npos);
    CHECK(processes_with("62.5") == 0);
  }
  SUBCASE("killed with -9: the next run removes what it left") {
    child_process p(
        sim({"--tasks", "ps:1,worker:1", "--out", out.path.string()}, {"/bin/sleep", "63.75"}));
    REQUIRE(p.wait_for("cluster-sim: 1 ps tasks", 60s));
    p.kill_now();
    CHECK(sim_namespaces().size() == before.size() + 3);  // bridge, ps0, worker0
    auto removed = remove_stale_namespaces();
    CHECK(removed.size() == 3);
    CHECK(processes_with("63.75") == 0);  // they died with it (PR_SET_PDEATHSIG)
  }
  CHECK(sim_namespaces() == before);
}

TEST_CASE("calibration: raw TCP between two namespaces runs at the shaped rate" *
          doctest::test_suite("netns")) {
  if (!can_make_namespaces()) return;
  child_process p({sim_binary, "--calibrate", "--link", "200mbit", "--calibrate-seconds", "2"});
  REQUIRE(p.wait_exit(60s) == 0);
  std::smatch m;
  std::string out = p.output();
  REQUIRE_MESSAGE(std::regex_search(out, m, std::regex("configured: ([0-9.]+) of it")), out);
  double ratio = std::stod(m[1]);
  MESSAGE(out);
  CHECK(ratio > 0.8);
  CHECK(ratio < 1.05);
}

TEST_CASE("a small cluster trains across namespaces, beyond 127.0.0.1" *
          doctest::test_suite("netns")) {
  if (!can_make_namespaces()) return;
  temp_dir out;
  child_process p(
      sim({"--tasks", "ps:1,worker:2", "--link", "1gbit", "--out", out.path.string()},
          {ACTORFLOW_TRAIN_BINARY, "--job", "{job}", "--task", "{index}", "--ps-hosts",
           "{ps_hosts}", "--worker-hosts", "{worker_hosts}", "--bind", "{ip}", "--threads", "1",
           "--out", "{out}/{job}{index}", "--sync", "--max-steps", "300"}));
  int status = p.wait_exit(300s);
  std::ifstream log(out.path / "worker0.log");
  std::string chief((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  INFO(p.output() << "\nchief:\n" << chief);
  REQUIRE(status == 0);
  std::smatch m;
  REQUIRE(std::regex_search(chief, m, std::regex("test_acc=([0-9.]+)")));
  CHECK(std::stod(m[1]) > 0.7);
  std::ifstream ps_log(out.path / "ps0.log");
  std::string ps((std::istreambuf_iterator<char>(ps_log)), std::istreambuf_iterator<char>());
  CHECK_MESSAGE(ps.find("serving on 10.233.0.1:7000") != std::string::npos, ps);
}
