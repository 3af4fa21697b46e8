#include "schema/checkpoint_manifest.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <kj/exception.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <system_error>

#include "core/device_name.hpp"
#include "core/error.hpp"
#include "schema/checkpoint.capnp.h"
#include "schema/file_io.hpp"
#include "schema/framed_file.hpp"
#include "schema/tensor_io.hpp"

namespace actorflow {

namespace fs = std::filesystem;

namespace {

static_assert(manifest_format_version == schema::MANIFEST_FORMAT_VERSION);

// Manifest, variables, variable, partition, text: 5 deep, with room to spare.
constexpr framed_format manifest_format{.magic = std::string_view("AFMANI\0\0", 8),
                                        .version = manifest_format_version,
                                        .kind = "manifest",
                                        .nesting_limit = 8};

std::string to_std(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

capnp::Text::Reader to_text(const std::string& s) { return {s.c_str(), s.size()}; }

// A name that stays inside the checkpoint's directory when joined to it.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string::npos;
}

// ---------------------------------------------------------------- checks

// Checks every field of a manifest, read or about to be written. Errors are
// `prefix` followed by what was wrong, with `code` (data_loss for a file,
// invalid_argument for a manifest being saved).
class manifest_checker {
 public:
  manifest_checker(std::string prefix, error_code code) : prefix_(std::move(prefix)), code_(code) {}

  [[noreturn]] void fail(const std::string& what) const { throw error(prefix_ + what, code_); }

  void check(const checkpoint_manifest& m) const {
    if (m.step < 0) fail("step " + std::to_string(m.step) + " is negative");
    check_text(m.run_id, "the run id");
    if (!std::isfinite(m.pause_ms) || m.pause_ms < 0)
      fail("pause_ms " + std::to_string(m.pause_ms) + " is not a finite number >= 0");
    for (auto& [job, tasks] : m.cluster) check_job(job, tasks);
    check_shards(m.shards);
    check_variables(m.variables, m.shards.size());
  }

  void check_name(const std::string& name, const std::string& label) const {
    if (name.empty()) fail(label + " has an empty name");
    check_text(name, label);
  }

 private:
  void check_text(const std::string& text, const std::string& label) const {
    if (text.find('\0') != std::string::npos)
      fail(label + " " + quoted_name(text) + " holds a NUL byte");
  }

  void check_job(const std::string& job, int32_t tasks) const {
    std::string label = "cluster job " + quoted_name(job);
    check_name(job, "a cluster job");
    if (tasks < 1) fail(label + " has " + std::to_string(tasks) + " tasks (must be >= 1)");
  }

  void check_shards(const std::vector<manifest_shard>& shards) const {
    std::set<std::string> tasks, files;
    for (size_t i = 0; i < shards.size(); ++i) {
      auto& s = shards[i];
      std::string label = "shard " + std::to_string(i);
      check_name(s.task, label + "'s task");
      check_name(s.file, label + "'s file");
      if (!is_plain_file_name(s.file))
        fail(label + "'s file " + quoted_name(s.file) +
             " is not a plain file name (no '/', not . or ..)");
      if (!tasks.insert(s.task).second)
        fail(label + ": task " + quoted_name(s.task) + " appears twice");
      if (!files.insert(s.file).second)
        fail(label + ": file " + quoted_name(s.file) + " appears twice");
    }
  }

  // Whole variables split into parts: the parts seen so far of each.
  struct whole_variable {
    const manifest_variable* first;  // the part that set rows, count and strategy
    std::set<int32_t> indexes;
    int64_t rows_held = 0;
  };

  void check_variables(const std::vector<manifest_variable>& variables, size_t shards) const {
    std::set<std::string> names;
    std::map<std::string, whole_variable> wholes;
    for (size_t i = 0; i < variables.size(); ++i) {
      auto& v = variables[i];
      std::string label = "variable " + std::to_string(i) + " (" + quoted_name(v.name) + ")";
      check_name(v.name, "variable " + std::to_string(i));
      if (!names.insert(v.name).second) fail(label + " appears twice");
      check_shape(v, label);
      if (v.shard >= shards)
        fail(label + ": shard " + std::to_string(v.shard) + " is out of range (" +
             std::to_string(shards) + " shards)");
      check_partition(v, label);
      if (v.partition.is_part()) add_part(wholes, v, label);
    }
    for (auto& [of, whole] : wholes) check_whole(of, whole);
  }

  void check_shape(const manifest_variable& v, const std::string& label) const {
    try {
      check_untrusted_shape(v.dims, v.type, false, prefix_ + label);
    } catch (const error& e) {
      throw error(e.what(), code_);
    }
  }

