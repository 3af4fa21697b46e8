// The language model's corpus: Debian's `fortunes` package (plain text in
// /usr/share/games/fortunes, fortunes separated by lines holding only `%`), as
// word ids, and the truncated-BPTT batches a recurrent model trains on.
//
// Tokens follow ../shared/perf-ref/tf_lstm_lm.py: lower-cased text split into
// runs of [a-z0-9'] and single other characters (whitespace dropped), `<eos>`
// after each fortune. Where it differs from that script, deliberately:
// - A line holding only `%` always separates. The script splits at "\n%\n",
//   so a `%` line at the start of a file or right after another one becomes
//   a `%` token: in Debian 12's package, one extra fortune "%" at the start of
//   `tao` (which shifts the every-10th validation split of the files after
//   it) and two extra tokens. With the split at lines, the script's rules give
//   exactly our ids (checked: 514,749 training and 58,286 validation tokens).
// - Lower-casing covers ASCII and Latin-1 letters only (Python's covers all of
//   Unicode; the package has no other cased letters).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "actors/input/dataset.hpp"
#include "core/tensor.hpp"

namespace actorflow {

/// Where Debian's fortunes package installs its text files.
inline constexpr const char* fortunes_dir = "/usr/share/games/fortunes";

struct fortunes_corpus {
  std::vector<int64_t> train;  ///< token ids of the training fortunes, in order
  std::vector<int64_t> valid;  ///< token ids of every 10th fortune (0-based 9, 19, ...)
  /// id -> token: the most frequent training tokens (ties: first appearance
  /// first), then "<unk>", which every other token maps to.
  std::vector<std::string> vocab;

  int64_t vocab_size() const { return int64_t(vocab.size()); }
  int64_t unk_id() const { return vocab_size() - 1; }
};

/// One fortune's tokens, without the `<eos>`: lower-cased, runs of [a-z0-9']
/// and single other (UTF-8) characters, whitespace dropped.
std::vector<std::string> fortune_tokens(const std::string& text);

/// The fortunes of one file's text, split at lines holding only `%`; empty
/// ones (whitespace only) are dropped.
std::vector<std::string> split_fortunes(const std::string& text);

/// Reads the plain text files of `dir` (sorted by name; `.dat` and `.u8`
/// files, anything that is not a regular file, and symlinks to such skipped),
/// splits each into fortunes, and maps their tokens to ids with a vocabulary
/// of the `max_vocab` most frequent training tokens plus `<unk>`. A missing or
/// unreadable directory or file, or one without fortunes, throws
/// `[fortunes] ...` naming it.
fortunes_corpus load_fortunes(const std::string& dir = fortunes_dir, int64_t max_vocab = 10000);

struct bptt_options {
  int64_t streams = 32;  ///< parallel streams: the sequence cut into this many contiguous parts
  int64_t steps = 35;    ///< time steps per segment
};

/// Truncated-BPTT batches, as ../shared/perf-ref/tf_lstm_lm.py cuts them: the
/// ids become `streams` contiguous rows of n = (size - 1) / streams tokens;
/// segment k holds columns [k * steps, (k + 1) * steps) of each row as inputs
/// and the tokens one further as targets, so segment k + 1 of a stream
/// continues segment k (carry the recurrent state across). The columns after
/// the last whole segment are never used. Every epoch has the same segments in
/// the same order, so a position depends only on the step.
class bptt_batcher {
 public:
  /// Throws `[bptt] ...` when the options are not positive or the ids do not
  /// fill one segment of every stream.
  bptt_batcher(std::vector<int64_t> ids, bptt_options options = {});

  const bptt_options& options() const { return options_; }
  /// Tokens per stream (n above).
  int64_t stream_length() const { return stream_length_; }
  int64_t segments_per_epoch() const { return segments_; }

  /// {inputs, targets}: int64 [streams, steps] each, targets[s][t] the token
  /// after inputs[s][t]. `pos.batch` is the segment.
  std::vector<tensor> batch(dataset_position pos) const;
  /// The position of global step `step`, counting one segment per step from
  /// epoch 0 (where training resumes from a checkpoint taken at that step).
  dataset_position position_at_step(int64_t step) const;
  /// The inverse of position_at_step.
  int64_t step_at(dataset_position pos) const;
  /// The position after `pos` (the next epoch's first segment after the last).
  dataset_position next(dataset_position pos) const;

  /// The same segments as a dataset of batch size 1 in stored order, for a
  /// batch_reader: components inputs and targets, int64 [segments, streams,
  /// steps], so a batch is [1, streams, steps] (reshape it in the graph), and
  /// its positions are this batcher's.
  std::shared_ptr<dataset> as_dataset() const;

 private:
  void check_position(dataset_position pos) const;

  std::vector<int64_t> ids_;
  bptt_options options_;
  int64_t stream_length_ = 0;
  int64_t segments_ = 0;
};

}  // namespace actorflow
