#include "perf/bench_train.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <random>

#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/lm_training.hpp"
#include "ops/embedding.hpp"
#include "ops/math.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/sync_replicas.hpp"
#include "ops/train.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

std::pair<tensor, tensor> random_fmnist_batch(int batch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  tensor images(dtype::float32, {batch, 28, 28, 1});
  for (int64_t i = 0; i < images.num_elements(); ++i) images.mutable_data<float>()[i] = pixel(rng);
  tensor labels(dtype::int32, {batch});
  for (int i = 0; i < batch; ++i) labels.mutable_data<int32_t>()[i] = int32_t(rng() % 10);
  return {images, labels};
}

fmnist_step::fmnist_step(const std::string& model, int batch,
                         const std::vector<std::string>& devices, models::precision p,
                         session_options options, const std::function<void(graph&)>& extend) {
  auto images = placeholder(g, dtype::float32, {batch, 28, 28, 1}, "images");
  auto labels = placeholder(g, dtype::int32, {batch}, "labels");
  // One device: the whole step there, the loss and its gradient too.
  auto whole_step = devices.size() == 1 ? g.device_scope(devices[0])
                                        : graph::scope_guard(std::function<void()>());
  auto net = models::make_classifier(g, model, 1, devices, p);
  loss = models::mean_cross_entropy(net->logits(images), labels);
  train = adam(1e-3).minimize(loss);
  if (extend) extend(g);
  s = std::make_unique<session>(g, options);
  s->run({global_variables_initializer(g)});
  auto [x, y] = random_fmnist_batch(batch);
  feeds = {{images, x}, {labels, y}};
}

void fmnist_step::run(const run_options& options) {
  run_metadata md;
  s->run(options, feeds, {loss}, {train}, &md);
}

double train_step_ms(const std::string& model, int batch, int steps,
                     const std::vector<std::string>& devices, models::precision p,
                     session_options options) {
  fmnist_step m(model, batch, devices, p, options);
  // The machine is shared and noisy: the figure is the median of five
  // blocks' mean step times.
  int block = std::max(1, steps / 5);
  double secs = median_seconds(5, 1, [&] {
    for (int i = 0; i < block; ++i) m.run();
  });
  return 1000.0 * secs / block;
}

std::pair<double, double> traced_step_ms(int batch, int steps) {
  fmnist_step m("mlp", batch, {});
  int block = std::max(1, steps / 5);
  std::vector<double> plain, traced;
  for (int round = 0; round < 6; ++round) {  // the first round warms up
    for (bool trace : {false, true}) {
      double t0 = now_seconds();
      for (int i = 0; i < block; ++i) m.run(run_options{.trace = trace});
      double ms = 1000.0 * (now_seconds() - t0) / block;
      if (round > 0) (trace ? traced : plain).push_back(ms);
    }
  }
  return {median(plain), median(traced)};
}

std::optional<double> torch_train_step_ms(const std::string& model, int batch, int steps) {
  static const std::regex field(R"(step_ms=([0-9.]+))");
  return run_torch_reference(
      "torch_fmnist.py", model + " " + std::to_string(steps) + " " + std::to_string(batch), field);
}

std::optional<double> torch_gpu_step_ms(const std::string& model, int batch, int steps) {
  static const std::regex field(R"(step_ms=([0-9.]+))");
  return run_torch_reference(perf_dir() + "/torch_gpu_fmnist.py",
                             model + " " + std::to_string(steps) + " " + std::to_string(batch),
                             field);
}

// loss = sum(lookup(ids)^2) over a rows x cols table in 4 shards.
struct embedding_bench_model {
  graph g;
  output ids, loss;
  explicit embedding_bench_model(int64_t rows, int64_t cols, int batch) {
    auto table = make_partitioned_variable(
        g, shape{rows, cols}, 4,
        [](graph& gr, shape dims, int k) {
          return random_normal(gr, dims, dtype::float32, 0, 0.1, 3, k);
        },
        "table");
    ids = placeholder(g, dtype::int64, {batch}, "ids");
    loss = reduce_sum(square(embedding_lookup(table, ids)));
  }
};

tensor random_ids(int batch, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  tensor ids(dtype::int64, {batch});
  for (int i = 0; i < batch; ++i)
    ids.mutable_data<int64_t>()[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
  return ids;
}

double ms_per_step(int steps, const std::function<void()>& step) {
  int block = std::max(1, steps / 5);
  double secs = median_seconds(5, 1, [&] {
    for (int i = 0; i < block; ++i) step();
  });
  return 1000.0 * secs / block;
}

double embedding_step_ms(bool by_rows, int64_t rows, int64_t cols, int batch, int steps) {
  embedding_bench_model m(rows, cols, batch);
  optimizer_options options;
  options.row_updates = by_rows;
  auto train = adagrad(0.1, 0.1, 1e-10, options).minimize(m.loss);
  session s(m.g);
  s.run({global_variables_initializer(m.g)});
  feed_list feeds{{m.ids, random_ids(batch, rows, 11)}};
  return ms_per_step(steps, [&] { s.run(feeds, {m.loss}, {train}); });
}

double sync_embedding_step_ms(bool by_rows, int64_t rows, int64_t cols, int batch, int steps) {
  embedding_bench_model m(rows, cols, batch);
  optimizer_options options;
  options.row_updates = by_rows;
  adagrad opt(0.1, 0.1, 1e-10, options);
  auto sync = sync_replicas(opt, m.loss, 2, 2, "");
  session s(m.g);
  s.run({global_variables_initializer(m.g)});
  s.run({sync.local_step_init});
  feed_list feeds_a{{m.ids, random_ids(batch, rows, 11)}};
  feed_list feeds_b{{m.ids, random_ids(batch, rows, 12)}};
  return ms_per_step(steps, [&] {
    auto a = s.run_async(feeds_a, {}, {sync.worker_train});
    auto b = s.run_async(feeds_b, {}, {sync.worker_train});
    s.run({sync.chief_update});
    a.get();
    b.get();
  });
}

// Words drawn from the log-uniform (Zipfian) law a word list sorted by
// frequency follows, as the sampler assumes.
std::vector<int64_t> zipfian_words(int64_t vocab, size_t count) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> words(count);
  for (auto& w : words)
    w = std::min<int64_t>(vocab - 1, int64_t(std::exp(u(rng) * std::log(double(vocab + 1)))) - 1);
  return words;
}

double lstm_lm_words_per_s(bool full_softmax, int steps, const std::string& device) {
  lm::lm_config config;
  config.full_softmax = full_softmax;
  std::vector<int64_t> train, valid;
  if (device.empty()) {
    auto corpus = load_fortunes();
    config.vocab = corpus.vocab_size();
    train = std::move(corpus.train);
    valid = std::move(corpus.valid);
  } else {
    config.vocab = 10001;
    train = zipfian_words(config.vocab, 600000);
    valid = zipfian_words(config.vocab, 10000);
  }
  apps::lm_trainer lm(config, std::move(train), std::move(valid),
                      apps::lm_placement{.rt = runtime::shared(), .device = device});
  lm.sess().run({global_variables_initializer(lm.g())});
  // The first steps compile the signatures and grow the allocator's pools.
  const int warmup = 5;
  for (int64_t step = 0; step < warmup; ++step) lm.run_step(step);
  double start = now_seconds();
  for (int64_t step = warmup; step < warmup + steps; ++step) lm.run_step(step);
  return double(steps * lm.words_per_step()) / (now_seconds() - start);
}

}  // namespace actorflow::bench
