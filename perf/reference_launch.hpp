// How actorflow-bench starts its references (PyTorch and TensorFlow scripts):
// in the environment the user started the bench with, never in the bench's
// own.
//
// The bench sets variables for itself (set_bench_environment); a reference
// that inherited them would run as none of its users run it: PyTorch's
// OpenMP threads under OMP_WAIT_POLICY=passive sleep between parallel
// regions, and its MLP step took 1.65x as long. So main captures the
// caller's environment before it sets anything, and every reference is
// started with posix_spawn and an explicit copy of that environment.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace actorflow::bench {

/// Takes a copy of the process's environment as the caller's, once: the
/// first call wins. main calls it before anything sets a variable.
void capture_caller_environment();

/// The caller's environment ("NAME=value" entries), captured by
/// capture_caller_environment() (called here if it has not been).
const std::vector<std::string>& caller_environment();

/// The variables the bench sets in its own environment, "NAME=value".
const std::vector<std::string>& bench_environment();

/// Captures the caller's environment, then sets bench_environment() in the
/// process's own (an existing value wins, as setenv(..., 0) does).
void set_bench_environment();

/// What a child run by run_child did.
struct child_output {
  int exit_status = -1;  // the child's exit code; -1 when it did not exit normally
  std::string out;       // its standard output
};

/// Runs argv[0] (a path, or a name looked up on PATH) with `argv` in the
/// caller's environment (caller_environment()), its standard input empty,
/// its standard output captured and its standard error discarded, and waits
/// for it. Nothing when it cannot be started.
std::optional<child_output> run_child(const std::vector<std::string>& argv);

/// The standard output of run_child(argv) when the child exits 0; nothing
/// otherwise.
std::optional<std::string> run_child_output(const std::vector<std::string>& argv);

}  // namespace actorflow::bench
