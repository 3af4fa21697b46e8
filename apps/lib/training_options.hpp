// actorflow-train's settings, shared by the single-process and cluster paths.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "actors/input/idx_reader.hpp"

namespace actorflow::apps {

struct training_options {
  std::string model = "mlp";
  int epochs = 10;
  int batch = 128;
  std::string optimizer = "adam";
  bool optimizer_given = false;    // --optimizer on the command line (the LM's default differs)
  std::string precision = "fp32";  // mlp and cnn: fp32, or bf16 products (mixed precision)
  double lr = 1e-3;
  int64_t seed = 0;
  int threads = 0;
  /// Where the model's layers run: "cpu", "gpu" (/gpu:0) or "stand_in" (the
  /// accelerator stand-in, devices/stand_in: the GPU's protocol on the CPU).
  std::string device = "cpu";
  std::string out = "train-out";
  std::string checkpoint_dir;
  int keep_checkpoints = 5;
  int64_t checkpoint_every = 0;
  bool resume = false;
  bool overwrite_checkpoints = false;        // delete the directory's checkpoints first
  std::string data_dir = fashion_mnist_dir;  // the LM's default: fortunes_dir
  int64_t test_examples = 0;                 // evaluate on the first N test images (0: all)
  // Seeing inside the run (apps/lib/step_observer.hpp):
  std::vector<int64_t> trace_steps;  // write these steps' timelines to `out`
  bool profile = false;              // trace every step, print the per-op table
  std::string logdir;                // TensorBoard summaries (apps/lib/train_summaries.hpp)
  std::string export_dir;  // an export for actorflow-serve at the end (apps/lib/model_export.hpp)
  int64_t summary_every = 100;  // steps between summaries
  // The LSTM language model (--model lstm_lm):
  bool full_softmax = false;     // train with the full softmax (default: sampled)
  int64_t max_train_tokens = 0;  // use only the first N training tokens (0: all)
  int64_t max_valid_tokens = 0;  // the same for validation
  int64_t vocab = 10000;         // the most frequent training words kept (plus <unk>)
  int64_t embedding = 256;       // embedding width
  int64_t hidden = 256;          // the LSTM's width
  int64_t vocab_shards = 0;  // embedding and softmax shards (0: one per ps task; 1 in one process)
  // In a cluster:
  bool sync = false;              // synchronous steps (default: asynchronous)
  int backup_workers = 0;         // with sync: each step drops the slowest b workers
  int64_t max_steps = 0;          // stop at this global step (0: after --epochs)
  double recovery_seconds = 120;  // how long to wait for a lost task to come back
  int64_t progress_every = 0;     // a `progress step= t=` line every N own steps (0: off)
  std::string straggler_delay;    // stragglers injected (apps/lib/straggler_delay.hpp; "": off)
};

}  // namespace actorflow::apps
