// Range checks for numeric command-line flags with messages a user can read.
// CLI11's own Range prints its bounds with std::to_string, so the double
// bounds of PositiveNumber and NonNegativeNumber come out as 309 digits; these
// print "--epochs: must be at least 1 (got 0)" instead. They check the text
// before CLI11 converts it, so a value too large for the flag's type is a
// range error here, not a wrapped-around number.
#pragma once
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

namespace actorflow::apps {

namespace detail {

// `expected` says the range the user asked for; `hi` may also be only the
// limit of the flag's type, which a value beyond it is then told.
inline CLI::Validator whole_in(int64_t lo, int64_t hi, const std::string& expected,
                               bool hi_is_type_limit) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        int64_t v = 0;
        const char* end = input.data() + input.size();
        auto [stop, ec] = std::from_chars(input.data(), end, v);
        if (stop != end || ec == std::errc::invalid_argument)
          return fmt::format("must be a whole number {} (got '{}')", expected, input);
        bool below = ec == std::errc() ? v < lo : input[0] == '-';
        bool above = !below && (ec == std::errc::result_out_of_range || v > hi);
        if (above && hi_is_type_limit) return fmt::format("must be at most {} (got {})", hi, input);
        if (below || above) return fmt::format("must be {} (got {})", expected, input);
        return {};
      },
      "INT " + expected, "whole_in");
}

}  // namespace detail

/// A whole number from `lo` to `hi`, both included.
inline CLI::Validator whole_between(int64_t lo, int64_t hi) {
  return detail::whole_in(lo, hi, fmt::format("from {} to {}", lo, hi), false);
}

/// A whole number of at least `lo` that fits the flag's type T.
template <class T>
CLI::Validator whole_at_least(int64_t lo) {
  return detail::whole_in(lo, int64_t(std::numeric_limits<T>::max()),
                          fmt::format("at least {}", lo), true);
}

/// A finite number greater than `lo` (or equal to it, with `lo_included`) and at most `hi`.
inline CLI::Validator number_between(double lo, double hi, bool lo_included = true) {
  auto expected =
      fmt::format("{} {} and at most {}", lo_included ? "at least" : "greater than", lo, hi);
  if (hi == std::numeric_limits<double>::max())
    expected = fmt::format("{} {}", lo_included ? "at least" : "greater than", lo);
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        char* stop = nullptr;
        double v = std::strtod(input.c_str(), &stop);
        if (input.empty() || *stop != '\0' || !std::isfinite(v))
          return fmt::format("must be a finite number {} (got '{}')", expected, input);
        if (v < lo || (v == lo && !lo_included) || v > hi)
          return fmt::format("must be {} (got {})", expected, input);
        return {};
      },
      "NUMBER " + expected, "number_between");
}

/// A finite number greater than zero.
inline CLI::Validator positive_number() {
  return number_between(0, std::numeric_limits<double>::max(), false);
}

/// The most threads --threads may ask for: more only thrash (and 100000
/// would start 100000 threads per pool).
constexpr int64_t max_threads = 1024;

}  // namespace actorflow::apps
