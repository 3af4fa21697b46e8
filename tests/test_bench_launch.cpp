// actorflow-bench's references run in the environment the user started the
// bench with (perf/reference_launch.hpp): a tiny reference script, started
// through the bench's own launch path after the bench set its variables,
// sees none of them, and sees what the caller set.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "perf/bench_util.hpp"
#include "perf/reference_launch.hpp"
#include "test_util.hpp"

using namespace actorflow;

namespace {

// A variable the caller sets (ctest's ENVIRONMENT does; by hand the test
// sets it before it captures the environment, as a caller would).
constexpr const char* caller_variable = "ACTORFLOW_LAUNCH_TEST_CALLER";

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// "NAME=value" lines, as the reference script prints them.
std::map<std::string, std::string> parse_environment(const std::string& text) {
  std::map<std::string, std::string> vars;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (auto eq = line.find('='); eq != std::string::npos)
      vars[line.substr(0, eq)] = line.substr(eq + 1);
  return vars;
}

}  // namespace

TEST_CASE("a reference started by the bench sees the caller's environment, not the bench's") {
  setenv(caller_variable, "from-the-caller", 0);
  const std::string callers_value = std::getenv(caller_variable);

  // What actorflow-bench's main does first.
  bench::capture_caller_environment();
  bench::set_bench_environment();
  // A variable set later in the bench's process does not reach a child either.
  setenv("ACTORFLOW_LAUNCH_TEST_LATE", "set-by-the-bench", 1);

  std::map<std::string, std::string> callers;
  for (const auto& e : bench::caller_environment()) callers[name_of(e)] = e.substr(e.find('=') + 1);
  REQUIRE_FALSE(bench::bench_environment().empty());
  for (const auto& e : bench::bench_environment()) {
    // The bench's own process has the variable: the check below means something.
    const char* own = std::getenv(name_of(e).c_str());
    REQUIRE(own != nullptr);
  }

  testing::temp_dir dir("bench_launch");
  const std::string script = (dir.path / "env_reference.py").string();
  std::ofstream(script) << "import os\n"
                           "for k, v in sorted(os.environ.items()):\n"
                           "    print(f'{k}={v}')\n";
  REQUIRE_MESSAGE(bench::python_runs("/usr/bin/python3", "pass"),
                  "/usr/bin/python3 is needed (scripts/setup.sh installs python3)");
  auto out = bench::run_reference_script("/usr/bin/python3", script, "");
  REQUIRE(out.has_value());
  auto child = parse_environment(*out);

  CHECK(child[caller_variable] == callers_value);
  CHECK(child.count("ACTORFLOW_LAUNCH_TEST_LATE") == 0);
  for (const auto& e : bench::bench_environment()) {
    const std::string name = name_of(e);
    INFO("the bench sets " << e << " for itself");
    if (callers.count(name) == 0) {
      CHECK_MESSAGE(child.count(name) == 0,
                    "the reference inherited " << name << "=" << child[name]);
    } else {
      // The caller set it: the reference runs with the caller's value.
      CHECK(child[name] == callers[name]);
    }
  }
}

TEST_CASE("a child that fails or cannot start is told apart") {
  auto r = bench::run_child({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  REQUIRE(r.has_value());
  CHECK(r->exit_status == 3);
  CHECK(r->out == "out\n");
  CHECK_FALSE(bench::run_child_output({"/bin/sh", "-c", "exit 1"}).has_value());
  CHECK(bench::run_child_output({"/bin/sh", "-c", "printf ok"}) ==
        std::optional<std::string>("ok"));
  CHECK_FALSE(bench::run_child({"/nonexistent/actorflow-no-such-program"}).has_value());
}
