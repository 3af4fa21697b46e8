// Training-step benchmarks: one full Adam step of the Fashion-MNIST models,
// and the PyTorch reference script run in the same process's lifetime.
#pragma once
#include <optional>
#include <string>

namespace actorflow::bench {

/// Milliseconds of one training step (forward, backward, Adam update) of
/// `model` ("mlp" or "cnn") at `batch`, with the batch already in memory:
/// the median of five blocks of steps / 5 steps each.
double train_step_ms(const std::string& model, int batch, int steps);

/// ../shared/perf-ref/torch_fmnist.py's step_ms for the same model (the median
/// of three runs), when python3-torch and the dataset are installed.
std::optional<double> torch_train_step_ms(const std::string& model, int batch, int steps);

}  // namespace actorflow::bench
