// TensorBoard output: the protobuf wire format, CRC32C and TFRecord framing,
// event files written and read back (every summary kind and the graph), summary
// ops run by a session, PNG images decoded again, damaged files, write errors,
// and TensorBoard's own reader (the suite "tensorboard", test_summary_tensorboard
// in ctest: Skipped where no Python imports tensorboard).
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/session.hpp"
#include "actors/trace/summary_writer.hpp"
#include "core/proto_wire.hpp"
#include "ops/array.hpp"
#include "ops/math.hpp"
#include "ops/png.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/summary.hpp"
#include "schema/event_file.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;
using actorflow::testing::skip_check;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system's temporary one, removed afterwards.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("actorflow_summary_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// A PNG decoded by hand: its signature, chunk CRCs and IHDR checked, the IDAT
// data inflated and each row's filter byte (0, as encode_png writes) removed.
struct decoded_png {
  uint32_t width = 0, height = 0;
  int color_type = -1;
  std::vector<uint8_t> pixels;
};

decoded_png decode_png(const std::string& png, int channels) {
  decoded_png out;
  REQUIRE(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  std::vector<std::string> chunk_types;
  for (size_t at = 8; at < png.size();) {
    REQUIRE(at + 12 <= png.size());
    const uint32_t len = be32(png, at);
    REQUIRE(at + 12 + len <= png.size());
    const std::string type = png.substr(at + 4, 4), data = png.substr(at + 8, len);
    const auto crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + at + 4), len + 4);
    CHECK_MESSAGE(crc == be32(png, at + 8 + len), "chunk " << type << " CRC");
    chunk_types.push_back(type);
    if (type == "IHDR") {
      REQUIRE(len == 13);
      out.width = be32(data, 0);
      out.height = be32(data, 4);
      CHECK(data[8] == 8);  // bit depth
      out.color_type = data[9];
      CHECK(data.substr(10) == std::string(3, '\0'));
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + len;
  }
  CHECK(chunk_types == std::vector<std::string>{"IHDR", "IDAT", "IEND"});
  const size_t row = size_t{out.width} * static_cast<size_t>(channels);
  std::string raw((row + 1) * out.height, '\0');
  uLongf raw_size = raw.size();
  REQUIRE(uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_size,
                     reinterpret_cast<const Bytef*>(idat.data()), idat.size()) == Z_OK);
  REQUIRE(raw_size == raw.size());
  for (uint32_t y = 0; y < out.height; ++y) {
    CHECK(raw[y * (row + 1)] == 0);  // filter: none
    for (size_t x = 0; x < row; ++x)
      out.pixels.push_back(static_cast<uint8_t>(raw[y * (row + 1) + 1 + x]));
  }
  return out;
}

// A small graph with scopes, a device, an input index > 0 and a control input.
void build_graph(graph& g) {
  auto x = placeholder(g, dtype::float32, {-1, 3}, "x");
  {
    auto scope = g.name_scope("layer1");
    auto dev = g.device_scope("/cpu:0");
    auto w = constant(g, tensor::from_vector<float>({1, 2, 3}, {3}), "w");
    auto y = x * w;
    auto init = no_op(g, "ready");
    auto after = g.control_dependencies({init});
    identity(y, "out");
  }
}

}  // namespace

TEST_CASE("crc32c: known vectors, masked as TFRecord masks it") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);    // RFC 3720, B.4
  CHECK(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);  // RFC 3720, B.4
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  CHECK(crc32c(ascending) == 0x46DD794Eu);
  // Continuing a CRC over a split buffer gives the CRC of the whole.
  CHECK(crc32c("56789", crc32c("1234")) == 0xE3069283u);
  const uint32_t c = 0xE3069283u;
  CHECK(masked_crc32c("123456789") == ((c >> 15) | (c << 17)) + 0xa282ead8u);
  const std::string rec = frame_record("abc");
  CHECK(rec.size() == 3 + 16);
  CHECK(rec.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(rec.substr(12, 3) == "abc");
}

