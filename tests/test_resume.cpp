// Fault tolerance end to end: training stopped at a checkpoint and resumed in a
// fresh graph and session gives exactly the losses of an uninterrupted run
// with the same seed (weights, Adam slots, global step and data order restored).
#include <doctest/doctest.h>

#include <filesystem>
#include <random>

#include "actors/checkpoint.hpp"
#include "actors/input/dataset.hpp"
#include "actors/input/reader_actor.hpp"
#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "ops/queue.hpp"
#include "ops/train.hpp"

using namespace actorflow;
namespace fs = std::filesystem;

namespace {

// Random 28x28 images whose label is a function of their pixels, so the loss falls.
std::shared_ptr<dataset> synthetic_data(uint64_t seed) {
  const int64_t n = 640;
  tensor images(dtype::float32, {n, 28, 28, 1});
  tensor labels(dtype::int32, {n});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* img = images.mutable_data<float>() + i * 784;
    for (int j = 0; j < 784; ++j) img[j] = pixel(rng);
    labels.mutable_data<int32_t>()[i] = int32_t(img[0] * 10) % 10;
  }
  return std::make_shared<dataset>(std::vector<tensor>{images, labels},
                                   dataset_options{.batch_size = 32, .seed = seed});
}

// Builds the training graph, optionally restores `ckpt_dir`, runs until
// `last_step` (saving at `save_at` when set) and returns the loss of each step run.
std::vector<float> train_run(const std::string& model, std::shared_ptr<dataset> data,
                             const std::string& ckpt_dir, bool resume, int64_t save_at,
                             int64_t last_step) {
  graph g;
  auto queue = fifo_queue(g, data->batch_types(), data->batch_shapes(), 3, "queue");
  auto batch = queue_dequeue(queue);
  auto net = models::make_classifier(g, model, 5);
  auto loss = models::mean_cross_entropy(net->logits(batch[0]), batch[1]);
  auto train = adam(1e-3).minimize(loss);
  session s(g);
  checkpoint_manager ckpt(ckpt_dir, 3);
  int64_t step = 0;
  if (resume) {
    auto r = ckpt.restore_latest(s);
    REQUIRE(r.restored);
    step = r.step;
  } else {
    s.run({global_variables_initializer(g)});
  }
  CHECK(s.eval(global_step(g)).item<int64_t>() == step);
  batch_reader reader(s, queue, data, data->position_at_step(step),
                      reader_options{.max_batches = last_step - step});
  std::vector<float> losses;
  for (; step < last_step; ++step) {
    losses.push_back(s.run({}, {loss}, {train})[0].item<float>());
    if (step + 1 == save_at) ckpt.save(s, step + 1);
  }
  return losses;
}

}  // namespace

TEST_CASE("a resumed run repeats the uninterrupted run's losses exactly") {
  for (std::string model : {"mlp", "cnn"}) {
    CAPTURE(model);
    auto dir = fs::temp_directory_path() / ("actorflow-resume-" + model);
    fs::remove_all(dir);
    auto data = synthetic_data(3);
    // 20 steps cross an epoch boundary (20 batches of 32 per epoch): step 26 is in epoch 1.
    const int64_t total = model == "mlp" ? 30 : 24, stop = model == "mlp" ? 12 : 21;
    auto whole = train_run(model, data, dir, false, stop, total);
    auto resumed = train_run(model, data, dir, true, 0, total);
    REQUIRE(whole.size() == size_t(total));
    REQUIRE(resumed.size() == size_t(total - stop));
    for (size_t i = 0; i < resumed.size(); ++i) {
      CAPTURE(i);
      CHECK(resumed[i] == whole[size_t(stop) + i]);  // bit for bit
    }
    if (model == "mlp") CHECK(whole.back() < whole.front());
    fs::remove_all(dir);
  }
}
