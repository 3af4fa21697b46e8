#include "apps/lib/cluster_training.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "actors/input/dataset.hpp"
#include "actors/input/reader_actor.hpp"
#include "actors/session.hpp"
#include "apps/lib/cluster_steps.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/run_dirs.hpp"
#include "apps/lib/step_observer.hpp"
#include "apps/lib/straggler_delay.hpp"
#include "apps/lib/train_report.hpp"
#include "apps/lib/train_steps.hpp"
#include "apps/lib/train_summaries.hpp"
#include "ops/normalization.hpp"
#include "ops/queue.hpp"
#include "ops/reduce.hpp"
#include "ops/sync_replicas.hpp"

namespace actorflow::apps {

namespace {

struct cluster_graph {
  graph g;
  output queue, loss, eval_images, predictions;
  variable step;
  operation init;
  output ready;                                 // every variable the chief's init sets is set
  std::vector<variable_initializer> variables;  // each with its own initializer
  operation train;                              // asynchronous
  std::unique_ptr<sync_replicas_ops> sync;
  output new_local_step;  // synchronous: what worker_train set
  // Synchronous: batch normalization's moving-average updates, which each
  // worker's step runs beside worker_train, as TensorFlow's UPDATE_OPS (none
  // for models without batch normalization).
  std::vector<operation> sync_updates;
};

void build(cluster_graph& t, const training_options& c, const cluster_setup& setup,
           const dataset& data) {
  auto& g = t.g;
  int num_ps = setup.spec.num_tasks("ps");
  int workers = setup.spec.num_tasks("worker");
  auto placement =
      g.device_function_scope(replica_device_setter(num_ps, worker_device(setup, c.device)));
  t.queue = fifo_queue(g, data.batch_types(), data.batch_shapes(), 4, "input_queue");
  auto batch = queue_dequeue(t.queue, "next_batch");
  auto net = models::make_classifier(g, c.model, c.seed, {}, models::parse_precision(c.precision));
  t.loss = models::mean_cross_entropy(net->training_logits(batch[0]), batch[1]);
  auto opt = make_optimizer(c.optimizer, c.lr);
  if (c.sync) {
    t.sync = std::make_unique<sync_replicas_ops>(sync_replicas(
        *opt, t.loss, workers - c.backup_workers, workers, worker_device(setup, c.device)));
    t.new_local_step = output(&g, {t.sync->worker_train.id(), 0});
    t.sync_updates = g.collection(update_ops_collection);
  } else {
    t.train = train_step_with_updates(g, opt->minimize(t.loss));
  }
  t.step = global_step(g);
  t.eval_images = placeholder(g, dtype::float32, {-1, 28, 28, 1}, "eval_images");
  t.predictions = argmax(net->logits(t.eval_images), 1, "predictions");
  t.init = global_variables_initializer(g);
  t.ready = global_variables_initialized(g);
  t.variables = variable_initializers(g);
}

}  // namespace

int train_in_cluster(const training_options& c, const cluster_setup& setup) {
  const int num_ps = setup.spec.num_tasks("ps");
  const int workers = setup.spec.num_tasks("worker");
  if (setup.job != "worker") fail("train", "--job must be worker or ps, not '" + setup.job + "'");
  if (num_ps < 1) fail("train", "the cluster needs at least one ps task (--ps-hosts)");
  if (c.backup_workers < 0 || (c.sync && c.backup_workers >= workers))
    fail("train", "--backup-workers must leave at least one of the " + std::to_string(workers) +
                      " workers to aggregate");
  const bool chief = setup.task == 0;
  const int aggregated = c.sync ? workers - c.backup_workers : 1;

  // Before the data load: only the chief writes the report.
  if (chief) require_writable_dir(c.out, "--out");
  auto rt = std::make_shared<runtime>(worker_runtime_options(setup, c.threads, c.device));
  auto data = load_fashion_mnist(c.data_dir);
  // Each worker reads its own shuffle of the training set.
  auto train_data = std::make_shared<dataset>(
      std::vector<tensor>{data.train_images, data.train_labels},
      dataset_options{.batch_size = c.batch,
                      .seed = uint64_t(c.seed) + 7919u * uint64_t(setup.task)});
  const dataset test_data({data.test_images, data.test_labels},
                          {.batch_size = 1000, .shuffle = false, .drop_remainder = false});
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, train_data->batches_per_epoch() / aggregated);
  const int64_t last_step = c.max_steps > 0 ? c.max_steps : steps_per_epoch * c.epochs;

