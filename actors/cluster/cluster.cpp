#include "actors/cluster/cluster.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <charconv>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/caf_ext/guarded_connection.hpp"
#include "actors/cluster/task_server.hpp"
#include "actors/run/messages.hpp"
#include "core/error.hpp"

namespace actorflow {

namespace {

std::vector<host_port> parse_host_list(const std::string& list) {
  std::vector<host_port> out;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    out.push_back(host_port::parse(list.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  return std::to_string(static_cast<double>(ms.count()) / 1000.0).substr(0, 5) + " s";
}

}  // namespace

host_port host_port::parse(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) fail("cluster", "'" + text + "' is not host:port");
  host_port hp;
  hp.host = text.substr(0, colon);
  std::string digits = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || value > 65535)
    fail("cluster", "'" + text + "': the port must be a number from 0 to 65535");
  hp.port = static_cast<uint16_t>(value);
  return hp;
}

runtime_options cluster_runtime_options(int threads) {
  return runtime_options{.scheduler_threads = threads,
                         .compute_threads = threads,
                         .idle_naps = 0,
                         .network_workers = 0,
                         .idle_spin_us = default_cluster_idle_spin_us};
}

caf::expected<uint16_t> publish_task_server(runtime& rt, const caf::actor& server, uint16_t port,
                                            const std::string& bind) {
  if (rt.options().tls.enabled()) return caf::openssl::publish(server, port, bind.c_str(), true);
  return rt.system().middleman().publish(server, port, bind.c_str(), true);
}

std::string task_name(const std::string& job, int index) {
  return "/job:" + job + "/task:" + std::to_string(index);
}

void cluster_spec::add_job(const std::string& job, std::vector<host_port> tasks) {
  if (job.empty()) fail("cluster", "a job needs a name");
  if (tasks.empty()) fail("cluster", "job '" + job + "' has no tasks");
  jobs_[job] = std::move(tasks);
}

cluster_spec cluster_spec::from_hosts(const std::string& ps_hosts,
                                      const std::string& worker_hosts) {
  cluster_spec spec;
  if (!ps_hosts.empty()) spec.add_job("ps", parse_host_list(ps_hosts));
  if (!worker_hosts.empty()) spec.add_job("worker", parse_host_list(worker_hosts));
  return spec;
}

cluster_spec cluster_spec::from_json(const std::string& json, std::string* job, int* index) {
  cluster_spec spec;
  try {
    auto doc = nlohmann::json::parse(json);
    if (!doc.contains("cluster") || !doc["cluster"].is_object())
      fail("cluster", "the cluster description has no \"cluster\" object");
    for (auto& [name, hosts] : doc["cluster"].items()) {
      std::vector<host_port> tasks;
      for (auto& h : hosts) tasks.push_back(host_port::parse(h.get<std::string>()));
      spec.add_job(name, std::move(tasks));
    }
    if (doc.contains("task")) {
      if (job) *job = doc["task"].at("type").get<std::string>();
      auto& task_index = doc["task"].at("index");
      if (!task_index.is_number_integer() || task_index.get<int64_t>() < 0 ||
          task_index.get<int64_t>() > std::numeric_limits<int>::max())
        fail("cluster",
             "the task index in the cluster description must be a whole number, 0 "
             "or more, not " +
                 task_index.dump());
      if (index) *index = task_index.get<int>();
    }
  } catch (const nlohmann::json::exception& e) {
    fail("cluster", std::string("malformed cluster description: ") + e.what());
  }
  return spec;
}

host_port cluster_spec::address(const std::string& task) const {
  // task is "/job:<job>/task:<i>"
  const std::string job_prefix = "/job:", task_part = "/task:";
  auto t = task.find(task_part);
  if (task.rfind(job_prefix, 0) != 0 || t == std::string::npos)
    fail("cluster", "'" + task + "' is not a task name (/job:<job>/task:<index>)");
  std::string job = task.substr(job_prefix.size(), t - job_prefix.size());
  int index = std::atoi(task.c_str() + t + task_part.size());
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    std::string known;
    for (auto& [name, tasks] : jobs_) known += (known.empty() ? "" : ", ") + name;
    fail("cluster",
         "task " + task + ": the cluster has no job '" + job + "' (jobs: " + known + ")");
  }
  if (index < 0 || index >= static_cast<int>(it->second.size()))
    fail("cluster", "task " + task + ": job '" + job + "' has " +
                        std::to_string(it->second.size()) + " tasks");
  return it->second[static_cast<size_t>(index)];
}

