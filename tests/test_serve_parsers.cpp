// What actorflow-serve reads from its users before any model runs: TensorFlow
// Serving's batching parameters file (apps/lib/batching_file.hpp) and REST
// request bodies, by our own JSON reader (apps/lib/json_values.hpp), checked
// against nlohmann::json on edge texts and mutated bodies.
#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "actors/serving/batcher.hpp"
#include "apps/lib/batching_file.hpp"
#include "apps/lib/json_values.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::code_of_failure;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using json = nlohmann::json;

TEST_CASE("TF Serving's batching parameters file is read, and what it cannot be is named") {
  batching_options defaults;
  auto o = apps::parse_batching_parameters(
      "# comment\nmax_batch_size { value: 128 }\nbatch_timeout_micros{value:0}\n"
      "num_batch_threads: { value: 3 } max_enqueued_batches { value: 7 }\n",
      "b.config", defaults);
  CHECK(o.enabled);
  CHECK(o.max_batch_size == 128);
  CHECK(o.batch_timeout == std::chrono::microseconds(0));
  CHECK(o.num_batch_threads == 3);
  CHECK(o.max_enqueued_batches == 7);
  CHECK(apps::parse_batching_parameters("", "empty", defaults).max_batch_size ==
        defaults.max_batch_size);
  auto refusal = [&](const std::string& text) {
    return error_of([&] { apps::parse_batching_parameters(text, "b.config", defaults); });
  };
  CHECK(contains(refusal("allowed_batch_sizes { value: 8 }"),
                 "b.config:1: 'allowed_batch_sizes' is not supported"));
  CHECK(contains(refusal("\n\nmax_batch_size { value: 0 }"),
                 "b.config:3: max_batch_size is 0, outside [1,"));
  CHECK(contains(refusal("max_batch_size { value: -5 }"), "outside"));
  CHECK(contains(refusal("max_batch_size { value: x }"), "expected a whole number"));
  CHECK(contains(refusal("max_batch_size { value: 8"), "expected '}'"));
  CHECK(contains(refusal("max_batch_size value: 8 }"), "expected '{'"));
  CHECK(contains(refusal("{"), "expected a field name"));
  CHECK(code_of_failure([] { apps::read_batching_parameters("/nonexistent/b.config", {}); }) ==
        error_code::not_found);
}

// ---------------------------------------------------------------- the JSON reader

namespace {

bool same_scalar(const apps::json_scalar& ours, const json& theirs) {
  if (ours.is_boolean) return theirs.is_boolean() && theirs.get<bool>() == (ours.value != 0);
  if (!theirs.is_number()) return false;
  if (ours.is_integer && theirs.is_number_integer() && !theirs.is_number_unsigned())
    return theirs.get<int64_t>() == ours.integer;
  return theirs.get<double>() == ours.value;
}

// Whether the elements of a packed list from `at` on, with `dims` from
// `level` on, are nlohmann's nested lists `theirs`.
bool same_packed(const apps::json_value& ours, size_t level, size_t& at, const json& theirs) {
  if (level == ours.dims.size()) return same_scalar(ours.elements[at++], theirs);
  if (!theirs.is_array() || int64_t(theirs.size()) != ours.dims[level]) return false;
  for (auto& e : theirs)
    if (!same_packed(ours, level + 1, at, e)) return false;
  return true;
}

// Whether `ours` holds what nlohmann::json read from the same text.
bool same_json(const apps::json_value& ours, const json& theirs) {
  using kind = apps::json_value::kind;
  switch (ours.type) {
    case kind::null:
      return theirs.is_null();
    case kind::boolean:
    case kind::number:
      return same_scalar(ours.scalar, theirs);
    case kind::string:
      return theirs.is_string() && theirs.get<std::string>() == ours.text;
    case kind::array: {
      if (ours.is_packed()) {
        size_t at = 0;
        return same_packed(ours, 0, at, theirs) && at == ours.elements.size();
      }
      if (!theirs.is_array() || theirs.size() != ours.items.size()) return false;
      for (size_t i = 0; i < ours.items.size(); ++i)
        if (!same_json(ours.items[i], theirs[i])) return false;
      return true;
    }
    case kind::object: {
      if (!theirs.is_object() || theirs.size() != ours.members.size()) return false;
      for (auto& [key, value] : ours.members)
        if (!theirs.contains(key) || !same_json(value, theirs[key])) return false;
      return true;
    }
  }
  return false;
}

// Reads `text` both ways: both accept it with the same values, or both refuse it.
void check_against_nlohmann(const std::string& text) {
  auto theirs = json::parse(text, nullptr, false);
  std::optional<apps::json_value> ours;
  std::string why;
  try {
    ours = apps::parse_json(text, 64);
  } catch (const error& e) {
    why = e.what();
  }
  INFO("text: " << text.substr(0, 200) << " | ours: " << (ours ? "read" : why));
  CHECK(ours.has_value() == !theirs.is_discarded());
  if (ours && !theirs.is_discarded()) CHECK(same_json(*ours, theirs));
}

}  // namespace

