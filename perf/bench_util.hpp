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
inline std::optional<double> run_torch_reference(const std::string& script, const std::string& args,
                                                 const std::regex& pattern) {
  std::string path = std::string(ACTORFLOW_PERF_REF_DIR) + "/" + script;
  if (!std::ifstream(path)) return std::nullopt;
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return std::nullopt;
  FILE* p = popen(("/usr/bin/python3 " + path + " " + args + " 2>/dev/null").c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  std::smatch m;
  if (std::regex_search(out, m, pattern)) return std::stod(m[1]);
  return std::nullopt;
}

}  // namespace actorflow::bench
