#include "apps/lib/straggler_delay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace actorflow::apps {

namespace {

constexpr const char* forms = "lognormal:MEDIAN_MS:SIGMA or pareto:MIN_MS:ALPHA";

// SplitMix64's finalizer: every bit of the input reaches every bit of the
// output, so neighbouring (worker, step) pairs draw unrelated numbers.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The top 53 bits as a double in (0, 1]: never 0, whose log is -inf.
double unit_open_low(uint64_t bits) { return double((bits >> 11) + 1) * 0x1.0p-53; }

std::vector<std::string> fields_of(const std::string& text) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t colon; (colon = text.find(':', start)) != std::string::npos; start = colon + 1)
    fields.push_back(text.substr(start, colon - start));
  fields.push_back(text.substr(start));
  return fields;
}

// A parameter of the flag: a finite number in (lo, hi].
double parameter(const std::string& text, const std::string& field, const char* name, double lo,
                 double hi) {
  char* stop = nullptr;
  double v = std::strtod(field.c_str(), &stop);
  if (field.empty() || *stop != '\0' || !std::isfinite(v))
    fail("--straggler-delay", fmt::format("'{}': {} must be a number (got '{}'); the forms are {}",
                                          text, name, field, forms));
  if (v <= lo || v > hi)
    fail("--straggler-delay",
         fmt::format("'{}': {} must be greater than {} and at most {} (got {})", text, name, lo, hi,
                     field));
  return v;
}

}  // namespace

double straggler_delay::draw_ms(int64_t seed, int worker, int64_t step) const {
  if (!enabled()) return 0;
  uint64_t bits = mix(mix(mix(uint64_t(seed)) ^ uint64_t(worker)) ^ uint64_t(step));
  double u = unit_open_low(bits);
  double ms = 0;
  if (distribution == kind::lognormal) {
    // Box-Muller, written out: std::normal_distribution's draws differ
    // between standard libraries, and a run must be repeatable anywhere.
    double v = unit_open_low(mix(bits));
    double z = std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v);
    ms = scale_ms * std::exp(shape * z);
  } else {
    ms = scale_ms * std::pow(u, -1 / shape);  // the inverse of Pareto's distribution function
  }
  return std::min(ms, max_straggler_delay_ms);
}

void straggler_delay::sleep_before(int64_t seed, int worker, int64_t step) const {
  if (!enabled()) return;
  std::this_thread::sleep_for(
      std::chrono::duration<double, std::milli>(draw_ms(seed, worker, step)));
}

straggler_delay parse_straggler_delay(const std::string& text) {
  straggler_delay d;
  if (text.empty()) return d;
  auto fields = fields_of(text);
  const std::string& name = fields[0];
  if (name == "lognormal")
    d.distribution = straggler_delay::kind::lognormal;
  else if (name == "pareto")
    d.distribution = straggler_delay::kind::pareto;
  else
    fail("--straggler-delay",
         fmt::format("'{}': unknown distribution '{}' (the forms are {})", text, name, forms));
  if (fields.size() != 3)
    fail("--straggler-delay", fmt::format("'{}': {} takes 2 parameters, got {} (the forms are {})",
                                          text, name, fields.size() - 1, forms));
  bool lognormal = d.distribution == straggler_delay::kind::lognormal;
  d.scale_ms =
      parameter(text, fields[1], lognormal ? "MEDIAN_MS" : "MIN_MS", 0, max_straggler_delay_ms);
  // A sigma past 5 or an alpha of 0.1 or less puts most draws at the cap.
  d.shape = lognormal ? parameter(text, fields[2], "SIGMA", 0, 5)
                      : parameter(text, fields[2], "ALPHA", 0.1, 100);
  return d;
}

std::string straggler_delay_error(const std::string& text) {
  try {
    parse_straggler_delay(text);
    return {};
  } catch (const error& e) {
    // CLI11 names the flag itself: the text after "[--straggler-delay] ".
    std::string why = e.what();
    return why.substr(why.find("] ") + 2);
  }
}

}  // namespace actorflow::apps
