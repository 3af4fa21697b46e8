#include "perf/bench_lm_cluster.hpp"

#include <fmt/format.h>

#include <map>
#include <regex>

#include "actors/caf_ext/guarded_connection.hpp"
#include "actors/input/fortunes.hpp"
#include "apps/lib/lm_training.hpp"
#include "apps/lib/step_observer.hpp"
#include "perf/bench_control.hpp"
#include "perf/bench_util.hpp"
#include "perf/ps_cluster.hpp"

namespace actorflow::bench {

namespace {

constexpr int warmup_steps = 5;
constexpr int64_t all_words = 30945;  // fortunes' distinct training words

struct shape_run {
  double words_per_s = 0;
  double sent_per_step = 0, received_per_step = 0;
  std::vector<double> bytes_per_ps;  // sent + received per step, by ps task
  double valid_ppl = 0;
};

lm::lm_config config_for(int64_t vocab, bool full) {
  lm::lm_config c;
  c.vocab = vocab;
  c.full_softmax = full;
  c.optimizer = "lazy_adam";
  return c;
}

int steps_for(int64_t vocab, bool full) {
  if (!full) return 60;
  return vocab > 10001 ? 10 : 20;
}

// The worker's bytes per step between two readings of its counters, by peer.
void add_traffic(shape_run& r, const std::map<std::string, traffic_bytes>& before,
                 const std::map<std::string, traffic_bytes>& after, const ps_cluster& c,
                 int steps) {
  for (auto& [peer, t] : after) {
    auto b = before.count(peer) ? before.at(peer) : traffic_bytes{};
    double sent = double(t.sent - b.sent) / steps,
           received = double(t.received - b.received) / steps;
    r.sent_per_step += sent, r.received_per_step += received;
    for (size_t k = 0; k < c.ps_ports.size(); ++k)
      if (peer == fmt::format("127.0.0.1:{}", c.ps_ports[k])) r.bytes_per_ps[k] += sent + received;
  }
}

template <class Step>
double timed_words_per_s(const apps::lm_trainer& lm, int steps, Step&& step) {
  double start = now_seconds();
  for (int i = 0; i < steps; ++i) step(warmup_steps + i);
  return double(int64_t(steps) * lm.words_per_step()) / (now_seconds() - start);
}

shape_run single_process(const fortunes_corpus& corpus, const lm::lm_config& c, int steps) {
  apps::lm_trainer lm(c, corpus.train, corpus.valid);
  lm.sess().run({global_variables_initializer(lm.g())});
  for (int64_t step = 0; step < warmup_steps; ++step) lm.run_step(step);
  shape_run r;
  r.words_per_s = timed_words_per_s(lm, steps, [&](int64_t step) { lm.run_step(step); });
  return r;
}

// One worker (this process, its own runtime) and `ps` ps tasks; `steps`
// timed steps, or a whole epoch and its validation perplexity.
shape_run in_cluster(const fortunes_corpus& corpus, lm::lm_config c, int ps, int steps,
                     bool epoch) {
  auto cluster = start_ps_cluster(ps, 1);
  auto connection = connect_as_worker(*cluster, 0);
  c.vocab_shards = ps;
  apps::lm_trainer lm(c, corpus.train, corpus.valid,
                      {.cluster = connection, .num_ps = ps, .worker = 0, .workers = 1});
  lm.sess().run({lm.cluster().init});
  apps::step_observer none({});
  for (int64_t step = 0; step < warmup_steps; ++step) lm.run_segment(step, step + 1, none);
  if (epoch) steps = int(lm.steps_per_epoch()) - warmup_steps;
  shape_run r;
  r.bytes_per_ps.assign(size_t(ps), 0);
  auto before = traffic_by_peer();
  r.words_per_s =
      timed_words_per_s(lm, steps, [&](int64_t step) { lm.run_segment(step, step + 1, none); });
  add_traffic(r, before, traffic_by_peer(), *cluster, steps);
  if (epoch) r.valid_ppl = lm.validation_perplexity();
  for (auto& t : cluster->tasks)
    if (t->exited()) throw std::runtime_error("a ps task exited: " + tail(t->output()));
  return r;
}

// The bytes a step must move at the least (see the header), both ways
// together, with this implementation's lookups: every id of the batch and
// every sampled class named once per occurrence. Ids go to the ps tasks once
// (a gather's gradient finds them there).
double floor_bytes_per_step(const lm::lm_config& c, int ps) {
  const double n = double(c.streams * c.steps), f = 4, id = 8;
  const double dense = double((c.embedding + c.hidden) * 4 * c.hidden + 4 * c.hidden) * f;
  const double state = 2 * double(c.streams * c.hidden) * f;
  // Values in and gradients (or the new state) out.
  double bytes = 2 * (dense + state) + n * (id + 2 * double(c.embedding) * f);
  if (c.full_softmax)  // per ps task: the hidden states and labels in, d(hidden) out, 2 scalars
                       // each way
    return bytes + ps * n * (2 * double(c.hidden) * f + id + 4 * f);
  return bytes + (n + double(c.sampled)) * (id + 2 * double(c.hidden + 1) * f);
}

std::string shape_suffix(int ps, bool full, int64_t vocab) {
  return fmt::format("1w_{}ps{}{}", ps, full ? "_full" : "", vocab > 10001 ? "_v30945" : "");
}

struct tf_figures {
  double words_per_s = 0, valid_ppl = 0;
};

std::optional<tf_figures> tf_reference(int ps, bool full, int64_t vocab, int steps, bool epoch) {
  auto args = fmt::format(
      "--workers 1 --ps {} --vocab {}{}{}", ps, vocab - 1, full ? " --full-softmax" : "",
      epoch ? " --epochs 1" : fmt::format(" --max-steps {} --no-eval", warmup_steps + steps));
  auto out = run_tf_reference(perf_dir() + "/tf_lm_cluster.py", args);
  static const std::regex words(R"(words_per_s=([0-9.]+))"), ppl(R"(valid_ppl=([0-9.]+))");
  std::smatch m;
  if (!out || !std::regex_search(*out, m, words)) return std::nullopt;
  tf_figures f{std::stod(m[1]), 0};
  if (std::regex_search(*out, m, ppl)) f.valid_ppl = std::stod(m[1]);
  return f;
}

void measure_shape(lm_cluster_figures& out, const fortunes_corpus& corpus, int64_t vocab, bool full,
                   double single_words) {
  const auto c = config_for(vocab, full);
  const int steps = steps_for(vocab, full);
  for (int ps : {1, 2, 4}) {
    auto suffix = shape_suffix(ps, full, vocab);
    try {
      auto r = in_cluster(corpus, c, ps, steps, false);
      out.rows.push_back({"lm_cluster_words_per_s_" + suffix, r.words_per_s, "words/s",
                          fmt::format("{:.2f}x the single process", r.words_per_s / single_words)});
      std::vector<std::string> per_ps;
      for (double b : r.bytes_per_ps) per_ps.push_back(fmt::format("{:.2f}", b / 1e6));
      out.rows.push_back(
          {"lm_cluster_mb_per_step_" + suffix, (r.sent_per_step + r.received_per_step) / 1e6, "MB",
           fmt::format("worker sent {:.2f} + received {:.2f}; by ps task {}; "
                       "floor {:.2f}",
                       r.sent_per_step / 1e6, r.received_per_step / 1e6, fmt::join(per_ps, " "),
                       floor_bytes_per_step(config_for(vocab, full), ps) / 1e6)});
      auto tf = tf_reference(ps, full, vocab, steps, false);
      if (tf)
        out.rows.push_back(
            {"tf_lm_cluster_words_per_s_" + suffix, tf->words_per_s, "words/s",
             fmt::format("TensorFlow; actorflow {:.2f}x", r.words_per_s / tf->words_per_s)});
    } catch (const std::exception& e) {
      out.errors.push_back(suffix + ": " + e.what());
    }
  }
}

void measure_epoch(lm_cluster_figures& out, const fortunes_corpus& corpus) {
  try {
    auto r = in_cluster(corpus, config_for(corpus.vocab_size(), false), 2, 0, true);
    auto tf = tf_reference(2, false, corpus.vocab_size(), 0, true);
    out.rows.push_back({"lm_cluster_epoch_words_per_s_1w_2ps", r.words_per_s, "words/s",
                        tf ? fmt::format("one epoch; {:.2f}x TensorFlow's, target >= 1.5",
                                         r.words_per_s / tf->words_per_s)
                           : "one epoch"});
    out.rows.push_back({"lm_cluster_valid_ppl_1w_2ps", r.valid_ppl, "ppl",
                        tf ? fmt::format("after one epoch; TensorFlow's {:.1f}, target <= {:.1f}",
                                         tf->valid_ppl, tf->valid_ppl * 1.05)
                           : "after one epoch"});
    if (tf) {
      out.rows.push_back({"tf_lm_cluster_epoch_words_per_s_1w_2ps", tf->words_per_s, "words/s",
                          "TensorFlow, one epoch (perf/tf_lm_cluster.py)"});
      out.rows.push_back(
          {"tf_lm_cluster_valid_ppl_1w_2ps", tf->valid_ppl, "ppl", "TensorFlow, after one epoch"});
    }
  } catch (const std::exception& e) {
    out.errors.push_back(std::string("one epoch: ") + e.what());
  }
}

}  // namespace

lm_cluster_figures lm_cluster_benchmarks(bool epoch) {
  lm_cluster_figures out;
  try {
    for (int64_t words : {int64_t{10000}, all_words}) {
      auto corpus = load_fortunes(fortunes_dir, words);
      for (bool full : {false, true}) {
        const auto c = config_for(corpus.vocab_size(), full);
        auto single = single_process(corpus, c, steps_for(c.vocab, full));
        out.rows.push_back({fmt::format("lm_single_words_per_s{}{}", full ? "_full" : "",
                                        c.vocab > 10001 ? "_v30945" : ""),
                            single.words_per_s, "words/s",
                            "the same model (lazy Adam) in one process, this run"});
        measure_shape(out, corpus, c.vocab, full, single.words_per_s);
      }
      if (epoch && words == 10000) measure_epoch(out, corpus);
    }
  } catch (const std::exception& e) {
    out.errors.push_back(e.what());
  }
  return out;
}

}  // namespace actorflow::bench
