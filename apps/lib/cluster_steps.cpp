#include "apps/lib/cluster_steps.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdio>

namespace actorflow::apps {

void require_finite_loss(float loss, int64_t step, const std::string& task) {
  if (std::isfinite(loss)) return;
  fail("train", fmt::format("{}: the loss is {} at global step {}: training diverged (try a "
                            "lower --lr); stopping; the ps tasks keep their last saved shards",
                            task, loss, step));
}

void progress_printer::step_done(int64_t global_step) {
  if (every_ <= 0 || ++steps_ % every_ != 0) return;
  // Wall-clock time, which another process on the machine can compare.
  double t =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  fmt::print("{} step={} t={:.3f}\n", label_, global_step, t);
  std::fflush(stdout);
}

step_observer worker_observer(const std::string& out, const std::string& job, int task,
                              const std::vector<int64_t>& trace_steps, bool profile) {
  // This worker's own steps, with the partitions' records merged in.
  return step_observer(observer_options{.out = out,
                                        .file_prefix = fmt::format("trace-{}{}-", job, task),
                                        .trace_steps = trace_steps,
                                        .profile = profile});
}

cluster_options recovering_cluster_options(double recovery_seconds) {
  cluster_options options;
  auto recovery = std::chrono::milliseconds(int64_t(1000 * recovery_seconds));
  options.connect_timeout = recovery;
  options.step_timeout = std::min(options.step_timeout, recovery);
  return options;
}

void recovering_runner::wait_initialized() {
  double deadline = now_seconds() + recovery_seconds_;
  while (!(*this)([&] { return s_.eval(ops_.ready).item<bool>(); })) {
    if (now_seconds() > deadline)
      fail("cluster", fmt::format("the variables were not all set within {:.0f} s (is the chief "
                                  "running?)",
                                  recovery_seconds_));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool recovering_runner::initialize_or_wait(const variable& global_step) {
  bool found_set = false;
  if (chief_) {
    bool step_set = true;
    try {
      s_.eval(global_step.value());
    } catch (const error& e) {
      if (e.code() != error_code::failed_precondition) throw;
      step_set = false;
    }
    bool all_set = step_set && (*this)([&] { return s_.eval(ops_.ready).item<bool>(); });
    if (all_set) {
      fmt::print("variables restored by the ps tasks\n");
      found_set = true;
    } else if (ops_.restore && (*this)([&] { return ops_.restore(s_); })) {
      found_set = true;
    } else if (step_set) {
      (*this)([&] {
        initialize_missing();
        return 0;
      });
      found_set = true;
    } else {
      (*this)([&] {
        s_.run({ops_.init});
        return 0;
      });
    }
  }
  wait_initialized();
  if (ops_.set_local)
    (*this)([&] {
      ops_.set_local(s_);
      return 0;
    });
  return found_set;
}

double recovering_runner::start_retrying(const error& e) const {
  fmt::print(stderr, "warning: {}\n  retrying for up to {:.0f} s\n", e.what(), recovery_seconds_);
  return now_seconds() + recovery_seconds_;
}

void recovering_runner::repair(error_code code) {
  if (code == error_code::failed_precondition) {
    // A worker's own variables are its to set; what is still unset after
    // that a ps task lost, and the chief sets the variables again.
    if (ops_.set_local) try_set_local();
    if (chief_) repair_lost_variables();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

// Every ps task back to the newest checkpoint (one step across all of them),
// or, without one, the lost variables to their initial values.
void recovering_runner::repair_lost_variables() {
  std::lock_guard<std::mutex> lock(repair_mutex_);
  if (variables_ready()) return;  // repaired by the other thread
  bool restored = false;
  if (ops_.restore) {
    try {
      restored = ops_.restore(s_);
    } catch (const error& e) {
      fmt::print(stderr, "warning: restoring the newest checkpoint failed: {}\n", e.what());
      return;  // retried with the step
    }
  }
  if (!restored) initialize_missing();
  if (ops_.after_repair) {
    try {
      ops_.after_repair(s_);
    } catch (const error& e) {
      fmt::print(stderr, "warning: after setting the variables back: {}\n", e.what());
    }
  }
}

// Whether every variable is set; true when that cannot be told now (a task
// down), so that nothing is set again on a guess.
bool recovering_runner::variables_ready() {
  try {
    return s_.eval(ops_.ready).item<bool>();
  } catch (const error&) {
    return true;
  }
}

// Sets the variables a restarted ps task lost, and only those: running the
// whole initializer again would also reset the variables the other ps tasks
// kept training.
void recovering_runner::initialize_missing() {
  if (ops_.variables.empty()) return try_run(ops_.init);
  try {
    std::vector<output> set;
    for (auto& v : ops_.variables) set.push_back(v.is_set);
    auto found = s_.run({}, set);
    std::vector<operation> missing;
    std::vector<std::string> names;
    for (size_t i = 0; i < found.size(); ++i)
      if (!found[i].item<bool>()) {
        missing.push_back(ops_.variables[i].init);
        names.push_back(ops_.variables[i].variable);
      }
    if (missing.empty()) return;
    fmt::print(stderr,
               "warning: {} variable(s) were lost (a ps task restarted without its "
               "shard); setting them to their initial values: {}\n",
               names.size(), fmt::join(names, ", "));
    s_.run(missing);
  } catch (const error&) {
    // Retried with the step.
  }
}

void recovering_runner::try_set_local() {
  try {
    ops_.set_local(s_);
  } catch (const error&) {
    // Retried with the step.
  }
}

void recovering_runner::try_run(operation op) {
  try {
    s_.run({op});
  } catch (const error&) {
    // Retried with the step.
  }
}

aggregation_thread::aggregation_thread(session& s, const sync_replicas_ops& sync,
                                       recovering_runner& run, int64_t first_step,
                                       int64_t last_step, bool restarted,
                                       std::function<void(int64_t)> after_step) {
  if (first_step >= last_step) return;  // the run has ended: no thread
  thread_ =
      std::thread([this, &s, &sync, &run, last_step, restarted, after = std::move(after_step)] {
        loop(s, sync, run, last_step, restarted, after);
      });
}

aggregation_thread::~aggregation_thread() {
  // A std::thread still joinable when destroyed ends the process.
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool aggregation_thread::join() {
  if (thread_.joinable()) thread_.join();
  return !failed_;
}

void aggregation_thread::loop(session& s, const sync_replicas_ops& sync, recovering_runner& run,
                              int64_t last_step, bool restarted,
                              const std::function<void(int64_t)>& after_step) {
  try {
    if (restarted)
      run([&] {
        s.run({sync.chief_init_tokens});
        return 0;
      });
    for (;;) {
      auto r = run([&] {
        // Checked on every try, so that a stop also ends the retries.
        if (stop_) fail("train", "the chief's training loop stopped");
        return s.run({}, {sync.chief_step}, {sync.chief_update});
      });
      int64_t step = r[0].item<int64_t>();
      if (after_step) after_step(step);
      if (step >= last_step) break;
    }
    s.run({sync.close_tokens});
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: the aggregation stopped: {}\n", e.what());
    failed_ = true;
    try {
      s.run({sync.close_tokens});
    } catch (const error&) {
    }
  }
}

cluster_checkpointer::cluster_checkpointer(const std::string& dir, int64_t every,
                                           size_t keep_last) {
  if (dir.empty()) {
    if (every > 0)
      fail("train",
           "--checkpoint-every needs --checkpoint-dir on the chief (worker 0): the "
           "cluster's checkpoints go there, one shard per ps task");
    return;
  }
  manager_ = std::make_unique<checkpoint_manager>(dir, keep_last);
  manager_->lock_directory();  // two runs never write into one directory
  schedule_ = save_schedule(every, 0);
}

void cluster_checkpointer::finish_pending(bool wait) {
  if (!pending_.valid()) return;
  if (!wait && pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  try {
    auto path = pending_.get();
    auto m = load_manifest(path + "/" + std::string(manifest_file_name));
    fmt::print("checkpoint step={} saved in {:.0f} ms (pause {:.1f} ms)\n", pending_step_,
               1000.0 * (now_seconds() - pending_since_), m.pause_ms);
    saved_step_ = pending_step_;
    std::fflush(stdout);  // read by whoever watches the run, as it happens
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: the checkpoint of step {} failed: {}\n", pending_step_, e.what());
  }
}

void cluster_checkpointer::at_step(session& s, int64_t step) {
  if (!manager_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  highest_step_ = std::max<int64_t>(highest_step_, step);
  finish_pending(false);
  if (pending_.valid() || !schedule_.due(step)) return;
  try {
    pending_since_ = now_seconds();
    pending_step_ = step;
    pending_ = manager_->start_save(s, step);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: the checkpoint of step {} failed: {}\n", step, e.what());
  }
}

void cluster_checkpointer::save_now(session& s, int64_t step) {
  if (!manager_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  finish_pending(true);
  if (saved_step_ == step) return;  // the schedule's save of the last step
  pending_since_ = now_seconds();
  pending_step_ = step;
  pending_ = manager_->start_save(s, step);
  finish_pending(true);
}

int64_t cluster_checkpointer::restore(session& s) {
  if (!manager_) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  // A save in flight is not waited for: its task may be the one lost (it
  // fails when that task's connection goes), or hung.
  finish_pending(false);
  auto r = manager_->restore_latest(s);
  for (auto& e : r.errors) fmt::print(stderr, "warning: skipped checkpoint: {}\n", e);
  if (!r.restored) return -1;
  const int64_t was = std::max<int64_t>(highest_step_, r.step);
  fmt::print("recovery: restored checkpoint step={} (global step was {}: {} steps lost) from {}\n",
             r.step, was, was - r.step, r.path);
  std::fflush(stdout);
  highest_step_ = r.step;
  return r.step;
}

}  // namespace actorflow::apps
