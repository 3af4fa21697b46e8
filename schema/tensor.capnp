# Tensors on disk and on the wire: a dtype, a shape and the raw element bytes.
# Shared by graphs (constant values, tensor attributes), checkpoints and
# cross-process messages; schema/tensor_io.hpp converts to and from actorflow::tensor.
@0xa6f771def0584ff7;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("actorflow::schema");

# Element types. The numbering is the on-disk format: never reorder, only append.
enum DType {
  float32 @0;
  float64 @1;
  int32 @2;
  int64 @3;
  uint8 @4;
  boolean @5;  # one byte per element, 0 or 1
  bfloat16 @6;  # two bytes: the upper half of a float32
}

struct Tensor {
  dtype @0 :DType;
  # Every dim >= 0; the empty list is a scalar.
  shape @1 :List(Int64);
  # Row-major elements, little-endian; exactly (product of shape) x (dtype size) bytes.
  data @2 :Data;
}