int cluster_spec::num_tasks(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

cluster_connection::cluster_connection(std::shared_ptr<runtime> rt, cluster_spec spec,
                                       std::string local_task, cluster_options options)
    : runtime_(std::move(rt)),
      spec_(std::move(spec)),
      local_task_(std::move(local_task)),
      options_(std::move(options)) {
  if (!runtime_) fail("cluster", "no runtime");
  const dtype t = options_.transfer_precision;
  if (t != dtype::float32 && t != dtype::bfloat16)
    fail("cluster",
         std::string("transfer_precision must be float32 or bfloat16, got ") + dtype_name(t));
}

caf::actor cluster_connection::server(const std::string& task) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& actor = servers_[task];
  if (!actor) actor = connect(task);
  return actor;
}

void cluster_connection::forget(const std::string& task) {
  std::lock_guard<std::mutex> lock(mutex_);
  servers_.erase(task);
}

namespace {

// Why a connection to `address` tried since `since` failed: CAF's error, and
// what the handshake found when it got that far (remote_actor only says
// the connection went away).
std::string connect_failure(const caf::error& error, const host_port& address,
                            std::chrono::steady_clock::time_point since) {
  auto text = error_text(error);
  if (text == "ip_connect failed")  // CAF's words for a refused or unroutable connection
    text = "no connection: nothing listens there yet, or the host cannot be reached";
  if (auto reason = handshake_failure_since(address.port, since)) return text + ": " + *reason;
  return text;
}

}  // namespace

caf::expected<caf::actor> cluster_connection::reach(const host_port& address) {
  auto& system = runtime_->system();
  return runtime_->options().tls.enabled()
             ? caf::openssl::remote_actor(system, address.host, address.port)
             : system.middleman().remote_actor(address.host, address.port);
}

caf::actor cluster_connection::connect(const std::string& task) {
  auto address = spec_.address(task);
  auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
  caf::actor server;
  for (bool said = false;; said = true) {
    auto attempt = std::chrono::steady_clock::now();
    auto found = reach(address);
    if (found) {
      server = *found;
      break;
    }
    auto why = connect_failure(found.error(), address, attempt);
    if (std::chrono::steady_clock::now() >= deadline)
      fail(error_code::unavailable, "cluster",
           "cannot reach task " + task + " at " + address.to_string() + " within " +
               seconds_text(options_.connect_timeout) + ": " + why);
    if (!said)
      say("[cluster] waiting up to " + seconds_text(options_.connect_timeout) + " for task " +
          task + " at " + address.to_string() + " (" + why + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  caf::scoped_actor self{runtime_->system()};
  std::string name, failure;
  self->request(server, options_.connect_timeout, hello_atom::value)
      .receive([&](std::string& n) { name = std::move(n); },
               [&](caf::error& e) { failure = error_text(e); });
  if (!failure.empty())
    fail(error_code::unavailable, "cluster",
         "task " + task + " at " + address.to_string() + " did not answer: " + failure);
  if (name != task)
    fail("cluster", "the address " + address.to_string() + " given for task " + task +
                        " is served by task " + name);
  return server;
}

void cluster_connection::say(const std::string& line) const {
  if (options_.log)
    options_.log(line);
  else
    std::cerr << line << std::endl;
}

}  // namespace actorflow
