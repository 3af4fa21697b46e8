// What actorflow-train shows and writes: a progress bar (plain lines when
// stdout is not a terminal), one line per epoch, metrics.csv and metrics.svg.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace actorflow {

/// Seconds on a steady clock.
double now_seconds();

struct epoch_metrics {
  int64_t epoch = 0;  // counted from 1
  int64_t step = 0;   // global step at the epoch's end
  double train_loss = 0;
  double test_acc = 0;  // the evaluation: test accuracy, or the LM's validation perplexity
  double seconds = 0;
  double examples_per_s = 0;  // training rate, in report_columns::unit
};

/// What a model's report calls its evaluation and its rate.
struct report_columns {
  std::string eval = "test_acc";             ///< CSV column and key of epoch_metrics::test_acc
  std::string eval_title = "test accuracy";  ///< its plot's title
  std::string unit = "examples";             ///< what the training rate counts
};

/// Keeps the per-epoch metrics of a run in `dir`/metrics.csv and plots them
/// in `dir`/metrics.svg after every epoch, so a stopped run leaves both behind.
/// A file that cannot be written (a full disk) is a warning on stderr, printed
/// once per run, never an error: the report must not stop the training.
class train_report {
 public:
  /// When `resumed`, the rows of an earlier run in the same directory are kept.
  train_report(std::string dir, std::string title, bool resumed, report_columns columns = {});
  /// Prints the epoch's line and rewrites the CSV and the plot (see above
  /// for a failed write). Call it after the epoch's checkpoint is saved.
  void add_epoch(const epoch_metrics& m);
  /// Whether a write has failed in this run.
  bool write_failed() const { return write_failed_; }
  const std::vector<epoch_metrics>& epochs() const { return epochs_; }
  std::string csv_path() const { return dir_ + "/metrics.csv"; }
  std::string svg_path() const { return dir_ + "/metrics.svg"; }

 private:
  void load_csv();
  void write_csv() const;
  void write_svg() const;
  void write_files();
  std::string csv_header() const;
  std::string dir_, title_;
  report_columns columns_;
  std::vector<epoch_metrics> epochs_;
  bool write_failed_ = false;
};

/// "epoch 3/10 [#####     ] 45%  9876 ex/s  ETA 0:12" redrawn in place on a
/// terminal; otherwise a plain line at most every 10 seconds. `unit` names
/// what is counted ("ex" on the terminal for "examples").
class progress_bar {
 public:
  progress_bar(bool terminal, int64_t total_examples, std::string unit = "examples");
  void update(int64_t epoch, int64_t epochs, int64_t done_examples);
  /// Erases the bar so that the next line starts clean.
  void clear();

 private:
  bool terminal_;
  int64_t total_;
  std::string unit_;
  int64_t first_done_ = -1;
  double start_ = 0, last_draw_ = 0;
  bool drawn_ = false;
};

}  // namespace actorflow
