// A tensor's wire form between processes: a small header (valid, dtype, dims,
// byte count) and then the elements as one contiguous byte run, copied
// straight between the tensor's buffer and CAF's message buffer, never through
// a temporary and never element by element.
#pragma once
#include <caf/all.hpp>
#include <string>
#include <type_traits>

#include "core/tensor.hpp"

namespace actorflow {

caf::error save_tensor(caf::serializer& sink, tensor& x);
/// Checks everything a hostile peer controls (dtype, dims, the byte count
/// against the dims and against what is left of the message) before it
/// allocates, so garbage yields an error, never a crash or a huge allocation.
caf::error load_tensor(caf::deserializer& source, tensor& x);

/// For CAF's logging and to_string: the tensor's short description.
std::string tensor_wire_summary(const tensor& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& x) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    return save_tensor(f, x);
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    return load_tensor(f, x);
  } else {
    auto summary = tensor_wire_summary(x);
    return f(caf::meta::type_name("actorflow::tensor"), summary);
  }
}

}  // namespace actorflow
