// actorflow-train --export DIR: the trained model written as an export
// (actors/serving/export.hpp) into DIR/<version>/, TensorFlow Serving's
// layout, the version one more than the newest there (1 in an empty DIR),
// so that a server watching DIR swaps it in.
#pragma once
#include <cstdint>
#include <string>

#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"

namespace actorflow::apps {

/// The number of the next version under `base`: one more than the largest
/// directory named by digits, 1 when there is none (or no `base`).
int64_t next_export_version(const std::string& base);

/// Exports a Fashion-MNIST classifier of session `s` into a new version
/// under `base`: signature "serving_default" takes "images" (float32
/// [batch, 28, 28, 1] in [0, 1]) and gives "probabilities" (float32
/// [batch, 10]) and "classes" (int64 [batch]). Returns the version's directory.
std::string export_classifier(session& s, const models::classifier& net, const std::string& base);

}  // namespace actorflow::apps
