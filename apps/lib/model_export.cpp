#include "apps/lib/model_export.hpp"

#include <filesystem>

#include "actors/serving/export.hpp"
#include "core/error.hpp"
#include "ops/array.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"

namespace actorflow::apps {

namespace fs = std::filesystem;

int64_t next_export_version(const std::string& base) {
  auto versions = export_versions(base);
  return versions.empty() ? 1 : versions.front() + 1;
}

std::string export_classifier(session& s, const models::classifier& net, const std::string& base) {
  graph& g = s.owner();
  auto scope = g.name_scope("serving");
  auto images = placeholder(g, dtype::float32, {-1, 28, 28, 1}, "images");
  auto logits = net.logits(images);
  auto probabilities = softmax(logits, "probabilities");
  auto classes = argmax(logits, 1, "classes");
  std::string dir = (fs::path(base) / std::to_string(next_export_version(base))).string();
  export_model(s, dir,
               {{.inputs = {{"images", images}},
                 .outputs = {{"probabilities", probabilities}, {"classes", classes}}}});
  return dir;
}

std::string export_language_model(session& s, const lm::lm_variables& vars,
                                  const lm::lm_config& config, const std::string& base) {
  if (vars.sharded)
    throw error("[export_model] the language model's vocabulary is split into " +
                std::to_string(config.vocab_shards) + " shards: export one of --vocab-shards 1");
  graph& g = s.owner();
  auto scope = g.name_scope("serving");
  auto words = placeholder(g, dtype::int64, {-1, config.steps}, "words");
  // A zero state of the request's batch: [batch, 1] zeros times [1, hidden] zeros.
  auto first = cast(slice(words, {0, 0}, {-1, 1}), dtype::float32);
  auto zeros = matmul(zeros_like(first), fill(g, {1, config.hidden}, 0.0));
  auto state = lm::read_prefix(vars, words, {zeros, zeros});
  auto logits = bias_add(matmul(state.h, vars.softmax_w.shards[0].value(), false, true),
                         vars.softmax_b.shards[0].value());
  auto log_probabilities = log_softmax(logits, "log_probabilities");
  std::string dir = (fs::path(base) / std::to_string(next_export_version(base))).string();
  export_model(
      s, dir,
      {{.inputs = {{"words", words}}, .outputs = {{"log_probabilities", log_probabilities}}}});
  return dir;
}

}  // namespace actorflow::apps
