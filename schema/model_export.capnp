# Exported models (actors/serving/export.hpp): the MODEL file of an export's
# directory, which names the inference graph's file with its size and CRC32
# and holds the model's signatures. schema/model_file.hpp writes and reads it;
# on disk it is the payload behind the 32-byte framed header
# (schema/framed_file.hpp) with the magic "AFMODEL\0".
@0xbb94a7b12a75140c;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("actorflow::schema");

using import "tensor.capnp".DType;

# The format version this build writes; loaders reject any other.
const modelFormatVersion :UInt32 = 1;

# One named input or output of a signature.
struct SignatureTensor {
  # The name a request uses ("images"); TensorFlow's key in a SignatureDef.
  alias @0 :Text;
  # The graph's output it is: "name" or "name:i".
  tensor @1 :Text;
  dtype @2 :DType;
  # -1 where a dim is unknown (the batch).
  shape @3 :List(Int64);
}

struct Signature {
  # "serving_default" for the one a request names none.
  key @0 :Text;
  # TensorFlow's method name: "tensorflow/serving/predict".
  methodName @1 :Text;
  inputs @2 :List(SignatureTensor);
  outputs @3 :List(SignatureTensor);
}

struct ModelExport {
  version @0 :UInt32;
  # The inference graph's file in the same directory (graph.capnp's format).
  graphFile @1 :Text;
  graphBytes @2 :UInt64;
  graphCrc32 @3 :UInt32;
  signatures @4 :List(Signature);
}
