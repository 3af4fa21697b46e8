// actorflow errors: every failure throws actorflow::error with a message that
// names the op or component, e.g. "[matmul] inner dimensions differ", and a
// code saying what kind of failure it is (TensorFlow's status codes, with
// their numbers), so that callers decide by code, never by the text.
#pragma once
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

#include "core/export.hpp"

namespace actorflow {

/// TensorFlow's status codes (tensorflow/core/protobuf/error_codes.proto).
enum class error_code : uint8_t {
  ok = 0,
  cancelled = 1,          // the operation was cancelled (a session closing its queues)
  unknown = 2,            // nothing more is known (an exception not of ours)
  invalid_argument = 3,   // bad input: shapes, dtypes, attributes, a malformed graph
  deadline_exceeded = 4,  // a step or connection ran past its timeout
  not_found = 5,          // a file, node or checkpoint that is not there
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,  // out of memory (a device's), a full disk
  failed_precondition =
      9,                 // the system is not in the state the call needs (uninitialized variable)
  aborted = 10,          // a step aborted because another part of it failed
  out_of_range = 11,     // past the end: a closed queue with nothing left, an iteration bound
  unimplemented = 12,    // no kernel for this dtype or device
  internal = 13,         // a broken invariant of actorflow itself
  unavailable = 14,      // a task that went down or cannot be reached; retrying may help
  data_loss = 15,        // a corrupted or truncated checkpoint, event or graph file
  unauthenticated = 16,  // a peer that failed the cluster secret or TLS
};
constexpr int max_error_code = 16;

/// "invalid_argument", ...; "unknown" for a value outside the enum.
ACTORFLOW_API const char* error_code_name(error_code code);
/// A code read from elsewhere (the wire, a file): itself if valid, else unknown.
ACTORFLOW_API error_code checked_error_code(int value);

class ACTORFLOW_API error : public std::runtime_error {
 public:
  /// Without a code, an error is invalid_argument: most are checks of input.
  explicit error(const std::string& what, error_code code = error_code::invalid_argument)
      : std::runtime_error(what), code_(code) {}
  error_code code() const { return code_; }

 private:
  error_code code_;
};

/// The code of any exception: an actorflow::error's own, resource_exhausted
/// for std::bad_alloc, unknown for the rest.
ACTORFLOW_API error_code code_of(const std::exception& e);

/// Throws actorflow::error("[where] what") with code invalid_argument.
[[noreturn]] ACTORFLOW_API inline void fail(const std::string& where, const std::string& what) {
  throw error("[" + where + "] " + what);
}
/// Throws actorflow::error("[where] what") with `code`.
[[noreturn]] ACTORFLOW_API inline void fail(error_code code, const std::string& where,
                                            const std::string& what) {
  throw error("[" + where + "] " + what, code);
}

}  // namespace actorflow
