#include "schema/checkpoint_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.hpp"

namespace actorflow {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view file_prefix = "ckpt-";
constexpr std::string_view file_suffix = ".afck";

// The step in "ckpt-<step>.afck", or -1 for any other name.
int64_t step_of(const std::string& file_name) {
  if (file_name.size() <= file_prefix.size() + file_suffix.size() ||
      file_name.compare(0, file_prefix.size(), file_prefix) != 0 ||
      file_name.compare(file_name.size() - file_suffix.size(), file_suffix.size(), file_suffix) !=
          0)
    return -1;
  std::string digits = file_name.substr(file_prefix.size(),
                                        file_name.size() - file_prefix.size() - file_suffix.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// Deletes the "ckpt-<step>.afck.tmp" files a killed save left behind. Only
// names of our own are touched: the directory may hold the user's files.
void remove_leftover_temporaries(const std::string& dir) {
  constexpr std::string_view tmp_suffix = ".tmp";
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= tmp_suffix.size() ||
        name.compare(name.size() - tmp_suffix.size(), tmp_suffix.size(), tmp_suffix) != 0 ||
        step_of(name.substr(0, name.size() - tmp_suffix.size())) < 0)
      continue;
    std::error_code type_ec, remove_ec;
    if (it->is_regular_file(type_ec)) fs::remove(it->path(), remove_ec);
  }
}

}  // namespace

checkpoint_directory::checkpoint_directory(std::string dir, size_t keep_last, size_t chunk_bytes)
    : dir_(std::move(dir)), keep_last_(keep_last), chunk_bytes_(chunk_bytes) {
  if (dir_.empty()) fail("checkpoint_manager", "empty directory name");
  if (keep_last_ == 0) fail("checkpoint_manager", "keep_last must be at least 1");
  remove_leftover_temporaries(dir_);
}

std::string checkpoint_directory::save_data(const checkpoint_data& data, int64_t step,
                                            double bytes_per_second) {
  if (step < 0) fail("checkpoint_manager", "step must be >= 0, got " + std::to_string(step));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("checkpoint_manager", "cannot make directory '" + dir_ + "': " + ec.message());
  std::string path = (fs::path(dir_) /
                      (std::string(file_prefix) + std::to_string(step) + std::string(file_suffix)))
                         .string();
  save_checkpoint_file(data, path, chunk_bytes_, bytes_per_second);

  // Keep the file just written and the newest others, keep_last in all.
  size_t kept = 1;
  for (auto& e : list()) {
    if (e.path == path) continue;
    if (kept < keep_last_) {
      ++kept;
      continue;
    }
    fs::remove(e.path, ec);  // best effort: the new checkpoint is safe either way
  }
  return path;
}

std::vector<checkpoint_directory::entry> checkpoint_directory::list() const {
  std::vector<entry> out;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec), end;
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    fail("checkpoint_manager", "cannot list '" + dir_ + "': " + ec.message());
  }
  for (; it != end; it.increment(ec)) {
    int64_t step = step_of(it->path().filename().string());
    if (step < 0) continue;
    // Skipping it would leave the save of that step to fail, much later.
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) {
      // Appended, not "'" + ...: GCC 12 warns falsely (-Wrestrict) about the sum.
      std::string what = "'";
      what += it->path().string();
      fail("checkpoint_manager",
           what + "' is not a regular file; move it out of the checkpoint directory");
    }
    out.push_back({step, it->path().string()});
  }
  if (ec) fail("checkpoint_manager", "cannot list '" + dir_ + "': " + ec.message());
  std::sort(out.begin(), out.end(), [](const entry& a, const entry& b) { return a.step > b.step; });
  return out;
}

std::optional<checkpoint_data> checkpoint_directory::load_latest(std::vector<std::string>& errors,
                                                                 std::string* path) const {
  for (auto& e : list()) {
    try {
      auto data = load_checkpoint_file(e.path);
      if (path) *path = e.path;
      return data;
    } catch (const error& err) {
      errors.push_back(std::string(err.what()) + " (skipped)");
    }
  }
  return std::nullopt;
}

}  // namespace actorflow
