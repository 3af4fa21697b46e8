// ResNet-50 and Inception-v3 (apps/lib/image_models.hpp): their layers
// against torchvision's (Debian's python3-torchvision, through
// perf/torch_image_models.py: every layer's output shape and parameter
// count, by torchvision's module names), and a short training run on small
// images, where batch normalization's training and inference modes differ.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>

#include "actors/compile/graph_optimizer.hpp"
#include "actors/serving/export.hpp"
#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/image_models.hpp"
#include "apps/lib/model_export.hpp"
#include "ops/array.hpp"
#include "ops/normalization.hpp"
#include "ops/softmax.hpp"
#include "ops/train.hpp"
#include "schema/model_file.hpp"
#include "support/child_process.hpp"
#include "test_util.hpp"

namespace actorflow {
namespace {

using models::image_model_options;

// The trainable parameters of each model at torchvision's defaults (3
// channels, 1000 classes), as torchvision counts them.
constexpr int64_t resnet50_params = 25557032;
constexpr int64_t inception_v3_params = 27161264;  // with the auxiliary head

int64_t total_params(const models::image_model& m) {
  int64_t n = 0;
  for (auto& v : m.trainable_variables()) n += v.dims().num_elements();
  return n;
}

std::unique_ptr<models::image_model> built(const std::string& name, image_model_options o, graph& g,
                                           bool training = true) {
  auto m = models::make_image_model(name, o);
  auto images = placeholder(g, dtype::float32, {2, o.image_size, o.image_size, o.channels});
  m->apply(images, training);
  return m;
}

TEST_CASE("ResNet-50 and Inception-v3 have torchvision's parameter counts") {
  graph g1, g2;
  CHECK(total_params(*built("resnet50", {.image_size = 224}, g1)) == resnet50_params);
  CHECK(total_params(*built("inception_v3", {.image_size = 299}, g2)) == inception_v3_params);
}

TEST_CASE("an unknown model and images of the wrong size are refused by name") {
  CHECK_THROWS_WITH(models::make_image_model("resnet51"),
                    doctest::Contains("unknown model 'resnet51': resnet50 or inception_v3"));
  graph g;
  auto m = models::make_image_model("resnet50", {.image_size = 64});
  CHECK_THROWS_WITH(m->apply(placeholder(g, dtype::float32, {2, 32, 32, 3}), true),
                    doctest::Contains("expects images [batch, 64, 64, 3], got (2,32,32,3)"));
  auto small = models::make_image_model("inception_v3", {.image_size = 75});
  CHECK_THROWS_WITH(small->apply(placeholder(g, dtype::float32, {2, 75, 75, 3}), true),
                    doctest::Contains("the auxiliary head needs images of at least 299 pixels"));
  auto no_aux = models::make_image_model("inception_v3", {.image_size = 75, .aux_logits = false});
  CHECK(!no_aux->apply(placeholder(g, dtype::float32, {2, 75, 75, 3}), true).aux_logits.valid());
}

// torchvision's layer lines: "name h,w,c params" (or "name classes params").
std::map<std::string, std::pair<std::string, int64_t>> torchvision_layers(const std::string& model,
                                                                          int64_t size) {
  testing::child_process py(
      {"/usr/bin/python3", ACTORFLOW_TORCH_IMAGE_MODELS, "layers", model, std::to_string(size)});
  const int status = py.wait_exit(std::chrono::seconds(120));
  REQUIRE_MESSAGE(status == 0, "torch_image_models.py failed: " << py.output());
  std::map<std::string, std::pair<std::string, int64_t>> layers;
  std::istringstream lines(py.output());
  std::string name, dims;
  int64_t params = 0;
  while (lines >> name >> dims >> params) layers[name] = {dims, params};
  return layers;
}

std::string dims_without_batch(const shape& s) {
  std::string text;
  for (int64_t i = 1; i < s.rank(); ++i) {
    if (i > 1) text += ',';
    text += std::to_string(s[i]);
  }
  return text;
}

void check_against_torchvision(const std::string& model, int64_t size) {
  graph g;
  auto ours = built(model, {.image_size = size}, g);
  auto theirs = torchvision_layers(model, size);
  REQUIRE(!theirs.empty());
  CHECK(ours->layers().size() == theirs.size());
  for (auto& layer : ours->layers()) {
    INFO(model << " layer " << layer.name);
    auto it = theirs.find(layer.name);
    REQUIRE_MESSAGE(it != theirs.end(), "torchvision has no layer of this name");
    CHECK(dims_without_batch(layer.output) == it->second.first);
    CHECK(layer.params == it->second.second);
  }
}

TEST_SUITE("torchvision") {
  TEST_CASE("every layer's output shape and parameters are torchvision's") {
    testing::child_process probe({"/usr/bin/python3", "-c", "import torchvision"});
    if (probe.wait_exit(std::chrono::seconds(60)) != 0) {
      testing::skip_check("torchvision",
                          "/usr/bin/python3 cannot import torchvision (apt-get install "
                          "python3-torchvision; .ci/run installs it)");
      return;
    }
    check_against_torchvision("resnet50", 224);
    check_against_torchvision("inception_v3", 299);
  }
}

tensor random_images(int64_t n, int64_t size, uint32_t seed) {
  tensor t(dtype::float32, {n, size, size, 3});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = u(rng);
  return t;
}

// A few SGD steps on one fixed batch of 4 random images: the loss falls, the
// moving averages move, and inference (moving averages) differs from
// training (the batch's statistics).
void check_short_training(const std::string& name, int64_t size) {
  graph g;
  image_model_options o{.image_size = size, .classes = 10, .aux_logits = false};
  auto m = models::make_image_model(name, o);
  auto images = placeholder(g, dtype::float32, {4, size, size, 3}, "images");
  auto labels = placeholder(g, dtype::int32, {4}, "labels");
  auto heads = m->apply(images, true);
  auto loss = models::image_model_loss(heads, labels);
  auto eval_logits = m->apply(images, false).logits;
  auto step =
      train_step_with_updates(g, momentum(0.01, 0.9).minimize(loss, m->trainable_variables()));
  session s(g);
  s.run({}, {}, {global_variables_initializer(g)});
  feed_list feeds{{images, random_images(4, size, 3)},
                  {labels, tensor::from_vector<int32_t>({1, 5, 7, 2}, shape{4})}};
  const float first = s.run(feeds, {loss})[0].item<float>();
  float last = first;
  for (int i = 0; i < 8; ++i) last = s.run(feeds, {loss}, {step})[0].item<float>();
  INFO(name << ": loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last < first);
  auto out = s.run(feeds, {heads.logits, eval_logits});
  auto train_logits = out[0].to_vector<float>(), inference_logits = out[1].to_vector<float>();
  double differ = 0;
  for (size_t i = 0; i < train_logits.size(); ++i)
    differ = std::max(differ, double(std::abs(train_logits[i] - inference_logits[i])));
  CHECK(differ > 1e-3);
}

TEST_CASE("a short run lowers the loss; training and inference modes differ") {
  SUBCASE("resnet50") { check_short_training("resnet50", 32); }
  SUBCASE("inception_v3") { check_short_training("inception_v3", 107); }
}

// ResNet-50 on Fashion-MNIST, exported as actorflow-train --export does:
// the served probabilities are the training session's inference ones, and
// the graph optimizer folds every batch norm of the export into its
// convolution.
TEST_CASE("an exported ResNet-50 serves its inference outputs, every batch norm folded") {
  namespace fs = std::filesystem;
  const auto base =
      fs::temp_directory_path() / ("actorflow_resnet_export_" + std::to_string(::getpid()));
  fs::remove_all(base);
  graph g;
  auto net = models::make_classifier(g, "resnet50", 3);
  auto images = placeholder(g, dtype::float32, {-1, 28, 28, 1}, "eval_images");
  auto probabilities = softmax(net->logits(images));
  session s(g);
  s.run({}, {}, {global_variables_initializer(g)});
  tensor batch(dtype::float32, {3, 28, 28, 1});
  std::mt19937 rng(5);
  for (int64_t i = 0; i < batch.num_elements(); ++i)
    batch.mutable_data<float>()[i] = float(rng() % 256) / 255.f;
  auto expected = s.run({{images, batch}}, {probabilities})[0].to_vector<float>();
  const std::string dir = apps::export_classifier(s, *net, base.string());

  auto files = load_model_files(dir);
  const signature_def& sig = *files.find("serving_default");
  run_signature run;
  run.feeds.push_back(signature_endpoint(*files.g, sig.find_input("images")->tensor));
  for (auto& out : sig.outputs) run.fetches.push_back(signature_endpoint(*files.g, out.tensor));
  auto optimized = optimize_graph(*files.g, run);
  CHECK(optimized.report.batch_norms_folded == 53);  // every one of ResNet-50's

  auto model = load_model(dir);
  auto served = model->predict("serving_default", {{"images", batch}});
  auto got = served.at("probabilities").to_vector<float>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-4));
  fs::remove_all(base);
}

}  // namespace
}  // namespace actorflow
