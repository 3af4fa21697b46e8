#include "apps/lib/json_values.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace actorflow::apps {

namespace {

class reader {
 public:
  reader(std::string_view text, int max_depth)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        max_depth_(max_depth) {}

  json_value document() {
    json_value v = value(0);
    skip_space();
    if (p_ != end_) fail("text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw error("[json] " + what + " at byte " + std::to_string(p_ - begin_));
  }

  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  json_value value(int depth) {
    skip_space();
    if (p_ == end_) fail("the text ends where a value belongs");
    json_value v;
    switch (*p_) {
      case '{':
        return object(depth + 1);
      case '[':
        return array(depth + 1);
      case '"':
        v.type = json_value::kind::string;
        v.text = string();
        return v;
      case 't':
      case 'f':
        v.type = json_value::kind::boolean;
        v.scalar = boolean();
        return v;
      case 'n':
        literal("null");
        return v;
      default:
        v.type = json_value::kind::number;
        v.scalar = number();
        return v;
    }
  }

  void literal(std::string_view word) {
    if (std::string_view(p_, static_cast<size_t>(end_ - p_)).substr(0, word.size()) != word)
      fail("not a JSON value");
    p_ += word.size();
  }

  void enter(int depth) {
    if (depth > max_depth_)
      fail("lists and objects nested deeper than " + std::to_string(max_depth_));
    ++p_;  // the bracket
  }

  json_scalar boolean() {
    json_scalar b;
    b.is_boolean = true;
    if (*p_ == 't') {
      literal("true");
      b.value = 1;
    } else {
      literal("false");
    }
    return b;
  }

  static bool starts_scalar(char c) {
    return c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f';
  }

  // A list: packed when it is a rectangle of numbers and booleans, else
  // read again as a list of values.
  json_value array(int depth) {
    const char* start = p_;
    json_value v;
    v.type = json_value::kind::array;
    int leaf = -1;
    if (packed(depth, 0, leaf, v.dims, v.elements)) return v;
    p_ = start;
    v.dims.clear();
    v.elements.clear();
    enter(depth);
    skip_space();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      return v;
    }
    for (;;) {
      v.items.push_back(value(depth));
      skip_space();
      if (p_ == end_) fail("the text ends inside a list");
      if (*p_ == ']') {
        ++p_;
        return v;
      }
      if (*p_ != ',') fail("expected ',' or ']' in a list");
      ++p_;
    }
  }

  // Reads the list at level `level` of a rectangle into `dims` and `out`;
  // false (the caller rewinds) at the first thing that is not one. `leaf`
  // is the level whose lists hold the scalars, -1 until one is seen.
  bool packed(int depth, size_t level, int& leaf, std::vector<int64_t>& dims,
              std::vector<json_scalar>& out) {
    enter(depth);
    if (dims.size() == level) dims.push_back(-1);  // its length, once known
    int64_t count = 0;
    skip_space();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      if (leaf == -1) leaf = static_cast<int>(level);
      if (leaf != static_cast<int>(level) || dims.size() != level + 1) return false;
      return settle(dims[level], 0);
    }
    for (;;) {
      skip_space();
      if (p_ == end_) return false;
      if (*p_ == '[') {
        if (leaf == static_cast<int>(level)) return false;
        if (!packed(depth + 1, level + 1, leaf, dims, out)) return false;
      } else if (starts_scalar(*p_)) {
        if (leaf == -1) leaf = static_cast<int>(level);
        if (leaf != static_cast<int>(level)) return false;
        out.push_back(*p_ == 't' || *p_ == 'f' ? boolean() : number());
      } else {
        return false;
      }
      ++count;
      skip_space();
      if (p_ == end_) return false;
      if (*p_ == ']') break;
      if (*p_ != ',') return false;
      ++p_;
    }
    ++p_;
    return settle(dims[level], count);
  }

  // A level's length: set by its first list, the same in every other.
  static bool settle(int64_t& known, int64_t count) {
    if (known == -1) known = count;
    return known == count;
  }

  json_value object(int depth) {
    enter(depth);
    json_value v;
    v.type = json_value::kind::object;
    skip_space();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      return v;
    }
    for (;;) {
      skip_space();
      if (p_ == end_ || *p_ != '"') fail("expected a string key in an object");
      std::string key = string();
      skip_space();
      if (p_ == end_ || *p_ != ':') fail("expected ':' after an object's key");
      ++p_;
      v.members.emplace_back(std::move(key), value(depth));
      skip_space();
      if (p_ == end_) fail("the text ends inside an object");
      if (*p_ == '}') {
        ++p_;
        return v;
      }
      if (*p_ != ',') fail("expected ',' or '}' in an object");
      ++p_;
    }
  }

  // A string token; one with escapes is decoded by nlohmann::json.
  std::string string() {
    const char* start = p_++;
    bool escaped = false;
    while (p_ != end_ && *p_ != '"') {
      auto c = static_cast<unsigned char>(*p_);
      if (c < 0x20) fail("a control character inside a string");
      if (c == '\\') {
        escaped = true;
        if (++p_ == end_) break;
      }
      ++p_;
    }
    if (p_ == end_) fail("the text ends inside a string");
    ++p_;  // the closing quote
    std::string_view token(start, static_cast<size_t>(p_ - start));
    if (!escaped) {
      std::string out(token.substr(1, token.size() - 2));
      if (!nlohmann::json::accept("\"" + out + "\"")) fail("a string that is not valid UTF-8");
      return out;
    }
    auto decoded = nlohmann::json::parse(token, nullptr, false);
    if (decoded.is_discarded()) fail("a string with a malformed escape or UTF-8");
    return decoded.get<std::string>();
  }

  // A number as JSON's grammar has it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  json_scalar number() {
    const char* start = p_;
    auto digits = [&] {
      const char* from = p_;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      return p_ - from;
    };
    if (p_ != end_ && *p_ == '-') ++p_;
    const char* int_start = p_;
    auto int_digits = digits();
    if (int_digits == 0) fail("not a JSON value");
    if (int_digits > 1 && *int_start == '0') fail("a number with a leading zero");
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      if (digits() == 0) fail("a number without digits after '.'");
      integer = false;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (digits() == 0) fail("a number without digits in its exponent");
      integer = false;
    }
    json_scalar n;
    auto parsed = std::from_chars(start, p_, n.value);
    if (parsed.ec == std::errc::result_out_of_range) {
      // Too large for a double is an error (as nlohmann::json has it); too
      // small rounds to zero, as strtod does.
      n.value = std::strtod(std::string(start, p_).c_str(), nullptr);
      if (std::isinf(n.value)) fail("a number beyond a double's range");
    }
    if (integer) {
      auto as_int = std::from_chars(start, p_, n.integer);
      n.is_integer = as_int.ec == std::errc() && as_int.ptr == p_;
    }
    return n;
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  int max_depth_;
};

}  // namespace

const json_value* json_value::find(std::string_view key) const {
  for (auto& [name, v] : members)
    if (name == key) return &v;
  return nullptr;
}

json_value parse_json(std::string_view text, int max_depth) {
  return reader(text, max_depth).document();
}

}  // namespace actorflow::apps
