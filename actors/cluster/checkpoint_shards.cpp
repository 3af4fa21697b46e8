#include "actors/cluster/checkpoint_shards.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "ops/embedding.hpp"

namespace actorflow {

namespace {

std::string spec_text(dtype type, const std::vector<int64_t>& dims) {
  return tensor_spec{type, shape(dims)}.to_string();
}

partition_strategy strategy_of(const std::string& name) {
  return name == "mod" ? partition_strategy::mod : partition_strategy::div;
}

// Where global row g of a whole variable split by `p` sits: (part, row in part).
struct row_place {
  int32_t part;
  int64_t row;
};

row_place place_of(int64_t g, const partition_info& p, const std::vector<int64_t>& offsets) {
  if (p.strategy == "mod") return {int32_t(g % p.count), g / p.count};
  auto it = std::upper_bound(offsets.begin(), offsets.end(), g);
  auto part = int32_t(it - offsets.begin() - 1);
  return {part, g - offsets[size_t(part)]};
}

// The rows of the whole variable a target holds, in its order: a part's
// (as make_partitioned_variable split them), or all of them.
std::vector<int64_t> rows_of_target(const manifest_variable& t) {
  if (!t.partition.is_part()) {
    std::vector<int64_t> all(size_t(t.dims.empty() ? 0 : t.dims[0]));
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    return all;
  }
  partitioned_variable layout;
  layout.row_offsets = even_row_offsets(t.partition.rows, t.partition.count);
  layout.strategy = strategy_of(t.partition.strategy);
  return layout.rows_of_shard(t.partition.index);
}

// Loads each shard file at most once, checked against the manifest.
class shard_cache {
 public:
  shard_cache(const std::string& dir, const checkpoint_manifest& m) : dir_(dir), m_(m) {}

  const variable_state& variable(const manifest_variable& v) {
    auto& data = shard(v.shard);
    auto it = data.variables.find(v.name);
    if (it == data.variables.end())
      fail("restore_checkpoint", dir_ + ": the manifest puts variable '" + v.name + "' in " +
                                     m_.shards[v.shard].file + ", which does not hold it");
    const tensor& value = it->second.value;
    if (value.type() != v.type || value.dims() != shape(v.dims))
      fail("restore_checkpoint", dir_ + "/" + m_.shards[v.shard].file + ": variable '" + v.name +
                                     "' is " + tensor_spec{value.type(), value.dims()}.to_string() +
                                     " but the manifest says " + spec_text(v.type, v.dims));
    return it->second;
  }

 private:
  const checkpoint_data& shard(uint32_t index) {
    auto& slot = loaded_[index];
    if (!slot) {
      const auto& s = m_.shards.at(index);
      verify_shard(dir_, s);
      slot = std::make_unique<checkpoint_data>(load_checkpoint_file(dir_ + "/" + s.file));
    }
    return *slot;
  }

