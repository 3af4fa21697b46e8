// Helpers shared by the test suites.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.hpp"

namespace actorflow::testing {

/// The message of the actorflow::error that f throws, or "" when it throws none.
/// Any other exception escapes and fails the test.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

/// Whether `text` holds `part`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The message of the actorflow::error that future.get() throws, or "" when
/// it throws none (a future of a request that should have failed).
template <class F>
std::string future_error(F& future) {
  return error_of([&] { future.get(); });
}

/// The code of the actorflow::error f() throws (ok when it throws none).
template <class F>
error_code code_of_failure(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.code();
  }
  return error_code::ok;
}

/// A new, empty directory under the system's temporary one, removed with all
/// it holds when the object goes: actorflow_<prefix>_<pid>_<n>.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& prefix = "test") {
    static int made = 0;
    path =
        std::filesystem::temp_directory_path() /
        ("actorflow_" + prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(made++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  /// The path of `name` inside it.
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
};

}  // namespace actorflow::testing
