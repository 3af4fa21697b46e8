// actorflow errors: every validation failure throws actorflow::error with a
// message that names the op or component, e.g. "[matmul] inner dimensions differ".
#pragma once
#include <stdexcept>
#include <string>

namespace actorflow {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws actorflow::error("[where] what").
[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw error("[" + where + "] " + what);
}

}  // namespace actorflow

namespace af = actorflow;
