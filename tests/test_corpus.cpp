// The language model's corpus (actors/input/fortunes.hpp): tokens, the validation split, the
// vocabulary and its ties, <unk>, the BPTT batches and their positions, on a fixture corpus
// written here; and the real Debian package when it is installed.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "actors/input/fortunes.hpp"
#include "test_util.hpp"

using namespace actorflow;
namespace fs = std::filesystem;

namespace {

// A directory of its own under the temp dir, removed at the end.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

std::vector<std::string> words(const fortunes_corpus& c, const std::vector<int64_t>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(c.vocab.at(size_t(id)));
  return out;
}

// Ten fortunes over two files (b before c by name), so that fortune 9 is the validation one;
// plus files the loader must skip.
void write_fixture(const temp_dir& d) {
  d.write("b", "A cat.\n%\nthe cat\n%\n%\nThe dog's bone!\n%\n  \n%\nb b\n%\n");
  d.write("c", "a\n%\ncat\n%\ndog\n%\nzebra, zebra\n%\nUNSEEN words\nhere\n%\n");
  d.write("c.dat", "binary index: must be skipped");
  d.write("b.u8", "skipped too");
  fs::create_symlink("c.dat", d.path / "alias");  // a symlink to a .dat file
  fs::create_directory(d.path / "subdir");
}

}  // namespace

TEST_CASE("fortune_tokens: lower case, words with apostrophes, single punctuation marks") {
  using v = std::vector<std::string>;
  CHECK(fortune_tokens("Don't PANIC!!  (42 times)") ==
        v{"don't", "panic", "!", "!", "(", "42", "times", ")"});
  CHECK(fortune_tokens("a-b\tc\n\nd...") == v{"a", "-", "b", "c", "d", ".", ".", "."});
  // Latin-1 capitals are lowered; a non-ASCII letter is a token of its own, as in the
  // reference's regex [a-z0-9']+|[^\sa-z0-9'].
  CHECK(fortune_tokens("Caf\xC3\x89 na\xC3\xafve") == v{"caf", "\xC3\xA9", "na", "\xC3\xAF", "ve"});
  CHECK(fortune_tokens("  \n ") == v{});
}

TEST_CASE("split_fortunes: lines holding only % separate; empty fortunes are dropped") {
  using v = std::vector<std::string>;
  CHECK(split_fortunes("one\n%\ntwo\nlines\n%\n") == v{"one\n", "two\nlines\n"});
  CHECK(split_fortunes("%\n%\n a\n%\n \n%\n100%\n% \nlast") == v{" a\n", "100%\n% \nlast\n"});
}

TEST_CASE("load_fortunes: tokens, the validation split, vocabulary ties and <unk>") {
  temp_dir d("actorflow-fortunes");
  write_fixture(d);
  auto c = load_fortunes(d.path.string(), 4);
  // Fortunes 0-8 (the empty ones dropped): "a cat." "the cat" "the dog's bone!" "b b" | "a"
  // "cat" "dog" "zebra, zebra" "unseen words here"; none is the 10th, so none is validation.
  // Training tokens in order: a cat . <eos> the cat <eos> the dog's bone ! <eos> b b <eos>
  // a <eos> cat <eos> dog <eos> zebra , zebra <eos> unseen words here <eos>.
  // Counts: <eos> 9, cat 3, a 2, the 2, b 2, zebra 2, the rest 1. Ties among a, the, b, zebra
  // go by first appearance (a, the, b, zebra), so max_vocab 4 keeps <eos> cat a the.
  CHECK(c.vocab == std::vector<std::string>{"<eos>", "cat", "a", "the", "<unk>"});
  CHECK(c.unk_id() == 4);
  CHECK(c.valid.empty());
  CHECK(words(c, c.train) == std::vector<std::string>{"a",     "cat",   "<unk>", "<eos>", "the",
                                                      "cat",   "<eos>", "the",   "<unk>", "<unk>",
                                                      "<unk>", "<eos>", "<unk>", "<unk>", "<eos>",
                                                      "a",     "<eos>", "cat",   "<eos>", "<unk>",
                                                      "<eos>", "<unk>", "<unk>", "<unk>", "<eos>",
                                                      "<unk>", "<unk>", "<unk>", "<eos>"});
  // One fortune more: it is the 10th (index 9), so it goes to validation, and the 11th to
  // training again.
  d.write("d", "Cat cat zebra\n%\nthe end\n");
  c = load_fortunes(d.path.string(), 100);
  CHECK(words(c, c.valid) == std::vector<std::string>{"cat", "cat", "zebra", "<eos>"});
  CHECK(words(c, {c.train.end() - 3, c.train.end()}) ==
        std::vector<std::string>{"the", "end", "<eos>"});
  // cat and the tie at 3: cat came first. Validation tokens do not count: b and zebra tie at 2
  // in training (b first), though zebra has a third in validation.
  auto at = [&](const std::string& w) {
    return std::find(c.vocab.begin(), c.vocab.end(), w) - c.vocab.begin();
  };
  CHECK(c.vocab.at(0) == "<eos>");
  CHECK(c.vocab.at(1) == "cat");
  CHECK(c.vocab.at(2) == "the");
  CHECK(at("b") < at("zebra"));
  CHECK(c.vocab.back() == "<unk>");
  CHECK(c.vocab_size() == 17);  // 16 distinct training tokens + <unk>
}

