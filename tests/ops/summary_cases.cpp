// Cases for the summary ops (ops/summary.hpp). Where TensorFlow's output is
// deterministic, the expected bytes are TensorFlow 2.21's own, from
// tf.compat.v1.summary.{scalar,histogram,text} on the same input; PNG bytes
// differ between encoders, so image cases decode what they get instead.
#include "ops/op_cases.hpp"
#include "ops/summary.hpp"
#include "schema/event_proto.hpp"

namespace actorflow::testing {
namespace {

tensor from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return summary_tensor(bytes);
}

// tf.compat.v1.summary.scalar("loss", 0.5)
const char* tf_scalar_loss = "0a0b0a046c6f7373150000003f";
// tf.compat.v1.summary.text("note", "hello")
const char* tf_text_note = "0a1d0a046e6f7465420b08071200420568656c6c6f4a080a060a0474657874";
// tf.compat.v1.summary.histogram("h", [0, 1, -2.5, 3, 1])
const char* tf_histogram_h =
    "0ac7010a01682ac1010900000000000004c01100000000000008401900000000000014402100000000000004"
    "402900000000004031403248ea360f76a3ef04c077603c0e660803c0000000000000000011ea2d819997713d"
    "08996919155aed3f2b14facdbe24f03f68bc10359a0707400d9cc5a029550940ffffffffffffef7f3a480000"
    "000000000000000000000000f03f0000000000000000000000000000f03f0000000000000000000000000000"
    "00400000000000000000000000000000f03f0000000000000000";

// Checks the image values of a summary: their tags and sizes.
std::function<void(const std::vector<tensor>&)> images_are(std::vector<std::string> tags, int64_t h,
                                                           int64_t w, int64_t c) {
  return [=](const std::vector<tensor>& outs) {
    auto values = decode_summary(summary_bytes(outs.at(0)));
    REQUIRE(values.size() == tags.size());
    for (size_t i = 0; i < tags.size(); ++i) {
      CHECK(values[i].tag == tags[i]);
      CHECK(values[i].what == summary_value::kind::image);
      CHECK(values[i].image.height == h);
      CHECK(values[i].image.width == w);
      CHECK(values[i].image.colorspace == c);
      CHECK(values[i].image.encoded.substr(1, 3) == "PNG");
    }
  };
}

attr_map tag(const std::string& t) { return {{"tag", t}}; }

const op_case_registrar cases({
    {.op = "scalar_summary",
     .label = "float32 0.5 as TensorFlow writes it",
     .inputs = {scalar_of<float>(0.5f)},
     .attrs = tag("loss"),
     .expected = {from_hex(tf_scalar_loss)}},
    {.op = "scalar_summary",
     .label = "int64 and float64 scalars become the same float",
     .inputs = {scalar_of<int64_t>(7)},
     .attrs = tag("n"),
     .expected = {summary_tensor(encode_scalar_summary("n", 7.0))}},
    {.op = "scalar_summary",
     .label = "float64",
     .inputs = {scalar_of<double>(-1.25)},
     .attrs = tag("x"),
     .expected = {summary_tensor(encode_scalar_summary("x", -1.25))}},
    {.op = "scalar_summary",
     .label = "a vector is no scalar",
     .inputs = {make<float>({2}, {1, 2})},
     .attrs = tag("x"),
     .expect_error = "expects a scalar value, got shape (2)"},
    {.op = "scalar_summary",
     .label = "bool",
     .inputs = {scalar_of<bool>(true)},
     .attrs = tag("x"),
     .expect_error = "expects a numeric dtype, got bool"},
    {.op = "scalar_summary",
     .label = "no tag",
     .inputs = {scalar_of<float>(1)},
     .expect_error = "missing attribute 'tag'"},
    {.op = "histogram_summary",
     .label = "TensorFlow's buckets and bytes",
     .inputs = {make<float>({5}, {0, 1, -2.5f, 3, 1})},
     .attrs = tag("h"),
     .expected = {from_hex(tf_histogram_h)}},
    {.op = "histogram_summary",
     .label = "int32 matrix as the same values in float64",
     .inputs = {make<int32_t>({2, 2}, {-3, 0, 5, 5})},
     .attrs = tag("i"),
     .expected = {summary_tensor(encode_histogram_summary("i", make<double>({4}, {-3, 0, 5, 5})))}},
    {.op = "histogram_summary",
     .label = "empty: one bucket up to DBL_MAX",
     .inputs = {tensor(dtype::float32, {0})},
     .attrs = tag("e"),
     .check =
         [](const std::vector<tensor>& outs) {
           auto v = decode_summary(summary_bytes(outs.at(0)));
           REQUIRE(v.size() == 1);
           CHECK(v[0].histo.num == 0);
           CHECK(v[0].histo.bucket.size() == 1);
           CHECK(v[0].histo.bucket[0] == 0);
         }},
    {.op = "histogram_summary",
     .label = "bool",
     .inputs = {make<bool>({2}, {true, false})},
     .attrs = tag("b"),
     .expect_error = "expects a numeric dtype, got bool"},
    {.op = "histogram_summary",
     .label = "NaN",
     .inputs = {make<float>({2}, {1, nan_f})},
     .attrs = tag("n"),
     .expect_error = "non-finite value nan in the values of 'n'"},
    {.op = "image_summary",
     .label = "uint8 batch of 2, max 3: tags tag/image/i",
     .inputs = {tensor::zeros(dtype::uint8, {2, 2, 3, 1})},
     .attrs = {{"tag", std::string("img")}, {"max_images", int64_t{3}}},
     .check = images_are({"img/image/0", "img/image/1"}, 2, 3, 1)},
    {.op = "image_summary",
     .label = "max_images 1: tag/image, the rest left out",
     .inputs = {tensor::zeros(dtype::uint8, {3, 4, 2, 3})},
     .attrs = {{"tag", std::string("one")}, {"max_images", int64_t{1}}},
     .check = images_are({"one/image"}, 4, 2, 3)},
    {.op = "image_summary",
     .label = "float32 RGBA",
     .inputs = {make<float>({1, 1, 2, 4}, {0, 0.5f, 1, 1, -1, 2, nan_f, 0})},
     .attrs = tag("f"),
     .check = images_are({"f/image/0"}, 1, 2, 4)},
    {.op = "image_summary",
     .label = "empty batch: no values",
     .inputs = {tensor(dtype::uint8, {0, 2, 2, 1})},
     .attrs = tag("z"),
     .expected = {summary_tensor("")}},
    {.op = "image_summary",
     .label = "rank 3",
     .inputs = {tensor::zeros(dtype::uint8, {2, 2, 3})},
     .attrs = tag("x"),
     .expect_error = "images must be 4-D"},
    {.op = "image_summary",
     .label = "2 channels",
     .inputs = {tensor::zeros(dtype::uint8, {1, 2, 2, 2})},
     .attrs = tag("x"),
     .expect_error = "must have 1, 3 or 4 channels"},
    {.op = "image_summary",
     .label = "int32",
     .inputs = {tensor::zeros(dtype::int32, {1, 2, 2, 1})},
     .attrs = tag("x"),
     .expect_error = "images must be uint8, float32 or float64, got int32"},
    {.op = "image_summary",
     .label = "max_images 0",
     .inputs = {tensor::zeros(dtype::uint8, {1, 2, 2, 1})},
     .attrs = {{"tag", std::string("x")}, {"max_images", int64_t{0}}},
     .expect_error = "max_images must be at least 1"},
    {.op = "image_summary",
     .label = "zero width",
     .inputs = {tensor::zeros(dtype::uint8, {1, 2, 0, 1})},
     .attrs = tag("x"),
     .expect_error = "positive height and width"},
    {.op = "text_summary",
     .label = "as TensorFlow's text plugin reads it",
     .attrs = {{"tag", std::string("note")}, {"text", std::string("hello")}},
     .expected = {from_hex(tf_text_note)}},
    {.op = "text_summary",
     .label = "no text",
     .attrs = tag("x"),
     .expect_error = "missing attribute 'text'"},
    {.op = "merge_summary",
     .label = "concatenates",
     .inputs = {from_hex(tf_scalar_loss), from_hex(tf_text_note)},
     .expected = {from_hex(std::string(tf_scalar_loss) + tf_text_note)}},
    {.op = "merge_summary",
     .label = "an empty summary merges to nothing",
     .inputs = {summary_tensor(""), from_hex(tf_scalar_loss)},
     .expected = {from_hex(tf_scalar_loss)}},
    {.op = "merge_summary",
     .label = "duplicate tag",
     .inputs = {from_hex(tf_scalar_loss), from_hex(tf_scalar_loss)},
     .expect_error = "duplicate tag 'loss'"},
    {.op = "merge_summary",
     .label = "not a summary's dtype",
     .inputs = {make<float>({2}, {1, 2})},
     .expect_error = "input 0 is float32(2), not a summary"},
    {.op = "merge_summary",
     .label = "malformed bytes",
     .inputs = {summary_tensor(std::string("\x0a\x7f\x01", 3))},
     .expect_error = "runs past the end"},
    {.op = "merge_summary", .label = "no inputs", .expect_error = "at least 1"},
});

}  // namespace
}  // namespace actorflow::testing
