#include "actors/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <random>

#include "actors/cluster/checkpoint_shards.hpp"
#include "actors/cluster/cluster.hpp"
#include "actors/cluster/cluster_checkpoint.hpp"
#include "actors/resources/resource_table.hpp"
#include "core/device_name.hpp"

namespace actorflow {

namespace {

// Restores already loaded contents; errors name the file.
int64_t restore_loaded(session& s, const checkpoint_data& data, const std::string& path) {
  try {
    s.restore_variables(data.variables);
  } catch (const error& e) {
    throw error("[restore_checkpoint] " + path + ": " + e.what(), e.code());
  }
  return data.global_step;
}

// The task holding each variable of a cluster session's graph, or "" for a
// session of one process.
std::map<std::string, std::string> variable_tasks(session& s) {
  std::map<std::string, std::string> out;
  if (!s.cluster()) return out;
  const std::string& local = s.cluster()->local_task();
  for (auto& n : s.owner().nodes())
    if (n.def->role == op_role::variable)
      out[n.name] = device_name::parse(n.device).task_name(local);
  return out;
}

bool saves_by_tasks(session& s) {
  auto tasks = variable_tasks(s);
  return std::any_of(tasks.begin(), tasks.end(),
                     [&](auto& t) { return t.second != s.cluster()->local_task(); });
}

// The variables of the graph grouped by the task holding them. Those in
// this process (a worker's local step) are its own state, as TensorFlow's
// local variables, and stay out of a cluster checkpoint.
std::map<std::string, std::vector<manifest_variable>> targets_by_task(session& s) {
  auto tasks = variable_tasks(s);
  std::map<std::string, std::vector<manifest_variable>> out;
  for (auto& v : restore_targets(s.owner())) {
    const std::string& task = tasks.at(v.name);
    if (task != s.cluster()->local_task()) out[task].push_back(v);
  }
  return out;
}

std::string random_run_id() {
  std::random_device rd;
  std::mt19937_64 gen((uint64_t(rd()) << 32) ^ rd());
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(gen()));
  return text;
}

// Completes the manifest the shards made: the cluster's shape, the run, and
// where the parts of partitioned variables sit; every variable of the graph
// must be in it.
void complete_manifest(checkpoint_manifest& m, const std::map<std::string, int32_t>& shape,
                       const std::map<std::string, std::vector<manifest_variable>>& by_task,
                       const std::string& run_id, const std::string& path) {
  m.run_id = run_id;
  m.cluster = shape;
  std::vector<std::string> missing;
  for (auto& [task, vars] : by_task)
    for (auto& v : vars) {
      auto it = std::find_if(m.variables.begin(), m.variables.end(),
                             [&](auto& saved) { return saved.name == v.name; });
      if (it == m.variables.end())
        missing.push_back(v.name + " (on " + task + ")");
      else
        it->partition = v.partition;
    }
  if (!missing.empty())
    fail("save_checkpoint", path + ": not initialized, so not saved: " + quoted_list(missing) +
                                " (run the initializers first); the checkpoint is incomplete");
}

// Starts a cluster save into `step_dir`; the future completes the manifest
// and hands it to `commit`, which writes it and returns its path.
template <class Commit>
std::future<std::string> start_cluster_checkpoint(session& s, const std::string& step_dir,
                                                  int64_t step, const std::string& run_id,
                                                  double bytes_per_second, Commit commit) {
  auto by_task = targets_by_task(s);
  std::vector<std::string> tasks;
  for (auto& [task, vars] : by_task) tasks.push_back(task);
  std::map<std::string, int32_t> shape;
  for (auto& [job, addresses] : s.cluster()->spec().jobs()) shape[job] = int32_t(addresses.size());
  cluster_snapshot_options options;
  options.write_bytes_per_second = bytes_per_second;
  auto written = start_cluster_snapshot(*s.cluster(), tasks, step_dir, step, options);
  return std::async(std::launch::async, [shape, by_task, run_id, step_dir, commit,
                                         written = std::move(written)]() mutable {
    auto m = written.get();
    complete_manifest(m, shape, by_task, run_id, step_dir);
    return commit(m);
  });
}

// Restores a cluster checkpoint's directory into `s`: through the tasks in a
// cluster, or assembled here for a session of one process.
int64_t restore_cluster_dir(session& s, const std::string& step_dir, const checkpoint_manifest& m) {
  if (saves_by_tasks(s)) {
    restore_cluster(*s.cluster(), targets_by_task(s), step_dir);
    return m.step;
  }
  auto values = assemble_variables(step_dir, m, restore_targets(s.owner()));
  try {
    s.restore_variables(values);
  } catch (const error& e) {
    throw error("[restore_checkpoint] " + step_dir + ": " + e.what(), e.code());
  }
  return m.step;
}

std::string manifest_path(const std::string& step_dir) {
  return step_dir + "/" + std::string(manifest_file_name);
}

}  // namespace