TEST_CASE("load_fortunes: a missing or empty directory is a clear error") {
  CHECK_THROWS_WITH(load_fortunes("/nonexistent/fortunes"),
                    doctest::Contains("[fortunes] directory /nonexistent/fortunes not found"));
  temp_dir d("actorflow-fortunes-empty");
  d.write("x.dat", "");
  CHECK_THROWS_WITH(load_fortunes(d.path.string()), doctest::Contains("holds no fortune files"));
  d.write("blank", "\n%\n  \n");
  CHECK_THROWS_WITH(load_fortunes(d.path.string()), doctest::Contains("[fortunes] no fortunes"));
  CHECK_THROWS_WITH(load_fortunes(d.path.string(), 0), doctest::Contains("max_vocab"));
}

TEST_CASE("bptt_batcher: streams are contiguous parts, targets shifted by one") {
  std::vector<int64_t> ids(2 * 7 + 1);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
  bptt_batcher b(ids, {.streams = 2, .steps = 3});
  // n = (15 - 1) / 2 = 7 tokens per stream: stream 0 is 0..6, stream 1 is 7..13; two whole
  // segments of 3, the 7th column unused.
  CHECK(b.stream_length() == 7);
  CHECK(b.segments_per_epoch() == 2);
  auto s0 = b.batch({0, 0});
  REQUIRE(s0.size() == 2);
  CHECK(s0[0].dims() == shape({2, 3}));
  CHECK(s0[0].type() == dtype::int64);
  CHECK(s0[0].to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 7, 8, 9});
  CHECK(s0[1].to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 8, 9, 10});
  auto s1 = b.batch({3, 1});  // every epoch has the same segments
  CHECK(s1[0].to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5, 10, 11, 12});
  CHECK(s1[1].to_vector<int64_t>() == std::vector<int64_t>{4, 5, 6, 11, 12, 13});
  CHECK_THROWS_WITH(b.batch({0, 2}), doctest::Contains("[bptt] no segment 2 of epoch 0"));
}

TEST_CASE("bptt_batcher: positions resume at a step; bad sizes are errors") {
  std::vector<int64_t> ids(32 * 35 * 3 + 5, 1);
  bptt_batcher b(ids);
  CHECK(b.segments_per_epoch() == 3);
  CHECK(b.batch({0, 0})[0].dims() == shape({32, 35}));
  CHECK(b.position_at_step(0) == dataset_position{0, 0});
  CHECK(b.position_at_step(7) == dataset_position{2, 1});
  CHECK(b.step_at({2, 1}) == 7);
  CHECK(b.next({0, 2}) == dataset_position{1, 0});
  CHECK(b.next({1, 0}) == dataset_position{1, 1});
  CHECK_THROWS_WITH(b.position_at_step(-1), doctest::Contains("step must be >= 0"));
  CHECK_THROWS_WITH(bptt_batcher(std::vector<int64_t>(32 * 35, 1)),
                    doctest::Contains("1120 tokens cannot fill one segment"));
  CHECK_THROWS_WITH(bptt_batcher(ids, {.streams = 0}), doctest::Contains("at least 1"));
  // The dataset view: batch k of any epoch is segment k, with a leading dim of 1.
  std::vector<int64_t> seq(2 * 7 + 1);
  for (size_t i = 0; i < seq.size(); ++i) seq[i] = int64_t(i) * 10;
  bptt_batcher small(seq, {.streams = 2, .steps = 3});
  auto data = small.as_dataset();
  CHECK(data->batches_per_epoch() == 2);
  for (int64_t k = 0; k < 2; ++k) {
    auto from_dataset = data->batch({5, k});
    auto direct = small.batch({5, k});
    CHECK(from_dataset[0].dims() == shape({1, 2, 3}));
    CHECK(from_dataset[0].to_vector<int64_t>() == direct[0].to_vector<int64_t>());
    CHECK(from_dataset[1].to_vector<int64_t>() == direct[1].to_vector<int64_t>());
  }
}

TEST_CASE("load_fortunes reads Debian's fortunes package" * doctest::test_suite("fortunes")) {
  if (!fs::is_directory(fortunes_dir)) {
    testing::skip_check("fortunes",
                        std::string(fortunes_dir) + " not found (apt-get install fortunes)");
    return;
  }
  auto c = load_fortunes();
  // With Debian 12's fortunes 1:1.99.1-7.3: 514,749 training and 58,286 validation tokens.
  CHECK(c.train.size() > 100000);
  CHECK(c.valid.size() > 10000);
  // About a tenth of the fortunes (of varying length) are validation.
  const double share = double(c.valid.size()) / double(c.train.size() + c.valid.size());
  CHECK(share > 0.07);
  CHECK(share < 0.13);
  CHECK(c.vocab_size() == 10001);
  CHECK(c.vocab.back() == "<unk>");
  int64_t out_of_range = 0;
  for (auto& ids : {c.train, c.valid})
    for (auto id : ids) out_of_range += id < 0 || id >= c.vocab_size();
  CHECK(out_of_range == 0);
  bptt_batcher b(c.train);
  CHECK(b.segments_per_epoch() == int64_t(c.train.size() - 1) / 32 / 35);
}