TEST_CASE("proto_wire: every field kind round-trips") {
  proto::writer sub;
  sub.bytes_field(1, "inner");
  proto::writer w;
  w.varint_field(1, 300);
  w.int64_field(2, -5);
  w.fixed32_field(3, 0xdeadbeef);
  w.double_field(4, 2.5);
  w.float_field(5, -0.75f);
  w.bytes_field(6, std::string("a\0b", 3));
  w.message_field(7, sub);
  const std::vector<double> doubles = {1.0, -2.0, 1e300};
  w.packed_doubles_field(8, doubles);
  w.double_field(8, 4.0);                           // a repeated double may also come unpacked
  CHECK(w.bytes().substr(0, 3) == "\x08\xac\x02");  // 300 as protobuf's own example

  proto::reader r(w.bytes(), "test");
  std::vector<proto::field> fields;
  for (proto::field f; r.next(f);) fields.push_back(f);
  REQUIRE(fields.size() == 9);
  CHECK(fields[0].value == 300);
  CHECK(fields[1].as_int64() == -5);
  CHECK(fields[2].value == 0xdeadbeef);
  CHECK(fields[3].as_double() == 2.5);
  CHECK(fields[4].as_float() == -0.75f);
  CHECK(fields[5].bytes == std::string_view("a\0b", 3));
  proto::reader inner(fields[6].bytes);
  proto::field f;
  REQUIRE(inner.next(f));
  CHECK(f.bytes == "inner");
  std::vector<double> got;
  r.append_doubles(fields[7], got);
  r.append_doubles(fields[8], got);
  CHECK(got == std::vector<double>{1.0, -2.0, 1e300, 4.0});
}

TEST_CASE("proto_wire: hostile buffers are errors naming the offset, not crashes") {
  auto read_all = [](const std::string& bytes) {
    return error_of([&] {
      proto::reader r(bytes, "hostile");
      for (proto::field f; r.next(f);) {
      }
    });
  };
  // A length of 2^62 for a bytes field: nothing may be allocated from it.
  CHECK(read_all(std::string("\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x40", 10)) ==
        "[hostile] length 4611686018427387904 of field 1 runs past the end (0 bytes left) at "
        "offset 1");
  CHECK(read_all("\x12\x05"
                 "abc")
            .find("runs past the end (3 bytes left)") != std::string::npos);
  CHECK(read_all("\x08\x80") == "[hostile] truncated varint at offset 1");
  CHECK(read_all(std::string("\x08").append(11, '\x80').append("\x01")) ==
        "[hostile] varint longer than 10 bytes at offset 1");
  CHECK(read_all(std::string("\x00\x01", 2)) == "[hostile] invalid field number 0 at offset 0");
  CHECK(read_all("\x0b") == "[hostile] unsupported wire type 3 of field 1 at offset 0");
  CHECK(read_all("\x09\x01\x02") == "[hostile] truncated fixed64 value at offset 1");
  // Packed doubles that are not whole doubles.
  std::string packed = "\x0a\x03xyz";
  proto::reader r(packed, "hostile");
  proto::field f;
  REQUIRE(r.next(f));
  std::vector<double> out;
  CHECK(error_of([&] { r.append_doubles(f, out); }).find("not a multiple of 8") !=
        std::string::npos);
  // A malformed Summary inside a well-framed event is an error too.
  CHECK(error_of([] {
          decode_summary(std::string("\x0a\x02\x15\x00", 4));
        }).find("truncated fixed32") != std::string::npos);
}

