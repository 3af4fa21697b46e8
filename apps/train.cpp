// actorflow-train: trains the Fashion-MNIST models of the PyTorch reference,
// and ResNet-50 and Inception-v3 on the same images enlarged, on the actor
// runtime (and, with --model lstm_lm, the LSTM language model of
// apps/lib/lm_training.hpp). A reader actor feeds batches into a FIFO queue that the
// training graph dequeues from, so loading overlaps computation; checkpoints
// make a stopped run resumable with exactly the losses it would have had.
#include "ops/train.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "actors/checkpoint.hpp"
#include "actors/input/dataset.hpp"
#include "actors/input/fortunes.hpp"
#include "actors/input/idx_reader.hpp"
#include "actors/input/reader_actor.hpp"
#include "actors/session.hpp"
#include "apps/lib/cluster_training.hpp"
#include "apps/lib/flag_checks.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/lm_cluster_training.hpp"
#include "apps/lib/lm_training.hpp"
#include "apps/lib/model_export.hpp"
#include "apps/lib/run_dirs.hpp"
#include "apps/lib/step_observer.hpp"
#include "apps/lib/straggler_delay.hpp"
#include "apps/lib/train_report.hpp"
#include "apps/lib/train_steps.hpp"
#include "apps/lib/train_summaries.hpp"
#include "ops/normalization.hpp"
#include "ops/queue.hpp"
#include "ops/reduce.hpp"

using namespace actorflow;
namespace fs = std::filesystem;

