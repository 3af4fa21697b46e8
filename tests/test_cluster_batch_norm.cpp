// Batch normalization in a synchronous cluster, across real processes on
// 127.0.0.1: each worker's step runs its moving-average updates beside the
// replicas' step (TensorFlow's UPDATE_OPS), on the ps task's variables. Its
// own executable, so that ctest runs its two minutes beside the other
// cluster tests. Every process started here is killed and reaped by the test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"
#include "tests/train_cluster.hpp"

using actorflow::testing::train_cluster;
using namespace std::chrono_literals;

TEST_CASE("synchronous ResNet-50: each worker's step updates batch norm's moving averages") {
  train_cluster c(1, 2);
  auto ps0 = c.ps(0);
  std::string checkpoints = c.out_dir + "/ckpt";
  const std::vector<std::string> flags{"--model", "resnet50",         "--sync",   "--batch",
                                       "4",       "--max-steps",      "3",        "--test-examples",
                                       "20",      "--checkpoint-dir", checkpoints};
  auto w1 = c.worker(1, flags);
  auto chief = c.worker(0, flags);
  REQUIRE_MESSAGE(chief->wait_exit(300s) == 0, chief->output());
  REQUIRE_MESSAGE(w1->wait_exit(120s) == 0, w1->output());
  // From zeros, moving = 0.9 * moving + 0.1 * the batch's mean: not zero any more.
  // The chief's last cut, whichever step it holds.
  std::string newest;
  for (auto& entry : std::filesystem::directory_iterator(checkpoints))
    if (entry.path().filename().string().rfind("ckpt-", 0) == 0)
      newest = std::max(newest, entry.path().string());
  REQUIRE(!newest.empty());
  auto shard =
      actorflow::load_checkpoint_file(newest + "/" + actorflow::shard_file_name("/job:ps/task:0"));
  REQUIRE(shard.variables.count("conv1/bn/moving_mean"));
  auto mean = shard.variables.at("conv1/bn/moving_mean").value.to_vector<float>();
  double largest = 0;
  for (float m : mean) largest = std::max(largest, double(std::abs(m)));
  CHECK(largest > 0);
  CHECK(shard.variables.at("conv1/bn/moving_variance").value.to_vector<float>()[0] != 1.0f);
}