TEST_CASE("histogram: TensorFlow's buckets on a known input") {
  // Worked out from histogram.cc's limits: 0 lands in (0, 1e-12], 1 in
  // (0.9172, 1.00897], -2.5 in (-2.617, -2.379], 3 in (2.8787, 3.1666].
  auto v = decode_summary(
      encode_histogram_summary("h", tensor::from_vector<double>({0.0, 1.0, -2.5, 3.0, 1.0})));
  REQUIRE(v.size() == 1);
  const auto& h = v[0].histo;
  CHECK(h.min == -2.5);
  CHECK(h.max == 3.0);
  CHECK(h.num == 5);
  CHECK(h.sum == 2.5);
  CHECK(h.sum_squares == 17.25);
  CHECK(h.bucket == std::vector<double>{0, 1, 0, 1, 0, 2, 0, 1, 0});
  REQUIRE(h.bucket_limit.size() == 9);
  CHECK(h.bucket_limit[2] == 0.0);
  CHECK(h.bucket_limit[3] == 1e-12);
  CHECK(h.bucket_limit[5] == doctest::Approx(1.0089710279437536).epsilon(1e-15));
  CHECK(h.bucket_limit[8] == DBL_MAX);
  CHECK(error_of([] {
          encode_histogram_summary("x", tensor::from_vector<float>({INFINITY}));
        }).find("non-finite value inf in the values of 'x'") != std::string::npos);
}

TEST_CASE("histogram: every value lands in TensorFlow's bucket, at every magnitude") {
  // The limits as histogram.cc makes them, and the bucket by binary search.
  std::vector<double> limits, pos;
  for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos.push_back(v);
  pos.push_back(DBL_MAX);
  for (auto it = pos.rbegin(); it != pos.rend(); ++it) limits.push_back(-*it);
  limits.push_back(0.0);
  limits.insert(limits.end(), pos.begin(), pos.end());
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> exponent(-15, 22);
  std::vector<double> values{0.0, -0.0, 1e-12, -1e-12, 1.0, -1.0};
  for (double l : limits)  // each limit, and its neighbours a bit either side
    if (std::isfinite(l) && std::fabs(l) < 1e21)
      for (double x : {l, std::nextafter(l, -INFINITY), std::nextafter(l, INFINITY)})
        values.push_back(x);
  for (int i = 0; i < 20000; ++i)
    values.push_back((rng() % 2 ? 1 : -1) * std::pow(10.0, exponent(rng)));
  std::map<double, double> expected;  // limit -> count
  for (double x : values) {
    size_t b =
        static_cast<size_t>(std::upper_bound(limits.begin(), limits.end(), x) - limits.begin());
    expected[limits[std::min(b, limits.size() - 1)]] += 1;
  }
  auto h =
      decode_summary(encode_histogram_summary("h", tensor::from_vector<double>(values)))[0].histo;
  std::map<double, double> got;
  for (size_t i = 0; i < h.bucket.size(); ++i)
    if (h.bucket[i] > 0) got[h.bucket_limit[i]] = h.bucket[i];
  CHECK(got == expected);
}

TEST_CASE("png: our encoder's output decodes to the pixels") {
  for (int channels : {1, 3, 4}) {
    INFO("channels " << channels);
    const int64_t h = 3, w = 5;
    std::vector<uint8_t> pixels;
    for (int64_t i = 0; i < h * w * channels; ++i) pixels.push_back(static_cast<uint8_t>(i * 7));
    const auto png = decode_png(encode_png(pixels.data(), h, w, channels), channels);
    CHECK(png.width == w);
    CHECK(png.height == h);
    CHECK(png.color_type == (channels == 1 ? 0 : channels == 3 ? 2 : 6));
    CHECK(png.pixels == pixels);
  }
  CHECK(error_of([] {
          uint8_t p[2] = {};
          encode_png(p, 1, 1, 2);
        }) == "[encode_png] channels must be 1, 3 or 4, got 2");
  // A float image is scaled as TensorFlow scales it: by 255 / max when no
  // value is negative, else by 127 / max|v| around 128; a NaN pixel is red.
  auto v = decode_summary(
      encode_image_summary("f", tensor::from_vector<float>({0, 0.5f, 1, 0.25f}, {1, 2, 2, 1}), 1));
  REQUIRE(v.size() == 1);
  CHECK(v[0].tag == "f/image");
  CHECK(decode_png(v[0].image.encoded, 1).pixels == std::vector<uint8_t>{0, 127, 255, 63});
  v = decode_summary(encode_image_summary(
      "g", tensor::from_vector<float>({-2, 0, 1, 2, NAN, 0}, {1, 1, 2, 3}), 2));
  REQUIRE(v.size() == 1);
  CHECK(v[0].tag == "g/image/0");
  CHECK(decode_png(v[0].image.encoded, 3).pixels == std::vector<uint8_t>{1, 128, 191, 255, 0, 0});
}

