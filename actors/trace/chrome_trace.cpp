#include "actors/trace/chrome_trace.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "schema/file_io.hpp"

namespace actorflow {

namespace {

using json = nlohmann::json;

// Kernels, sends and recvs ran on a thread of their own: a slice on its track.
// Launches and resource requests overlap one another: async slices.
bool on_thread_track(const node_trace& t) {
  return t.kind == trace_kind::kernel || t.kind == trace_kind::send || t.kind == trace_kind::recv;
}

const char* kind_name(trace_kind k) {
  switch (k) {
    case trace_kind::kernel:
      return "kernel";
    case trace_kind::device:
      return "device";
    case trace_kind::resource:
      return "resource";
    case trace_kind::send:
      return "send";
    case trace_kind::recv:
      return "recv";
  }
  return "kernel";
}

class trace_builder {
 public:
  explicit trace_builder(const run_metadata& step) : step_(step) {}

  json build() {
    for (auto& t : step_.nodes) pid_of(t.task);
    for (size_t i = 0; i < step_.nodes.size(); ++i) add_node(i);
    for (size_t i = 0; i < step_.nodes.size(); ++i) add_flows(i);
    return json{{"traceEvents", std::move(events_)}, {"displayTimeUnit", "ms"}};
  }

 private:
  // Microseconds since the step began, to the nanosecond.
  double us(int64_t ns) const { return static_cast<double>(ns - step_.start_ns) / 1000.0; }

  int pid_of(const std::string& task) {
    auto [it, fresh] = pids_.try_emplace(task, static_cast<int>(pids_.size()) + 1);
    if (fresh)
      events_.push_back({{"ph", "M"},
                         {"name", "process_name"},
                         {"pid", it->second},
                         {"args", {{"name", task.empty() ? "this process" : task}}}});
    return it->second;
  }

  void name_thread(int pid, const node_trace& t) {
    if (!named_threads_.emplace(pid, t.thread).second) return;
    std::string name = t.on_pool ? t.device + " pool (TBB) " + std::to_string(t.thread)
                                 : "actors (CAF worker) " + std::to_string(t.thread);
    events_.push_back({{"ph", "M"},
                       {"name", "thread_name"},
                       {"pid", pid},
                       {"tid", t.thread},
                       {"args", {{"name", name}}}});
  }

  json args_of(const node_trace& t) const {
    json a{{"op", t.op},
           {"device", t.device},
           {"kind", kind_name(t.kind)},
           {"output_bytes", t.output_bytes},
           {"queued_us", static_cast<double>(t.start_ns - t.ready_ns) / 1000.0}};
    if (!t.peer_task.empty()) a["peer_task"] = t.peer_task;
    if (t.frame != 0) {
      a["frame"] = t.frame;
      a["iteration"] = t.iteration;
    }
    return a;
  }

  void add_node(size_t i) {
    const node_trace& t = step_.nodes[i];
    int pid = pid_of(t.task);
    if (on_thread_track(t)) {
      name_thread(pid, t);
      events_.push_back({{"ph", "X"},
                         {"name", t.node},
                         {"cat", kind_name(t.kind)},
                         {"pid", pid},
                         {"tid", t.thread},
                         {"ts", us(t.start_ns)},
                         {"dur", static_cast<double>(t.end_ns - t.start_ns) / 1000.0},
                         {"args", args_of(t)}});
      by_name_[{t.node, t.frame, t.iteration}] = i;
      return;
    }
    // An async slice per launch or request, grouped under its device.
    std::string cat = std::string(kind_name(t.kind)) + " " + t.device;
    json begin{{"ph", "b"}, {"name", t.node}, {"cat", cat},           {"pid", pid},
               {"tid", 0},  {"id", next_id_}, {"ts", us(t.start_ns)}, {"args", args_of(t)}};
    json end{{"ph", "e"}, {"name", t.node}, {"cat", cat},        {"pid", pid},
             {"tid", 0},  {"id", next_id_}, {"ts", us(t.end_ns)}};
    ++next_id_;
    events_.push_back(std::move(begin));
    events_.push_back(std::move(end));
  }

  // An arrow from each producer's slice (at its end) to this node's (at its
  // start), where both ran on threads in this step.
  void add_flows(size_t i) {
    const node_trace& t = step_.nodes[i];
    if (!on_thread_track(t)) return;
    for (auto& input : t.inputs) {
      auto it = by_name_.find({input, t.frame, t.iteration});
      if (it == by_name_.end()) continue;
      const node_trace& from = step_.nodes[it->second];
      // Inside the producer's slice, so that the arrow binds to it.
      int64_t at = std::max(from.start_ns, from.end_ns - 1);
      events_.push_back({{"ph", "s"},
                         {"name", "value"},
                         {"cat", "flow"},
                         {"id", next_id_},
                         {"pid", pid_of(from.task)},
                         {"tid", from.thread},
                         {"ts", us(at)}});
      events_.push_back({{"ph", "f"},
                         {"bp", "e"},
                         {"name", "value"},
                         {"cat", "flow"},
                         {"id", next_id_},
                         {"pid", pid_of(t.task)},
                         {"tid", t.thread},
                         {"ts", us(t.start_ns)}});
      ++next_id_;
    }
  }

  const run_metadata& step_;
  json events_ = json::array();
  std::map<std::string, int> pids_;
  std::set<std::pair<int, uint64_t>> named_threads_;
  std::map<std::tuple<std::string, uint64_t, uint64_t>, size_t> by_name_;
  uint64_t next_id_ = 1;
};

}  // namespace

std::string chrome_trace_json(const run_metadata& step) {
  return trace_builder(step).build().dump();
}

void write_chrome_trace(const std::string& path, const run_metadata& step) {
  std::string text = chrome_trace_json(step);
  write_file_atomically(path, {text}, "[trace] writing the timeline");
}

}  // namespace actorflow
