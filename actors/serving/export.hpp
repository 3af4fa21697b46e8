// Exported models: the inference part of a trained graph, written so that
// another process (actorflow-serve, or any program) loads it and answers
// requests with it. TensorFlow's SavedModel, in actorflow's formats.
//
//   export_model(s, "export/1", {{.inputs = {{"images", images}},
//                                  .outputs = {{"probabilities", probs},
//                                              {"classes", classes}}}});
//   auto model = load_model("export/1");
//   auto out = model->predict("serving_default", {{"images", batch}});
//
// What an export holds (schema/model_file.hpp has the files):
//  - the graph pruned to what the signatures' outputs need, with every
//    device annotation and colocation dropped, so that a model trained on
//    several devices or tasks serves on whatever the loading process has;
//  - its variables *frozen into constants*, each read of one becoming an
//    identity of its value. Where TensorFlow keeps variables and restores
//    them from a checkpoint in the SavedModel, actorflow freezes: a served
//    model never changes its weights, a constant is folded into the ops that
//    use it when a signature is compiled (no variable actor on a request's
//    path), and the export is two files checked as one;
//  - its signatures (TensorFlow's SignatureDef: named inputs and outputs
//    with dtypes and shapes; "serving_default" the one requests name none).
//
// An export is written into a temporary directory beside `dir` and renamed
// to `dir` once complete, so a reader (a server watching a base path) never
// sees half of one; MODEL records the graph file's size and CRC32, so a
// corrupted one is refused.
#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/session.hpp"
#include "core/export.hpp"
#include "core/graph.hpp"
#include "schema/model_file.hpp"

namespace actorflow {

/// A signature as an exporter names it: aliases bound to the graph's outputs.
struct ACTORFLOW_API export_signature {
  std::string key = std::string(default_signature_key);
  /// Placeholders the requests feed, by alias.
  std::vector<std::pair<std::string, output>> inputs;
  /// What the requests get back, by alias.
  std::vector<std::pair<std::string, output>> outputs;
};

/// The signature_def of `sig` (tensor names, dtypes and shapes from the graph).
ACTORFLOW_API signature_def describe_signature(const export_signature& sig);

/// The inference graph of `g` for `signatures`: the nodes their outputs need,
/// without devices or colocations, each variable replaced by a constant of
/// its value in `variables` and each read of one by an identity. Throws
/// naming the node when an output needs a placeholder that is no input of the
/// signature, a variable without a value, or an op an export cannot hold (an
/// update of a variable, a queue, a transfer between tasks).
ACTORFLOW_API std::unique_ptr<graph> inference_graph(
    const graph& g, const std::vector<signature_def>& signatures,
    const std::map<std::string, variable_state>& variables);

/// Exports `s`'s graph with the variables' current values into `dir`, which
/// must not exist yet (its parent is created if missing). Run it between
/// steps. Throws naming what was wrong; on failure nothing is left at `dir`.
ACTORFLOW_API void export_model(session& s, const std::string& dir,
                                const std::vector<export_signature>& signatures);

/// A loaded export: its graph, a session on it and its signatures.
class ACTORFLOW_API loaded_model {
 public:
  loaded_model(model_files files, const std::shared_ptr<runtime>& rt);
  ~loaded_model();
  loaded_model(const loaded_model&) = delete;
  loaded_model& operator=(const loaded_model&) = delete;

  const std::vector<signature_def>& signatures() const { return files_.signatures; }
  /// The signature `key`; throws not_found naming the keys there are.
  const signature_def& signature(const std::string& key) const;
  /// Checks `inputs` against signature `key`: every input there, none other,
  /// each with the signature's dtype and a shape that fits. Throws
  /// invalid_argument naming the alias and both dtypes or shapes.
  void check_inputs(const std::string& key, const std::map<std::string, tensor>& inputs) const;
  /// Runs signature `key` on `inputs` (alias -> tensor): its outputs by
  /// alias. Many threads may call it at once; their steps overlap. With a
  /// `timeout`, a step not done by then throws deadline_exceeded (the step
  /// itself finishes in the background, its result dropped).
  std::map<std::string, tensor> predict(
      const std::string& key, const std::map<std::string, tensor>& inputs,
      std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  /// The outputs by alias, or the exception that failed the step.
  using predict_callback =
      std::function<void(std::map<std::string, tensor> outputs, std::exception_ptr failure)>;
  /// Starts signature `key` on `inputs` and returns at once; `done` gets the
  /// outputs on the runtime thread that finished the step, and must not
  /// block. Throws, as predict does, for inputs that do not fit.
  void predict_then(const std::string& key, const std::map<std::string, tensor>& inputs,
                    predict_callback done);
  session& sess() { return *session_; }

 private:
  feed_list feeds_of(const std::string& key, const std::map<std::string, tensor>& inputs) const;
  // A signature's inputs and outputs as the graph's outputs, in its order.
  struct bound_signature {
    std::vector<output> inputs;
    std::vector<output> outputs;
  };
  model_files files_;
  std::map<std::string, bound_signature> bound_;
  std::unique_ptr<session> session_;
};

/// The versions under `base` (TensorFlow Serving's layout: directories
/// named by digits alone; an export being written has another name),
/// newest first. None when `base` is missing or unreadable.
ACTORFLOW_API std::vector<int64_t> export_versions(const std::string& base);

/// Loads the export in `dir` (export_model's layout) into a session on `rt`
/// (the process's shared runtime when null). Throws "[load_model] <path>: ..."
/// for a missing, incomplete or corrupted export.
ACTORFLOW_API std::unique_ptr<loaded_model> load_model(const std::string& dir,
                                                       std::shared_ptr<runtime> rt = nullptr);

}  // namespace actorflow
