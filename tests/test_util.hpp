// Helpers shared by the test suites.
#pragma once
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "actors/input/fortunes.hpp"
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

/// Whether $ACTORFLOW_REQUIRE_CHECKS (a comma-separated list of checks, or
/// "all") names `check`: CI requires the checks whose needs it installs.
inline bool check_required(const std::string& check) {
  const char* env = std::getenv("ACTORFLOW_REQUIRE_CHECKS");
  if (env == nullptr) return false;
  // Appended piece by piece: GCC 12 warns (falsely, -Wrestrict) on "," + string.
  std::string list = ",", wanted = ",";
  list.append(env).append(",");
  wanted.append(check).append(",");
  return list == ",all," || contains(list, wanted);
}

/// Says that `check` cannot run on this machine (something it needs is
/// missing: `why`), in the line that its ctest entry's SKIP_REGULAR_EXPRESSION
/// looks for ("skipped check: "), so that ctest reports it as Skipped, never
/// as Passed. Such a check is a doctest suite of its own, run as an entry of
/// its own (actorflow_skippable_suites in tests/CMakeLists.txt); it calls this
/// first thing and returns. Where $ACTORFLOW_REQUIRE_CHECKS names it, the
/// check fails instead.
inline void skip_check(const std::string& check, const std::string& why) {
  if (check_required(check)) {
    FAIL_CHECK("the " << check << " check cannot run (" << why
                      << ") and $ACTORFLOW_REQUIRE_CHECKS requires it");
    return;
  }
  std::cout << "skipped check: " << check << ": " << why << std::endl;
}

/// Mounts a tmpfs of `size` (as mount(8) writes it: "4m") on the directory
/// `dir`, in a mount namespace of this process's own, so that the mount goes
/// away with the process however it ends. Call it before the test starts any
/// thread (a session does): a thread started earlier keeps the old namespace.
/// Where it cannot (it needs root), skips the "small_filesystem" check and
/// returns false.
inline bool mount_small_filesystem(const std::string& dir, const char* size) {
  std::string options = std::string("size=") + size;
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    skip_check("small_filesystem", std::string("cannot mount a small file system here (") +
                                       std::strerror(errno) + "; it needs root)");
    return false;
  }
  return true;
}

/// Whether Debian's fortunes text is installed; if not, skips the
/// "fortunes" check (see skip_check).
inline bool have_fortunes(const char* dir = fortunes_dir) {
  if (std::filesystem::is_directory(dir)) return true;
  skip_check("fortunes", std::string(dir) +
                             " not found: Debian's fortunes package is missing "
                             "(scripts/setup.sh installs it; apt-get install fortunes)");
  return false;
}

}  // namespace actorflow::testing
