#include "apps/lib/lm_training.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>

#include "actors/input/fortunes.hpp"
#include "actors/session.hpp"
#include "apps/lib/model_export.hpp"
#include "apps/lib/run_dirs.hpp"
#include "apps/lib/train_report.hpp"
#include "apps/lib/train_steps.hpp"
#include "apps/lib/train_summaries.hpp"
#include "ops/math.hpp"

namespace actorflow::apps {

lm::lm_config lm_config_from(const training_options& o, int64_t vocab,
                             const std::string& default_optimizer, int64_t default_shards) {
  lm::lm_config c;
  c.vocab = vocab;
  c.streams = o.batch;
  c.full_softmax = o.full_softmax;
  c.lr = o.lr;
  c.seed = o.seed;
  c.embedding = o.embedding;
  c.hidden = o.hidden;
  c.vocab_shards = o.vocab_shards > 0 ? o.vocab_shards : default_shards;
  c.optimizer = o.optimizer_given ? o.optimizer : default_optimizer;
  return c;
}

lm_trainer::lm_trainer(const lm::lm_config& config, std::vector<int64_t> train_ids,
                       std::vector<int64_t> valid_ids, std::shared_ptr<runtime> rt)
    : lm_trainer(config, std::move(train_ids), std::move(valid_ids),
                 lm_placement{.rt = std::move(rt)}) {}

lm_trainer::lm_trainer(lm::lm_config config, std::vector<int64_t> train_ids,
                       std::vector<int64_t> valid_ids, const lm_placement& placement)
    : config_(std::move(config)),
      train_(std::move(train_ids), {.streams = config_.streams, .steps = config_.steps}),
      valid_(std::move(valid_ids), {.streams = config_.streams, .steps = config_.steps}) {
  if (!placement.in_cluster()) {
    std::optional<graph::scope_guard> on_device;
    if (!placement.device.empty()) on_device.emplace(graph_.device_scope(placement.device));
    vars_ = lm::make_lm_variables(graph_, config_);
    train_graph_ = lm::make_training_graph(graph_, vars_, config_);
    eval_graph_ = lm::make_eval_graph(graph_, vars_, config_);
    session_ = std::make_unique<session>(graph_, placement.rt);
    return;
  }
  build(placement);
  session_ = std::make_unique<session>(graph_, placement.cluster);
}

// Between-graph replication: every worker builds the same graph; the
// variables go to the ps tasks (the vocabulary's shards explicitly, one per
// task in turn), the rest to this worker.
void lm_trainer::build(const lm_placement& p) {
  auto& g = graph_;
  const std::string worker_device = task_name("worker", p.worker) + p.device;
  // A shard's nodes run on its ps task's CPU, whatever device this worker's run on.
  for (int k = 0; k < p.num_ps; ++k)
    config_.shard_devices.push_back(task_name("ps", k) + (p.device.empty() ? "" : "/cpu:0"));
  config_.state_prefix = "worker_" + std::to_string(p.worker);
  if (config_.vocab_shards < 1) config_.vocab_shards = p.num_ps;
  auto placement = g.device_function_scope(replica_device_setter(p.num_ps, worker_device));
  {
    auto on_first_ps = g.device_scope(task_name("ps", 0));
    cluster_.sizes = make_variable(
        constant(g, tensor::from_vector<int64_t>(lm::model_sizes(config_), {4})), "model_sizes");
  }
  vars_ = lm::make_lm_variables(g, config_);
  lm::lm_update update;
  if (p.sync_aggregated > 0)
    update = [&](optimizer& opt, output loss, std::vector<variable> vars) {
      cluster_.sync = std::make_unique<sync_replicas_ops>(
          sync_replicas(opt, loss, p.sync_aggregated, p.workers, worker_device, std::move(vars)));
      return cluster_.sync->worker_train;
    };
  train_graph_ = lm::make_training_graph(g, vars_, config_, update);
  if (cluster_.sync) cluster_.new_local_step = output(&g, {cluster_.sync->worker_train.id(), 0});
  eval_graph_ = lm::make_eval_graph(g, vars_, config_);
  cluster_.state_set = logical_and(is_variable_initialized(train_graph_.state_h),
                                   is_variable_initialized(train_graph_.state_c));
  global_step(g);
  cluster_.init = global_variables_initializer(g);
  cluster_.ready = global_variables_initialized(g);
  cluster_.variables = variable_initializers(g);
}

float lm_trainer::run_step(int64_t step) {
  step_observer none({});
  return run_step(step, none);
}

float lm_trainer::run_step(int64_t step, step_observer& observer) {
  const auto& t = train_graph_;
  if (step % steps_per_epoch() == 0) sess().run({t.reset_state});
  auto batch = train_.batch(train_.position_at_step(step));
  return observer
      .run(sess(), step + 1, {{t.inputs, batch[0]}, {t.targets, batch[1]}}, {t.loss}, {t.train})[0]
      .item<float>();
}

lm_step lm_trainer::run_segment(int64_t position, int64_t trace_step, step_observer& observer) {
  const auto& t = train_graph_;
  if (position % steps_per_epoch() == 0) sess().run({t.reset_state});
  auto batch = train_.batch(train_.position_at_step(position));
  const bool sync = cluster_.sync != nullptr;
  auto step = sync ? cluster_.new_local_step : global_step(graph_).value();
  auto out = observer.run(sess(), trace_step, {{t.inputs, batch[0]}, {t.targets, batch[1]}},
                          {t.loss, step}, {t.train});
  // Asynchronous: the step read beside the update, which adds one.
  return {out[0].item<float>(), out[1].item<int64_t>() + (sync ? 0 : 1)};
}

double lm_trainer::validation_perplexity() {
  const auto& e = eval_graph_;
  tensor h = tensor::zeros(dtype::float32, {config_.streams, config_.hidden}), c = h;
  double nll = 0;
  int64_t words = 0;
  dataset_position pos;
  for (int64_t k = 0; k < valid_.segments_per_epoch(); ++k, pos = valid_.next(pos)) {
    auto batch = valid_.batch(pos);
    auto out = sess().run({{e.inputs, batch[0]}, {e.targets, batch[1]}, {e.h0, h}, {e.c0, c}},
                          {e.nll_sum, e.final_state.h, e.final_state.c});
    nll += double(out[0].item<float>());
    words += batch[1].num_elements();
    h = out[1], c = out[2];
  }
  return std::exp(nll / double(words));
}

namespace {

void keep_first(std::vector<int64_t>& ids, int64_t limit) {
  if (limit > 0 && int64_t(ids.size()) > limit) ids.resize(size_t(limit));
}

}  // namespace

fortunes_corpus load_lm_corpus(const training_options& o) {
  double t0 = now_seconds();
  auto corpus = load_fortunes(o.data_dir, o.vocab);
  // The vocabulary holds the words kept, then <unk>.
  const int64_t words = corpus.vocab_size() - 1;
  if (words < o.vocab)
    fail("train", fmt::format("--vocab {} asks for more words than the training text of {} has: "
                              "{} distinct ones",
                              o.vocab, o.data_dir, words));
  keep_first(corpus.train, o.max_train_tokens);
  keep_first(corpus.valid, o.max_valid_tokens);
  fmt::print("loaded fortunes from {} in {:.2f} s: {} training, {} validation tokens, {} words\n",
             o.data_dir, now_seconds() - t0, corpus.train.size(), corpus.valid.size(),
             corpus.vocab_size());
  return corpus;
}

namespace {

struct epoch_run {
  double loss_sum = 0;
  int64_t steps = 0;
};

// Steps from `step` up to `end` (within one epoch), saving every
// --checkpoint-every steps.
epoch_run run_epoch(lm_trainer& lm, const training_options& o, int64_t& step, int64_t end,
                    checkpoint_manager* ckpt, progress_bar& bar, step_observer& observer,
                    train_summaries& summaries) {
  epoch_run r;
  const int64_t per_epoch = lm.steps_per_epoch();
  for (; step < end; ++r.steps) {
    float loss = lm.run_step(step, observer);
    ++step;
    require_finite_loss(loss, step, ckpt);
    if (summaries.due(step))
      summaries.write_step(step, {}, loss, o.lr, lm.words_per_step(), "words");
    r.loss_sum += double(loss);
    bar.update((step - 1) / per_epoch + 1, o.epochs, step * lm.words_per_step());
    if (ckpt && o.checkpoint_every > 0 && step % o.checkpoint_every == 0)
      save_finite(lm.sess(), *ckpt, step);
  }
  return r;
}

std::string report_title(const lm::lm_config& c) {
  return fmt::format("lstm_lm on fortunes: {} softmax, {} lr={} streams={} seed={}, {}",
                     c.full_softmax ? "full" : "sampled", c.optimizer, c.lr, c.streams, c.seed,
                     lm::describe_sizes(lm::model_sizes(c)));
}

}  // namespace

int train_lstm_lm(const training_options& o) {
  auto ckpt = prepare_outputs(o);
  // Before training: a run must not end unable to write its export.
  if (!o.export_dir.empty()) require_writable_dir(o.export_dir, "--export");
  auto rt = make_training_runtime(o);
  auto corpus = load_lm_corpus(o);
  lm_trainer lm(lm_config_from(o, corpus.vocab_size()), std::move(corpus.train),
                std::move(corpus.valid),
                lm_placement{.rt = rt, .device = o.device == "cpu" ? "" : "/" + o.device + ":0"});
  auto& s = lm.sess();
  int64_t step = restore_or_initialize(s, lm.g(), o, ckpt.get());

  const int64_t per_epoch = lm.steps_per_epoch();
  const int64_t last_step =
      o.max_steps > 0 ? std::min(o.max_steps, per_epoch * o.epochs) : per_epoch * o.epochs;
  train_report report(
      o.out, report_title(lm.config()), step > 0,
      {.eval = "valid_ppl", .eval_title = "validation perplexity", .unit = "words"});
  if (step >= last_step) fmt::print("already trained {} epochs (step {})\n", o.epochs, step);
  progress_bar bar(isatty(STDOUT_FILENO), last_step * lm.words_per_step(), "words");
  double train_seconds = 0, ppl = NAN;
  int64_t steps_run = 0;
  step_observer observer({.out = o.out, .trace_steps = o.trace_steps, .profile = o.profile});
  train_summaries summaries(o.logdir, o.summary_every);
  summaries.write_graph(lm.g());
  summaries.start(step);
  while (step < last_step) {
    int64_t epoch = step / per_epoch;
    double start = now_seconds();
    auto r = run_epoch(lm, o, step, std::min((epoch + 1) * per_epoch, last_step), ckpt.get(), bar,
                       observer, summaries);
    double seconds = now_seconds() - start;
    train_seconds += seconds, steps_run += r.steps;
    ppl = lm.validation_perplexity();
    bar.clear();
    if (ckpt) save_finite(s, *ckpt, step);  // before the report, as the image models do
    report.add_epoch({epoch + 1, step, r.loss_sum / double(r.steps), ppl, seconds,
                      double(r.steps * lm.words_per_step()) / seconds});
    summaries.write_eval(step, "eval/valid_perplexity", ppl);
  }
  if (std::isnan(ppl)) ppl = lm.validation_perplexity();
  double words = train_seconds > 0 ? double(steps_run * lm.words_per_step()) / train_seconds : 0.0;
  if (o.device != "cpu") print_soft_placement(s);
  fmt::print("valid_ppl={:.2f} words_per_s={:.0f}\n", ppl, words);
  if (!o.export_dir.empty())
    fmt::print("exported the model to {}\n",
               export_language_model(s, lm.vars(), lm.config(), o.export_dir));
  observer.finish(step, std::cout);
  summaries.finish();
  return 0;
}

}  // namespace actorflow::apps
