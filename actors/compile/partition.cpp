#include "actors/compile/partition.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "actors/compile/placement.hpp"
#include "core/device_name.hpp"
#include "ops/transfer.hpp"

namespace actorflow {

namespace {

std::string task_of_hint(const node& n, const std::string& client_task) {
  return checked_device(n).task_name(client_task);
}

// "/job:ps/task:0" -> "job_ps/task_0": node names keep ':' for output indices.
std::string name_part(const std::string& task) {
  std::string s = task.substr(task.empty() || task[0] != '/' ? 0 : 1);
  std::replace(s.begin(), s.end(), ':', '_');
  return s;
}

std::string output_name(const node& n, int index) {
  return index == 0 ? n.name : n.name + ":" + std::to_string(index);
}

// Builds the partitions node by node, in the graph's (topological) order.
class partitioner {
 public:
  partitioner(const graph& g, const run_signature& sig, const std::string& client_task,
              std::vector<std::string> tasks, dtype transfer)
      : g_(g), sig_(sig), client_(client_task), tasks_(std::move(tasks)), transfer_(transfer) {
    part_of(client_);
    std::vector<std::string> others;
    for (auto& t : tasks_)
      if (!t.empty() && t != client_) others.push_back(t);
    std::sort(others.begin(), others.end());
    for (auto& t : others) part_of(t);
    consumed_.assign(g.size(), 0);
    for (size_t id = 0; id < g.size(); ++id) {
      if (tasks_[id].empty()) continue;
      auto& n = g.at(static_cast<int>(id));
      for (auto& e : n.inputs) consumed_[static_cast<size_t>(e.node)] = 1;
      for (int c : n.control_inputs) consumed_[static_cast<size_t>(c)] = 1;
    }
    for (int t : sig.targets) is_target_.insert(t);
  }

  partitioned_graph run() {
    for (size_t id = 0; id < g_.size(); ++id)
      if (!tasks_[id].empty()) copy_node(static_cast<int>(id));
    add_signature();
    // A task with nothing to feed, fetch or run (one that only held a copied
    // constant) gets no partition.
    partitioned_graph out;
    for (size_t i = 0; i < result_.parts.size(); ++i) {
      auto& p = result_.parts[i];
      if (i == 0 || !p.targets.empty() || !p.feeds.empty()) out.parts.push_back(std::move(p));
    }
    out.cuts = std::move(result_.cuts);
    return out;
  }

 private:
  partition& part_of(const std::string& task) {
    auto it = index_.find(task);
    if (it != index_.end()) return result_.parts[it->second];
    index_.emplace(task, result_.parts.size());
    partition p;
    p.task = task;
    p.g = std::make_unique<graph>();
    result_.parts.push_back(std::move(p));
    local_.emplace_back(g_.size(), -1);
    return result_.parts.back();
  }
  std::vector<int>& local_ids(const std::string& task) { return local_[index_.at(task)]; }

  void copy_node(int id) {
    auto& n = g_.at(id);
    const std::string& task = tasks_[static_cast<size_t>(id)];
    std::vector<endpoint> inputs;
    for (auto& e : n.inputs) inputs.push_back(input_in(e, task));
    std::vector<int> controls;
    for (int c : n.control_inputs) {
      if (completes_through_its_partition(n, c)) continue;
      controls.push_back(input_in({c, -1}, task).node);
    }
    // A colocation names a node the partition may lack (one this signature
    // does not need): the copy takes its root's device hint instead.
    attr_map attrs = n.attrs;
    std::string device = n.device;
    if (attrs.erase(colocate_attr) > 0) device = g_.at(colocation_root(g_, id)).device;
    auto& added = part_of(task).g->add_node_raw(n.op, inputs, controls, attrs, n.name, device);
    local_ids(task)[static_cast<size_t>(id)] = added.id;
  }

  // A grouping no_op that the step only runs as a target (minimize's train
  // op) need not hear from a control input on another task: that input
  // becomes a target of its own partition instead, and the step still ends
  // only after it, since the client waits for every partition. This saves a
  // network hop at the end of every training step.
  bool completes_through_its_partition(const node& n, int control_input) {
    const std::string& from = tasks_[static_cast<size_t>(control_input)];
    if (n.def->role != op_role::group || !is_target_.count(n.id) ||
        consumed_[static_cast<size_t>(n.id)] || from == tasks_[static_cast<size_t>(n.id)])
      return false;
    auto& targets = part_of(from).targets;
    const std::string& name = g_.at(control_input).name;
    if (std::find(targets.begin(), targets.end(), name) == targets.end()) targets.push_back(name);
    return true;
  }

  // The endpoint in `task`'s graph that carries output e (index -1: control).
  endpoint input_in(endpoint e, const std::string& task) {
    const node& src = g_.at(e.node);
    const std::string& src_task = tasks_[static_cast<size_t>(e.node)];
    if (src_task == task)
      return {local_ids(task)[static_cast<size_t>(e.node)], std::max(e.index, 0)};
    if (is_foldable_constant(src)) return {constant_copy(src, task), e.index};
    return {recv_for(e, task), 0};
  }

  int constant_copy(const node& src, const std::string& task) {
    auto& local = local_ids(task)[static_cast<size_t>(src.id)];
    if (local < 0)
      local = part_of(task).g->add_node_raw(src.op, {}, {}, src.attrs, src.name, "").id;
    return local;
  }

