// Summaries for TensorBoard, as in TensorFlow 1.x: encoders that return a
// serialized `Summary` protobuf (tensorflow/core/framework/summary.proto), and
// graph ops that compute one per step. actors/trace/summary_writer.hpp writes them
// to event files.
//
// Deliberate differences from TensorFlow:
//  - actorflow has no string dtype: a summary op outputs a 1-D uint8 tensor
//    holding the serialized Summary's bytes, where TensorFlow outputs a string
//    scalar. merge_summary concatenates those bytes, which is how protobuf
//    merges messages (the repeated `value` fields append).
//  - text_summary takes its text as a C++ string when the graph is built (an
//    op with no inputs), since no tensor can hold a string.
//  - Tags are used as given: TensorFlow's tf.summary.* prefix them with the
//    enclosing name scope; here the node's name gets the scope, the tag not.
//  - merge_all_summaries finds the summary ops by their op name (the graph has
//    no collections), and returns an invalid output when there is none, where
//    TensorFlow returns None.
#pragma once
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

// ---- encoders: the Summary bytes, for values the program already has ----

/// Summary{value{tag, simple_value}}; the value is stored as a float.
ACTORFLOW_API std::string encode_scalar_summary(const std::string& tag, double v);
/// Summary{value{tag, histo}} with TensorFlow's default buckets (histogram.cc:
/// 0, ±1e-12 * 1.1^k up to 1e20, ±DBL_MAX), runs of empty buckets collapsed
/// into one as TensorFlow writes them. Numeric dtypes only; a NaN or infinite
/// value is an error, as in TensorFlow.
ACTORFLOW_API std::string encode_histogram_summary(const std::string& tag, const tensor& values);
/// One Summary.Value per image of an NHWC batch (C in 1, 3, 4), at most
/// max_images, PNG-encoded. uint8 pixels are stored as they are; float32 and
/// float64 images are scaled as TensorFlow does (all values >= 0: by
/// 255 / max; otherwise by 127 / max|v| around 128; non-finite pixels red).
/// Tags: "tag/image" when max_images is 1, else "tag/image/0", "tag/image/1"...
ACTORFLOW_API std::string encode_image_summary(const std::string& tag, const tensor& images,
                                               int max_images = 3);
/// The text plugin's form: Summary{value{tag, tensor: a DT_STRING scalar,
/// metadata{plugin_data{plugin_name: "text"}}}}.
ACTORFLOW_API std::string encode_text_summary(const std::string& tag, const std::string& text);

/// The bytes of a summary op's output (a 1-D uint8 tensor).
ACTORFLOW_API std::string summary_bytes(const tensor& serialized);
/// A 1-D uint8 tensor holding `bytes`, as the summary ops output.
ACTORFLOW_API tensor summary_tensor(const std::string& bytes);

// ---- graph ops: each outputs a 1-D uint8 tensor, the serialized Summary ----

/// A scalar summary of a numeric 0-d value.
ACTORFLOW_API output scalar_summary(const std::string& tag, output value,
                                    const std::string& name = "");
/// A histogram of every element of `values` (numeric).
ACTORFLOW_API output histogram_summary(const std::string& tag, output values,
                                       const std::string& name = "");
/// Images of a rank-4 NHWC batch (uint8, float32 or float64; C in 1, 3, 4).
ACTORFLOW_API output image_summary(const std::string& tag, output images, int max_images = 3,
                                   const std::string& name = "");
/// A text summary of a string fixed when the graph is built.
ACTORFLOW_API output text_summary(graph& g, const std::string& tag, const std::string& text,
                                  const std::string& name = "");
/// One Summary holding every value of `summaries`; a tag seen twice is an error
/// (TensorFlow's MergeSummary).
ACTORFLOW_API output merge_summary(const std::vector<output>& summaries,
                                   const std::string& name = "");
/// merge_summary of every summary op in g (not merges); invalid when g has none.
ACTORFLOW_API output merge_all_summaries(graph& g, const std::string& name = "");

}  // namespace actorflow