void save_checkpoint(session& s, const std::string& path, int64_t global_step, size_t chunk_bytes) {
  if (saves_by_tasks(s)) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) fail("save_checkpoint", path + ": cannot make the directory: " + ec.message());
    auto saved = start_cluster_checkpoint(s, path, global_step, random_run_id(), 0,
                                          [path](const checkpoint_manifest& m) {
                                            save_manifest(m, manifest_path(path));
                                            return path;
                                          });
    saved.get();
    return;
  }
  checkpoint_data data;
  data.global_step = global_step;
  try {
    data.variables = s.snapshot_variables();
  } catch (const error& e) {
    throw error("[save_checkpoint] " + path + ": " + e.what(), e.code());
  }
  save_checkpoint_file(data, path, chunk_bytes);
}

int64_t restore_checkpoint(session& s, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (!std::filesystem::exists(manifest_path(path), ec))
      fail("load_checkpoint", path +
                                  ": a directory without a MANIFEST, so not a checkpoint (a "
                                  "cluster save that did not finish, or not a checkpoint)");
    return restore_cluster_dir(s, path, load_manifest(manifest_path(path)));
  }
  return restore_loaded(s, load_checkpoint_file(path), path);
}

checkpoint_manager::checkpoint_manager(std::string dir, size_t keep_last, size_t chunk_bytes)
    : checkpoint_directory(dir, keep_last, chunk_bytes),
      cluster_dir_(dir, keep_last),
      run_id_(random_run_id()) {}

checkpoint_manager::~checkpoint_manager() = default;

void checkpoint_manager::lock_directory() {
  if (!lock_) lock_ = std::make_unique<directory_lock>(dir());
}

std::string checkpoint_manager::save(session& s, int64_t step) {
  return start_save(s, step, 0).get();
}

void checkpoint_manager::set_background_rate(double bytes_per_second) {
  if (!(bytes_per_second >= 0))
    fail("checkpoint_manager",
         "the background rate must be >= 0 bytes/s, got " + std::to_string(bytes_per_second));
  background_rate_ = bytes_per_second;
}

std::future<std::string> checkpoint_manager::start_save(session& s, int64_t step) {
  return start_save(s, step, background_rate_);
}

std::future<std::string> checkpoint_manager::start_cluster_save(session& s, int64_t step,
                                                                double bytes_per_second) {
  if (step < 0) fail("checkpoint_manager", "step must be >= 0, got " + std::to_string(step));
  lock_directory();
  cluster_checkpoint_directory target = cluster_dir_;
  return start_cluster_checkpoint(
      s, target.prepare_step(step), step, run_id_, bytes_per_second,
      [target](const checkpoint_manifest& m) {
        // The checkpoint is its directory.
        return std::filesystem::path(target.commit(m)).parent_path().string();
      });
}

std::future<std::string> checkpoint_manager::start_save(session& s, int64_t step,
                                                        double bytes_per_second) {
  if (saves_by_tasks(s)) return start_cluster_save(s, step, bytes_per_second);
  checkpoint_data data;
  data.global_step = step;
  try {
    data.variables = s.snapshot_variables();
  } catch (const error& e) {
    throw error("[save_checkpoint] " + dir() + ": " + e.what(), e.code());
  }
  // The references are taken; the bytes go out while training goes on.
  checkpoint_directory files = *this;
  return std::async(std::launch::async,
                    [files, data = std::move(data), step, bytes_per_second]() mutable {
                      return files.save_data(data, step, bytes_per_second);
                    });
}

checkpoint_manager::restore_result checkpoint_manager::restore_latest(session& s) const {
  restore_result result;
  auto cluster = cluster_dir_.newest(result.errors);
  for (auto& e : result.errors) e += " (skipped)";
  for (auto& e : list()) {
    if (cluster && cluster->first.step >= e.step) break;
    checkpoint_data data;
    try {
      data = load_checkpoint_file(e.path);
    } catch (const error& err) {
      result.errors.push_back(std::string(err.what()) + " (skipped)");
      continue;
    }
    result.step = restore_loaded(s, data, e.path);
    result.path = e.path;
    result.restored = true;
    return result;
  }
  if (!cluster) return result;
  result.step = restore_cluster_dir(s, cluster->first.path, cluster->second);
  result.path = cluster->first.path;
  result.restored = true;
  return result;
}

}  // namespace actorflow
