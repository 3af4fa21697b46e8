#include "core/error.hpp"

#include <new>

namespace actorflow {

const char* error_code_name(error_code code) {
  switch (code) {
    case error_code::ok:
      return "ok";
    case error_code::cancelled:
      return "cancelled";
    case error_code::unknown:
      return "unknown";
    case error_code::invalid_argument:
      return "invalid_argument";
    case error_code::deadline_exceeded:
      return "deadline_exceeded";
    case error_code::not_found:
      return "not_found";
    case error_code::already_exists:
      return "already_exists";
    case error_code::permission_denied:
      return "permission_denied";
    case error_code::resource_exhausted:
      return "resource_exhausted";
    case error_code::failed_precondition:
      return "failed_precondition";
    case error_code::aborted:
      return "aborted";
    case error_code::out_of_range:
      return "out_of_range";
    case error_code::unimplemented:
      return "unimplemented";
    case error_code::internal:
      return "internal";
    case error_code::unavailable:
      return "unavailable";
    case error_code::data_loss:
      return "data_loss";
    case error_code::unauthenticated:
      return "unauthenticated";
  }
  return "unknown";
}

error_code checked_error_code(int value) {
  return value >= 0 && value <= max_error_code ? static_cast<error_code>(value)
                                               : error_code::unknown;
}

error_code code_of(const std::exception& e) {
  if (auto* ours = dynamic_cast<const error*>(&e)) return ours->code();
  if (dynamic_cast<const std::bad_alloc*>(&e)) return error_code::resource_exhausted;
  return error_code::unknown;
}

}  // namespace actorflow