namespace {

using train_config = apps::training_options;

// The training graph: reader -> queue -> dequeue -> model -> loss -> train op,
// and an evaluation path that shares the model's variables.
struct training_graph {
  graph g;
  output queue, loss, eval_images, predictions;
  output summaries;  // merged, with --logdir
  operation train;
  std::unique_ptr<models::classifier> net;
};

void build_graph(training_graph& t, const train_config& c, const dataset& data,
                 apps::train_summaries& summaries) {
  auto& g = t.g;
  t.queue = fifo_queue(g, data.batch_types(), data.batch_shapes(), 4, "input_queue");
  auto batch = queue_dequeue(t.queue, "next_batch");
  std::vector<std::string> devices;
  if (c.device != "cpu") devices.push_back("/" + c.device + ":0");
  t.net =
      models::make_classifier(g, c.model, c.seed, devices, models::parse_precision(c.precision));
  auto& net = t.net;
  t.loss = models::mean_cross_entropy(net->training_logits(batch[0]), batch[1]);
  auto opt = make_optimizer(c.optimizer, c.lr);
  auto pairs = opt->compute_gradients(t.loss);
  t.train = train_step_with_updates(g, opt->apply_gradients(pairs));
  t.summaries = summaries.add_to_graph(g, t.loss, pairs);
  t.eval_images = placeholder(g, dtype::float32, {-1, 28, 28, 1}, "eval_images");
  t.predictions = argmax(net->logits(t.eval_images), 1, "predictions");
}

struct epoch_result {
  double loss_sum = 0;
  int64_t steps = 0;
};

// Runs the steps of one epoch from `step` up to `end`, saving every
// --checkpoint-every steps.
epoch_result run_epoch(session& s, training_graph& t, const train_config& c, int64_t& step,
                       int64_t end, checkpoint_manager* ckpt, progress_bar& bar, int64_t epoch,
                       apps::step_observer& observer, apps::train_summaries& summaries) {
  epoch_result r;
  for (; step < end; ++r.steps) {
    float loss = 0;
    if (summaries.due(step + 1)) {
      auto out = observer.run(s, step + 1, {}, {t.loss, t.summaries}, {t.train});
      loss = out[0].item<float>();
      summaries.write_step(step + 1, out[1], loss, c.lr, c.batch, "examples");
    } else {
      loss = observer.run(s, step + 1, {}, {t.loss}, {t.train})[0].item<float>();
    }
    ++step;
    apps::require_finite_loss(loss, step, ckpt);
    r.loss_sum += double(loss);
    bar.update(epoch + 1, c.epochs, step * c.batch);
    if (ckpt && c.checkpoint_every > 0 && step % c.checkpoint_every == 0)
      apps::save_finite(s, *ckpt, step);
  }
  return r;
}

// The first n rows of t (all of them for n = 0 or more than it has).
tensor first_rows(const tensor& t, int64_t n) {
  const int64_t rows = t.dims()[0];
  if (n <= 0 || n >= rows) return t;
  shape dims = t.dims();
  dims[0] = n;
  tensor head(t.type(), dims);
  std::memcpy(head.raw_mutable_data(), t.raw_data(), head.size_bytes());
  return head;
}

int train(const train_config& c) {
  auto ckpt = apps::prepare_outputs(c);
  // Before training: a run must not end unable to write its export.
  if (!c.export_dir.empty()) apps::require_writable_dir(c.export_dir, "--export");
  auto rt = apps::make_training_runtime(c);
  double t0 = now_seconds();
  auto data = load_fashion_mnist(c.data_dir);
  auto train_data =
      std::make_shared<dataset>(std::vector<tensor>{data.train_images, data.train_labels},
                                dataset_options{.batch_size = c.batch, .seed = uint64_t(c.seed)});
  fmt::print("loaded Fashion-MNIST from {} in {:.2f} s: {} training, {} test examples\n",
             c.data_dir, now_seconds() - t0, train_data->num_examples(),
             data.test_images.dims()[0]);
  const dataset test_data({first_rows(data.test_images, c.test_examples),
                           first_rows(data.test_labels, c.test_examples)},
                          {.batch_size = 1000, .shuffle = false, .drop_remainder = false});

  training_graph t;
  apps::train_summaries summaries(c.logdir, c.summary_every);
  build_graph(t, c, *train_data, summaries);
  summaries.write_graph(t.g);
  session s(t.g, rt);
  int64_t step = apps::restore_or_initialize(s, t.g, c, ckpt.get());
  summaries.start(step);

  const int64_t per_epoch = train_data->batches_per_epoch();
  const int64_t last_step =
      c.max_steps > 0 ? std::min(c.max_steps, per_epoch * c.epochs) : per_epoch * c.epochs;
  train_report report(
      c.out,
      fmt::format("{} on Fashion-MNIST: {} lr={} batch={} seed={}{}", c.model, c.optimizer, c.lr,
                  c.batch, c.seed, c.precision == "fp32" ? "" : " precision=" + c.precision),
      step > 0);
  if (step >= last_step) {
    fmt::print("already trained {} epochs (step {})\n", c.epochs, step);
  }
  batch_reader reader(s, t.queue, train_data, train_data->position_at_step(step),
                      reader_options{.until_epoch = c.epochs});
  progress_bar bar(isatty(STDOUT_FILENO), last_step * c.batch);
  double train_seconds = 0;
  int64_t steps_run = 0;
  apps::step_observer observer(
      apps::observer_options{.out = c.out, .trace_steps = c.trace_steps, .profile = c.profile});
  while (step < last_step) {
    int64_t epoch = step / per_epoch;
    double epoch_start = now_seconds();
    auto r = run_epoch(s, t, c, step, std::min((epoch + 1) * per_epoch, last_step), ckpt.get(), bar,
                       epoch, observer, summaries);
    double seconds = now_seconds() - epoch_start;
    train_seconds += seconds;
    steps_run += r.steps;
    double acc = models::test_accuracy(s, t.predictions, t.eval_images, test_data);
    bar.clear();
    // The checkpoint first: a report that cannot be written (a full --out)
    // must not cost the epoch's checkpoint.
    if (ckpt) apps::save_finite(s, *ckpt, step);
    report.add_epoch({epoch + 1, step, r.loss_sum / double(r.steps), acc, seconds,
                      double(r.steps * c.batch) / seconds});
    summaries.write_eval(step, "eval/test_accuracy", acc);
  }
  // The queue closed at the end (cancelled) is how a reader normally stops.
  if (auto r = reader.report(); !r.error.empty() && r.code != error_code::cancelled)
    fmt::print(stderr, "warning: the reader stopped with: {}\n", r.error);
  double acc = models::test_accuracy(s, t.predictions, t.eval_images, test_data);
  double step_ms = steps_run ? 1000.0 * train_seconds / double(steps_run) : 0.0;
  double examples = train_seconds > 0 ? double(steps_run * c.batch) / train_seconds : 0.0;
  if (c.device != "cpu") apps::print_soft_placement(s);
  fmt::print("test_acc={:.4f} step_ms={:.3f} examples_per_s={:.0f}\n", acc, step_ms, examples);
  if (!c.export_dir.empty())
    fmt::print("exported the model to {}\n", apps::export_classifier(s, *t.net, c.export_dir));
  observer.finish(step, std::cout);
  summaries.finish();
  return 0;
}

void add_lm_flags(CLI::App& app, train_config& c) {
  const char* group = "Language model (--model lstm_lm)";
  app.add_flag("--full-softmax", c.full_softmax,
               "train with the full softmax (default: sampled softmax, 512 candidates)")
      ->group(group);
  app.add_option("--max-train-tokens", c.max_train_tokens,
                 "use only the first N training tokens (0: all)")
      ->check(apps::whole_at_least<int64_t>(0))
      ->group(group);
  app.add_option("--max-valid-tokens", c.max_valid_tokens,
                 "use only the first N validation tokens (0: all)")
      ->check(apps::whole_at_least<int64_t>(0))
      ->group(group);
  app.add_option("--vocab", c.vocab,
                 "keep the N most frequent training words (the rest become <unk>); fortunes "
                 "has 30,945 distinct ones")
      ->check(apps::whole_at_least<int64_t>(1))
      ->capture_default_str()
      ->group(group);
  app.add_option("--embedding", c.embedding, "the embedding's width")
      ->check(apps::whole_between(1, 65536))
      ->capture_default_str()
      ->group(group);
  app.add_option("--hidden", c.hidden, "the LSTM's width")
      ->check(apps::whole_between(1, 65536))
      ->capture_default_str()
      ->group(group);
  app.add_option("--vocab-shards", c.vocab_shards,
                 "split the embedding and softmax by rows into N shards, word i on shard i % N "
                 "(default: one per ps task in a cluster, 1 in one process)")
      ->check(apps::whole_at_least<int64_t>(1))
      ->group(group);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"actorflow-train: trains a classifier on Fashion-MNIST on the actor runtime"};
  train_config c;
  app.add_option("--model", c.model,
                 "mlp (784-512-512-10), cnn (2 conv + 2 fc), resnet50 (ResNet-50 v1.5 on the "
                 "images enlarged to 56x56) or inception_v3 (Inception-v3 on 84x84) on "
                 "Fashion-MNIST, or lstm_lm (an LSTM language model on Debian's fortunes)")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet50", "inception_v3", "lstm_lm"}))
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "passes over the training set")
      ->check(apps::whole_at_least<int>(1))
      ->capture_default_str();
  auto* batch =
      app.add_option("--batch", c.batch, "examples per step (lstm_lm: streams, default 32)")
          ->check(apps::whole_between(1, 60000))
          ->capture_default_str();
  auto* optimizer =
      app.add_option("--optimizer", c.optimizer,
                     "sgd, momentum, nesterov, adam, lazy_adam, rmsprop or adagrad (lstm_lm in "
                     "a cluster: lazy_adam unless given)")
          ->check(CLI::IsMember(
              {"sgd", "momentum", "nesterov", "adam", "lazy_adam", "rmsprop", "adagrad"}))
          ->capture_default_str();
  app.add_option("--precision", c.precision,
                 "mlp and cnn: fp32, or bf16 (products in bfloat16, weights and the rest in "
                 "float32)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")
      ->check(apps::positive_number())
      ->capture_default_str();
  app.add_option("--seed", c.seed, "initial weights and shuffling")->capture_default_str();
  app.add_option("--threads", c.threads, "threads for actors and for kernels (0: one per core)")
      ->check(apps::whole_between(0, apps::max_threads))
      ->capture_default_str();
  app.add_option("--device", c.device,
                 "where the model runs: cpu, gpu (/gpu:0) or stand_in (the accelerator stand-in, "
                 "the GPU's protocol on the CPU, for testing)")
      ->check(CLI::IsMember({"cpu", "gpu", "stand_in"}))
      ->capture_default_str();
  app.add_option("--out", c.out, "directory for metrics.csv and metrics.svg")
      ->capture_default_str();
  app.add_option("--export", c.export_dir,
                 "at the end, export the model for actorflow-serve into DIR/<next version>/");
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "save a checkpoint here after every epoch (and every --checkpoint-every steps)");
  app.add_option("--checkpoint-every", c.checkpoint_every, "also save every N steps (0: off)")
      ->check(apps::whole_at_least<int64_t>(0));
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "checkpoints to keep")
      ->check(apps::whole_at_least<int>(1))
      ->capture_default_str();
  auto* resume =
      app.add_flag("--resume", c.resume, "continue from the newest checkpoint in --checkpoint-dir");
  app.add_flag("--overwrite-checkpoints", c.overwrite_checkpoints,
               "delete the checkpoints already in --checkpoint-dir and start afresh (without "
               "it or --resume, a directory that holds checkpoints is refused)")
      ->excludes(resume);
  auto* data_dir =
      app.add_option("--data-dir", c.data_dir,
                     "where the Fashion-MNIST .gz files are (lstm_lm: the fortunes' text files, "
                     "default " +
                         std::string(fortunes_dir) + ")")
          ->capture_default_str();
  app.add_option("--trace-steps", c.trace_steps,
                 "write these steps' timelines (e.g. 10,11: the 10th and 11th training steps; in "
                 "a cluster, this worker's own steps) to --out as trace-<step>.json, for "
                 "Perfetto or chrome://tracing")
      ->delimiter(',')
      ->check(apps::whole_at_least<int64_t>(1));
  app.add_flag("--profile", c.profile,
               "trace every step and print, at the end, the ops with the most kernel time");
  app.add_option("--logdir", c.logdir,
                 "write TensorBoard summaries here (tensorboard --logdir DIR): loss, learning "
                 "rate, speed, weight and gradient histograms, test results, the graph");
  app.add_option("--summary-every", c.summary_every, "with --logdir: summaries every N steps")
      ->check(apps::whole_at_least<int64_t>(1))
      ->capture_default_str();
  add_lm_flags(app, c);
  apps::cluster_flags cluster;
  apps::add_cluster_flags(app, cluster);
  app.add_flag("--sync", c.sync, "in a cluster: synchronous steps (default: asynchronous)")
      ->group("Cluster");
  app.add_option("--backup-workers", c.backup_workers,
                 "with --sync: each step aggregates all but the slowest N workers")
      ->check(apps::whole_between(0, 1024))
      ->group("Cluster");
  app.add_option("--max-steps", c.max_steps, "stop at this global step (0: after --epochs)")
      ->check(apps::whole_at_least<int64_t>(0));
  app.add_option("--test-examples", c.test_examples,
                 "measure test accuracy on the first N test images (0: all 10,000; ResNet-50 "
                 "and Inception-v3 take minutes over all of them on 2 cores)")
      ->check(apps::whole_at_least<int64_t>(0));
  app.add_option("--recovery-seconds", c.recovery_seconds,
                 "in a cluster: how long to wait for a lost task to come back")
      ->check(apps::number_between(1, 86400))
      ->group("Cluster")
      ->capture_default_str();
  app.add_option("--progress-every", c.progress_every,
                 "in a cluster: print 'progress step=<global step> t=<unix seconds>' after every "
                 "N of this worker's steps, and on a synchronous chief 'aggregated step=<global "
                 "step> t=<unix seconds>' after every N aggregations (0: off)")
      ->check(apps::whole_at_least<int64_t>(0))
      ->group("Cluster")
      ->capture_default_str();
  app.add_option("--straggler-delay", c.straggler_delay,
                 "in a cluster, the image classifiers (not lstm_lm): sleep before each of this "
                 "worker's steps for a draw of lognormal:MEDIAN_MS:SIGMA or pareto:MIN_MS:ALPHA, "
                 "seeded by --seed, "
                 "the worker and its step (simulated stragglers; default: off)")
      ->check(CLI::Validator(apps::straggler_delay_error, "DISTRIBUTION:MS:SHAPE", "stragglers"))
      ->group("Cluster");
  CLI11_PARSE(app, argc, argv);
  if ((c.resume || c.overwrite_checkpoints) && c.checkpoint_dir.empty()) {
    std::cerr << "error: " << (c.resume ? "--resume" : "--overwrite-checkpoints")
              << " needs --checkpoint-dir\n";
    return 2;
  }
  c.optimizer_given = optimizer->count() > 0;
  if (c.model == "lstm_lm") {
    if (!batch->count()) c.batch = 32;
    if (!data_dir->count()) c.data_dir = fortunes_dir;
  }
  try {
    auto setup = apps::resolve_cluster(cluster);
    if (c.device != "cpu" && setup.enabled() && setup.job == "ps")
      fail("train", "--device " + c.device +
                        " is for workers: a ps task serves its variables from host memory");
    // A ps task only serves; it writes its shards where the chief says.
    if (setup.enabled() && setup.job == "ps")
      return apps::serve_task(setup, cluster.bind, c.checkpoint_dir, c.threads);
    if (!c.export_dir.empty() && setup.enabled())
      fail("train",
           "--export is for a model trained in one process: export a cluster's model from "
           "its checkpoint in one process (--checkpoint-dir DIR --resume --export EXPORT_DIR "
           "with the same --model)");
    if (!c.straggler_delay.empty() && (!setup.enabled() || c.model == "lstm_lm"))
      fail("train", "--straggler-delay is for the workers of an image model's cluster");
    if (c.model == "lstm_lm") {
      if (c.precision != "fp32") fail("train", "--precision bf16 is for mlp and cnn, for now");
      if (setup.enabled()) return apps::train_lstm_lm_in_cluster(c, setup);
      return apps::train_lstm_lm(c);
    }
    if (setup.enabled()) return apps::train_in_cluster(c, setup);
    return train(c);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