TEST_CASE("the JSON reader reads what nlohmann::json reads, and refuses what it refuses") {
  const std::vector<std::string> texts = {
      "{}",
      "[]",
      "[[]]",
      "0",
      "-0",
      "1.5e3",
      "-1E-2",
      "1e999",
      "-1e999",
      "1e-999",
      "9223372036854775807",
      "9223372036854775808",
      "-9223372036854775808",
      "18446744073709551616",
      "[1, 2.5, -3e2, true]",
      "[1, [2]]",
      "[[1,2],[3,4]]",
      R"({"a": [1, {"b": null}], "c": "d\u00e9\n\"q\"", "e": false})",
      "\"\\ud83d\\ude00\"",
      " [ 1 , 2 ] ",
      "[[1, 2], [3]]",
      "[[1], 2]",
      "[[[]], [[]]]",
      "[[], [1]]",
      "[[true, 1]]",
      "[[1, [2]], [3, [4]]]",
      "[[1, 2], [3, 4], {\"a\": 5}]",
      "[01]",
      "[1.]",
      "[.5]",
      "[-]",
      "[1e]",
      "[+1]",
      "[1,]",
      "[,1]",
      "{\"a\" 1}",
      "{\"a\":1,}",
      "{a:1}",
      "[1 2]",
      "tru",
      "nul",
      "\"abc",
      "\"a\tb\"",
      "[\"\\x\"]",
      "\"\\u12\"",
      "[1]]",
      "[[1]",
      "{\"a\":1}}",
      "",
      "   ",
      "NaN",
      "[Infinity]",
      "\"\xff\"",
      "\"\xc3\xa9\"",
      "[true, false, null]"};
  for (auto& t : texts) check_against_nlohmann(t);
  // Mutations of a predict body: flipped, dropped and doubled bytes.
  std::string body = R"({"signature_name": "serving_default", "instances": [[0.5, 1e-3, -2, 3],)"
                     R"( [1, 2, 3, 4]], "x": {"y": [true, null, "s\"t"]}})";
  check_against_nlohmann(body);
  std::mt19937 rng(11);
  const std::string alphabet = "[]{},:\"\\ 0123456789.eE+-truefalsn";
  for (int round = 0; round < 3000; ++round) {
    std::string t = body;
    for (int k = 0; k < 1 + round % 3; ++k) {
      size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          t.erase(at, 1);
          break;
        default:
          t.insert(at, 1, t[at]);
          break;
      }
    }
    check_against_nlohmann(t);
  }
  // A rectangle of numbers is held as dims and elements, a ragged one as items.
  auto rectangle = apps::parse_json("[[[1], [2]], [[3], [4.5]]]", 32);
  CHECK(rectangle.is_packed());
  CHECK(rectangle.dims == std::vector<int64_t>{2, 2, 1});
  CHECK(rectangle.elements.size() == 4);
  CHECK(rectangle.elements[3].value == 4.5);
  CHECK_FALSE(apps::parse_json("[[1, 2], [3]]", 32).is_packed());
  // Deep nesting is refused at the bound, not by the stack.
  CHECK(contains(error_of([] { apps::parse_json(std::string(100000, '['), 32); }),
                 "nested deeper than 32"));
  CHECK(apps::parse_json(std::string(32, '[') + std::string(32, ']'), 32).is_array());
}
