#include "perf/bench_train.hpp"

#include <algorithm>
#include <random>

#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "ops/embedding.hpp"
#include "ops/math.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
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

double train_step_ms(const std::string& model, int batch, int steps) {
  graph g;
  auto images = placeholder(g, dtype::float32, {batch, 28, 28, 1}, "images");
  auto labels = placeholder(g, dtype::int32, {batch}, "labels");
  auto net = models::make_classifier(g, model, 1);
  auto loss = models::mean_cross_entropy(net->logits(images), labels);
  auto train = adam(1e-3).minimize(loss);
  session s(g);
  s.run({global_variables_initializer(g)});
  auto [x, y] = random_fmnist_batch(batch);
  feed_list feeds{{images, x}, {labels, y}};
  // Fetch the loss every step, as the reference does. The machine is shared
  // and noisy: the figure is the median of five blocks' mean step times.
  int block = std::max(1, steps / 5);
  double secs = median_seconds(5, 1, [&] {
    for (int i = 0; i < block; ++i) s.run(feeds, {loss}, {train});
  });
  return 1000.0 * secs / block;
}

std::optional<double> torch_train_step_ms(const std::string& model, int batch, int steps) {
  static const std::regex field(R"(step_ms=([0-9.]+))");
  return run_torch_reference(
      "torch_fmnist.py", model + " " + std::to_string(steps) + " " + std::to_string(batch), field);
}

double embedding_step_ms(bool by_rows, int64_t rows, int64_t cols, int batch, int steps) {
  graph g;
  auto table = make_partitioned_variable(
      g, shape{rows, cols}, 4,
      [](graph& gr, shape dims, int k) { return random_normal(gr, dims, dtype::float32, 0, 0.1, 3, k); },
      "table");
  auto ids = placeholder(g, dtype::int64, {batch}, "ids");
  auto loss = reduce_sum(square(embedding_lookup(table, ids)));
  optimizer_options options;
  options.row_updates = by_rows;
  auto train = adagrad(0.1, 0.1, 1e-10, options).minimize(loss);
  session s(g);
  s.run({global_variables_initializer(g)});
  std::mt19937_64 rng(11);
  tensor id_values(dtype::int64, {batch});
  for (int i = 0; i < batch; ++i)
    id_values.mutable_data<int64_t>()[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
  feed_list feeds{{ids, id_values}};
  int block = std::max(1, steps / 5);
  double secs = median_seconds(5, 1, [&] {
    for (int i = 0; i < block; ++i) s.run(feeds, {loss}, {train});
  });
  return 1000.0 * secs / block;
}

}  // namespace actorflow::bench
