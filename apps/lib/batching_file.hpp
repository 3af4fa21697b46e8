// TensorFlow Serving's --batching_parameters_file: its BatchingParameters in
// protobuf's text format, e.g.
//
//   max_batch_size { value: 64 }
//   batch_timeout_micros { value: 1000 }
//   num_batch_threads { value: 4 }
//   max_enqueued_batches { value: 100 }
//
// read into batching_options (actors/serving/batcher.hpp), starting from
// `defaults`. The four fields above are read; a field TF Serving has that
// actorflow does not (allowed_batch_sizes, pad_variable_length_inputs, ...)
// or an unknown one is refused, naming it, rather than ignored.
#pragma once
#include <string>

#include "actors/serving/batcher.hpp"

namespace actorflow::apps {

/// The options the text `text` gives (`source` names it in errors). Throws
/// invalid_argument "[batching_parameters] <source>:<line>: ..." for a
/// malformed file, an unsupported field or a value out of range.
batching_options parse_batching_parameters(const std::string& text, const std::string& source,
                                           batching_options defaults);

/// The same for the file at `path` (a missing one is not_found).
batching_options read_batching_parameters(const std::string& path, batching_options defaults);

}  // namespace actorflow::apps