  void check_partition(const manifest_variable& v, const std::string& label) const {
    auto& p = v.partition;
    if (!p.is_part()) {
      if (p.rows || p.count || p.index || !p.strategy.empty())
        fail(label + " is not a part of a variable (no 'of') but has partition fields");
      return;
    }
    check_text(p.of, label + "'s partition of");
    std::string part = label + ": part " + std::to_string(p.index) + " of " + quoted_name(p.of);
    if (p.strategy != "div" && p.strategy != "mod")
      fail(part + " has strategy " + quoted_name(p.strategy) + " (must be div or mod)");
    if (p.count < 1) fail(part + " has " + std::to_string(p.count) + " parts (must be >= 1)");
    if (p.index < 0 || p.index >= p.count)
      fail(part + ": index not in [0, " + std::to_string(p.count) + ")");
    if (p.rows < 0) fail(part + " has " + std::to_string(p.rows) + " rows (must be >= 0)");
    if (v.dims.empty()) fail(part + " is a scalar (a part has rows)");
    if (v.dims[0] > p.rows)
      fail(part + " has " + std::to_string(v.dims[0]) + " rows, more than the whole's " +
           std::to_string(p.rows));
  }

  void add_part(std::map<std::string, whole_variable>& wholes, const manifest_variable& v,
                const std::string& label) const {
    auto [it, first] = wholes.try_emplace(v.partition.of, whole_variable{&v, {}, 0});
    auto& whole = it->second;
    auto& p = v.partition;
    auto& q = whole.first->partition;
    if (!first && (p.rows != q.rows || p.count != q.count || p.strategy != q.strategy))
      fail(label + " says " + quoted_name(p.of) + " has " + describe_split(p) + ", " +
           quoted_name(whole.first->name) + " says " + describe_split(q));
    if (!whole.indexes.insert(p.index).second)
      fail(label + ": part " + std::to_string(p.index) + " of " + quoted_name(p.of) +
           " appears twice");
    // Each part holds at most `rows` rows and there are at most 2^31 parts: no overflow.
    whole.rows_held += v.dims[0];
  }

  static std::string describe_split(const partition_info& p) {
    return std::to_string(p.rows) + " rows in " + std::to_string(p.count) + " parts (" +
           p.strategy + ")";
  }

  void check_whole(const std::string& of, const whole_variable& whole) const {
    auto& p = whole.first->partition;
    if (whole.rows_held > p.rows)
      fail("the parts of " + quoted_name(of) + " hold " + std::to_string(whole.rows_held) +
           " rows, more than its " + std::to_string(p.rows));
    if (whole.indexes.size() == static_cast<size_t>(p.count) && whole.rows_held != p.rows)
      fail("the " + std::to_string(p.count) + " parts of " + quoted_name(of) + " hold " +
           std::to_string(whole.rows_held) + " rows, not its " + std::to_string(p.rows));
  }

