// actorflow::tensor <-> Cap'n Proto schema::Tensor (schema/tensor.capnp).
//
// Used by graph files (constant values, tensor attributes), checkpoints and
// cross-process messages. Reading treats the message as untrusted: every
// problem throws actorflow::error, never a crash or a huge allocation.
#pragma once
#include <kj/exception.h>

#include <string>
#include <string_view>

#include "core/tensor.hpp"
#include "schema/tensor.capnp.h"

namespace actorflow {

/// Largest tensor payload a reader accepts (and a writer produces), in bytes.
inline constexpr uint64_t max_tensor_bytes = uint64_t{1} << 40;
/// Largest payload one Cap'n Proto Data field can hold (2^29 - 1 bytes).
inline constexpr uint64_t max_capnp_data_bytes = (uint64_t{1} << 29) - 1;

/// Validates dims read from untrusted input: each is >= 0 (or -1 when
/// allow_unknown), and the product of the nonzero known dims times the dtype size
/// is at most max_tensor_bytes, so no later product of these dims can overflow.
/// Returns the byte size (0 when a dim is 0; with unknown dims, that of the known
/// ones); throws "<context>: shape (..) ..." otherwise.
uint64_t check_untrusted_shape(const std::vector<int64_t>& dims, dtype type, bool allow_unknown,
                               const std::string& context);

/// On-disk dtype <-> actorflow dtype.
schema::DType dtype_to_capnp(dtype t);
/// Throws "<context>: invalid dtype value N" for a value this build does not know.
dtype dtype_from_capnp(schema::DType t, const std::string& context = "[tensor_io]");

/// Fills `out` with t's dtype, shape and little-endian bytes. Throws for an
/// empty tensor, one past Cap'n Proto's Data limit (max_capnp_data_bytes), or
/// one whose shape a reader would reject (check_untrusted_shape).
void tensor_to_capnp(const tensor& t, schema::Tensor::Builder out);

/// Builds a tensor from an untrusted message. Validates the dtype, the shape
/// (check_untrusted_shape: every dim >= 0, at most max_tensor_bytes even counting
/// only nonzero dims), that data holds exactly elements x dtype size bytes, and
/// that bool bytes are 0 or 1.
/// Throws actorflow::error "<context>: <what was wrong>"; Cap'n Proto decoding
/// errors (kj::Exception) are converted the same way.
tensor tensor_from_capnp(schema::Tensor::Reader in, const std::string& context = "[tensor_io]");

/// Text from untrusted input made safe for an error message: bytes that are
/// not printable ASCII (and backslashes) become \xNN; past max_shown bytes it is cut.
std::string printable(std::string_view s, size_t max_shown);

/// The reason in a Cap'n Proto decoding error, printable and without the raw
/// values kj quotes from the input, e.g. "Message ends prematurely in segment table.".
std::string capnp_error_reason(const kj::Exception& e);

}  // namespace actorflow