  // The recv node in `task` for output e of another task; adds the send/recv
  // pair on first use, so each value crosses to each task once per step.
  int recv_for(endpoint e, const std::string& task) {
    auto key = std::make_tuple(e.node, e.index, task);
    auto it = recvs_.find(key);
    if (it != recvs_.end()) return it->second;
    const node& src = g_.at(e.node);
    const std::string& src_task = tasks_[static_cast<size_t>(e.node)];
    std::string edge = src.name + "/" + (e.index < 0 ? "control" : std::to_string(e.index));
    std::string send_name = "_send/" + edge + "/to/" + name_part(task);
    std::string recv_name = "_recv/" + edge + "/from/" + name_part(src_task);
    int src_local = local_ids(src_task)[static_cast<size_t>(e.node)];
    partition& from = part_of(src_task);
    std::vector<endpoint> data;
    std::vector<int> control;
    if (e.index < 0)
      control.push_back(src_local);
    else
      data.push_back({src_local, e.index});
    // A send inside a loop sends once per iteration: it runs as a target of
    // its partition but does not report (a target reports once per step);
    // the partitions that need its values wait for them, and its errors
    // reach the client through them.
    bool in_loop = g_.frame_of(e.node) >= 0;
    // Narrowed on the wire: rounded on the sending task, widened back on the receiving one. (A
    // cast inside a loop would need the loop's frame: those values cross as they are.)
    const bool narrowed = e.index >= 0 && !in_loop && transfer_ != dtype::float32 &&
                          src.outputs[static_cast<size_t>(e.index)].type == dtype::float32;
    if (narrowed)
      data = {
          {from.g->add_node_raw("cast", data, {}, {{"dtype", transfer_}}, send_name + "/narrow", "")
               .id,
           0}};
    from.g->add_node_raw(
        "send", data, control,
        {{transfer_peer_attr, recv_name}, {transfer_peer_task_attr, task}, {"in_loop", in_loop}},
        send_name, "");
    from.targets.push_back(send_name);
    // A control edge carries an empty value; its recv's output is a dummy.
    tensor_spec spec = e.index < 0 ? tensor_spec{dtype::float32, shape{}}
                                   : src.outputs[static_cast<size_t>(e.index)];
    if (narrowed) spec.type = transfer_;
    int recv = part_of(task)
                   .g
                   ->add_node_raw("recv", {}, {},
                                  {{"dtype", spec.type},
                                   {"shape", spec.dims.dims()},
                                   {transfer_peer_attr, send_name},
                                   {transfer_peer_task_attr, src_task},
                                   // a loop invariant comes once per frame
                                   {"invariant", is_loop_invariant(src)}},
                                  recv_name, "")
                   .id;
    result_.cuts.push_back({src_task, send_name, task, recv_name});
    if (narrowed)
      recv = part_of(task)
                 .g
                 ->add_node_raw("cast", {{recv, 0}}, {}, {{"dtype", dtype::float32}},
                                recv_name + "/widen", "")
                 .id;
    recvs_.emplace(key, recv);
    return recv;
  }

  void add_signature() {
    for (size_t i = 0; i < sig_.feeds.size(); ++i) {
      auto& task = tasks_[static_cast<size_t>(sig_.feeds[i].node)];
      if (task.empty()) continue;  // fed but not needed
      auto& p = part_of(task);
      p.feeds.push_back(g_.at(sig_.feeds[i].node).name);
      p.feed_index.push_back(i);
    }
    for (auto& f : sig_.fetches) {
      auto& task = tasks_[static_cast<size_t>(f.node)];
      if (task == client_) {
        part_of(client_).fetches.push_back(output_name(g_.at(f.node), f.index));
        continue;
      }
      endpoint local = input_in(f, client_);
      part_of(client_).fetches.push_back(
          output_name(part_of(client_).g->at(local.node), local.index));
    }
    for (int t : sig_.targets) {
      auto& targets = part_of(tasks_[static_cast<size_t>(t)]).targets;
      if (std::find(targets.begin(), targets.end(), g_.at(t).name) == targets.end())
        targets.push_back(g_.at(t).name);
    }
  }

  const graph& g_;
  const run_signature& sig_;
  std::string client_;
  std::vector<std::string> tasks_;
  dtype transfer_;  // the dtype float32 values cross between tasks as
  partitioned_graph result_;
  std::map<std::string, size_t> index_;
  std::vector<std::vector<int>> local_;  // per partition: original id -> local id
  std::map<std::tuple<int, int, std::string>, int> recvs_;
  std::vector<char> consumed_;  // needed nodes that some needed node reads or waits for
  std::set<int> is_target_;
};

}  // namespace

run_signature partition::signature() const {
  run_signature sig;
  for (auto& f : feeds) sig.feeds.push_back(g->output_by_name(f).ref());
  for (auto& f : fetches) sig.fetches.push_back(g->output_by_name(f).ref());
  for (auto& t : targets) sig.targets.push_back(g->operation_by_name(t).id());
  return sig;
}

std::vector<std::string> place(const graph& g, const run_signature& sig,
                               const std::string& client_task) {
  auto needed = needed_nodes(g, sig, true);
  std::vector<std::string> tasks(g.size());
  for (size_t id = 0; id < g.size(); ++id) {
    if (!needed[id]) continue;
    // An op on a resource, or colocated with another, runs where the end of
    // its chain does (actors/compile/placement.hpp).
    tasks[id] = task_of_hint(g.at(colocation_root(g, static_cast<int>(id))), client_task);
  }
  return tasks;
}

partitioned_graph partition_graph(const graph& g, const run_signature& sig,
                                  const std::string& client_task, dtype transfer) {
  return partition_graph(g, sig, client_task, place(g, sig, client_task), transfer);
}

partitioned_graph partition_graph(const graph& g, const run_signature& sig,
                                  const std::string& client_task, std::vector<std::string> tasks,
                                  dtype transfer) {
  return partitioner(g, sig, client_task, std::move(tasks), transfer).run();
}

}  // namespace actorflow