  std::string prefix_;
  error_code code_;
};

// ---------------------------------------------------------------- writing

void write_variable(const manifest_variable& v, schema::Manifest::Variable::Builder out) {
  out.setName(to_text(v.name));
  out.setDtype(dtype_to_capnp(v.type));
  auto shape = out.initShape(static_cast<unsigned>(v.dims.size()));
  for (unsigned i = 0; i < v.dims.size(); ++i) shape.set(i, v.dims[i]);
  out.setShard(v.shard);
  auto p = out.initPartition();
  p.setOf(to_text(v.partition.of));
  p.setRows(v.partition.rows);
  p.setCount(v.partition.count);
  p.setIndex(v.partition.index);
  p.setStrategy(to_text(v.partition.strategy));
}

void write_message(const checkpoint_manifest& m, schema::Manifest::Builder root) {
  root.setVersion(manifest_format_version);
  root.setStep(m.step);
  root.setRunId(to_text(m.run_id));
  root.setPauseMs(m.pause_ms);
  auto cluster = root.initCluster(static_cast<unsigned>(m.cluster.size()));
  unsigned i = 0;
  for (auto& [job, tasks] : m.cluster) {
    cluster[i].setName(to_text(job));
    cluster[i++].setTasks(tasks);
  }
  auto shards = root.initShards(static_cast<unsigned>(m.shards.size()));
  for (i = 0; i < m.shards.size(); ++i) {
    shards[i].setTask(to_text(m.shards[i].task));
    shards[i].setFile(to_text(m.shards[i].file));
    shards[i].setBytes(m.shards[i].bytes);
    shards[i].setCrc32(m.shards[i].crc32);
  }
  auto variables = root.initVariables(static_cast<unsigned>(m.variables.size()));
  for (i = 0; i < m.variables.size(); ++i) write_variable(m.variables[i], variables[i]);
}

// The file's bytes, or `where` followed by what was wrong with `m`.
std::string encode(const checkpoint_manifest& m, const std::string& where) {
  manifest_checker(where, error_code::invalid_argument).check(m);
  capnp::MallocMessageBuilder msg;
  try {
    write_message(m, msg.initRoot<schema::Manifest>());
  } catch (const kj::Exception& e) {
    throw error(where + "cannot encode the manifest: " + capnp_error_reason(e));
  }
  auto words = capnp::messageToFlatArray(msg);
  return frame_manifest_payload({words.asChars().begin(), words.asChars().size()});
}

// ---------------------------------------------------------------- reading

manifest_variable read_variable(schema::Manifest::Variable::Reader in, const std::string& context) {
  manifest_variable v;
  v.name = to_std(in.getName());
  v.type = dtype_from_capnp(in.getDtype(), context);
  for (int64_t d : in.getShape()) v.dims.push_back(d);
  v.shard = in.getShard();
  auto p = in.getPartition();
  v.partition = {to_std(p.getOf()), p.getRows(), p.getCount(), p.getIndex(),
                 to_std(p.getStrategy())};
  return v;
}

// The message's fields, each checked.
checkpoint_manifest read_message(capnp::MessageReader& reader, const std::string& prefix) {
  manifest_checker checker(prefix, error_code::data_loss);
  auto root = reader.getRoot<schema::Manifest>();
  if (root.getVersion() != manifest_format_version)
    checker.fail("unsupported manifest message version " + std::to_string(root.getVersion()) +
                 " (this build reads version " + std::to_string(manifest_format_version) + ")");
  checkpoint_manifest m;
  m.step = root.getStep();
  m.run_id = to_std(root.getRunId());
  m.pause_ms = root.getPauseMs();
  for (auto job : root.getCluster()) {
    std::string name = to_std(job.getName());
    if (!m.cluster.emplace(name, job.getTasks()).second)
      checker.fail("cluster job " + quoted_name(name) + " appears twice");
  }
  for (auto s : root.getShards())
    m.shards.push_back({to_std(s.getTask()), to_std(s.getFile()), s.getBytes(), s.getCrc32()});
  auto variables = root.getVariables();
  for (unsigned i = 0; i < variables.size(); ++i) {
    try {
      m.variables.push_back(read_variable(variables[i], prefix + "variable " + std::to_string(i)));
    } catch (const error& e) {
      throw error(e.what(), error_code::data_loss);
    }
  }
  checker.check(m);
  return m;
}

}  // namespace

const manifest_variable* checkpoint_manifest::find(const std::string& name) const {
  for (auto& v : variables)
    if (v.name == name) return &v;
  return nullptr;
}

std::string serialize_manifest(const checkpoint_manifest& m) {
  return encode(m, "[serialize_manifest] ");
}

checkpoint_manifest deserialize_manifest(std::string_view bytes, const std::string& source_name) {
  std::string prefix = "[load_manifest] " + source_name + ": ";
  checkpoint_manifest m;
  read_framed_bytes(bytes, manifest_format, prefix,
                    [&](capnp::MessageReader& reader) { m = read_message(reader, prefix); });
  return m;
}

std::string frame_manifest_payload(std::string_view payload) {
  return make_framed_header(manifest_format, {payload}) + std::string(payload);
}

void save_manifest(const checkpoint_manifest& m, const std::string& path) {
  std::string where = "[save_checkpoint] " + path + ": ";
  std::string bytes = encode(m, where);
  write_file_atomically(path, {bytes}, where);
}

checkpoint_manifest load_manifest(const std::string& path) {
  std::string prefix = "[load_manifest] " + path + ": ";
  checkpoint_manifest m;
  read_framed_file(path, manifest_format, prefix,
                   [&](capnp::MessageReader& reader) { m = read_message(reader, prefix); });
  return m;
}

// ---------------------------------------------------------------- shard files

namespace {

// describe_file, with errors starting `where`.
manifest_shard describe(const std::string& path, const std::string& where) {
  auto digest = digest_file(path, where);
  manifest_shard out;
  out.file = fs::path(path).filename().string();
  out.bytes = digest.bytes;
  out.crc32 = digest.crc32;
  return out;
}

}  // namespace

manifest_shard describe_file(const std::string& path) {
  return describe(path, "[save_checkpoint] " + path + ": ");
}

void verify_shard(const std::string& checkpoint_dir, const manifest_shard& shard) {
  std::string path = checkpoint_dir + "/" + shard.file;
  std::string where = "[load_checkpoint] " + path + ": ";
  if (!is_plain_file_name(shard.file))
    throw error(where + "the shard's file " + quoted_name(shard.file) +
                " is not a plain file name");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw error(where + "the shard is missing: " + errno_text(errno), errno_code(errno));
  auto check_size = [&](uint64_t size) {
    if (size != shard.bytes)
      throw error(where + "size mismatch: the file holds " + std::to_string(size) +
                      " bytes, the manifest says " + std::to_string(shard.bytes),
                  error_code::data_loss);
  };
  // The size first: it needs no read of a file that may be large.
  if (S_ISREG(st.st_mode)) check_size(static_cast<uint64_t>(st.st_size));
  auto found = describe(path, where);
  check_size(found.bytes);  // it may have changed since
  if (found.crc32 != shard.crc32)
    throw error(where + "CRC32 mismatch: the file's is " + hex32(found.crc32) +
                    ", the manifest says " + hex32(shard.crc32),
                error_code::data_loss);
}

// ---------------------------------------------------------------- the lock

namespace {

// The pid the holder wrote into the lock file, or "unknown".
std::string holder_pid(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  bool digits = !text.empty() &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  return digits ? text : "unknown";
}

void write_pid(int fd) {
  std::string pid = std::to_string(::getpid()) + "\n";
  // Best effort: the pid only makes the error of the next run clearer.
  if (::ftruncate(fd, 0) != 0) return;
  [[maybe_unused]] ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
}

}  // namespace

directory_lock::directory_lock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("checkpoint_manager", dir + ": cannot make the directory: " + ec.message());
  std::string path = dir + "/LOCK";
  // Never truncated on open: a holder's pid must survive a failed attempt.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail(errno_code(errno), "checkpoint_manager",
         dir + ": cannot open " + path + ": " + errno_text(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string pid = holder_pid(fd_);
    ::close(fd_);
    fd_ = -1;
    fail(error_code::failed_precondition, "checkpoint_manager",
         dir + ": another process (pid " + pid + ") holds " + path + ": " + errno_text(err));
  }
  write_pid(fd_);
}

