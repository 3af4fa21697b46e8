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

# The format version of cluster checkpoints' manifests this build writes.
const manifestFormatVersion :UInt32 = 1;

# A cluster checkpoint's manifest (schema/checkpoint_manifest.hpp): which
# shard files make up one global step, and every variable in them. On disk
# it sits behind the same 32-byte header as a checkpoint, magic "AFMANI\0\0".
struct Manifest {
  version @0 :UInt32;
  step @1 :Int64;
  # The run that wrote it.
  runId @2 :Text;
  # The cluster's shape: job names are unique, each has tasks >= 1.
  cluster @3 :List(Job);
  shards @4 :List(Shard);
  # Names are unique; shard is an index into shards.
  variables @5 :List(Variable);
  # How long updates were held while the snapshot was taken.
  pauseMs @6 :Float64;

  struct Job {
    name @0 :Text;
    tasks @1 :Int32;
  }

  struct Shard {
    # "/job:ps/task:1"
    task @0 :Text;
    # A plain name inside the checkpoint's directory: no '/', not "." or "..".
    file @1 :Text;
    bytes @2 :UInt64;
    # zlib CRC32 of the whole file.
    crc32 @3 :UInt32;
  }

  struct Variable {
    name @0 :Text;
    dtype @1 :DType;
    # Every dim >= 0; the empty list is a scalar.
    shape @2 :List(Int64);
    shard @3 :UInt32;
    partition @4 :Partition;
  }

  # Where a part of a variable split by rows sits; `of` empty: not a part.
  struct Partition {
    of @0 :Text;
    rows @1 :Int64;
    count @2 :Int32;
    index @3 :Int32;
    # "div" or "mod"
    strategy @4 :Text;
  }
}
