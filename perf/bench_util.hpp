// Small timing helpers shared by the benchmarks, and the reference scripts
// they run beside them (found at run time, never through a path compiled in).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "perf/reference_launch.hpp"

namespace actorflow::bench {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// Median over `repeats` of the seconds one call of fn takes, after warm-up calls.
inline double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

/// The q-quantile (0..1) of `values`, the nearest rank's; NaN when there are none.
inline double quantile(std::vector<double> values, double q) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(std::clamp(q, 0.0, 1.0) * double(values.size() - 1) + 0.5)];
}

inline double median_seconds(int repeats, int warmup, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    double t0 = now_seconds();
    fn();
    times.push_back(now_seconds() - t0);
  }
  return median(std::move(times));
}

/// The directory of the PyTorch and TensorFlow reference scripts (the
/// project's perf-ref), as --reference-dir or $ACTORFLOW_PERF_REF gave it;
/// empty when neither did. Set by main before any benchmark runs.
inline std::string& reference_dir() {
  static std::string dir;
  return dir;
}

/// Prints `line` on stderr the first time it is said in this run only: a
/// reference is looked for once per row that would stand beside it.
inline void say_once(const std::string& line) {
  static std::mutex lock;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> guard(lock);
  if (said.insert(line).second) std::cerr << line << "\n";
}

/// The path of reference script `script`: a file of reference_dir(), or, for
/// a script of this repository's perf/, its full path. Nothing when it is not
/// there, saying once on stderr which (`kind`: "PyTorch", "TensorFlow")
/// reference is skipped and why.
inline std::optional<std::string> reference_script(const std::string& script,
                                                   const std::string& kind) {
  if (script.starts_with('/')) {
    if (std::ifstream(script)) return script;
    say_once(kind + " reference skipped: " + script + " not found");
    return std::nullopt;
  }
  if (reference_dir().empty()) {
    say_once(kind +
             " reference skipped: set --reference-dir or ACTORFLOW_PERF_REF to the perf-ref "
             "scripts' directory");
    return std::nullopt;
  }
  std::string path = reference_dir() + "/" + script;
  if (!std::ifstream(path)) {
    say_once(kind + " reference " + script + " skipped: no " + script + " in " + reference_dir() +
             " (--reference-dir or ACTORFLOW_PERF_REF)");
    return std::nullopt;
  }
  return path;
}

/// The words of `args`, split on spaces (the benchmarks' arguments hold none).
inline std::vector<std::string> split_args(const std::string& args) {
  std::vector<std::string> words;
  std::string word;
  for (char c : args + ' ') {
    if (c != ' ') {
      word += c;
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  return words;
}

/// What `python <path> <args>` prints, or nothing when it fails. It runs in
/// the environment the user started the bench with (reference_launch.hpp),
/// not in the bench's own.
inline std::optional<std::string> run_reference_script(const std::string& python,
                                                       const std::string& path,
                                                       const std::string& args) {
  std::vector<std::string> argv{python, path};
  for (auto& a : split_args(args)) argv.push_back(a);
  return run_child_output(argv);
}

/// Whether `python -c <code>` exits 0, in the caller's environment.
inline bool python_runs(const std::string& python, const std::string& code) {
  return run_child_output({python, "-c", code}).has_value();
}

/// The Python that holds PyTorch: $ACTORFLOW_TORCH_PYTHON, else Debian's
/// /usr/bin/python3 (python3-torch). A GPU machine's own PyTorch with CUDA
/// is often another interpreter.
inline std::string torch_python() {
  const char* chosen = std::getenv("ACTORFLOW_TORCH_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3";
}

/// This repository's perf/ folder, where its own reference scripts are:
/// $ACTORFLOW_PERF_DIR where set (a bench carried to another machine), else
/// the source tree it was built from.
std::string perf_dir();  // bench_main.cpp, where the source tree's path is known

/// Runs PyTorch reference `script` (see reference_script) with `args` and
/// returns the number captured by `pattern` (one group) in its output;
/// nothing when the script, python3-torch or the number is missing.
inline std::optional<double> run_torch_reference(const std::string& script, const std::string& args,
                                                 const std::regex& pattern) {
  auto path = reference_script(script, "PyTorch");
  if (!path) return std::nullopt;
  const std::string python = torch_python();
  if (!python_runs(python, "import torch")) {
    say_once("PyTorch reference skipped: " + python +
             " cannot import torch (python3-torch, or set ACTORFLOW_TORCH_PYTHON)");
    return std::nullopt;
  }
  auto out = run_reference_script(python, *path, args);
  std::smatch m;
  if (out && std::regex_search(*out, m, pattern)) return std::stod(m[1]);
  return std::nullopt;
}

}  // namespace actorflow::bench