  std::string dir_;
  const checkpoint_manifest& m_;
  std::map<uint32_t, std::unique_ptr<checkpoint_data>> loaded_;
};

// The saved parts of whole variable `of`, by part index; empty when none.
std::vector<const manifest_variable*> saved_parts(const checkpoint_manifest& m,
                                                  const std::string& of) {
  std::vector<const manifest_variable*> parts;
  for (auto& v : m.variables)
    if (v.partition.of == of) parts.push_back(&v);
  std::sort(parts.begin(), parts.end(),
            [](auto* a, auto* b) { return a->partition.index < b->partition.index; });
  return parts;
}

// Why the saved parts cannot give `t` its rows, or "" when they can.
std::string parts_problem(const manifest_variable& t,
                          const std::vector<const manifest_variable*>& parts) {
  const partition_info& p = parts.front()->partition;
  if (int32_t(parts.size()) != p.count)
    return "the checkpoint holds " + std::to_string(parts.size()) + " of the " +
           std::to_string(p.count) + " parts of '" + p.of + "'";
  const int64_t rows = t.partition.is_part() ? t.partition.rows : t.dims[0];
  if (rows != p.rows)
    return "'" + p.of + "' has " + std::to_string(rows) + " rows in the graph but " +
           std::to_string(p.rows) + " in the checkpoint";
  for (auto* part : parts) {
    if (part->type != t.type ||
        !std::equal(part->dims.begin() + 1, part->dims.end(), t.dims.begin() + 1, t.dims.end()))
      return "'" + part->name + "' is " + spec_text(part->type, part->dims) +
             ", which cannot give rows of " + spec_text(t.type, t.dims);
  }
  return "";
}

// Copies the rows `rows` (global indices) of a tensor split like `p` into one
// tensor of `dims`; `piece(k)` is part k's tensor of those rows.
template <class Piece>
tensor gather_rows(const std::vector<int64_t>& rows, const partition_info& p, dtype type,
                   const std::vector<int64_t>& dims, Piece piece) {
  tensor out(type, shape(dims));
  const int64_t rows_out = dims.empty() ? 1 : dims[0];
  const size_t row_bytes = rows_out ? out.size_bytes() / size_t(rows_out) : 0;
  auto offsets = even_row_offsets(p.rows, p.count);
  auto* to = static_cast<char*>(out.raw_mutable_data());
  for (size_t i = 0; i < rows.size(); ++i) {
    auto at = place_of(rows[i], p, offsets);
    const tensor& from = piece(at.part);
    std::memcpy(to + i * row_bytes,
                static_cast<const char*>(from.raw_data()) + size_t(at.row) * row_bytes, row_bytes);
  }
  return out;
}

// A target's value and slots from the saved parts of its whole variable. A
// slot shaped like its part is re-split like the value; any other slot
// (a scalar, say) is the same in every part and taken from the first.
variable_state from_parts(const manifest_variable& t,
                          const std::vector<const manifest_variable*>& parts, shard_cache& shards) {
  const partition_info& p = parts.front()->partition;
  auto rows = rows_of_target(t);
  variable_state out;
  out.value = gather_rows(rows, p, t.type, t.dims, [&](int32_t k) -> const tensor& {
    return shards.variable(*parts[size_t(k)]).value;
  });
  const variable_state& first = shards.variable(*parts.front());
  for (auto& [slot, value] : first.slots) {
    const bool row_shaped = value.dims() == first.value.dims();
    if (!row_shaped) {
      out.slots[slot] = value;
      continue;
    }
    out.slots[slot] = gather_rows(rows, p, value.type(), t.dims, [&](int32_t k) -> const tensor& {
      auto& slots = shards.variable(*parts[size_t(k)]).slots;
      auto it = slots.find(slot);
      if (it == slots.end() || it->second.dims() != shards.variable(*parts[size_t(k)]).value.dims())
        fail("restore_checkpoint", "part '" + parts[size_t(k)]->name + "' has no slot '" + slot +
                                       "' shaped like its value, as '" + parts.front()->name +
                                       "' has");
      return it->second;
    });
  }
  return out;
}

// Whether a saved variable holds the same rows as a target of its name and
// shape: both whole, or parts of one split (a part of another split, by
// another strategy, say, holds other rows in the same shape).
bool same_rows(const partition_info& a, const partition_info& b) {
  return a.of == b.of && a.rows == b.rows && a.count == b.count && a.index == b.index &&
         (!a.is_part() || a.strategy == b.strategy);
}

}  // namespace

std::vector<manifest_variable> restore_targets(const graph& g) {
  std::vector<manifest_variable> out;
  for (auto& n : g.nodes()) {
    if (n.def->role != op_role::variable) continue;
    manifest_variable v;
    v.name = n.name;
    v.type = n.outputs[0].type;
    v.dims = n.outputs[0].dims.dims();
    v.partition.of = get_attr_or<std::string>(n.attrs, "_partition_of", n.op, "");
    if (v.partition.is_part()) {
      v.partition.rows = get_attr_or<int64_t>(n.attrs, "_partition_rows", n.op, 0);
      v.partition.count = int32_t(get_attr_or<int64_t>(n.attrs, "_partition_count", n.op, 0));
      v.partition.index = int32_t(get_attr_or<int64_t>(n.attrs, "_partition_index", n.op, 0));
      v.partition.strategy = get_attr_or<std::string>(n.attrs, "_partition_strategy", n.op, "div");
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::map<std::string, variable_state> assemble_variables(
    const std::string& checkpoint_dir, const checkpoint_manifest& m,
    const std::vector<manifest_variable>& targets) {
  shard_cache shards(checkpoint_dir, m);
  std::vector<std::string> problems;
  // First decide where every target comes from, so that nothing is read
  // for a restore that cannot succeed.
  std::vector<std::pair<const manifest_variable*, std::vector<const manifest_variable*>>> plan;
  for (auto& t : targets) {
    const manifest_variable* same = m.find(t.name);
    if (same && same->type == t.type && same->dims == t.dims &&
        same_rows(same->partition, t.partition)) {
      plan.push_back({&t, {same}});
      continue;
    }
    auto parts = saved_parts(m, t.partition.is_part() ? t.partition.of : t.name);
    std::string problem = parts.empty() || t.dims.empty() ? "" : parts_problem(t, parts);
    if (!parts.empty() && !t.dims.empty() && problem.empty()) {
      plan.push_back({&t, parts});
      continue;
    }
    if (!problem.empty())
      problems.push_back("variable '" + t.name + "': " + problem);
    else if (same)
      problems.push_back("variable '" + t.name + "' is " + spec_text(t.type, t.dims) +
                         " in the graph but " + spec_text(same->type, same->dims) +
                         " in the checkpoint");
    else
      problems.push_back("variable '" + t.name + "' is not in the checkpoint");
  }
  if (!problems.empty()) {
    std::string text;
    for (auto& p : problems) text += (text.empty() ? "" : "; ") + p;
    fail("restore_checkpoint",
         checkpoint_dir + " (step " + std::to_string(m.step) + "): " + text +
             " (is it a checkpoint of this model, with the same sizes?); nothing was restored");
  }
  std::map<std::string, variable_state> out;
  for (auto& [target, sources] : plan) {
    if (sources.size() == 1 && sources.front()->name == target->name)
      out[target->name] = shards.variable(*sources.front());
    else
      out[target->name] = from_parts(*target, sources, shards);
  }
  return out;
}

std::string serialize_targets(const std::vector<manifest_variable>& targets) {
  checkpoint_manifest m;
  m.shards.push_back({"/job:client", "targets", 0, 0});
  m.variables = targets;
  for (auto& v : m.variables) v.shard = 0;
  return serialize_manifest(m);
}

std::vector<manifest_variable> deserialize_targets(const std::string& bytes,
                                                   const std::string& source_name) {
  return deserialize_manifest(bytes, source_name).variables;
}

}  // namespace actorflow
