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
  fmt::print("progress step={} t={:.3f}\n", global_step, t);
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
    try {
      s_.eval(global_step.value());
      fmt::print("variables restored by the ps tasks\n");
      found_set = true;
    } catch (const error& e) {
      if (e.code() != error_code::failed_precondition) throw;
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
    if (chief_ && !variables_ready()) initialize_missing();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
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
                                       recovering_runner& run, int64_t last_step, bool restarted)
    : thread_([this, &s, &sync, &run, last_step, restarted] {
        loop(s, sync, run, last_step, restarted);
      }) {}

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
                              int64_t last_step, bool restarted) {
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
      if (r[0].item<int64_t>() >= last_step) break;
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

void shard_saver::save(int64_t step) {
  if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return;
  pending_ = std::async(std::launch::async, [this, step] {
    for (int i = 0; i < num_ps_; ++i) {
      try {
        cluster_.save_shard(task_name("ps", i), step);
      } catch (const error& e) {
        fmt::print(stderr, "warning: {}\n", e.what());
      }
    }
  });
}

}  // namespace actorflow::apps