directory_lock::~directory_lock() {
  // Closing the file releases the lock; the file stays, since removing it
  // would let a waiting run lock a file that is no longer <dir>/LOCK.
  if (fd_ >= 0) ::close(fd_);
}

// ---------------------------------------------------------------- the directory

namespace {

constexpr std::string_view step_prefix = "ckpt-";
constexpr std::string_view no_manifest = "no MANIFEST (a save that did not finish)";

// The step of "ckpt-<step>" written as std::to_string writes it, or -1.
int64_t step_of(const std::string& name) {
  if (name.size() <= step_prefix.size() || name.compare(0, step_prefix.size(), step_prefix) != 0)
    return -1;
  std::string digits = name.substr(step_prefix.size());
  if (digits.size() > 18 || (digits.size() > 1 && digits[0] == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

std::string step_path(const std::string& dir, int64_t step) {
  if (step < 0) fail("checkpoint_manager", "step must be >= 0, got " + std::to_string(step));
  return dir + "/" + std::string(step_prefix) + std::to_string(step);
}

// One checkpoint found in the directory, with its manifest when it reads cleanly.
struct found_checkpoint {
  cluster_checkpoint_directory::entry entry;
  std::optional<checkpoint_manifest> manifest;
  bool is_directory = false;  // else never ours to delete
};

found_checkpoint examine(const fs::directory_entry& item, int64_t step) {
  found_checkpoint found{{step, item.path().string(), false, ""}, std::nullopt};
  std::error_code ec;
  // A link is not followed: it may lead to the user's files.
  if (!item.is_directory(ec) || item.is_symlink(ec)) {
    found.entry.problem = "not a directory";
    return found;
  }
  found.is_directory = true;
  std::string manifest_path = found.entry.path + "/" + std::string(manifest_file_name);
  if (!fs::exists(fs::symlink_status(manifest_path, ec))) {
    found.entry.problem = no_manifest;
    return found;
  }
  try {
    found.manifest = load_manifest(manifest_path);
  } catch (const error& e) {
    found.entry.problem = e.what();
    return found;
  }
  if (found.manifest->step != step) {
    found.entry.problem = "its MANIFEST is of step " + std::to_string(found.manifest->step);
    found.manifest.reset();
    return found;
  }
  found.entry.complete = true;
  return found;
}

// Every ckpt-<step> in `dir`, newest first.
std::vector<found_checkpoint> scan(const std::string& dir) {
  std::vector<found_checkpoint> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec == std::errc::no_such_file_or_directory) return out;
  for (; !ec && it != end; it.increment(ec)) {
    int64_t step = step_of(it->path().filename().string());
    if (step >= 0) out.push_back(examine(*it, step));
  }
  if (ec) fail("checkpoint_manager", "cannot list '" + dir + "': " + ec.message());
  std::sort(out.begin(), out.end(), [](const found_checkpoint& a, const found_checkpoint& b) {
    return a.entry.step > b.entry.step;
  });
  return out;
}

// Removes a checkpoint's directory, its manifest first: an interrupted removal
// leaves an incomplete checkpoint, never a manifest without its shards.
void remove_checkpoint(const std::string& path, std::error_code& ec) {
  fs::remove(path + "/" + std::string(manifest_file_name), ec);
  fs::remove_all(path, ec);
}

// Persists the names made or removed in `dir` (best effort, as file_io does).
void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

cluster_checkpoint_directory::cluster_checkpoint_directory(std::string dir, size_t keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last) {
  if (dir_.empty()) fail("checkpoint_manager", "empty directory name");
  if (keep_last_ == 0) fail("checkpoint_manager", "keep_last must be at least 1");
}

std::vector<cluster_checkpoint_directory::entry> cluster_checkpoint_directory::list() const {
  std::vector<entry> out;
  for (auto& found : scan(dir_)) out.push_back(std::move(found.entry));
  return out;
}

std::string cluster_checkpoint_directory::prepare_step(int64_t step) const {
  std::string path = step_path(dir_, step);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("checkpoint_manager", "cannot make directory '" + dir_ + "': " + ec.message());
  auto status = fs::symlink_status(path, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status))
      fail("checkpoint_manager", "'" + path +
                                     "' is not a directory; move it out of the checkpoint "
                                     "directory");
    remove_checkpoint(path, ec);  // a save of this step that did not finish
    if (ec) fail("checkpoint_manager", "cannot empty '" + path + "': " + ec.message());
  }
  fs::create_directory(path, ec);
  if (ec) fail("checkpoint_manager", "cannot make directory '" + path + "': " + ec.message());
  sync_directory(dir_);
  return path;
}

std::string cluster_checkpoint_directory::commit(const checkpoint_manifest& m) const {
  std::string path = step_path(dir_, m.step);
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(path, ec)))
    fail("checkpoint_manager", "'" + path + "' is not a directory: prepare_step(" +
                                   std::to_string(m.step) + ") makes it");
  std::string manifest_path = path + "/" + std::string(manifest_file_name);
  save_manifest(m, manifest_path);
  sync_directory(dir_);

  // Keep the checkpoint just committed and the newest complete others,
  // keep_last in all; drop the stale shards of older saves that did not finish.
  size_t kept = 1;
  for (auto& found : scan(dir_)) {
    auto& e = found.entry;
    if (e.step == m.step || !found.is_directory) continue;
    bool keep = e.complete ? kept++ < keep_last_ : e.step > m.step;
    if (!keep) remove_checkpoint(e.path, ec);  // best effort: the new one is safe either way
  }
  return manifest_path;
}

