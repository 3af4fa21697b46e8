#include "actors/serving/export.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <system_error>

#include "actors/compile/signature.hpp"
#include "core/error.hpp"
#include "schema/file_io.hpp"

namespace actorflow {

namespace fs = std::filesystem;

namespace {

signature_tensor describe_tensor(const std::string& alias, const output& o) {
  if (!o.valid()) throw error("[export_model] " + alias + " is not bound to an output");
  std::vector<int64_t> dims(o.dims().dims().begin(), o.dims().dims().end());
  return {alias, o.name(), o.type(), dims};
}

// A read of a variable: in an export, an identity of the frozen value. (The
// one op compared by name: the registry has no role for "a read of a
// variable's value", and an export is the one pass that needs to know.)
bool is_variable_read(const node& n) { return n.op == "read_variable"; }

// What an export cannot hold, or empty.
std::string why_not_exportable(const node& n) {
  switch (n.def->role) {
    case op_role::resource:
      return "a resource (" + n.op + "): an export holds no queues or accumulators";
    case op_role::resource_op:
      if (is_variable_read(n)) return "";
      return "an op on a resource (" + n.op +
             "): an export holds no updates of variables and no queue ops, its variables "
             "are frozen";
    case op_role::send:
    case op_role::recv:
      return "a transfer between partitions (" + n.op + ")";
    default:
      return "";
  }
}

// The nodes `sig`'s outputs need, each checked.
std::vector<bool> needed_by(const graph& g, const signature_def& sig,
                            const std::map<std::string, variable_state>& variables) {
  run_signature run;
  std::set<int> inputs;
  for (auto& t : sig.inputs) inputs.insert(signature_endpoint(g, t.tensor).node);
  for (auto& t : sig.outputs) run.fetches.push_back(signature_endpoint(g, t.tensor));
  auto needed = needed_nodes(g, run, true);
  std::string where = "[export_model] signature '" + sig.key + "' needs node '";
  for (auto& n : g.nodes()) {
    if (!needed[static_cast<size_t>(n.id)]) continue;
    if (auto why = why_not_exportable(n); !why.empty()) throw error(where + n.name + "', " + why);
    if (n.def->role == op_role::placeholder && !inputs.count(n.id))
      throw error(where + n.name + "', a placeholder that is not one of its inputs");
    if (n.def->role == op_role::variable && !variables.count(n.name))
      throw error(where + n.name + "', a variable without a value to freeze",
                  error_code::failed_precondition);
  }
  return needed;
}

// n's attributes without those that say where it runs.
attr_map placement_free(const attr_map& attrs) {
  attr_map out = attrs;
  out.erase("_colocate_with");
  return out;
}

std::string temporary_beside(const std::string& dir) {
  static std::atomic<int> count{0};
  return dir + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(count++);
}

}  // namespace

signature_def describe_signature(const export_signature& sig) {
  signature_def out;
  out.key = sig.key;
  for (auto& [alias, o] : sig.inputs) out.inputs.push_back(describe_tensor(alias, o));
  for (auto& [alias, o] : sig.outputs) out.outputs.push_back(describe_tensor(alias, o));
  return out;
}

std::unique_ptr<graph> inference_graph(const graph& g, const std::vector<signature_def>& signatures,
                                       const std::map<std::string, variable_state>& variables) {
  check_signatures(g, signatures, "[export_model] ");
  std::vector<bool> needed(g.size(), false);
  for (auto& sig : signatures) {
    auto mine = needed_by(g, sig, variables);
    for (size_t i = 0; i < needed.size(); ++i) needed[i] = needed[i] || mine[i];
  }
  auto out = std::make_unique<graph>();
  std::vector<int> new_id(g.size(), -1);
  for (auto& n : g.nodes()) {
    if (!needed[static_cast<size_t>(n.id)]) continue;
    const node* added = nullptr;
    if (n.def->role == op_role::variable) {
      added = &out->add_node_raw("constant", {}, {}, {{"value", variables.at(n.name).value}},
                                 n.name, "");
    } else {
      std::vector<endpoint> inputs;
      for (auto& e : n.inputs) inputs.push_back({new_id[static_cast<size_t>(e.node)], e.index});
      std::vector<int> control;
      // A read's control dependencies ordered it after updates, which are gone.
      if (!is_variable_read(n))
        for (int c : n.control_inputs) control.push_back(new_id[static_cast<size_t>(c)]);
      added = &out->add_node_raw(is_variable_read(n) ? "identity" : n.op, inputs, control,
                                 is_variable_read(n) ? attr_map{} : placement_free(n.attrs), n.name,
                                 "");
    }
    new_id[static_cast<size_t>(n.id)] = added->id;
  }
  check_signatures(*out, signatures, "[export_model] ");
  return out;
}

void export_model(session& s, const std::string& dir,
                  const std::vector<export_signature>& signatures) {
  std::string where = "[export_model] " + dir + ": ";
  std::error_code ec;
  if (fs::exists(dir, ec))
    throw error(where + "already exists (an export is never written over another)",
                error_code::already_exists);
  std::vector<signature_def> defs;
  for (auto& sig : signatures) defs.push_back(describe_signature(sig));
  auto frozen = inference_graph(s.owner(), defs, s.snapshot_variables());
  auto parent = fs::path(dir).parent_path();
  if (!parent.empty() && !fs::create_directories(parent, ec) && ec)
    throw error(where + "cannot create " + parent.string() + ": " + ec.message(),
                errno_code(ec.value()));
  std::string temporary = temporary_beside(dir);
  if (!fs::create_directory(temporary, ec))
    throw error(where + "cannot create " + temporary + ": " + ec.message(), errno_code(ec.value()));
  try {
    save_model_files(*frozen, defs, temporary);
    fs::rename(temporary, dir);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(temporary, ec);
    throw error(where + "cannot rename " + temporary + " to it: " + e.code().message(),
                errno_code(e.code().value()));
  } catch (...) {
    fs::remove_all(temporary, ec);
    throw;
  }
}

loaded_model::loaded_model(model_files files, const std::shared_ptr<runtime>& rt)
    : files_(std::move(files)) {
  session_ = rt ? std::make_unique<session>(*files_.g, rt) : std::make_unique<session>(*files_.g);
  for (auto& sig : files_.signatures) {
    bound_signature& b = bound_[sig.key];
    for (auto& t : sig.inputs)
      b.inputs.emplace_back(files_.g.get(), signature_endpoint(*files_.g, t.tensor));
    for (auto& t : sig.outputs)
      b.outputs.emplace_back(files_.g.get(), signature_endpoint(*files_.g, t.tensor));
  }
}

loaded_model::~loaded_model() = default;

const signature_def& loaded_model::signature(const std::string& key) const {
  if (auto* sig = files_.find(key)) return *sig;
  std::string keys;
  for (auto& s : files_.signatures) keys += (keys.empty() ? "'" : ", '") + s.key + "'";
  throw error("[predict] no signature '" + key + "' (the model has " + keys + ")",
              error_code::not_found);
}

void loaded_model::check_inputs(const std::string& key,
                                const std::map<std::string, tensor>& inputs) const {
  auto& sig = signature(key);
  std::string where = "[predict] signature '" + key + "': ";
  for (auto& [alias, value] : inputs)
    if (!sig.find_input(alias)) {
      std::string names;
      for (auto& t : sig.inputs) names += (names.empty() ? "'" : ", '") + t.alias + "'";
      throw error(where + "no input '" + alias + "' (its inputs are " + names + ")");
    }
  for (auto& t : sig.inputs) {
    auto it = inputs.find(t.alias);
    if (it == inputs.end()) throw error(where + "input '" + t.alias + "' is missing");
    auto& value = it->second;
    if (value.type() != t.type)
      throw error(where + "input '" + t.alias + "' must be " + dtype_name(t.type) + ", not " +
                  dtype_name(value.type()));
    shape expected(t.dims);
    if (value.dims().rank() != expected.rank() || !value.dims().compatible_with(expected))
      throw error(where + "input '" + t.alias + "' must have shape " + expected.to_string() +
                  ", not " + value.dims().to_string());
  }
}

feed_list loaded_model::feeds_of(const std::string& key,
                                 const std::map<std::string, tensor>& inputs) const {
  check_inputs(key, inputs);
  auto& sig = signature(key);
  auto& bound = bound_.at(key);
  feed_list feeds;
  for (size_t i = 0; i < sig.inputs.size(); ++i)
    feeds.emplace_back(bound.inputs[i], inputs.at(sig.inputs[i].alias));
  return feeds;
}

namespace {

std::map<std::string, tensor> by_alias(const signature_def& sig, std::vector<tensor>& values) {
  std::map<std::string, tensor> out;
  for (size_t i = 0; i < sig.outputs.size(); ++i) out[sig.outputs[i].alias] = std::move(values[i]);
  return out;
}

}  // namespace

std::map<std::string, tensor> loaded_model::predict(
    const std::string& key, const std::map<std::string, tensor>& inputs,
    std::optional<std::chrono::milliseconds> timeout) {
  auto feeds = feeds_of(key, inputs);
  auto& outputs = bound_.at(key).outputs;
  std::vector<tensor> values;
  if (!timeout) {
    values = session_->run(feeds, outputs);
  } else {
    auto step = session_->run_async(feeds, outputs);
    if (step.wait_for(*timeout) != std::future_status::ready)
      throw error("[predict] signature '" + key + "' took longer than " +
                      std::to_string(timeout->count()) + " ms",
                  error_code::deadline_exceeded);
    values = step.get();
  }
  return by_alias(signature(key), values);
}

void loaded_model::predict_then(const std::string& key, const std::map<std::string, tensor>& inputs,
                                predict_callback done) {
  auto feeds = feeds_of(key, inputs);
  const signature_def* sig = &signature(key);
  session_->run_then(
      feeds, bound_.at(key).outputs,
      [sig, done = std::move(done)](std::vector<tensor> values, std::exception_ptr failure) {
        if (failure)
          done({}, failure);
        else
          done(by_alias(*sig, values), nullptr);
      });
}

std::vector<int64_t> export_versions(const std::string& base) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(base, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    auto name = it->path().filename().string();
    if (name.empty() || name.size() > 18 ||
        name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (it->is_directory(ec)) out.push_back(std::stoll(name));
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

std::unique_ptr<loaded_model> load_model(const std::string& dir, std::shared_ptr<runtime> rt) {
  return std::make_unique<loaded_model>(load_model_files(dir), rt);
}

}  // namespace actorflow
