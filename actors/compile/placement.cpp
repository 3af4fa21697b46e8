#include "actors/compile/placement.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "devices/cuda/gpu_support.hpp"

namespace actorflow {

namespace {

// " on float32, int32": the dtypes of a node's inputs, for messages.
std::string kinds(const std::vector<dtype>& types) {
  std::string s;
  for (dtype t : types) s += (s.empty() ? " on " : ", ") + std::string(dtype_name(t));
  return s;
}

std::string device_list(const std::vector<local_device>& devices) {
  std::string s;
  for (auto& d : devices) s += (s.empty() ? "" : ", ") + d.name;
  return s;
}

// Why accelerator d cannot hold variable n ("" when it can): it must run
// every op the graph applies to the variable, which follow it there.
std::string why_variable_not_on(const local_device& d, const graph& g, const node& n) {
  const dtype type = n.outputs.at(0).type;
  if (type == dtype::bfloat16) return d.name + " holds no bfloat16 variable";
  for (size_t id = 0; id < g.size(); ++id) {
    const node& m = g.at(static_cast<int>(id));
    if (!m.def->update || m.inputs.empty() || m.inputs[0].node != n.id) continue;
    if (!d.accel->has_update_kernel(*m.def, type))
      return d.name + " has no kernel for " + m.op + " on " + dtype_name(type) + " (node '" +
             m.name + "', which acts on it)";
  }
  return "";
}

// Why device d cannot run n ("" when it can). CPU devices run every op.
std::string why_not_on(const local_device& d, const graph& g, const node& n) {
  if (!d.accel) return "";
  if (n.def->role == op_role::variable) return why_variable_not_on(d, g, n);
  if (routes_values(n.def->role)) return "";
  if (n.def->served_by_runtime()) return d.name + " does not serve " + n.op + " (the runtime does)";
  std::vector<dtype> types;
  for (auto& e : n.inputs) types.push_back(g.at(e.node).outputs[static_cast<size_t>(e.index)].type);
  if (!d.accel->has_kernel(*n.def, types))
    return d.name + " has no kernel for " + n.op + kinds(types);
  // A kernel picked by its input's dtype (a cast from float32) would not see a bfloat16
  // output: a node that touches bfloat16 needs a kernel that says it handles it.
  bool bfloat16 = std::find(types.begin(), types.end(), dtype::bfloat16) != types.end();
  for (auto& out : n.outputs) bfloat16 |= out.type == dtype::bfloat16;
  if (bfloat16 && !d.accel->has_bfloat16_kernel(*n.def))
    return d.name + " has no bfloat16 kernel for " + n.op;
  return "";
}

}  // namespace

bool routes_values(op_role role) {
  switch (role) {
    case op_role::placeholder:
    case op_role::switch_value:
    case op_role::merge_values:
    case op_role::enter_frame:
    case op_role::exit_frame:
    case op_role::next_iteration:
    case op_role::history_push:
    case op_role::history_read:
      return true;
    default:
      return false;
  }
}

bool runs_in_host_memory(const graph& g, const node& n) {
  auto integral = [](dtype t) {
    return t == dtype::int32 || t == dtype::int64 || t == dtype::boolean;
  };
  if (n.def->host_kernel) return true;
  if (n.outputs.empty()) return false;
  for (auto& o : n.outputs)
    if (!integral(o.type)) return false;
  for (auto& e : n.inputs)
    if (!integral(g.at(e.node).outputs[static_cast<size_t>(e.index)].type)) return false;
  return true;
}

device_name checked_device(const node& n) {
  try {
    return device_name::parse(n.device);
  } catch (const error& e) {
    fail("session", "node '" + n.name + "': " + e.what());
  }
}

int colocation_target(const graph& g, const node& n) {
  if (n.def->acts_on_resource() && !n.inputs.empty()) return n.inputs[0].node;
  auto it = n.attrs.find(colocate_attr);
  if (it == n.attrs.end()) return -1;
  auto* name = std::get_if<std::string>(&it->second);
  const node* target = name ? g.find(*name) : nullptr;
  if (!target)
    fail("session", "node '" + n.name + "' is colocated with '" + (name ? *name : "?") +
                        "', which the graph lacks");
  return target->id;
}

int colocation_root(const graph& g, int id) {
  std::vector<int> chain{id};
  for (int next = colocation_target(g, g.at(id)); next >= 0;
       next = colocation_target(g, g.at(next))) {
    for (int seen : chain) {
      if (seen != next) continue;
      std::string cycle;
      for (int c : chain) cycle += "'" + g.at(c).name + "' -> ";
      fail("session", "colocation cycle: " + cycle + "'" + g.at(next).name + "'");
    }
    chain.push_back(next);
  }
  return chain.back();
}

std::string to_string(const std::vector<placement_entry>& log) {
  std::string s;
  for (auto& e : log) s += e.node + " (" + e.op + ") -> " + e.device + ": " + e.reason + "\n";
  return s;
}

device_placer::device_placer(const graph& g, const std::vector<local_device>& devices)
    : g_(g), devices_(devices), device_(g.size(), -1), why_(g.size()) {
  if (devices_.empty()) fail("session", "the runtime has no devices");
  for (auto& d : devices_) has_accelerator_ |= d.accel != nullptr;
}

int device_placer::device_of(int id) {
  auto uid = static_cast<size_t>(id);
  if (device_[uid] >= 0) return device_[uid];
  const node& n = g_.at(id);
  int root = colocation_root(g_, id);
  if (root != id) {
    device_[uid] = device_of(root);
    const node& r = g_.at(root);
    why_[uid] =
        (n.def->acts_on_resource() && colocation_target(g_, n) == root ? "with its resource '"
                                                                       : "colocated with '") +
        r.name + "'";
    return device_[uid];
  }
  if (n.def->role == op_role::variable && has_accelerator_ && checked_device(n).type.empty()) {
    int d = readers_device(n);
    if (d >= 0) {
      device_[uid] = d;
      why_[uid] = "with its readers on " + devices_[static_cast<size_t>(d)].name;
      return d;
    }
  }
  device_[uid] = place_by_hint(n, why_[uid]);
  return device_[uid];
}

int device_placer::readers_device(const node& var) {
  int common = -1;
  for (size_t id = 0; id < g_.size(); ++id) {
    const node& m = g_.at(static_cast<int>(id));
    if (m.def->acts_on_resource()) continue;  // placed with the variable
    bool reads = false;
    for (auto& e : m.inputs) reads |= e.node == var.id;
    if (!reads) continue;
    int d = device_of(m.id);
    if (common >= 0 && d != common) return -1;
    common = d;
  }
  if (common < 0) return -1;
  const local_device& d = devices_[static_cast<size_t>(common)];
  return d.accel && why_not_on(d, g_, var).empty() ? common : -1;
}

placement_entry device_placer::entry(int id) const {
  auto& n = g_.at(id);
  int d = device_[static_cast<size_t>(id)];
  return {n.name, n.op, d >= 0 ? devices_[static_cast<size_t>(d)].name : "",
          why_[static_cast<size_t>(id)]};
}

void device_placer::place_by_cost(const std::vector<bool>& needed,
                                  const std::vector<device_rate>& rates) {
  std::vector<double> finish(g_.size(), 0), busy_until(devices_.size(), 0);
  for (size_t uid = 0; uid < g_.size(); ++uid) {
    if (!needed[uid]) continue;
    int id = static_cast<int>(uid);
    const node& n = g_.at(id);
    // A variable goes where its hint or its readers say, the same in every
    // signature: it lives on one device (resource_table).
    bool free = colocation_root(g_, id) == id && checked_device(n).type.empty() &&
                n.def->role != op_role::variable;
    int fixed = free ? -1 : device_of(id);
    double flops = estimated_flops(g_, n);
    int best = -1;  // always found: a CPU device runs any node
    double best_finish = 0;
    for (size_t d = 0; d < devices_.size(); ++d) {
      if (free ? !why_not_on(devices_[d], g_, n).empty() : int(d) != fixed) continue;
      double start = busy_until[d];
      for (auto& e : n.inputs) {
        if (!needed[static_cast<size_t>(e.node)]) continue;  // a folded constant
        int from = device_[static_cast<size_t>(e.node)];
        if (from < 0) continue;
        start =
            std::max(start, finish[static_cast<size_t>(e.node)] +
                                transfer_us(devices_, rates, from, int(d), estimated_bytes(g_, e)));
      }
      for (int c : n.control_inputs) start = std::max(start, finish[static_cast<size_t>(c)]);
      double end = start + flops / (rates[d].gflops * 1e3);
      if (best < 0 || end < best_finish) {
        best = int(d);
        best_finish = end;
      }
    }
    finish[uid] = best_finish;
    busy_until[static_cast<size_t>(best)] = best_finish;
    if (free) {
      device_[uid] = best;
      char text[96];
      std::snprintf(text, sizeof text, "cost model: done at %.1f us in the simulated step",
                    best_finish);
      why_[uid] = text;
    }
  }
}

int device_placer::place_by_hint(const node& n, std::string& why) const {
  device_name hint = checked_device(n);
  if (hint.type.empty()) {
    why = "default";
    return 0;
  }
  int wanted = -1;
  for (size_t i = 0; i < devices_.size() && wanted < 0; ++i)
    if (devices_[i].type == hint.type && (hint.index < 0 || devices_[i].index == hint.index))
      wanted = static_cast<int>(i);
  std::string hinted = "/" + hint.type + ":" + (hint.index < 0 ? "*" : std::to_string(hint.index));
  if (wanted < 0) {
    std::string why_not =
        hint.type == "gpu" ? " (no GPU: " + gpu::gpu_placement_refusal() + ")" : "";
    fail("session", "node '" + n.name + "' asks for device '" + n.device +
                        "', but this process has no " + hinted +
                        "; its devices: " + device_list(devices_) + why_not);
  }
  std::string why_not = why_not_on(devices_[static_cast<size_t>(wanted)], g_, n);
  if (why_not.empty()) {
    why = "hint '" + n.device + "'";
    return wanted;
  }
  for (size_t i = 0; i < devices_.size(); ++i)
    if (why_not_on(devices_[i], g_, n).empty()) {
      why = "soft placement: " + why_not;
      return static_cast<int>(i);
    }
  fail("session", "node '" + n.name + "' (" + n.op + ") has a kernel on none of this process's " +
                      "devices (" + device_list(devices_) + ")");
}

}  // namespace actorflow
