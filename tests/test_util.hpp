// Helpers shared by the test suites.
#pragma once
#include <string>

#include "core/error.hpp"

namespace actorflow::testing {

/// The message of the actorflow::error that f throws, or "" when it throws none.
/// Any other exception escapes and fails the test.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

/// The code of the actorflow::error f() throws (ok when it throws none).
template <class F>
error_code code_of_failure(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.code();
  }
  return error_code::ok;
}

}  // namespace actorflow::testing
