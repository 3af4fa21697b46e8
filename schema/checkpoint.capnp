# Checkpoints: every variable's value and optimizer slots, and the global step.
# schema/checkpoint_io.hpp writes and reads them. On disk this message is the
# payload behind a fixed 32-byte header (magic, version, payload length and
# CRC32s) described there; the header is checked before the message is parsed.
@0xe1b062ca8b2fb6fb;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("actorflow::schema");

using import "tensor.capnp".DType;

# The format version this build writes; loaders reject any other.
const checkpointFormatVersion :UInt32 = 1;

# A tensor whose bytes are split into runs: one Data field holds less than
# 512 MiB, and a variable may be larger.
struct ChunkedTensor {
  dtype @0 :DType;
  # Every dim >= 0; the empty list is a scalar.
  shape @1 :List(Int64);
  # Row-major elements, little-endian. Concatenated, the chunks hold exactly
  # (product of shape) x (dtype size) bytes; a reader accepts any split.
  chunks @2 :List(Data);
}

struct Slot {
  name @0 :Text;
  value @1 :ChunkedTensor;
}

struct Variable {
  name @0 :Text;
  value @1 :ChunkedTensor;
  # Optimizer state kept beside the value (moments, accumulators), by name.
  slots @2 :List(Slot);
}

struct Checkpoint {
  version @0 :UInt32;
  globalStep @1 :Int64;
  # Names are unique; slot names are unique within a variable.
  variables @2 :List(Variable);
}
