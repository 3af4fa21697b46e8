#include "apps/lib/lm_training.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "actors/fortunes.hpp"
#include "actors/session.hpp"
#include "apps/lib/train_report.hpp"
#include "apps/lib/train_steps.hpp"

namespace actorflow::apps {

lm::lm_config lm_config_from(const training_options& o, int64_t vocab) {
  lm::lm_config c;
  c.vocab = vocab;
  c.streams = o.batch;
  c.full_softmax = o.full_softmax;
  c.lr = o.lr;
  c.seed = o.seed;
  return c;
}

namespace {

// The training and validation graphs on one set of variables.
struct lm_graphs {
  graph g;
  lm::lm_variables vars;
  lm::lm_training_graph train;
  lm::lm_eval_graph eval;
};

void build_graphs(lm_graphs& m, const lm::lm_config& c) {
  m.vars = lm::make_lm_variables(m.g, c);
  m.train = lm::make_training_graph(m.g, m.vars, c);
  m.eval = lm::make_eval_graph(m.g, m.vars, c);
}

void keep_first(std::vector<int64_t>& ids, int64_t limit) {
  if (limit > 0 && int64_t(ids.size()) > limit) ids.resize(size_t(limit));
}

fortunes_corpus load_corpus(const training_options& o) {
  double t0 = now_seconds();
  auto corpus = load_fortunes(o.data_dir);
  keep_first(corpus.train, o.max_train_tokens);
  keep_first(corpus.valid, o.max_valid_tokens);
  fmt::print("loaded fortunes from {} in {:.2f} s: {} training, {} validation tokens, {} words\n",
             o.data_dir, now_seconds() - t0, corpus.train.size(), corpus.valid.size(),
             corpus.vocab_size());
  return corpus;
}

// Perplexity of the full softmax over every validation segment, the state
// carried from zero across them as in training.
double validation_perplexity(session& s, const lm::lm_eval_graph& e, const bptt_batcher& valid,
                             const lm::lm_config& c) {
  tensor h = tensor::zeros(dtype::float32, {c.streams, c.hidden}), cell = h;
  double nll = 0;
  int64_t words = 0;
  dataset_position pos;
  for (int64_t k = 0; k < valid.segments_per_epoch(); ++k, pos = valid.next(pos)) {
    auto batch = valid.batch(pos);
    auto out = s.run({{e.inputs, batch[0]}, {e.targets, batch[1]}, {e.h0, h}, {e.c0, cell}},
                     {e.nll_sum, e.final_state.h, e.final_state.c});
    nll += double(out[0].item<float>());
    words += batch[1].num_elements();
    h = out[1], cell = out[2];
  }
  return std::exp(nll / double(words));
}

struct epoch_run {
  double loss_sum = 0;
  int64_t steps = 0;
};

// Steps from `step` up to `end` (within one epoch). The carried state starts
// from zero at each epoch's first segment, as the reference's does; a run
// resumed mid-epoch keeps the state its checkpoint restored.
epoch_run run_epoch(session& s, const lm::lm_training_graph& t, const bptt_batcher& train,
                    const training_options& o, int64_t& step, int64_t end, checkpoint_manager* ckpt,
                    progress_bar& bar) {
  epoch_run r;
  const int64_t per_epoch = train.segments_per_epoch();
  const int64_t words = o.batch * train.options().steps;
  for (; step < end; ++r.steps) {
    if (step % per_epoch == 0) s.run({t.reset_state});
    auto batch = train.batch(train.position_at_step(step));
    float loss =
        s.run({{t.inputs, batch[0]}, {t.targets, batch[1]}}, {t.loss}, {t.train})[0].item<float>();
    ++step;
    require_finite_loss(loss, step, ckpt);
    r.loss_sum += double(loss);
    bar.update((step - 1) / per_epoch + 1, o.epochs, step * words);
    if (ckpt && o.checkpoint_every > 0 && step % o.checkpoint_every == 0)
      save_finite(s, *ckpt, step);
  }
  return r;
}

std::string report_title(const training_options& o, const lm::lm_config& c) {
  return fmt::format("lstm_lm on fortunes: {} softmax, adam lr={} streams={} seed={}",
                     c.full_softmax ? "full" : "sampled", c.lr, c.streams, c.seed);
}

}  // namespace

int train_lstm_lm(const training_options& o) {
  auto ckpt = prepare_outputs(o);
  auto rt = std::make_shared<runtime>(
      runtime_options{.scheduler_threads = o.threads, .compute_threads = o.threads});
  auto corpus = load_corpus(o);
  const auto config = lm_config_from(o, corpus.vocab_size());
  const bptt_options cut{.streams = config.streams, .steps = config.steps};
  const bptt_batcher train(std::move(corpus.train), cut), valid(std::move(corpus.valid), cut);

  lm_graphs m;
  build_graphs(m, config);
  session s(m.g, rt);
  int64_t step = restore_or_initialize(s, m.g, o, ckpt.get());

  const int64_t per_epoch = train.segments_per_epoch();
  const int64_t words_per_step = config.streams * config.steps;
  const int64_t last_step =
      o.max_steps > 0 ? std::min(o.max_steps, per_epoch * o.epochs) : per_epoch * o.epochs;
  train_report report(
      o.out, report_title(o, config), step > 0,
      {.eval = "valid_ppl", .eval_title = "validation perplexity", .unit = "words"});
  if (step >= last_step) fmt::print("already trained {} epochs (step {})\n", o.epochs, step);
  progress_bar bar(isatty(STDOUT_FILENO), last_step * words_per_step, "words");
  double train_seconds = 0, ppl = NAN;
  int64_t steps_run = 0;
  while (step < last_step) {
    int64_t epoch = step / per_epoch;
    double start = now_seconds();
    auto r = run_epoch(s, m.train, train, o, step, std::min((epoch + 1) * per_epoch, last_step),
                       ckpt.get(), bar);
    double seconds = now_seconds() - start;
    train_seconds += seconds, steps_run += r.steps;
    ppl = validation_perplexity(s, m.eval, valid, config);
    bar.clear();
    if (ckpt) save_finite(s, *ckpt, step);  // before the report, as the image models do
    report.add_epoch({epoch + 1, step, r.loss_sum / double(r.steps), ppl, seconds,
                      double(r.steps * words_per_step) / seconds});
  }
  if (std::isnan(ppl)) ppl = validation_perplexity(s, m.eval, valid, config);
  double words = train_seconds > 0 ? double(steps_run * words_per_step) / train_seconds : 0.0;
  fmt::print("valid_ppl={:.2f} words_per_s={:.0f}\n", ppl, words);
  return 0;
}

}  // namespace actorflow::apps
