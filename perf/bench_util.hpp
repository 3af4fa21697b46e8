// Small timing helpers shared by the benchmarks.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

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

/// Runs `python3 <script> <args>` from the PyTorch reference directory and
/// returns the number captured by `pattern` (one group) in its output; nothing
/// when the script, python3-torch or the number is missing.
/// What `python script args` (a script of ../shared/perf-ref) prints, or
/// nothing when it is missing or fails.
inline std::optional<std::string> run_reference_script(const std::string& python,
                                                       const std::string& script,
                                                       const std::string& args) {
  // A script of this repository's perf/ comes with its full path.
  std::string path =
      script.starts_with('/') ? script : std::string(ACTORFLOW_PERF_REF_DIR) + "/" + script;
  if (!std::ifstream(path)) return std::nullopt;
  FILE* p = popen((python + " " + path + " " + args + " 2>/dev/null").c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  if (pclose(p) != 0) return std::nullopt;
  return out;
}

inline std::optional<double> run_torch_reference(const std::string& script, const std::string& args,
                                                 const std::regex& pattern) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return std::nullopt;
  auto out = run_reference_script("/usr/bin/python3", script, args);
  std::smatch m;
  if (out && std::regex_search(*out, m, pattern)) return std::stod(m[1]);
  return std::nullopt;
}

}  // namespace actorflow::bench
