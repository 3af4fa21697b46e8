#include "perf/bench_checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/checkpoint.hpp"
#include "ops/array.hpp"
#include "ops/state.hpp"
#include "perf/bench_train.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

namespace {

namespace fs = std::filesystem;

constexpr size_t block_bytes = size_t{64} << 20;
constexpr int model_variables = 16;

[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  throw std::runtime_error("[checkpoint bench] " + what + " '" + path +
                           "': " + std::strerror(errno));
}

// The directory the files go to: the one asked for, or a fresh one under
// $TMPDIR that is removed (with anything a failed round left) at the end.
class bench_dir {
 public:
  explicit bench_dir(const std::string& asked) {
    if (!asked.empty()) {
      path_ = asked;
      fs::create_directories(path_);
      return;
    }
    std::string pattern =
        (fs::temp_directory_path() / "actorflow-bench-checkpoint-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) fail_io("cannot make", pattern);
    path_ = pattern;
    owned_ = true;
  }
  bench_dir(const bench_dir&) = delete;
  bench_dir& operator=(const bench_dir&) = delete;
  ~bench_dir() {
    std::error_code ignored;
    if (owned_) fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

// A 64 MiB block of bytes to write, aligned for direct I/O.
const char* disk_block() {
  static const std::unique_ptr<char, decltype(&std::free)> block = [] {
    auto* b = static_cast<char*>(std::aligned_alloc(4096, block_bytes));
    if (b == nullptr) throw std::bad_alloc();
    for (size_t i = 0; i < block_bytes; ++i) b[i] = static_cast<char>(i * 131 + (i >> 20));
    return std::unique_ptr<char, decltype(&std::free)>(b, &std::free);
  }();
  return block.get();
}

// Seconds to write `bytes` to a new file in 64 MiB blocks, fsync and close
// it: the disk's sequential write rate as a program without any format gets
// it, through the page cache, or (`direct`) around it (O_DIRECT), as a save
// does where the file system allows. The file is removed afterwards.
double disk_write_seconds(const std::string& path, uint64_t bytes, bool direct) {
  double t0 = now_seconds();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0),
                  0644);
  if (fd < 0) fail_io("cannot open", path);
  for (uint64_t done = 0; done < bytes;) {
    // Whole 4 KiB blocks, as direct I/O needs: the last block is rounded up.
    uint64_t n = std::min<uint64_t>(block_bytes, (bytes - done + 4095) / 4096 * 4096);
    ssize_t w = ::write(fd, disk_block(), n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ::close(fd);
      fail_io("cannot write", path);
    }
    done += static_cast<uint64_t>(w);
  }
  bool synced = ::fsync(fd) == 0;
  if (::close(fd) != 0 || !synced) fail_io("cannot sync", path);
  double secs = now_seconds() - t0;
  fs::remove(path);
  return secs;
}

// A session holding `bytes` of float32 in 16 variables: the model saved.
struct big_model {
  graph g;
  std::unique_ptr<session> s;
  explicit big_model(uint64_t bytes) {
    auto each = static_cast<int64_t>(bytes / model_variables / sizeof(float));
    for (int i = 0; i < model_variables; ++i)
      make_variable(fill(g, {each}, 0.5 + i), fmt::format("w{}", i));
    s = std::make_unique<session>(g);
    s->run({global_variables_initializer(g)});
  }
};

struct save_figures {
  double disk_mb_s, direct_disk_mb_s, save_mb_s, snapshot_ms;
};

// MB/s of save_checkpoint (the file's bytes over the call's time), and the
// pause of the snapshot it takes, measured apart.
std::pair<double, double> save_mb_s(session& s, const std::string& path, int64_t step) {
  double t0 = now_seconds();
  s.snapshot_variables();
  double snapshot_ms = (now_seconds() - t0) * 1e3;
  t0 = now_seconds();
  save_checkpoint(s, path, step);
  double secs = now_seconds() - t0;
  auto file_bytes = static_cast<double>(fs::file_size(path));
  fs::remove(path);
  return {file_bytes / secs / 1e6, snapshot_ms};
}

// The disk's rates (through the page cache and around it) and
// save_checkpoint's, in rounds
// after one that warms up. Each round starts with another of the three: on
// a virtual machine the first large write after a pause can run much slower
// (memory the host took back comes back page by page).
save_figures save_rates(const bench_dir& dir, uint64_t bytes, int rounds) {
  big_model model(bytes);
  std::vector<double> rates[3], snapshot;
  auto disk_mb_s = [&](bool direct) {
    return static_cast<double>(bytes) / disk_write_seconds(dir.file("disk.bin"), bytes, direct) /
           1e6;
  };
  for (int round = 0; round <= rounds; ++round) {
    for (int k = 0; k < 3; ++k) {
      int which = (round + k) % 3;
      double rate = 0;
      if (which < 2) {
        rate = disk_mb_s(which == 1);
      } else {
        auto [mb_s, pause_ms] = save_mb_s(*model.s, dir.file("model.afck"), round);
        rate = mb_s;
        if (round > 0) snapshot.push_back(pause_ms);
      }
      if (round > 0) rates[which].push_back(rate);
    }
  }
  return {median(rates[0]), median(rates[1]), median(rates[2]), median(snapshot)};
}

// Steps taken while background saves ran, and how long the saves took.
struct saves_seen {
  std::vector<double> step_ms, save_s;
};

struct step_figures {
  std::vector<double> quiet_ms, snapshot_ms;
  saves_seen paced, unpaced;
};

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Runs steps, each timed, until `done` (at least `min_steps`).
void timed_steps(fmnist_step& m, std::vector<double>& ms, const std::atomic<bool>& done,
                 int min_steps = 0) {
  for (int i = 0; i < min_steps || !done.load(); ++i) {
    double t0 = now_seconds();
    m.run();
    ms.push_back((now_seconds() - t0) * 1e3);
  }
}

// save_checkpoint_file on a thread of its own, at most `bytes_per_second`.
std::thread background_save(const checkpoint_data& data, const std::string& path,
                            double bytes_per_second, std::atomic<bool>& done,
                            std::exception_ptr& failed) {
  return std::thread([&data, path, bytes_per_second, &done, &failed] {
    try {
      save_checkpoint_file(data, path, default_checkpoint_chunk_bytes, bytes_per_second);
    } catch (...) {
      failed = std::current_exception();
    }
    done = true;
  });
}

// One background save: the snapshot between two steps (the pause), then the
// save on a thread while the steps go on; `paced` at the rate a background
// save takes by default (checkpoint_manager::start_save), else as fast as the
// disk goes. Returns the steps it lasted.
size_t steps_during_save(fmnist_step& m, const std::string& path, int64_t step, bool paced,
                         step_figures& out) {
  double t0 = now_seconds();
  checkpoint_data data{step, m.s->snapshot_variables()};
  out.snapshot_ms.push_back((now_seconds() - t0) * 1e3);
  saves_seen& seen = paced ? out.paced : out.unpaced;
  std::atomic<bool> done{false};
  std::exception_ptr failed;
  t0 = now_seconds();
  auto saver = background_save(data, path, paced ? default_background_save_bytes_per_second : 0,
                               done, failed);
  size_t before = seen.step_ms.size();
  timed_steps(m, seen.step_ms, done);
  saver.join();
  seen.save_s.push_back(now_seconds() - t0);
  if (failed) std::rethrow_exception(failed);
  fs::remove(path);
  return seen.step_ms.size() - before;
}

// The MLP's Adam step (batch 128) with and without a save of the session's
// variables in the background (paced and unpaced), in alternating rounds. A float32 variable of
// `ballast_bytes` that no step reads sits beside the model, so that the save lasts many steps.
step_figures step_costs(const bench_dir& dir, uint64_t ballast_bytes, int rounds) {
  fmnist_step m("mlp", 128, {}, models::precision::fp32, {}, [&](graph& g) {
    make_variable(fill(g, {static_cast<int64_t>(ballast_bytes / sizeof(float))}, 0.25), "ballast");
  });
  std::atomic<bool> always{true};
  std::vector<double> warm_up;
  timed_steps(m, warm_up, always, 20);
  step_figures out;
  int quiet_steps = 20;
  for (int round = 0; round < 2 * rounds; ++round) {
    timed_steps(m, out.quiet_ms, always, quiet_steps);
    size_t lasted = steps_during_save(m, dir.file("background.afck"), round, round % 2 == 0, out);
    if (lasted < 3)
      std::cerr << "  checkpoint: a background save lasted under 3 steps; raise --checkpoint-gb\n";
    // As many quiet steps as the save lasted, so that both see the machine alike.
    quiet_steps = std::max(20, static_cast<int>(lasted));
  }
  return out;
}

}  // namespace

void add_checkpoint_rows(const add_row_fn& add_row, const checkpoint_bench_options& options) {
  bench_dir dir(options.dir);
  auto bytes = static_cast<uint64_t>(options.gib * double(uint64_t{1} << 30));
  std::cerr << fmt::format("  checkpoint: {:.2f} GiB files in {}\n", options.gib, dir.path());
  auto s = save_rates(dir, bytes, options.rounds);
  double best_disk = std::max(s.disk_mb_s, s.direct_disk_mb_s);
  add_row("checkpoint_disk_write_mb_s", s.disk_mb_s, "MB/s",
          fmt::format("{:.2f} GiB in 64 MiB writes, fsync; median of {} rounds", options.gib,
                      options.rounds));
  add_row("checkpoint_disk_write_mb_s_direct", s.direct_disk_mb_s, "MB/s",
          "the same around the page cache (O_DIRECT)");
  add_row("checkpoint_save_mb_s", s.save_mb_s, "MB/s",
          fmt::format("save_checkpoint of {} float32 variables, {:.2f} GiB, to the same directory, "
                      "alternating with the above",
                      model_variables, options.gib));
  add_row("checkpoint_save_ratio_of_disk", s.save_mb_s / best_disk, "x",
          "save over the faster of the two writes; target >= 0.8");
  auto st = step_costs(dir, bytes, options.background_saves);
  double quiet = median(st.quiet_ms);
  add_row("checkpoint_snapshot_ms", median(st.snapshot_ms), "ms",
          fmt::format("snapshot_variables of the MLP + {:.2f} GiB ballast: the step loop's pause "
                      "({:.2f} ms for the 16 variables above)",
                      options.gib, s.snapshot_ms));
  add_row("checkpoint_step_ms", quiet, "ms",
          fmt::format("the MLP's Adam step (batch 128), no save running (mean {:.2f})",
                      mean(st.quiet_ms)));
  for (auto [seen, suffix, how] :
       {std::tuple{&st.paced, "",
                   fmt::format("paced at {:.0f} MiB/s as a background save is by default",
                               default_background_save_bytes_per_second / (1 << 20))},
        std::tuple{&st.unpaced, "_unpaced", std::string("unpaced")}}) {
    double during = median(seen->step_ms);
    add_row(fmt::format("checkpoint_step_ms_during_save{}", suffix), during, "ms",
            fmt::format("the same step while save_checkpoint_file writes the snapshot on a thread, "
                        "{} ({} steps during {} saves of {:.2f} s (median); mean {:.2f})",
                        how, seen->step_ms.size(), seen->save_s.size(), median(seen->save_s),
                        mean(seen->step_ms)));
    add_row(fmt::format("checkpoint_step_ratio{}", suffix), during / quiet, "x",
            *suffix ? "for comparison" : "target <= 1.1");
  }
}

}  // namespace actorflow::bench