std::optional<std::pair<cluster_checkpoint_directory::entry, checkpoint_manifest>>
cluster_checkpoint_directory::newest(std::vector<std::string>& skipped) const {
  for (auto& found : scan(dir_)) {
    auto& e = found.entry;
    if (!e.complete) {
      skipped.push_back(e.path + ": " + e.problem + " (skipped)");
      continue;
    }
    try {
      for (auto& shard : found.manifest->shards) verify_shard(e.path, shard);
      return std::make_pair(std::move(e), std::move(*found.manifest));
    } catch (const error& err) {
      skipped.push_back(e.path + ": " + err.what() + " (skipped)");
    }
  }
  return std::nullopt;
}

std::string shard_file_name(const std::string& task) {
  auto bad = [&](const std::string& what) {
    fail("checkpoint_manager", "shard_file_name: '" + task + "': " + what);
  };
  device_name name = device_name::parse(task);
  if (name.job.empty() || name.task < 0 || !name.type.empty())
    bad("a task is named /job:<job>/task:<index>");
  // Letters, digits, '_' and '-' only: the name can hold no '/' and no "..".
  bool plain = std::all_of(name.job.begin(), name.job.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (!plain) bad("the job name may hold only letters, digits, '_' and '-'");
  return name.job + "-" + std::to_string(name.task) + ".afck";
}

}  // namespace actorflow
