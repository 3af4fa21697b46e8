// actorflow-train --export DIR: the trained model written as an export
// (actors/serving/export.hpp) into DIR/<version>/, TensorFlow Serving's
// layout, the version one more than the newest there (1 in an empty DIR),
// so that a server watching DIR swaps it in.
#pragma once
#include <cstdint>
#include <string>

#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "apps/lib/lstm_lm.hpp"

namespace actorflow::apps {

/// The number of the next version under `base`: one more than the largest
/// directory named by digits, 1 when there is none (or no `base`).
int64_t next_export_version(const std::string& base);

/// Exports a Fashion-MNIST classifier of session `s` into a new version
/// under `base`: signature "serving_default" takes "images" (float32
/// [batch, 28, 28, 1] in [0, 1]) and gives "probabilities" (float32
/// [batch, 10]) and "classes" (int64 [batch]). Returns the version's directory.
std::string export_classifier(session& s, const models::classifier& net, const std::string& base);

/// Exports the language model of session `s` into a new version under
/// `base`: signature "serving_default" takes "words" (int64 [batch, steps],
/// word ids, oldest first) and gives "log_probabilities" (float32 [batch,
/// vocab]) of the word after them, from a zero state (not the state carried
/// in training). The prefix's length is the model's `steps`, fixed: the
/// export unrolls the cell over that many words (lm::read_prefix); pad a
/// shorter prefix on the left with its first word. The vocabulary must be
/// unsharded (one process). Returns the version's directory.
std::string export_language_model(session& s, const lm::lm_variables& vars,
                                  const lm::lm_config& config, const std::string& base);

}  // namespace actorflow::apps
