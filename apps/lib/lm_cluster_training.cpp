#include "apps/lib/lm_cluster_training.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <iostream>

#include "actors/caf_ext/guarded_connection.hpp"
#include "apps/lib/cluster_steps.hpp"
#include "apps/lib/lm_training.hpp"
#include "apps/lib/run_dirs.hpp"
#include "apps/lib/step_observer.hpp"
#include "apps/lib/train_report.hpp"
#include "apps/lib/train_steps.hpp"
#include "apps/lib/train_summaries.hpp"
#include "ops/embedding.hpp"

namespace actorflow::apps {

shard_loads vocabulary_shard_loads(const std::vector<int64_t>& ids, int64_t vocab, int shards) {
  shard_loads loads{std::vector<double>(size_t(shards)), std::vector<double>(size_t(shards))};
  if (ids.empty() || shards < 1 || vocab < shards) return loads;
  auto offsets = even_row_offsets(vocab, shards);
  for (int64_t id : ids) {
    loads.mod[size_t(id % shards)] += 1;
    auto upper = std::upper_bound(offsets.begin(), offsets.end(), id);
    loads.contiguous[size_t(upper - offsets.begin() - 1)] += 1;
  }
  for (auto* v : {&loads.mod, &loads.contiguous})
    for (auto& x : *v) x /= double(ids.size());
  return loads;
}

std::vector<int64_t> worker_share(const std::vector<int64_t>& ids, int worker, int workers) {
  const size_t n = ids.size();
  return {ids.begin() + ptrdiff_t(n * size_t(worker) / size_t(workers)),
          ids.begin() + ptrdiff_t(n * size_t(worker + 1) / size_t(workers))};
}

namespace {

void check_setup(const training_options& o, const cluster_setup& setup) {
  const int num_ps = setup.spec.num_tasks("ps"), workers = setup.spec.num_tasks("worker");
  if (setup.job != "worker") fail("train", "--job must be worker or ps, not '" + setup.job + "'");
  if (num_ps < 1) fail("train", "the cluster needs at least one ps task (--ps-hosts)");
  if (o.backup_workers < 0 || (o.sync && o.backup_workers >= workers))
    fail("train", fmt::format("--backup-workers must leave at least one of the {} workers to "
                              "aggregate",
                              workers));
}

std::string percentages(const std::vector<double>& shares) {
  std::vector<std::string> parts;
  for (double x : shares) parts.push_back(fmt::format("{:.1f}%", 100 * x));
  return fmt::format("{}", fmt::join(parts, " "));
}

void print_shard_loads(const fortunes_corpus& corpus, const lm::lm_config& c) {
  if (c.vocab_shards < 2) return;
  auto loads = vocabulary_shard_loads(corpus.train, c.vocab, int(c.vocab_shards));
  fmt::print(
      "vocabulary shards' share of the training lookups: {} (word i on shard i % {}; "
      "contiguous ranges would give {})\n",
      percentages(loads.mod), c.vocab_shards, percentages(loads.contiguous));
}

// Every worker, and a run resumed from the ps tasks' shards, must build the
// model the ps tasks hold: fails naming both sizes.
void check_model_sizes(session& s, const variable& sizes, const lm::lm_config& c,
                       const std::string& task) {
  auto held = s.eval(sizes.value());
  std::vector<int64_t> theirs(held.data<int64_t>(), held.data<int64_t>() + held.num_elements());
  auto ours = lm::model_sizes(c);
  if (theirs != ours)
    fail("train", fmt::format("{} builds a model of {}, but the ps tasks hold one of {} (set by "
                              "the chief, or restored from their checkpoints): start every task "
                              "with the same --vocab, --embedding, --hidden and --vocab-shards",
                              task, lm::describe_sizes(ours), lm::describe_sizes(theirs)));
}

// The carried state's first segment for a worker starting at global step
// `step`: in synchronous training every global step is one segment of each
// worker's; asynchronously the workers share the steps.
int64_t start_position(int64_t step, bool sync, int workers) {
  return sync ? step : step / workers;
}

// The bytes this worker's connections carried per training step: what the
// validation passes move is left out.
class bytes_report {
 public:
  void pause() { paused_at_ = traffic_total(); }
  void resume() {
    auto now = traffic_total();
    excluded_.sent += now.sent - paused_at_.sent;
    excluded_.received += now.received - paused_at_.received;
  }
  std::string per_step(int64_t steps) const {
    if (steps <= 0) return "";
    auto now = traffic_total();
    auto moved = [&](uint64_t end, uint64_t begin, uint64_t excluded) {
      return double(end - begin - excluded) / double(steps);
    };
    return fmt::format("bytes_sent_per_step={:.0f} bytes_received_per_step={:.0f}",
                       moved(now.sent, start_.sent, excluded_.sent),
                       moved(now.received, start_.received, excluded_.received));
  }