TEST_CASE("event files: every summary kind and the graph come back") {
  temp_dir dir("roundtrip");
  graph g;
  build_graph(g);
  std::string path;
  {
    summary_writer w((dir.path / "run1").string());
    path = w.path();
    w.add_graph(g);
    w.add_scalar("loss", 0.5, 1);
    w.add_histogram("weights", tensor::from_vector<float>({-1, 0, 2, 3}), 2);
    w.add_image("picture", tensor::zeros(dtype::uint8, {2, 2, 3, 3}), 3, 2);
    w.add_text("note", "hello", 4);
    CHECK(w.last_error().empty());
  }  // flushed on destruction
  CHECK(fs::path(path).parent_path() == dir.path / "run1");
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);

  event_file_reader r(path);
  auto events = r.read_all();
  CHECK_FALSE(r.truncated());
  REQUIRE(events.size() == 6);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].wall_time > 1.6e9);

  const auto nodes = decode_graph_def(events[1].graph_def);
  REQUIRE(nodes.size() == g.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const node& n = g.nodes()[i];
    INFO("node " << n.name);
    CHECK(nodes[i].name == n.name);
    CHECK(nodes[i].op == n.op);
    CHECK(nodes[i].device == n.device);
    CHECK(nodes[i].attrs.count("_output_shapes") == 1);
  }
  auto& mul = nodes[2];
  CHECK(mul.name.rfind("layer1/", 0) == 0);
  CHECK(mul.inputs == std::vector<std::string>{"x", "layer1/w"});
  CHECK(mul.device == "/cpu:0");
  CHECK(nodes.back().name == "layer1/out");
  CHECK(nodes.back().inputs == std::vector<std::string>{mul.name, "^layer1/ready"});

  using k = summary_value::kind;
  CHECK(events[2].step == 1);
  REQUIRE(events[2].summary.size() == 1);
  CHECK(events[2].summary[0].tag == "loss");
  CHECK(events[2].summary[0].what == k::simple_value);
  CHECK(events[2].summary[0].simple_value == 0.5f);
  REQUIRE(events[3].summary.size() == 1);
  CHECK(events[3].summary[0].what == k::histo);
  CHECK(events[3].summary[0].histo.num == 4);
  CHECK(events[3].summary[0].histo.sum == 4);
  REQUIRE(events[4].summary.size() == 2);
  CHECK(events[4].summary[1].tag == "picture/image/1");
  CHECK(events[4].summary[1].image.colorspace == 3);
  CHECK(decode_png(events[4].summary[1].image.encoded, 3).pixels == std::vector<uint8_t>(18, 0));
  REQUIRE(events[5].summary.size() == 1);
  CHECK(events[5].summary[0].what == k::tensor);
  CHECK(events[5].summary[0].plugin_name == "text");
  CHECK(events[5].summary[0].tensor.dtype == 7);
  CHECK(events[5].summary[0].tensor.string_val == std::vector<std::string>{"hello"});
  CHECK(events[5].step == 4);
}

