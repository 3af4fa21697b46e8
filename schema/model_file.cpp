#include "schema/model_file.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstdint>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "schema/file_io.hpp"
#include "schema/framed_file.hpp"
#include "schema/graph_io.hpp"
#include "schema/model_export.capnp.h"
#include "schema/tensor_io.hpp"

namespace actorflow {

namespace {

static_assert(model_format_version == schema::MODEL_FORMAT_VERSION);

// ModelExport, signatures, signature, tensors, tensor, shape: 6 deep.
constexpr framed_format model_format{.magic = std::string_view("AFMODEL\0", 8),
                                     .version = model_format_version,
                                     .kind = "model",
                                     .nesting_limit = 10};

std::string to_std(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }
capnp::Text::Reader to_text(const std::string& s) { return {s.c_str(), s.size()}; }

const signature_tensor* find_alias(const std::vector<signature_tensor>& tensors,
                                   const std::string& alias) {
  for (auto& t : tensors)
    if (t.alias == alias) return &t;
  return nullptr;
}

// "name:i" as graph::output_by_name reads it: a suffix of digits is the
// output's index (one too large to be one is out of range), else output 0.
std::pair<std::string, size_t> split_tensor_name(const std::string& name) {
  auto colon = name.rfind(':');
  if (colon == std::string::npos || colon + 1 == name.size()) return {name, 0};
  auto digits = name.substr(colon + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return {name, 0};
  size_t index = digits.size() > 9 ? SIZE_MAX : std::stoul(digits);
  return {name.substr(0, colon), index};
}

std::string describe(const std::vector<int64_t>& dims) { return shape(dims).to_string(); }

// One side (inputs or outputs) of one signature.
void check_side(const graph& g, const std::vector<signature_tensor>& tensors,
                const std::string& label, bool inputs, const std::string& where) {
  std::set<std::string> aliases;
  for (auto& t : tensors) {
    std::string name = label + " " + quoted_name(t.alias);
    if (t.alias.empty()) throw error(where + label + " has an empty alias");
    if (t.alias.find('\0') != std::string::npos) throw error(where + name + " holds a NUL byte");
    if (!aliases.insert(t.alias).second) throw error(where + name + " appears twice");
    check_untrusted_shape(t.dims, t.type, true, where + name);
    auto [node_name, index] = split_tensor_name(t.tensor);
    auto* n = g.find(node_name);
    if (!n) throw error(where + name + " names " + quoted_name(t.tensor) + ", not in the graph");
    if (index >= n->outputs.size())
      throw error(where + name + " names output " + std::to_string(index) + " of " +
                  quoted_name(node_name) + ", which has " + std::to_string(n->outputs.size()));
    auto& spec = n->outputs[index];
    if (spec.type != t.type)
      throw error(where + name + " is " + dtype_name(t.type) + " but " + quoted_name(t.tensor) +
                  " is " + dtype_name(spec.type));
    if (static_cast<size_t>(spec.dims.rank()) != t.dims.size() ||
        !spec.dims.compatible_with(shape(t.dims)))
      throw error(where + name + " has shape " + describe(t.dims) + " but " +
                  quoted_name(t.tensor) + " has " + spec.dims.to_string());
    if (inputs && n->def->role != op_role::placeholder)
      throw error(where + name + " names " + quoted_name(t.tensor) + ", a " + n->op +
                  ", not a placeholder");
  }
}

void write_tensors(const std::vector<signature_tensor>& tensors,
                   capnp::List<schema::SignatureTensor>::Builder out) {
  for (unsigned i = 0; i < tensors.size(); ++i) {
    auto& t = tensors[i];
    out[i].setAlias(to_text(t.alias));
    out[i].setTensor(to_text(t.tensor));
    out[i].setDtype(dtype_to_capnp(t.type));
    auto dims = out[i].initShape(static_cast<unsigned>(t.dims.size()));
    for (unsigned d = 0; d < t.dims.size(); ++d) dims.set(d, t.dims[d]);
  }
}

std::vector<signature_tensor> read_tensors(capnp::List<schema::SignatureTensor>::Reader in,
                                           const std::string& context) {
  std::vector<signature_tensor> out;
  for (auto t : in) {
    signature_tensor s{to_std(t.getAlias()), to_std(t.getTensor()), {}, {}};
    s.type = dtype_from_capnp(t.getDtype(), context);
    for (int64_t d : t.getShape()) s.dims.push_back(d);
    out.push_back(std::move(s));
  }
  return out;
}

struct model_record {
  std::string graph_file;
  file_digest graph;
  std::vector<signature_def> signatures;
};

model_record read_record(capnp::MessageReader& reader, const std::string& prefix) {
  auto root = reader.getRoot<schema::ModelExport>();
  if (root.getVersion() != model_format_version)
    throw error(prefix + "unsupported model message version " + std::to_string(root.getVersion()) +
                    " (this build reads version " + std::to_string(model_format_version) + ")",
                error_code::data_loss);
  model_record r;
  r.graph_file = to_std(root.getGraphFile());
  r.graph = {root.getGraphBytes(), root.getGraphCrc32()};
  for (auto s : root.getSignatures()) {
    signature_def sig;
    sig.key = to_std(s.getKey());
    sig.method = to_std(s.getMethodName());
    sig.inputs = read_tensors(s.getInputs(), prefix + "signature " + quoted_name(sig.key));
    sig.outputs = read_tensors(s.getOutputs(), prefix + "signature " + quoted_name(sig.key));
    r.signatures.push_back(std::move(sig));
  }
  return r;
}

}  // namespace

const signature_tensor* signature_def::find_input(const std::string& alias) const {
  return find_alias(inputs, alias);
}

const signature_tensor* signature_def::find_output(const std::string& alias) const {
  return find_alias(outputs, alias);
}

const signature_def* model_files::find(const std::string& key) const {
  for (auto& s : signatures)
    if (s.key == key) return &s;
  return nullptr;
}

endpoint signature_endpoint(const graph& g, const std::string& name) {
  auto [node_name, index] = split_tensor_name(name);
  auto* n = g.find(node_name);
  if (!n || index >= n->outputs.size())
    throw error("[signature] " + quoted_name(name) + " is no output of the graph");
  return {n->id, static_cast<int>(index)};
}

void check_signatures(const graph& g, const std::vector<signature_def>& signatures,
                      const std::string& where) {
  if (signatures.empty()) throw error(where + "the model has no signature");
  std::set<std::string> keys;
  for (auto& s : signatures) {
    std::string label = "signature " + quoted_name(s.key);
    if (s.key.empty()) throw error(where + "a signature has an empty key");
    if (s.key.find('\0') != std::string::npos || s.method.find('\0') != std::string::npos)
      throw error(where + label + " holds a NUL byte");
    if (!keys.insert(s.key).second) throw error(where + label + " appears twice");
    if (s.outputs.empty()) throw error(where + label + " has no outputs");
    check_side(g, s.inputs, label + " input", true, where);
    check_side(g, s.outputs, label + " output", false, where);
  }
}

void save_model_files(const graph& g, const std::vector<signature_def>& signatures,
                      const std::string& dir) {
  std::string where = "[export_model] " + dir + ": ";
  check_signatures(g, signatures, where);
  std::string graph_path = dir + "/" + std::string(model_graph_file_name);
  save_graph(g, graph_path);
  auto digest = digest_file(graph_path, where);
  capnp::MallocMessageBuilder msg;
  try {
    auto root = msg.initRoot<schema::ModelExport>();
    root.setVersion(model_format_version);
    root.setGraphFile(to_text(std::string(model_graph_file_name)));
    root.setGraphBytes(digest.bytes);
    root.setGraphCrc32(digest.crc32);
    auto sigs = root.initSignatures(static_cast<unsigned>(signatures.size()));
    for (unsigned i = 0; i < signatures.size(); ++i) {
      sigs[i].setKey(to_text(signatures[i].key));
      sigs[i].setMethodName(to_text(signatures[i].method));
      write_tensors(signatures[i].inputs,
                    sigs[i].initInputs(static_cast<unsigned>(signatures[i].inputs.size())));
      write_tensors(signatures[i].outputs,
                    sigs[i].initOutputs(static_cast<unsigned>(signatures[i].outputs.size())));
    }
  } catch (const kj::Exception& e) {
    throw error(where + "cannot encode the signatures: " + capnp_error_reason(e));
  }
  auto words = capnp::messageToFlatArray(msg);
  std::string_view payload{words.asChars().begin(), words.asChars().size()};
  std::string header = make_framed_header(model_format, {payload});
  write_file_atomically(dir + "/" + std::string(model_file_name), {header, payload}, where);
}

model_files load_model_files(const std::string& dir) {
  std::string path = dir + "/" + std::string(model_file_name);
  std::string prefix = "[load_model] " + path + ": ";
  model_record record;
  read_framed_file(path, model_format, prefix,
                   [&](capnp::MessageReader& reader) { record = read_record(reader, prefix); });
  if (record.graph_file != model_graph_file_name)
    throw error(prefix + "names the graph file " + quoted_name(record.graph_file) +
                    " (this build writes and reads only " + std::string(model_graph_file_name) +
                    ")",
                error_code::data_loss);
  std::string graph_path = dir + "/" + record.graph_file;
  std::string graph_where = "[load_model] " + graph_path + ": ";
  auto found = digest_file(graph_path, graph_where);
  if (found.bytes != record.graph.bytes || found.crc32 != record.graph.crc32)
    throw error(graph_where + "the file holds " + std::to_string(found.bytes) +
                    " bytes with CRC32 " + hex32(found.crc32) + ", MODEL records " +
                    std::to_string(record.graph.bytes) + " bytes with CRC32 " +
                    hex32(record.graph.crc32) + " (corrupted, or not this export's graph)",
                error_code::data_loss);
  model_files out;
  out.g = load_graph(graph_path);
  try {
    check_signatures(*out.g, record.signatures, prefix);
  } catch (const error& e) {
    throw error(e.what(), error_code::data_loss);
  }
  out.signatures = std::move(record.signatures);
  return out;
}

}  // namespace actorflow
