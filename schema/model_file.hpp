// The files of an exported model (actors/serving/export.hpp makes and loads
// them; this file is only the format). An export is a directory:
//
//   <dir>/model.afg   the inference graph (schema/graph_io.hpp's format)
//   <dir>/MODEL       the signatures, and the graph file's size and CRC32;
//                     written last
//
// MODEL has checkpoint files' layout: a 32-byte header (magic "AFMODEL\0",
// version, payload length, CRC32s; schema/framed_file.hpp) and then a Cap'n
// Proto message, schema::ModelExport in schema/model_export.capnp. Every byte
// read is untrusted: problems throw "[load_model] <path>: <what was wrong>",
// and a graph file whose size or CRC32 differs from MODEL's record is refused
// before it is parsed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

inline constexpr uint32_t model_format_version = 1;
inline constexpr std::string_view model_file_name = "MODEL";
inline constexpr std::string_view model_graph_file_name = "model.afg";
/// TensorFlow's names: the signature a request that names none gets, and the
/// method of a signature that maps inputs to outputs.
inline constexpr std::string_view default_signature_key = "serving_default";
inline constexpr std::string_view predict_method_name = "tensorflow/serving/predict";

/// One named input or output of a signature.
struct ACTORFLOW_API signature_tensor {
  std::string alias;   ///< the name requests use, "images"
  std::string tensor;  ///< the graph's output, "probabilities" or "top_k:1"
  dtype type = dtype::float32;
  std::vector<int64_t> dims;  ///< -1 where unknown (the batch)
};

/// TensorFlow's SignatureDef: a named function of the model.
struct ACTORFLOW_API signature_def {
  std::string key = std::string(default_signature_key);
  std::string method = std::string(predict_method_name);
  std::vector<signature_tensor> inputs;
  std::vector<signature_tensor> outputs;
  const signature_tensor* find_input(const std::string& alias) const;
  const signature_tensor* find_output(const std::string& alias) const;
};

/// A model read back: its graph and signatures, each checked against it.
struct ACTORFLOW_API model_files {
  std::unique_ptr<graph> g;
  std::vector<signature_def> signatures;
  const signature_def* find(const std::string& key) const;
};

/// The output of `g` a signature's tensor name ("name" or "name:i") names;
/// throws invalid_argument when there is none.
ACTORFLOW_API endpoint signature_endpoint(const graph& g, const std::string& name);

/// Checks the signatures against `g`: keys non-empty and unique, aliases
/// non-empty and unique within each side of a signature, each tensor an output
/// of `g` with the signature's dtype and a shape it fits, each input a
/// placeholder. Throws actorflow::error `where` followed by what was wrong.
ACTORFLOW_API void check_signatures(const graph& g, const std::vector<signature_def>& signatures,
                                    const std::string& where);

/// Writes the graph file and then MODEL into the existing directory `dir`
/// (each file atomically). Throws naming the file and the reason.
ACTORFLOW_API void save_model_files(const graph& g, const std::vector<signature_def>& signatures,
                                    const std::string& dir);

/// Reads what save_model_files wrote. Throws "[load_model] <path>: ..." for a
/// missing, truncated, corrupted or inconsistent file (data_loss when the
/// bytes are wrong, not_found when a file is missing).
ACTORFLOW_API model_files load_model_files(const std::string& dir);

}  // namespace actorflow