 private:
  traffic_bytes start_ = traffic_total(), paused_at_, excluded_;
};

}  // namespace

int train_lstm_lm_in_cluster(const training_options& o, const cluster_setup& setup) {
  check_setup(o, setup);
  const int num_ps = setup.spec.num_tasks("ps"), workers = setup.spec.num_tasks("worker");
  const bool chief = setup.task == 0;
  const int aggregated = o.sync ? workers - o.backup_workers : 0;
  if (chief) require_writable_dir(o.out, "--out");
  auto rt = std::make_shared<runtime>(worker_runtime_options(setup, o.threads, o.device));
  auto corpus = load_lm_corpus(o);
  auto config = lm_config_from(o, corpus.vocab_size(), "lazy_adam", num_ps);
  if (chief) print_shard_loads(corpus, config);

  auto options = recovering_cluster_options(o.recovery_seconds);
  auto cluster = std::make_shared<cluster_connection>(rt, setup.spec, setup.task_name(), options);
  lm_trainer lm(config, worker_share(corpus.train, setup.task, workers), std::move(corpus.valid),
                {.cluster = cluster,
                 .device = o.device == "cpu" ? "" : "/" + o.device + ":0",
                 .num_ps = num_ps,
                 .worker = setup.task,
                 .workers = workers,
                 .sync_aggregated = aggregated});
  auto& s = lm.sess();
  const auto& ops = lm.cluster();
  recovery_ops recovery{ops.init, ops.ready, {}, ops.variables};
  recovery.set_local = [&](session& sess) {
    if (ops.sync) sess.run({ops.sync->local_step_init});
    if (!sess.eval(ops.state_set).item<bool>()) sess.run({lm.training_graph().reset_state});
  };
  if (ops.sync)
    recovery.after_repair = [&](session& sess) { sess.run({ops.sync->chief_init_tokens}); };
  cluster_checkpointer checkpoints(chief ? o.checkpoint_dir : "", chief ? o.checkpoint_every : 0,
                                   size_t(o.keep_checkpoints));
  if (checkpoints.enabled())
    recovery.restore = [&checkpoints](session& sess) { return checkpoints.restore(sess) >= 0; };
  recovering_runner run(s, recovery, chief, o.recovery_seconds);
  auto step_var = global_step(lm.g());
  const bool restarted = run.initialize_or_wait(step_var);
  run([&] {
    check_model_sizes(s, ops.sizes, lm.config(), setup.task_name());
    return 0;
  });

  // Global steps per epoch: one segment of every worker's share per step in
  // synchronous training; asynchronously each worker's steps count.
  const int64_t per_epoch = lm.steps_per_epoch() * (o.sync ? 1 : workers);
  const int64_t last_step = o.max_steps > 0 ? o.max_steps : per_epoch * o.epochs;
  int64_t step = run([&] { return s.eval(step_var.value()).item<int64_t>(); });
  int64_t position = start_position(step, o.sync, workers);
  fmt::print("{}: lstm_lm, {} training, {} workers{}, {} ps tasks, {}, until step {}\n",
             setup.task_name(), o.sync ? "synchronous" : "asynchronous", workers,
             o.sync ? fmt::format(" ({} aggregated per step)", aggregated) : "", num_ps,
             lm::describe_sizes(lm::model_sizes(lm.config())), last_step);

  std::unique_ptr<aggregation_thread> aggregation;
  progress_printer aggregations(o.progress_every, "aggregated");
  if (chief && ops.sync)
    aggregation = std::make_unique<aggregation_thread>(s, *ops.sync, run, step, last_step,
                                                       restarted, [&](int64_t at) {
                                                         aggregations.step_done(at);
                                                         checkpoints.at_step(s, at);
                                                       });
  std::unique_ptr<train_report> report;
  if (chief)
    report = std::make_unique<train_report>(
        o.out,
        fmt::format("lstm_lm on fortunes, {} workers x {} ps, {}: {} softmax, {} lr={} "
                    "streams={}, {}",
                    workers, num_ps, o.sync ? "sync" : "async", o.full_softmax ? "full" : "sampled",
                    lm.config().optimizer, o.lr, o.batch,
                    lm::describe_sizes(lm::model_sizes(lm.config()))),
        step > 0,
        report_columns{
            .eval = "valid_ppl", .eval_title = "validation perplexity", .unit = "words"});
  progress_printer progress(o.progress_every);
  auto observer = worker_observer(o.out, setup.job, setup.task, o.trace_steps, o.profile);
  train_summaries summaries(chief ? o.logdir : "", o.summary_every);
  summaries.write_graph(lm.g());
  summaries.start(step);
  bytes_report bytes;
  int64_t steps_run = 0, epoch_steps = 0, reported_epoch = step / per_epoch;
  double start = now_seconds(), epoch_start = start, loss_sum = 0, ppl = NAN, eval_seconds = 0;
  while (step < last_step) {
    lm_step r;
    try {
      r = run([&] { return lm.run_segment(position, steps_run + 1, observer); });
    } catch (const error& e) {
      if (ops.sync && chief_finished(e)) break;
      throw;
    }
    step = r.global_step;
    position = o.sync ? step : position + 1;
    require_finite_loss(r.loss, step, setup.task_name());
    if (summaries.due(steps_run + 1))
      summaries.write_step(step, {}, r.loss, o.lr, lm.words_per_step(), "words");
    loss_sum += double(r.loss);
    ++steps_run, ++epoch_steps;
    progress.step_done(step);
    if (!ops.sync) checkpoints.at_step(s, step);
    if (chief && (step / per_epoch > reported_epoch || step >= last_step)) {
      reported_epoch = std::max(reported_epoch + 1, step / per_epoch);
      double seconds = now_seconds() - epoch_start, eval_start = now_seconds();
      bytes.pause();
      ppl = run([&] { return lm.validation_perplexity(); });
      bytes.resume();
      eval_seconds += now_seconds() - eval_start;
      report->add_epoch({reported_epoch, step, loss_sum / double(std::max<int64_t>(epoch_steps, 1)),
                         ppl, seconds, double(epoch_steps * lm.words_per_step()) / seconds});
      summaries.write_eval(step, "eval/valid_perplexity", ppl);
      epoch_start = now_seconds(), loss_sum = 0, epoch_steps = 0;
    }
  }
  if (aggregation && !aggregation->join()) return 1;  // it ends after the last step
  // Training words per second: the validation passes left out.
  double seconds = now_seconds() - start - eval_seconds;
  double words = seconds > 0 ? double(steps_run * lm.words_per_step()) / seconds : 0;
  observer.finish(steps_run, std::cout);
  if (o.device != "cpu") print_soft_placement(s);
  if (!chief) {
    fmt::print("{} done: {} steps, words_per_s={:.0f} {}\n", setup.task_name(), steps_run, words,
               bytes.per_step(steps_run));
    return 0;
  }
  checkpoints.save_now(s, step);
  if (std::isnan(ppl)) ppl = run([&] { return lm.validation_perplexity(); });
  fmt::print("valid_ppl={:.2f} words_per_s={:.0f} global_step={} {}\n", ppl, words, step,
             bytes.per_step(steps_run));
  summaries.finish();
  return 0;
}

}  // namespace actorflow::apps