TEST_CASE("summary ops run by a session, merged, written and read back") {
  graph g;
  auto x = placeholder(g, dtype::float32, {4}, "x");
  auto loss = reduce_sum(x * x);
  scalar_summary("loss", loss);
  histogram_summary("x", x);
  image_summary("img", reshape(x, {1, 2, 2, 1}), 1);
  text_summary(g, "note", "step text");
  auto merged = merge_all_summaries(g);
  REQUIRE(merged.valid());
  CHECK(merged.node().op == "merge_summary");
  CHECK(merged.node().inputs.size() == 4);
  CHECK(merged.type() == dtype::uint8);

  session s(g);
  const tensor feed = tensor::from_vector<float>({0, 1, 2, 3});
  const tensor bytes = s.eval(merged, {{x, feed}});
  CHECK(bytes.rank() == 1);
  // The same bytes as the encoders give for those values.
  CHECK(summary_bytes(bytes) == encode_scalar_summary("loss", 14) +
                                    encode_histogram_summary("x", feed) +
                                    encode_image_summary("img", feed.reshaped({1, 2, 2, 1}), 1) +
                                    encode_text_summary("note", "step text"));

  temp_dir dir("session");
  std::string path;
  {
    summary_writer w(dir.path.string());
    path = w.path();
    w.add_summary(bytes, 7);
    w.flush();
    CHECK(w.last_error().empty());
  }
  auto events = event_file_reader(path).read_all();
  REQUIRE(events.size() == 2);
  CHECK(events[1].step == 7);
  CHECK(events[1].summary_bytes == summary_bytes(bytes));
  std::vector<std::string> tags;
  for (auto& v : events[1].summary) tags.push_back(v.tag);
  CHECK(tags == std::vector<std::string>{"loss", "x", "img/image", "note"});
  CHECK(events[1].summary[0].simple_value == 14.0f);

  graph empty;
  placeholder(empty, dtype::float32, {}, "p");
  CHECK_FALSE(merge_all_summaries(empty).valid());
  CHECK(error_of([&] { scalar_summary("bad", x); }).find("expects a scalar value, got shape (4)") !=
        std::string::npos);
}

