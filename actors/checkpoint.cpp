#include "actors/checkpoint.hpp"

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

}  // namespace

void save_checkpoint(session& s, const std::string& path, int64_t global_step, size_t chunk_bytes) {
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
  return restore_loaded(s, load_checkpoint_file(path), path);
}

std::string checkpoint_manager::save(session& s, int64_t step) {
  checkpoint_data data;
  data.global_step = step;
  try {
    data.variables = s.snapshot_variables();
  } catch (const error& e) {
    throw error("[save_checkpoint] " + dir() + ": " + e.what(), e.code());
  }
  return save_data(data, step);
}

checkpoint_manager::restore_result checkpoint_manager::restore_latest(session& s) const {
  restore_result result;
  for (auto& e : list()) {
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
    break;
  }
  return result;
}

}  // namespace actorflow
