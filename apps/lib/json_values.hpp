// JSON request bodies read fast, for the REST front end (apps/lib/serve_rest):
// TensorFlow Serving's predict bodies are mostly lists of numbers, and a
// general JSON library makes a node per number and reads each with strtod
// (nlohmann::json: 270 us for one 28x28 image's 16 KB body, the better part
// of a request's whole time). This reader keeps a list of numbers as one
// array of them, read with std::from_chars.
// Strings with escapes are decoded by nlohmann::json, and tests/test_serve
// checks this reader against it on valid and broken bodies: both accept the
// same texts and read the same values.
//
// It reads RFC 8259 JSON: one value, whitespace around it; numbers as the
// grammar has them (no leading '+', no leading zeros, no NaN); strings
// without raw control characters. Nesting deeper than `max_depth` is
// refused, so a hostile body cannot exhaust the stack.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actorflow::apps {

/// A number or a boolean: its value, and for a number whether it was written
/// as an integer (no fraction, no exponent) that fits int64.
struct json_scalar {
  double value = 0;
  int64_t integer = 0;
  bool is_integer = false;
  bool is_boolean = false;  ///< true or false (value 1 or 0)
};

struct json_value {
  enum class kind : uint8_t { null, boolean, number, string, array, object };
  kind type = kind::null;
  json_scalar scalar;  ///< a number's or a boolean's
  std::string text;    ///< a string's decoded text
  /// A list of numbers and booleans, nested however deep, every list of a
  /// level the same length: its dims and its elements in row-major order
  /// (what a tensor is written as), kept without a node per element.
  std::vector<int64_t> dims;
  std::vector<json_scalar> elements;
  std::vector<json_value> items;                            ///< any other list
  std::vector<std::pair<std::string, json_value>> members;  ///< an object, in order

  bool is_array() const { return type == kind::array; }
  bool is_object() const { return type == kind::object; }
  /// A list held as dims and elements.
  bool is_packed() const { return type == kind::array && !dims.empty(); }
  /// The length of a list.
  size_t size() const { return is_packed() ? static_cast<size_t>(dims[0]) : items.size(); }
  /// The member `key` of an object, or null.
  const json_value* find(std::string_view key) const;
};

/// The value `text` holds. Throws actorflow::error (invalid_argument)
/// "<what> at byte <n>" for text that is not JSON or nests deeper than
/// `max_depth`.
json_value parse_json(std::string_view text, int max_depth);

}  // namespace actorflow::apps
