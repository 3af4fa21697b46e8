#include "apps/lib/run_dirs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "core/error.hpp"
#include "schema/file_io.hpp"

namespace actorflow::apps {

namespace fs = std::filesystem;

void require_writable_dir(const std::string& dir, const std::string& flag) {
  auto where = flag + " '" + dir + "'";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("train", where + ": cannot make the directory: " + ec.message());
  if (!fs::is_directory(dir, ec)) fail("train", where + ": not a directory");
  // Permissions alone do not tell (root ignores them; a read-only mount does
  // not): only a write does.
  auto probe = (fs::path(dir) / (".actorflow-write-test-" + std::to_string(::getpid()))).string();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("train", where + ": cannot write in it: " + errno_text(errno));
  bool written = ::write(fd, "x", 1) == 1;
  int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!written) fail("train", where + ": cannot write in it: " + errno_text(err));
}

void claim_checkpoint_dir(const checkpoint_manager& ckpt, existing_checkpoints policy) {
  auto found = ckpt.list();  // throws for a non-file named like a checkpoint
  if (found.empty() || policy == existing_checkpoints::resume) return;
  if (policy == existing_checkpoints::refuse)
    fail("train", "--checkpoint-dir '" + ckpt.dir() + "' already holds " +
                      std::to_string(found.size()) + " checkpoint(s), the newest " +
                      found.front().path +
                      "; pass --resume to continue that run or --overwrite-checkpoints to "
                      "delete them");
  for (auto& e : found) {
    std::error_code ec;
    if (!fs::remove(e.path, ec) && ec)
      fail("train", "--overwrite-checkpoints: cannot delete '" + e.path + "': " + ec.message());
  }
}

}  // namespace actorflow::apps
