#include "apps/lib/train_summaries.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "ops/summary.hpp"

namespace actorflow::apps {

train_summaries::train_summaries(const std::string& logdir, int64_t every)
    : every_(std::max<int64_t>(every, 1)) {
  if (logdir.empty()) return;
  try {
    writer_ = std::make_unique<summary_writer>(logdir, 30);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: --logdir {}: {}; training goes on without summaries\n", logdir,
               e.what());
  }
}

output train_summaries::add_to_graph(graph& g, output loss, const grads_and_vars& pairs) {
  if (!enabled()) return {};
  scalar_summary("train/loss", loss, "summaries/loss");
  for (auto& [grad, var] : pairs) {
    histogram_summary("weights/" + var.name(), var.value(), "summaries/weights/" + var.name());
    histogram_summary("gradients/" + var.name(), grad, "summaries/gradients/" + var.name());
  }
  return merge_all_summaries(g, "summaries/merged");
}

void train_summaries::write_graph(const graph& g) {
  if (!enabled()) return;
  writer_->add_graph(g);
  check();
}

namespace {
double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void train_summaries::start(int64_t n) {
  last_n_ = n;
  last_seconds_ = seconds_now();
}

void train_summaries::write_step(int64_t n, const tensor& merged, float loss, double lr,
                                 int64_t units_per_step, const std::string& unit) {
  if (!enabled()) return;
  const double now = seconds_now(), seconds = now - last_seconds_;
  const double rate = seconds > 0 ? double(units_per_step * (n - last_n_)) / seconds : 0.0;
  last_n_ = n;
  last_seconds_ = now;
  if (merged.valid())
    writer_->add_summary(merged, n);
  else
    writer_->add_scalar("train/loss", double(loss), n);
  writer_->add_scalar("train/learning_rate", lr, n);
  writer_->add_scalar("train/" + unit + "_per_s", rate, n);
  check();
}

void train_summaries::write_eval(int64_t n, const std::string& tag, double value) {
  if (!enabled()) return;
  writer_->add_scalar(tag, value, n);
  writer_->flush();  // an epoch's results are worth a write
  check();
}

void train_summaries::finish() {
  if (!enabled()) return;
  writer_->flush();
  check();
  fmt::print("summaries: {} (tensorboard --logdir {})\n", writer_->path(),
             std::filesystem::path(writer_->path()).parent_path().string());
}

void train_summaries::check() {
  int64_t errors = writer_->error_count();
  if (errors > errors_seen_ && errors_seen_ == 0)
    fmt::print(stderr, "warning: summaries not written: {}; training goes on\n",
               writer_->last_error());
  errors_seen_ = errors;
}

}  // namespace actorflow::apps