  cluster_graph t;
  build(t, c, setup, *train_data);
  auto options = recovering_cluster_options(c.recovery_seconds);
  auto cluster = std::make_shared<cluster_connection>(rt, setup.spec, setup.task_name(), options);
  session s(t.g, cluster);
  recovery_ops recovery{t.init, t.ready, {}, t.variables};
  if (t.sync) {
    recovery.set_local = [&t](session& s) { s.run({t.sync->local_step_init}); };
    recovery.after_repair = [&t](session& s) { s.run({t.sync->chief_init_tokens}); };
  }
  // The chief's consistent checkpoints of every ps task.
  cluster_checkpointer checkpoints(chief ? c.checkpoint_dir : "", chief ? c.checkpoint_every : 0,
                                   size_t(c.keep_checkpoints));
  if (checkpoints.enabled())
    recovery.restore = [&checkpoints](session& s) { return checkpoints.restore(s) >= 0; };
  recovering_runner run(s, recovery, chief, c.recovery_seconds);
  fmt::print("{}: {} training, {} workers ({} aggregated per step), {} ps tasks, until step {}\n",
             setup.task_name(), c.sync ? "synchronous" : "asynchronous", workers, aggregated,
             num_ps, last_step);
  const bool restarted = run.initialize_or_wait(t.step);
  int64_t step = run([&] { return s.eval(t.step.value()).item<int64_t>(); });
  if (chief && step >= last_step)
    fmt::print("the global step is {}: the run has ended (its last step is {})\n", step, last_step);

  batch_reader reader(s, t.queue, train_data, {0, 0}, reader_options{});
  std::unique_ptr<aggregation_thread> aggregation;
  progress_printer aggregations(c.progress_every, "aggregated");
  if (chief && t.sync)
    aggregation = std::make_unique<aggregation_thread>(s, *t.sync, run, step, last_step, restarted,
                                                       [&](int64_t step) {
                                                         aggregations.step_done(step);
                                                         checkpoints.at_step(s, step);
                                                       });

  std::unique_ptr<train_report> report;
  if (chief) {
    report = std::make_unique<train_report>(
        c.out,
        fmt::format("{} on Fashion-MNIST, {} workers x {} ps, {}: {} lr={} batch={}", c.model,
                    workers, num_ps, c.sync ? "sync" : "async", c.optimizer, c.lr, c.batch),
        restarted);
  }
  int64_t steps_run = 0, reported_epoch = step / steps_per_epoch;
  double start = now_seconds(), epoch_start = start, loss_sum = 0;
  int64_t epoch_steps = 0;
  progress_printer progress(c.progress_every);
  auto observer = worker_observer(c.out, setup.job, setup.task, c.trace_steps, c.profile);
  // The chief writes the run's summaries (scalars and the graph).
  train_summaries summaries(chief ? c.logdir : "", c.summary_every);
  summaries.write_graph(t.g);
  summaries.start(step);
  const auto stragglers = parse_straggler_delay(c.straggler_delay);
  while (step < last_step) {
    float loss = 0;
    // A simulated straggler is slow before its step, as if computing: its
    // gradient arrives late, tagged with the step its token named.
    stragglers.sleep_before(c.seed, setup.task, steps_run + 1);
    try {
      if (t.sync) {
        auto r = run([&] {
          return observer.run(s, steps_run + 1, {}, {t.loss, t.new_local_step}, t.sync_updates);
        });
        loss = r[0].item<float>();
        step = r[1].item<int64_t>();
      } else {
        auto r = run([&] {
          return observer.run(s, steps_run + 1, {}, {t.loss, t.step.value()}, {t.train});
        });
        loss = r[0].item<float>();
        step = r[1].item<int64_t>() + 1;
      }
    } catch (const error& e) {
      if (t.sync && chief_finished(e)) break;
      throw;
    }
    require_finite_loss(loss, step, setup.task_name());
    if (summaries.due(steps_run + 1))
      summaries.write_step(step, {}, loss, c.lr, c.batch, "examples");
    loss_sum += double(loss);
    ++steps_run;
    ++epoch_steps;
    progress.step_done(step);
    // Other workers advance the step too: save on crossing a multiple
    // (synchronous: between two aggregations, on the aggregation's thread).
    if (!t.sync) checkpoints.at_step(s, step);
    if (chief && (step / steps_per_epoch > reported_epoch || step >= last_step)) {
      // The last, partial epoch gets the next number.
      reported_epoch = std::max(reported_epoch + 1, step / steps_per_epoch);
      double seconds = now_seconds() - epoch_start;
      double acc =
          run([&] { return models::test_accuracy(s, t.predictions, t.eval_images, test_data); });
      report->add_epoch({reported_epoch, step, loss_sum / double(std::max<int64_t>(epoch_steps, 1)),
                         acc, seconds, double(epoch_steps * c.batch) / seconds});
      summaries.write_eval(step, "eval/test_accuracy", acc);
      epoch_start = now_seconds();
      loss_sum = 0;
      epoch_steps = 0;
    }
  }
  reader.stop();
  if (aggregation && !aggregation->join()) return 1;  // it ends after the last step
  double seconds = now_seconds() - start;
  double examples = seconds > 0 ? double(steps_run * c.batch) / seconds : 0;
  observer.finish(steps_run, std::cout);
  if (c.device != "cpu") print_soft_placement(s);
  if (!chief) {
    fmt::print("{} done: {} steps, examples_per_s={:.0f}\n", setup.task_name(), steps_run,
               examples);
    return 0;
  }
  checkpoints.save_now(s, step);
  double acc =
      run([&] { return models::test_accuracy(s, t.predictions, t.eval_images, test_data); });
  fmt::print("test_acc={:.4f} step_ms={:.3f} examples_per_s={:.0f} global_step={}\n", acc,
             steps_run ? 1000.0 * seconds / double(steps_run) : 0.0, examples, step);
  summaries.finish();
  return 0;
}

}  // namespace actorflow::apps
