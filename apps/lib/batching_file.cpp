#include "apps/lib/batching_file.hpp"

#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace actorflow::apps {

namespace {

// A reader of `name { value: N }` entries, with # comments.
class entries {
 public:
  entries(const std::string& text, std::string source) : text_(text), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw error("[batching_parameters] " + source_ + ":" + std::to_string(line_) + ": " + what);
  }

  bool done() {
    skip();
    return at_ == text_.size();
  }

  std::string name() {
    skip();
    size_t start = at_;
    while (at_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[at_])) || text_[at_] == '_'))
      ++at_;
    if (at_ == start) fail("expected a field name");
    return text_.substr(start, at_ - start);
  }

  void expect(char c) {
    skip();
    if (at_ == text_.size() || text_[at_] != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }

  bool accept(char c) {
    skip();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  int64_t number() {
    skip();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text_.data() + at_, text_.data() + text_.size(), value);
    if (ec != std::errc()) fail("expected a whole number");
    at_ = static_cast<size_t>(end - text_.data());
    return value;
  }

 private:
  void skip() {
    while (at_ < text_.size()) {
      char c = text_[at_];
      if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') ++at_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        if (c == '\n') ++line_;
        ++at_;
      } else {
        return;
      }
    }
  }

  const std::string& text_;
  std::string source_;
  size_t at_ = 0;
  int line_ = 1;
};

int64_t in_range(entries& in, const std::string& field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    in.fail(field + " is " + std::to_string(value) + ", outside [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "]");
  return value;
}

}  // namespace

batching_options parse_batching_parameters(const std::string& text, const std::string& source,
                                           batching_options o) {
  entries in(text, source);
  o.enabled = true;
  while (!in.done()) {
    auto field = in.name();
    in.accept(':');  // the text format allows one before a message
    in.expect('{');
    if (in.name() != "value") in.fail(field + ": expected 'value'");
    in.expect(':');
    int64_t v = in.number();
    in.expect('}');
    if (field == "max_batch_size")
      o.max_batch_size = in_range(in, field, v, 1, int64_t{1} << 20);
    else if (field == "batch_timeout_micros")
      o.batch_timeout = std::chrono::microseconds(in_range(in, field, v, 0, 60'000'000));
    else if (field == "num_batch_threads")
      o.num_batch_threads = static_cast<int>(in_range(in, field, v, 1, 1024));
    else if (field == "max_enqueued_batches")
      o.max_enqueued_batches = static_cast<int>(in_range(in, field, v, 1, 1 << 20));
    else
      in.fail("'" + field +
              "' is not supported (actorflow reads max_batch_size, batch_timeout_micros, "
              "num_batch_threads and max_enqueued_batches)");
  }
  return o;
}

batching_options read_batching_parameters(const std::string& path, batching_options defaults) {
  std::ifstream file(path);
  if (!file)
    throw error("[batching_parameters] " + path + ": cannot be read", error_code::not_found);
  std::stringstream text;
  text << file.rdbuf();
  return parse_batching_parameters(text.str(), path, defaults);
}

}  // namespace actorflow::apps
