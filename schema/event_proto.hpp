// TensorBoard's messages as plain structs: the Event a record of an event file
// holds (tensorflow/core/util/event.proto), the Summary inside it
// (tensorflow/core/framework/summary.proto) and the GraphDef TensorBoard draws
// (graph.proto, node_def.proto, attr_value.proto). Encoded and decoded with
// core/proto_wire.hpp; the field numbers are the .proto files' own.
//
// Summaries are written by ops/summary (which this room may not include), so
// here they are only decoded: what a reader of event files needs to check them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// HistogramProto: buckets as TensorFlow writes them (bucket i counts the
/// values in (bucket_limit[i-1], bucket_limit[i]]).
struct ACTORFLOW_API histogram_value {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

/// Summary.Image: an encoded (PNG) image.
struct ACTORFLOW_API image_value {
  int64_t height = 0, width = 0, colorspace = 0;
  std::string encoded;
};

/// The parts of a TensorProto that summaries use (text summaries: a DT_STRING
/// scalar in string_val).
struct ACTORFLOW_API tensor_value {
  int64_t dtype = 0;  // TensorFlow's DataType enum (DT_STRING = 7)
  std::vector<int64_t> dims;
  std::vector<std::string> string_val;
  std::string tensor_content;
};

/// One Summary.Value.
struct ACTORFLOW_API summary_value {
  enum class kind { none, simple_value, histo, image, tensor };
  std::string tag;
  kind what = kind::none;
  float simple_value = 0;
  histogram_value histo;
  image_value image;
  tensor_value tensor;
  std::string plugin_name;  // metadata.plugin_data.plugin_name
};

/// Decodes a serialized Summary; throws "[where] ..." naming the offset for
/// malformed bytes.
ACTORFLOW_API std::vector<summary_value> decode_summary(std::string_view bytes,
                                                        const std::string& where = "Summary");

/// One Event. `summary_bytes` is the Summary as stored; `summary` its decoding.
struct ACTORFLOW_API event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::string graph_def;  // a serialized GraphDef
  bool has_summary = false;
  std::string summary_bytes;
  std::vector<summary_value> summary;
};

/// Serializes the event's wall_time, step, file_version, graph_def and (when
/// has_summary) summary_bytes.
ACTORFLOW_API std::string encode_event(const event& e);
/// Decodes an Event and the Summary in it.
ACTORFLOW_API event decode_event(std::string_view bytes, const std::string& where = "Event");

/// The GraphDef TensorBoard draws for g: one NodeDef per node with its name,
/// op, inputs ("name", "name:1", "^control"), device and attributes, plus
/// "T" (output 0's dtype, when the node has no "T" or "dtype" attribute) and
/// "_output_shapes" (unknown dims as -1), which TensorBoard shows on edges.
/// Constants' tensors larger than 1 MiB keep their dtype and shape only.
ACTORFLOW_API std::string encode_graph_def(const graph& g);

/// A NodeDef as read back; attributes as their serialized AttrValue.
struct ACTORFLOW_API graph_def_node {
  std::string name, op, device;
  std::vector<std::string> inputs;
  std::map<std::string, std::string> attrs;
};
ACTORFLOW_API std::vector<graph_def_node> decode_graph_def(std::string_view bytes,
                                                           const std::string& where = "GraphDef");

/// TensorFlow's DataType enum value for a dtype (DT_FLOAT = 1, ...).
ACTORFLOW_API int tf_datatype(dtype t);

}  // namespace actorflow
