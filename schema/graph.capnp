# Dataflow graphs on disk and on the wire (graph partitions shipped to other
# processes). schema/graph_io.hpp saves and loads them; a loader treats every
# field as untrusted and rebuilds the graph through graph::add_node_raw.
@0x81aa952c60dcd918;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("actorflow::schema");

using import "tensor.capnp".DType;
using import "tensor.capnp".Tensor;

# The format version this build writes; loaders reject any other.
const graphFormatVersion :UInt32 = 1;

struct AttrValue {
  union {
    int @0 :Int64;
    float @1 :Float64;
    bool @2 :Bool;
    string @3 :Text;
    dtype @4 :DType;
    ints @5 :List(Int64);
    floats @6 :List(Float64);
    tensor @7 :Tensor;
  }
}

struct Attr {
  name @0 :Text;
  value @1 :AttrValue;
}

# Output `index` of the node at position `node` in Graph.nodes.
struct Endpoint {
  node @0 :UInt32;
  index @1 :UInt32;
}

struct Node {
  name @0 :Text;
  op @1 :Text;
  device @2 :Text;
  # Each names an earlier node (nodes are stored in topological order).
  inputs @3 :List(Endpoint);
  controlInputs @4 :List(UInt32);
  attrs @5 :List(Attr);
}

struct Graph {
  version @0 :UInt32;
  nodes @1 :List(Node);
}
