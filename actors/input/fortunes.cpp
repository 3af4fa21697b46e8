#include "actors/input/fortunes.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace actorflow {

namespace {

namespace fs = std::filesystem;

constexpr const char* kEos = "<eos>";
constexpr const char* kUnk = "<unk>";

// ---- UTF-8 ------------------------------------------------------------------------------------

// The code point at text[i] and its length in bytes; a malformed sequence is one byte of U+FFFD,
// as Python's errors="replace" reads it (the reference script's decoder).
std::pair<char32_t, size_t> decode_at(const std::string& text, size_t i) {
  const auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) return {b, 1};
  const size_t len = b >= 0xF0 && b < 0xF5 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (len == 0 || i + len > text.size()) return {0xFFFD, 1};
  char32_t c = b & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k) {
    const auto cont = static_cast<unsigned char>(text[i + k]);
    if ((cont & 0xC0) != 0x80) return {0xFFFD, 1};
    c = (c << 6) | (cont & 0x3F);
  }
  return {c, len};
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

// Python's str.isspace(), which the reference's \s follows.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// ASCII and Latin-1 capitals (U+00D7 is the multiplication sign).
char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  return c;
}

bool is_word_char(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '\'';
}

// ---- files ------------------------------------------------------------------------------------

bool has_suffix(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The plain text files of dir, sorted by name.
std::vector<fs::path> fortune_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("fortunes", "directory " + dir + " not found (install Debian's fortunes package)");
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (has_suffix(name, ".dat") || has_suffix(name, ".u8")) continue;
    // A symlink counts as what it points to: a .dat or .u8 file, or not a file, is skipped.
    if (fs::is_symlink(p, ec)) {
      const std::string target = fs::read_symlink(p, ec).filename().string();
      if (has_suffix(target, ".dat") || has_suffix(target, ".u8")) continue;
    }
    if (fs::is_regular_file(p, ec)) files.push_back(p);
  }
  if (ec) fail("fortunes", "cannot list directory " + dir + ": " + ec.message());
  if (files.empty()) fail("fortunes", "directory " + dir + " holds no fortune files");
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("fortunes", "cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("fortunes", "error reading " + path.string());
  return text.str();
}

// ---- vocabulary -------------------------------------------------------------------------------

struct token_stats {
  int64_t count = 0;
  int64_t first = 0;  // position of the first appearance in the training tokens
};

std::vector<std::string> build_vocab(const std::vector<std::string>& train, int64_t max_vocab) {
  std::unordered_map<std::string, token_stats> stats;
  for (size_t i = 0; i < train.size(); ++i) {
    auto [it, fresh] = stats.try_emplace(train[i], token_stats{0, int64_t(i)});
    ++it->second.count;
  }
  std::vector<std::pair<const std::string*, token_stats>> order;
  for (auto& [token, s] : stats) order.emplace_back(&token, s);
  // Most frequent first; among equals, the one seen first.
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second.count != b.second.count ? a.second.count > b.second.count
                                            : a.second.first < b.second.first;
  });
  std::vector<std::string> vocab;
  for (size_t i = 0; i < order.size() && int64_t(i) < max_vocab; ++i)
    vocab.push_back(*order[i].first);
  vocab.push_back(kUnk);
  return vocab;
}

std::vector<int64_t> to_ids(const std::vector<std::string>& tokens,
                            const std::vector<std::string>& vocab) {
  std::unordered_map<std::string, int64_t> index;
  for (size_t i = 0; i + 1 < vocab.size(); ++i) index.emplace(vocab[i], int64_t(i));
  const int64_t unk = int64_t(vocab.size()) - 1;
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (auto& t : tokens) {
    auto it = index.find(t);
    ids.push_back(it == index.end() ? unk : it->second);
  }
  return ids;
}

}  // namespace

std::vector<std::string> fortune_tokens(const std::string& text) {
  std::vector<std::string> tokens;
  std::string word;
  auto end_word = [&] {
    if (!word.empty()) tokens.push_back(std::move(word));
    word.clear();
  };
  for (size_t i = 0; i < text.size();) {
    auto [c, len] = decode_at(text, i);
    i += len;
    c = to_lower(c);
    if (is_word_char(c)) {
      word += char(c);
      continue;
    }
    end_word();
    if (is_space(c)) continue;
    tokens.emplace_back();
    append_utf8(tokens.back(), c);
  }
  end_word();
  return tokens;
}

std::vector<std::string> split_fortunes(const std::string& text) {
  std::vector<std::string> fortunes;
  std::string current;
  auto flush = [&] {
    if (std::any_of(current.begin(), current.end(),
                    [](char c) { return !std::isspace(uint8_t(c)); }))
      fortunes.push_back(current);
    current.clear();
  };
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line == "%") {
      flush();
      continue;
    }
    current += line;
    current += '\n';
  }
  flush();
  return fortunes;
}

