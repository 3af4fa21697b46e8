#include "core/device_name.hpp"

#include <algorithm>
#include <charconv>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace actorflow {

namespace {

[[noreturn]] void bad_name(const std::string& text, const std::string& what) {
  fail("device", "'" + text + "': " + what);
}

int parse_index(const std::string& text, const std::string& part, const std::string& digits) {
  int value = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || value < 0)
    bad_name(text, part + " needs a non-negative integer, got '" + digits + "'");
  return value;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

void set_device_type(device_name& d, const std::string& text, const std::string& type,
                     const std::string& index) {
  d.type = lower(type);
  if (d.type != "cpu" && d.type != "gpu" && d.type != "stand_in")
    bad_name(text, "unknown device type '" + type + "' (cpu, gpu or stand_in)");
  d.index = index == "*" ? -1 : parse_index(text, d.type, index);
}

}  // namespace

device_name device_name::parse(const std::string& text) {
  device_name d;
  if (text.empty()) return d;
  if (text[0] != '/') bad_name(text, "a device name starts with '/'");
  size_t pos = 1;
  while (pos <= text.size()) {
    size_t end = text.find('/', pos);
    if (end == std::string::npos) end = text.size();
    std::string part = text.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty()) bad_name(text, "empty part");
    auto colon = part.find(':');
    if (colon == std::string::npos) bad_name(text, "part '" + part + "' has no ':'");
    std::string key = part.substr(0, colon), value = part.substr(colon + 1);
    std::string lkey = lower(key);
    if (lkey == "job") {
      if (value.empty()) bad_name(text, "empty job name");
      d.job = value;
    } else if (lkey == "replica") {
      d.replica = parse_index(text, "replica", value);
    } else if (lkey == "task") {
      d.task = parse_index(text, "task", value);
    } else if (lkey == "device") {  // "device:CPU:0"
      auto c2 = value.find(':');
      if (c2 == std::string::npos) bad_name(text, "'device:' needs TYPE:INDEX");
      set_device_type(d, text, value.substr(0, c2), value.substr(c2 + 1));
    } else {
      set_device_type(d, text, key, value);
    }
  }
  return d;
}

std::string device_name::to_string() const {
  std::string s;
  if (!job.empty()) s += "/job:" + job;
  if (replica >= 0) s += "/replica:" + std::to_string(replica);
  if (task >= 0) s += "/task:" + std::to_string(task);
  if (!type.empty()) s += "/" + type + ":" + (index >= 0 ? std::to_string(index) : "*");
  return s;
}

std::string device_name::task_name(const std::string& default_task) const {
  if (job.empty()) return default_task;
  return "/job:" + job + "/task:" + std::to_string(task < 0 ? 0 : task);
}

device_name device_name::merged_onto(const device_name& outer) const {
  device_name d = outer;
  if (!job.empty()) {  // another job: the outer task index does not carry over
    if (job != outer.job) d.task = -1, d.replica = -1;
    d.job = job;
  }
  if (replica >= 0) d.replica = replica;
  if (task >= 0) d.task = task;
  if (!type.empty()) d.type = type, d.index = index;
  return d;
}

device_function replica_device_setter(int ps_tasks, const std::string& worker_device,
                                      ps_strategy strategy) {
  if (ps_tasks < 1) fail("replica_device_setter", "needs at least one ps task");
  device_name worker = device_name::parse(worker_device);
  // Shared by the copies of the function: the assignment so far.
  struct assignment {
    int next = 0;
    std::vector<int64_t> bytes;
  };
  auto state = std::make_shared<assignment>();
  state->bytes.assign(static_cast<size_t>(ps_tasks), 0);
  return [=](const std::string& op, const attr_map& attrs, const std::string& device) {
    device_name scoped = device_name::parse(device);
    if (op != "variable") return scoped.merged_onto(worker).to_string();
    if (!scoped.job.empty()) return scoped.to_string();  // placed explicitly
    int task = 0;
    if (strategy == ps_strategy::round_robin) {
      task = state->next;
      state->next = (state->next + 1) % ps_tasks;
    } else {
      task = static_cast<int>(std::min_element(state->bytes.begin(), state->bytes.end()) -
                              state->bytes.begin());
      auto dims = get_attr<std::vector<int64_t>>(attrs, "shape", op);
      int64_t bytes = static_cast<int64_t>(dtype_size(get_attr<dtype>(attrs, "dtype", op)));
      for (auto d : dims) bytes *= std::max<int64_t>(d, 1);
      state->bytes[static_cast<size_t>(task)] += bytes;
    }
    device_name ps;
    ps.job = "ps";
    ps.task = task;
    return scoped.merged_onto(ps).to_string();
  };
}

}  // namespace actorflow