TEST_CASE("event files: a truncated tail stops cleanly, a corrupted byte names its offset") {
  temp_dir dir("damaged");
  std::string path;
  {
    event_file_writer w(dir.path.string());
    path = w.path();
    for (int step = 1; step <= 3; ++step) w.write_summary(encode_scalar_summary("s", step), step);
  }
  const std::string whole = read_bytes(path);
  const auto events = event_file_reader(path).read_all();
  REQUIRE(events.size() == 4);
  // Record offsets: each record is 16 bytes of framing plus its event.
  std::vector<size_t> starts = {0};
  {
    event_file_reader r(path);
    while (r.next()) starts.push_back(r.offset());
  }
  REQUIRE(starts.size() == 5);
  CHECK(starts.back() == whole.size());

  // Cut anywhere inside the last record: the three whole ones come back.
  const fs::path cut = dir.path / "cut.tfevents";
  for (size_t end = starts[3] + 1; end < whole.size(); end += 3) {
    write_bytes(cut, whole.substr(0, end));
    event_file_reader r(cut.string());
    INFO("cut at " << end);
    CHECK(r.read_all().size() == 3);
    CHECK(r.truncated());
    CHECK(r.truncation().find("record at offset " + std::to_string(starts[3])) == 0);
  }
  write_bytes(cut, whole.substr(0, starts[3]));
  event_file_reader at_boundary(cut.string());
  CHECK(at_boundary.read_all().size() == 3);
  CHECK_FALSE(at_boundary.truncated());

  // A flipped byte in record 2's data, then in its length.
  std::string bad = whole;
  bad[starts[2] + 14] ^= 0x40;
  write_bytes(cut, bad);
  CHECK(error_of([&] {
          event_file_reader(cut.string()).read_all();
        }).find("record data CRC mismatch") != std::string::npos);
  CHECK(error_of([&] {
          event_file_reader(cut.string()).read_all();
        }).find("at offset " + std::to_string(starts[2])) != std::string::npos);
  bad = whole;
  bad[starts[2] + 1] ^= 0x01;
  write_bytes(cut, bad);
  CHECK(error_of([&] {
          event_file_reader(cut.string()).read_all();
        }).find("record length CRC mismatch (stored") != std::string::npos);
  // A huge length with a valid CRC for it is a truncated tail, not an allocation.
  bad = whole.substr(0, starts[1]);
  bad += frame_record("x").substr(0, 12);
  bad.replace(starts[1], 8, std::string(8, '\x7f'));
  const uint32_t crc = masked_crc32c(std::string(8, '\x7f'));
  for (int i = 0; i < 4; ++i) bad[starts[1] + 8 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  write_bytes(cut, bad);
  event_file_reader huge(cut.string());
  CHECK(huge.read_all().size() == 1);
  CHECK(huge.truncated());
  CHECK(error_of([] {
          event_file_reader("/nonexistent/events");
        }).find("cannot open '/nonexistent/events'") != std::string::npos);
}

TEST_CASE("write errors: an unwritable directory names the path; a full disk is recorded") {
  temp_dir dir("unwritable");
  fs::create_directories(dir.path);
  write_bytes(dir.path / "plain_file", "x");
  const std::string under_file = (dir.path / "plain_file" / "logs").string();
  const std::string what = error_of([&] { summary_writer w(under_file); });
  CHECK(what.find("cannot create log directory '" + under_file + "'") != std::string::npos);
  CHECK(what.find("Not a directory") != std::string::npos);
  CHECK(error_of([&] {
          event_file_writer w(event_file_path{under_file});
        }).find("cannot open '" + under_file + "': ") != std::string::npos);
}

TEST_CASE("write errors: a full disk is recorded, never thrown" *
          doctest::test_suite("full_disk")) {
  if (!fs::exists("/dev/full")) {
    skip_check("full_disk", "/dev/full missing");
    return;
  }
  summary_writer w(event_file_path{"/dev/full"});
  w.add_scalar("loss", 1.0, 1);  // buffered: nothing fails yet
  CHECK(w.last_error().empty());
  w.flush();
  CHECK(w.last_error() == "[event_file_writer] cannot write '/dev/full': No space left on device");
  CHECK(w.error_count() == 1);
  w.add_scalar("loss", 2.0, 2);  // the file is failed: recorded again, never thrown
  CHECK(w.error_count() == 2);
  w.add_histogram("nan", tensor::from_vector<float>({NAN}), 3);
  CHECK(w.last_error().find("non-finite value") != std::string::npos);
}

namespace {

// A Python that imports tensorboard: $ACTORFLOW_TB_PYTHON, else the one CMake
// was told of (ACTORFLOW_TENSORBOARD_PYTHON, by default the virtual
// environment scripts/tensorboard_venv.sh makes in the build folder), else
// python3 on PATH; "" when none does.
std::string tensorboard_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ACTORFLOW_TB_PYTHON"); env && *env) candidates.push_back(env);
  candidates.push_back(ACTORFLOW_TENSORBOARD_PYTHON);
  candidates.push_back("python3");
  for (const auto& python : candidates)
    if (!python.empty() &&
        std::system(("'" + python + "' -c 'import tensorboard' >/dev/null 2>&1").c_str()) == 0)
      return python;
  return "";
}

}  // namespace

TEST_CASE("TensorBoard's own reader loads what we write" * doctest::test_suite("tensorboard")) {
  const std::string python = tensorboard_python();
  if (python.empty()) {
    skip_check(
        "tensorboard",
        "no Python that imports tensorboard ($ACTORFLOW_TB_PYTHON, " ACTORFLOW_TENSORBOARD_PYTHON
        ", python3); bash scripts/tensorboard_venv.sh makes one");
    return;
  }
  temp_dir dir("tensorboard");
  graph g;
  build_graph(g);
  {
    summary_writer w(dir.path.string());
    w.add_graph(g);
    for (int step = 1; step <= 3; ++step) w.add_scalar("loss", 1.0 / (1 << step), step);
    w.add_histogram("weights", tensor::from_vector<float>({-1, 0, 2, 3}), 1);
    w.add_image("picture", tensor::zeros(dtype::uint8, {1, 2, 3, 1}), 1, 1);
    w.add_text("note", "hello tensorboard", 1);
    REQUIRE(w.last_error().empty());
  }
  const std::string cmd = "'" + python + "' " ACTORFLOW_TB_CHECK_SCRIPT " " + dir.path.string() +
                          " " + std::to_string(g.size()) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("tensorboard check: ok") != std::string::npos);
}