fortunes_corpus load_fortunes(const std::string& dir, int64_t max_vocab) {
  if (max_vocab < 1)
    fail("fortunes", "max_vocab must be at least 1, got " + std::to_string(max_vocab));
  std::vector<std::string> train, valid;
  int64_t index = 0;
  for (auto& file : fortune_files(dir)) {
    for (auto& fortune : split_fortunes(read_text(file))) {
      auto& dest = index++ % 10 == 9 ? valid : train;
      auto tokens = fortune_tokens(fortune);
      dest.insert(dest.end(), tokens.begin(), tokens.end());
      dest.push_back(kEos);
    }
  }
  if (index == 0) fail("fortunes", "no fortunes in the files of " + dir);
  fortunes_corpus corpus;
  corpus.vocab = build_vocab(train, max_vocab);
  corpus.train = to_ids(train, corpus.vocab);
  corpus.valid = to_ids(valid, corpus.vocab);
  return corpus;
}

// ---- bptt_batcher -----------------------------------------------------------------------------

bptt_batcher::bptt_batcher(std::vector<int64_t> ids, bptt_options options)
    : ids_(std::move(ids)), options_(options) {
  if (options_.streams < 1 || options_.steps < 1)
    fail("bptt", "streams and steps must be at least 1, got " + std::to_string(options_.streams) +
                     " and " + std::to_string(options_.steps));
  // One token more than the inputs: the last target.
  stream_length_ = ids_.empty() ? 0 : (int64_t(ids_.size()) - 1) / options_.streams;
  segments_ = stream_length_ / options_.steps;
  if (segments_ == 0)
    fail("bptt", std::to_string(ids_.size()) + " tokens cannot fill one segment of " +
                     std::to_string(options_.streams) + " streams x " +
                     std::to_string(options_.steps) + " steps (needs " +
                     std::to_string(options_.streams * options_.steps + 1) + ")");
}

void bptt_batcher::check_position(dataset_position pos) const {
  if (pos.epoch < 0 || pos.batch < 0 || pos.batch >= segments_)
    fail("bptt", "no segment " + std::to_string(pos.batch) + " of epoch " +
                     std::to_string(pos.epoch) + " (an epoch has " + std::to_string(segments_) +
                     ")");
}

std::vector<tensor> bptt_batcher::batch(dataset_position pos) const {
  check_position(pos);
  const int64_t streams = options_.streams, steps = options_.steps;
  tensor inputs(dtype::int64, shape({streams, steps}));
  tensor targets(dtype::int64, shape({streams, steps}));
  int64_t* x = inputs.mutable_data<int64_t>();
  int64_t* y = targets.mutable_data<int64_t>();
  for (int64_t s = 0; s < streams; ++s) {
    // Stream s is ids[s * n, (s + 1) * n); its targets start one token later.
    const int64_t first = s * stream_length_ + pos.batch * steps;
    std::copy_n(ids_.begin() + first, steps, x + s * steps);
    std::copy_n(ids_.begin() + first + 1, steps, y + s * steps);
  }
  return {inputs, targets};
}

dataset_position bptt_batcher::position_at_step(int64_t step) const {
  if (step < 0) fail("bptt", "step must be >= 0, got " + std::to_string(step));
  return {step / segments_, step % segments_};
}

int64_t bptt_batcher::step_at(dataset_position pos) const {
  check_position(pos);
  return pos.epoch * segments_ + pos.batch;
}

dataset_position bptt_batcher::next(dataset_position pos) const {
  check_position(pos);
  return pos.batch + 1 < segments_ ? dataset_position{pos.epoch, pos.batch + 1}
                                   : dataset_position{pos.epoch + 1, 0};
}

std::shared_ptr<dataset> bptt_batcher::as_dataset() const {
  const int64_t streams = options_.streams, steps = options_.steps;
  tensor inputs(dtype::int64, shape({segments_, streams, steps}));
  tensor targets(dtype::int64, shape({segments_, streams, steps}));
  const size_t per_segment = size_t(streams * steps);
  for (int64_t k = 0; k < segments_; ++k) {
    auto b = batch({0, k});
    std::copy_n(b[0].data<int64_t>(), per_segment,
                inputs.mutable_data<int64_t>() + k * per_segment);
    std::copy_n(b[1].data<int64_t>(), per_segment,
                targets.mutable_data<int64_t>() + k * per_segment);
  }
  return std::make_shared<dataset>(
      std::vector<tensor>{inputs, targets},
      dataset_options{.batch_size = 1, .seed = 0, .shuffle = false, .drop_remainder = true});
}

}  // namespace actorflow
