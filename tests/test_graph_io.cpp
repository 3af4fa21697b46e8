// Graph files (schema/graph_io) and tensor messages (schema/tensor_io): exact
// round trips, and hostile input (truncated, corrupted, random, hand-crafted)
// that must either load or throw actorflow::error, never crash.
#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "core/graph.hpp"
#include "ops/control_flow.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "schema/graph.capnp.h"
#include "schema/graph_io.hpp"
#include "schema/tensor_io.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::temp_dir;
namespace fs = std::filesystem;

namespace {

// A test-only op with any number of inputs and outputs and attributes of every
// kind, each read with its expected kind (so a wrong kind in a file is rejected).
// Output k has shape (k+1, out_shape...) and dtype out_dtype.
const op_registrar test_op({
    .name = "graph_io_test_multi",
    .num_inputs = -1,
    .min_inputs = 0,
    .infer =
        [](const shape_context& c) {
          int n = c.attr<int>("num_outputs");
          if (n < 0 || n > 8) c.fail("num_outputs must be in [0, 8], got " + std::to_string(n));
          dtype t = c.attr<dtype>("out_dtype");
          c.attr_or<double>("scale", 1.0);
          c.attr_or<bool>("flag", false);
          c.attr_or<std::string>("label", "");
          c.attr_or<std::vector<double>>("weights", {});
          c.attr_or<tensor>("table", tensor());
          auto dims = c.attr_or<std::vector<int64_t>>("out_shape", {});
          std::vector<tensor_spec> out;
          for (int k = 0; k < n; ++k) {
            std::vector<int64_t> d{k + 1};
            d.insert(d.end(), dims.begin(), dims.end());
            out.push_back({t, shape(d)});
          }
          return out;
        },
    .kernel = [](kernel_context&) {},
    .summary = "graph_io test op with many outputs and attribute kinds",
});

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same_attr(const attr_value& a, const attr_value& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, double>) {
          return same_bits(x, y);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          if (x.size() != y.size()) return false;
          for (size_t i = 0; i < x.size(); ++i)
            if (!same_bits(x[i], y[i])) return false;
          return true;
        } else if constexpr (std::is_same_v<T, tensor>) {
          return x.equals(y);
        } else {
          return x == y;
        }
      },
      a);
}

void check_same_graph(const graph& a, const graph& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    auto& x = a.nodes()[i];
    auto& y = b.nodes()[i];
    INFO("node " << i << " '" << x.name << "'");
    CHECK(y.id == x.id);
    CHECK(y.name == x.name);
    CHECK(y.op == x.op);
    CHECK(y.device == x.device);
    CHECK(y.inputs == x.inputs);
    CHECK(y.control_inputs == x.control_inputs);
    CHECK(y.def == x.def);
    REQUIRE(y.attrs.size() == x.attrs.size());
    for (auto& [name, value] : x.attrs) {
      INFO("attribute " << name);
      REQUIRE(y.attrs.count(name));
      CHECK(same_attr(value, y.attrs.at(name)));
    }
    REQUIRE(y.outputs.size() == x.outputs.size());
    for (size_t k = 0; k < x.outputs.size(); ++k) {
      CHECK(y.outputs[k].type == x.outputs[k].type);
      CHECK(y.outputs[k].dims == x.outputs[k].dims);
    }
    CHECK(b.find(x.name) == &y);
  }
}

// A graph with every feature a file must carry.
const char label_chars[] = "a label\nwith \0 a nul";

std::unique_ptr<graph> sample_graph() {
  auto g = std::make_unique<graph>();
  auto x = placeholder(*g, dtype::float32, {-1, 3}, "x");
  auto y = placeholder(*g, dtype::int64, {}, "y");
  placeholder(*g, dtype::boolean, {0, -1, 2}, "mask");
  variable v;
  std::vector<output> consts;
  {
    auto scope = g->name_scope("layer1");
    auto dev = g->device_scope("/cpu:0");
    auto w = constant(*g, tensor::from_vector<float>({1.5f, -2, 3, 4e-30f, -0.0f, 6}, {2, 3}), "w");
    consts.push_back(w);
    consts.push_back(scalar<double>(*g, -3.25));
    consts.push_back(scalar<bool>(*g, true));
    consts.push_back(scalar<int64_t>(*g, std::numeric_limits<int64_t>::min()));
    consts.push_back(constant(*g, tensor::from_vector<int32_t>({1, -2, 2147483647}), "ints"));
    consts.push_back(constant(*g, tensor::from_vector<bool>({true, false, true, true}, {2, 2})));
    consts.push_back(constant(*g, tensor::from_vector<uint8_t>({0, 255, 7}), "bytes"));
    consts.push_back(constant(*g, tensor::zeros(dtype::float32, {0, 4}), "empty"));
    consts.push_back(constant(*g, tensor::zeros(dtype::int64, {3, 0, 2}), "empty_int"));
    consts.push_back(constant(
        *g, tensor::from_vector<double>({std::nan(""), INFINITY, -1e-300, 1e300}), "doubles"));
    v = make_variable(w, "v");
  }
  auto v2 = make_variable(*g, dtype::int32, {4}, "v2");
  auto init = global_variables_initializer(*g);
  {
    auto after = g->control_dependencies({init});
    identity(x, "after_init");
    auto scope = g->name_scope("update");
    assign_add(v, consts[0]);
  }
  auto multi =
      make_op_outputs("graph_io_test_multi", {x, y, consts[1]},
                      {{"num_outputs", int64_t{3}},
                       {"out_dtype", dtype::float64},
                       {"out_shape", std::vector<int64_t>{-1, 5}},
                       {"scale", 0.1},
                       {"flag", true},
                       {"label", std::string(label_chars, sizeof label_chars - 1)},
                       {"weights", std::vector<double>{1.0, -0.0, 1e-310}},
                       {"table", tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {3, 2})}},
                      "multi");
  identity(multi[2], "third");
  identity(multi[0]);
  identity(multi[0]);  // gets a uniquified name
  make_op("graph_io_test_multi", {multi[1], multi[2], v2},
          {{"num_outputs", int64_t{0}}, {"out_dtype", dtype::uint8}}, "sink");
  group(*g, {init, operation(g.get(), g->find("sink")->id)}, "all");
  return g;
}

std::string load_error(const std::string& bytes, const std::string& source = "test.afg") {
  return error_of([&] { deserialize_graph(bytes, source); });
}

// Loads or throws actorflow::error; anything else (or a crash) fails the test.
// Returns true when the bytes loaded.
bool loads_or_throws(std::string_view bytes) {
  try {
    auto g = deserialize_graph(bytes, "fuzz");
    // What loads must be a valid graph that serializes again.
    auto again = serialize_graph(*g);
    auto g2 = deserialize_graph(again, "fuzz-again");
    CHECK(g2->size() == g->size());
    return true;
  } catch (const error&) {
    return false;
  }
}

std::string to_bytes(capnp::MessageBuilder& msg) {
  auto words = capnp::messageToFlatArray(msg);
  auto chars = words.asChars();
  return std::string(chars.begin(), chars.size());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Hand-crafted graph messages for the hostile cases.
struct crafted {
  capnp::MallocMessageBuilder msg;
  schema::Graph::Builder root = msg.initRoot<schema::Graph>();
  capnp::List<schema::Node>::Builder nodes;

  explicit crafted(unsigned n) {
    root.setVersion(schema::GRAPH_FORMAT_VERSION);
    nodes = root.initNodes(n);
  }
  schema::Node::Builder node(unsigned i, const char* name, const char* op) {
    auto n = nodes[i];
    n.setName(name);
    n.setOp(op);
    return n;
  }
  // A placeholder float32 of shape `dims`.
  schema::Node::Builder placeholder(unsigned i, const char* name, std::vector<int64_t> dims = {2}) {
    auto n = node(i, name, "placeholder");
    auto attrs = n.initAttrs(2);
    attrs[0].setName("dtype");
    attrs[0].initValue().setDtype(schema::DType::FLOAT32);
    attrs[1].setName("shape");
    auto s = attrs[1].initValue().initInts(static_cast<unsigned>(dims.size()));
    for (unsigned k = 0; k < dims.size(); ++k) s.set(k, dims[k]);
    return n;
  }
  schema::Node::Builder identity(unsigned i, const char* name, uint32_t src, uint32_t index = 0) {
    auto n = node(i, name, "identity");
    auto in = n.initInputs(1);
    in[0].setNode(src);
    in[0].setIndex(index);
    return n;
  }
  // A constant whose value tensor the caller fills.
  schema::Tensor::Builder constant(unsigned i, const char* name) {
    auto attrs = node(i, name, "constant").initAttrs(1);
    attrs[0].setName("value");
    return attrs[0].initValue().initTensor();
  }
  std::string bytes() { return to_bytes(msg); }
};

}  // namespace

TEST_CASE("graph round trips exactly through bytes and files") {
  auto g = sample_graph();
  auto bytes = serialize_graph(*g);
  CHECK(bytes.size() % 8 == 0);
  auto loaded = deserialize_graph(bytes, "memory");
  check_same_graph(*g, *loaded);
  // Deterministic: the loaded graph serializes to the same bytes.
  CHECK(serialize_graph(*loaded) == bytes);
  // Unaligned input is accepted (it is copied first).
  std::string shifted = "x" + bytes;
  check_same_graph(*g, *deserialize_graph(std::string_view(shifted).substr(1), "unaligned"));

  temp_dir dir;
  auto path = dir.file("model.afg");
  save_graph(*g, path);
  CHECK(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  auto from_file = load_graph(path);
  check_same_graph(*g, *from_file);
  CHECK(serialize_graph(*from_file) == bytes);

  // The loaded graph is a working graph: lookups and new nodes work.
  auto third = from_file->output_by_name("third");
  CHECK(third.spec().type == dtype::float64);
  CHECK(third.dims() == shape{3, -1, 5});
  CHECK(from_file->output_by_name("multi:1").dims() == shape{2, -1, 5});
  auto extra = identity(from_file->output_by_name("layer1/w"), "extra");
  CHECK(extra.dims() == shape{2, 3});
  CHECK(from_file->find("identity_1") != nullptr);
  CHECK(from_file->find("layer1/w")->device == "/cpu:0");
  auto& w = std::get<tensor>(from_file->find("layer1/w")->attrs.at("value"));
  CHECK(w.to_vector<float>() == std::vector<float>{1.5f, -2, 3, 4e-30f, -0.0f, 6});
  auto& label = std::get<std::string>(from_file->find("multi")->attrs.at("label"));
  CHECK(label == std::string(label_chars, sizeof label_chars - 1));
  CHECK(label.size() == 20);

  // Saving again replaces the file atomically (a stale .tmp is overwritten).
  write_file(path + ".tmp", "stale half-written junk");
  graph small;
  placeholder(small, dtype::uint8, {1}, "only");
  save_graph(small, path);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK(load_graph(path)->size() == 1);
}

TEST_CASE("empty graph round trips") {
  graph g;
  auto loaded = deserialize_graph(serialize_graph(g), "empty");
  CHECK(loaded->size() == 0);
}

TEST_CASE("file errors name the path and the system's reason") {
  temp_dir dir;
  auto missing = dir.file("missing.afg");
  CHECK(error_of([&] { load_graph(missing); }) ==
        "[load_graph] " + missing + ": cannot open: No such file or directory");
  CHECK(error_of([&] { load_graph(dir.path.string()); }) ==
        "[load_graph] " + dir.path.string() + ": not a regular file");
  write_file(dir.file("empty.afg"), "");
  CHECK(contains(error_of([&] { load_graph(dir.file("empty.afg")); }), "empty file"));

  graph g;
  placeholder(g, dtype::float32, {2}, "x");
  auto nowhere = dir.file("no/such/dir/model.afg");
  CHECK(error_of([&] { save_graph(g, nowhere); }) ==
        "[save_graph] " + nowhere + ": cannot open '" + nowhere +
            ".tmp' for writing: No such file or directory");

  // A failed save leaves the existing file as it was.
  auto path = dir.file("keep.afg");
  save_graph(g, path);
  auto before = serialize_graph(g);
  fs::create_directory(path + ".tmp");  // the temporary cannot be opened as a file
  graph other;
  placeholder(other, dtype::int32, {5}, "y");
  CHECK(contains(error_of([&] { save_graph(other, path); }), "cannot open '" + path + ".tmp'"));
  CHECK(load_graph(path)->find("x") != nullptr);
}

TEST_CASE("truncated input is rejected at every length") {
  auto bytes = serialize_graph(*sample_graph());
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto msg = load_error(bytes.substr(0, len), "cut.afg");
    INFO("length " << len << ": " << msg);
    CHECK(contains(msg, "[deserialize_graph] cut.afg: "));
  }
  CHECK(contains(load_error(bytes.substr(0, 13)), "not a multiple of 8"));
  CHECK(contains(load_error(bytes.substr(0, bytes.size() - 8)), "malformed Cap'n Proto message"));
  CHECK(contains(load_error(""), "empty input"));
  CHECK(contains(load_error(bytes + std::string(16, '\0')), "16 bytes of trailing data"));

  // The same through files.
  temp_dir dir;
  auto path = dir.file("cut.afg");
  for (size_t len : {size_t{0}, size_t{5}, size_t{8}, bytes.size() / 2, bytes.size() - 8}) {
    write_file(path, bytes.substr(0, len));
    auto msg = error_of([&] { load_graph(path); });
    INFO(msg);
    CHECK(contains(msg, "[load_graph] " + path + ": "));
  }
}

TEST_CASE("flipped bytes load or throw, never crash") {
  auto bytes = serialize_graph(*sample_graph());
  int loaded = 0, rejected = 0;
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (unsigned char mask : {0x01, 0x10, 0x80, 0xff}) {
      auto copy = bytes;
      copy[at] = static_cast<char>(copy[at] ^ mask);
      INFO("offset " << at << " mask " << int(mask));
      (loads_or_throws(copy) ? loaded : rejected)++;
    }
  }
  MESSAGE("flipped bytes: " << loaded << " loaded, " << rejected << " rejected");
  CHECK(rejected > 0);
  CHECK(loaded > 0);  // e.g. a changed character in a name or a constant's value
}

TEST_CASE("random bytes load or throw, never crash") {
  std::mt19937_64 rng(20240611);
  auto valid = serialize_graph(*sample_graph());
  int rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    size_t len = rng() % 600;
    std::string buf(len, '\0');
    for (auto& c : buf) c = static_cast<char>(rng());
    if (round % 3 == 1 && len >= 16) {
      // A plausible one-segment header, so the bytes reach the pointer decoder.
      uint32_t words = static_cast<uint32_t>(len / 8 - 1);
      std::memset(buf.data(), 0, 4);
      std::memcpy(buf.data() + 4, &words, 4);
      buf.resize(len / 8 * 8);
    } else if (round % 3 == 2) {
      // A valid message with a random run of bytes overwritten.
      buf = valid;
      size_t at = rng() % buf.size(), n = 1 + rng() % 32;
      for (size_t i = at; i < buf.size() && i < at + n; ++i) buf[i] = static_cast<char>(rng());
    }
    INFO("round " << round);
    if (!loads_or_throws(buf)) ++rejected;
  }
  CHECK(rejected > 1900);
}

TEST_CASE("hand-crafted hostile graphs are rejected with clear errors") {
  SUBCASE("a well-formed crafted graph loads") {
    crafted c(2);
    c.placeholder(0, "a");
    c.identity(1, "b", 0);
    auto g = deserialize_graph(c.bytes(), "ok");
    CHECK(g->find("b")->outputs[0].dims == shape{2});
  }
  SUBCASE("unknown op") {
    crafted c(1);
    c.node(0, "a", "no_such_op");
    CHECK(load_error(c.bytes()) ==
          "[deserialize_graph] test.afg: node 0 ('a') has unknown op 'no_such_op'");
  }
  SUBCASE("input names a later node") {
    crafted c(2);
    c.placeholder(0, "a");
    c.identity(1, "dense/matmul", 7);
    temp_dir dir;
    auto path = dir.file("model.afg");
    write_file(path, c.bytes());
    CHECK(error_of([&] { load_graph(path); }) ==
          "[load_graph] " + path +
              ": node 1 ('dense/matmul') input 0 names node 7, which is not an earlier node");
  }
  SUBCASE("bad output index") {
    crafted c(2);
    c.placeholder(0, "a");
    c.identity(1, "b", 0, 5);
    CHECK(load_error(c.bytes()) ==
          "[deserialize_graph] test.afg: node 1 ('b') input 0 names "
          "output 5 of node 0 ('a'), which has 1 outputs");
  }
  SUBCASE("self reference") {
    crafted c(1);
    c.identity(0, "loop", 0);
    CHECK(contains(load_error(c.bytes()), "node 0 ('loop') input 0 names node 0, which is not"));
  }
  SUBCASE("cycle") {
    crafted c(3);
    c.placeholder(0, "a");
    c.identity(1, "b", 2);
    c.identity(2, "c", 1);
    CHECK(contains(load_error(c.bytes()), "node 1 ('b') input 0 names node 2, which is not"));
  }
  SUBCASE("control input that is not earlier") {
    crafted c(2);
    c.placeholder(0, "a");
    auto n = c.node(1, "b", "no_op");
    n.initControlInputs(2).set(1, 1);
    CHECK(contains(load_error(c.bytes()),
                   "node 1 ('b') control input 1 names node 1, which is not an earlier node"));
  }
  SUBCASE("duplicate node names") {
    crafted c(2);
    c.placeholder(0, "a");
    c.placeholder(1, "a");
    CHECK(contains(load_error(c.bytes()), "node 1 ('a') has the same name as node 0"));
  }
  SUBCASE("empty name") {
    crafted c(1);
    c.placeholder(0, "");
    CHECK(contains(load_error(c.bytes()), "node 0 has an empty name"));
  }
  SUBCASE("unsupported version") {
    crafted c(1);
    c.placeholder(0, "a");
    c.root.setVersion(2);
    CHECK(contains(load_error(c.bytes()),
                   "unsupported graph format version 2 (this build reads version 1)"));
    c.root.setVersion(0);
    CHECK(contains(load_error(c.bytes()), "unsupported graph format version 0"));
  }
  SUBCASE("absurd shapes") {
    crafted c(1);
    auto t = c.constant(0, "big");
    t.setDtype(schema::DType::FLOAT32);
    auto s = t.initShape(2);
    s.set(0, int64_t{1} << 40);
    s.set(1, int64_t{1} << 40);
    CHECK(contains(load_error(c.bytes()),
                   "node 0 ('big') attribute 'value': shape "
                   "(1099511627776,1099511627776) of float32 is larger"));
    s.set(0, int64_t{1} << 62);
    s.set(1, 8);  // the product overflows int64
    CHECK(contains(load_error(c.bytes()), "is larger than 1099511627776 bytes"));
    s.set(0, 3);
    s.set(1, -2);
    CHECK(contains(load_error(c.bytes()), "has negative dim -2 at axis 1"));
    // A zero-size tensor holds no bytes, but its other dims are still bounded:
    // later shape functions multiply them.
    s.set(0, 0);
    s.set(1, int64_t{1} << 62);
    CHECK(contains(load_error(c.bytes()), "shape (0,4611686018427387904) of float32 is larger"));
    s.set(1, 1000);
    CHECK(deserialize_graph(c.bytes(), "ok")->at(0).outputs[0].dims == shape{0, 1000});
    // Writers refuse what readers would refuse.
    graph g;
    constant(g, tensor::zeros(dtype::float32, {int64_t{1} << 62, 0}), "huge_empty");
    CHECK(error_of([&] { serialize_graph(g); }) ==
          "[serialize_graph] node 0 ('huge_empty'): [tensor_io]: shape (4611686018427387904,0) "
          "of float32 is larger than 1099511627776 bytes");
  }
  SUBCASE("data size does not match dtype x shape") {
    crafted c(1);
    auto t = c.constant(0, "c");
    t.setDtype(schema::DType::FLOAT32);
    auto s = t.initShape(2);
    s.set(0, 2);
    s.set(1, 2);
    t.initData(15);
    CHECK(contains(load_error(c.bytes()), "tensor float32(2,2) needs 16 data bytes, got 15"));
    t.initData(17);
    CHECK(contains(load_error(c.bytes()), "needs 16 data bytes, got 17"));
  }
  SUBCASE("invalid dtype values") {
    crafted c(1);
    auto t = c.constant(0, "c");
    t.setDtype(static_cast<schema::DType>(99));
    CHECK(
        contains(load_error(c.bytes()), "node 0 ('c') attribute 'value': invalid dtype value 99"));
    crafted d(1);
    // 6 is bfloat16, the last one.
    d.placeholder(0, "p").getAttrs()[0].getValue().setDtype(static_cast<schema::DType>(7));
    CHECK(contains(load_error(d.bytes()), "node 0 ('p') attribute 'dtype': invalid dtype value 7"));
  }
  SUBCASE("bool bytes other than 0 and 1") {
    crafted c(1);
    auto t = c.constant(0, "c");
    t.setDtype(schema::DType::BOOLEAN);
    t.initShape(1).set(0, 3);
    auto data = t.initData(3);
    data[0] = 1;
    data[2] = 2;
    CHECK(contains(load_error(c.bytes()), "bool tensor element 2 has byte value 2"));
  }
  SUBCASE("attribute of the wrong kind") {
    crafted c(1);
    c.placeholder(0, "p").getAttrs()[0].getValue().setInt(3);
    CHECK(contains(load_error(c.bytes()),
                   "node 0 ('p'): [placeholder] attribute 'dtype' has kind int"));
    crafted d(1);
    auto attrs = d.node(0, "m", "graph_io_test_multi").initAttrs(2);
    attrs[0].setName("num_outputs");
    attrs[0].initValue().setString("three");
    attrs[1].setName("out_dtype");
    attrs[1].initValue().setDtype(schema::DType::INT32);
    CHECK(contains(load_error(d.bytes()), "attribute 'num_outputs' has kind string"));
  }
  SUBCASE("missing attribute") {
    crafted c(1);
    c.node(0, "k", "constant");
    CHECK(contains(load_error(c.bytes()), "node 0 ('k'): [constant] missing attribute 'value'"));
  }
  SUBCASE("duplicate attribute") {
    crafted c(1);
    auto n = c.placeholder(0, "p");
    n.getAttrs()[1].setName("dtype");
    CHECK(contains(load_error(c.bytes()), "node 0 ('p') attribute 'dtype' appears twice"));
  }
  SUBCASE("unknown attribute kind") {
    crafted c(1);
    // The union discriminant sits in the data section's bytes 8..9.
    capnp::AnyStruct::Builder raw(c.placeholder(0, "p").getAttrs()[0].getValue());
    raw.getDataSection()[8] = 42;
    CHECK(contains(load_error(c.bytes()), "node 0 ('p') attribute 'dtype' has unknown kind 42"));
  }
  SUBCASE("invalid or absurd placeholder dims") {
    crafted c(1);
    c.placeholder(0, "p", {2, -5});
    CHECK(contains(load_error(c.bytes()),
                   "node 0 ('p') output 0: shape (2,-5) has invalid dim -5 at axis 1"));
    crafted d(2);
    d.placeholder(0, "p", {int64_t{1} << 30, -1, int64_t{1} << 30, 0});
    d.node(1, "r", "identity");
    CHECK(contains(load_error(d.bytes()),
                   "node 0 ('p') output 0: shape "
                   "(1073741824,-1,1073741824,0) of float32 is larger"));
    crafted e(1);
    e.placeholder(0, "p", {-1, 1 << 20, -1, 1 << 18});
    CHECK(deserialize_graph(e.bytes(), "ok")->at(0).outputs[0].dims ==
          shape{-1, 1 << 20, -1, 1 << 18});
  }
  SUBCASE("wrong arity and update without a variable") {
    crafted c(2);
    c.placeholder(0, "a");
    auto n = c.node(1, "b", "identity");
    CHECK(contains(load_error(c.bytes()), "node 1 ('b'): [identity] expects 1 inputs, got 0"));
    n.initInputs(2);
    n.setOp("assign");
    CHECK(contains(load_error(c.bytes()), "input 0 must be a variable"));
  }
  SUBCASE("names are escaped and cut in errors") {
    crafted c(1);
    std::string name(200, 'n');
    name[0] = '\x01';
    c.node(0, name.c_str(), "nope");
    auto msg = load_error(c.bytes());
    CHECK(contains(msg, "node 0 ('\\x01nnn"));
    CHECK(contains(msg, "...(200 bytes)') has unknown op 'nope'"));
  }
  SUBCASE("many zero-size list elements hit the traversal limit") {
    // Root Graph struct (1 data word, 1 pointer) whose nodes list claims 2^28
    // elements of zero size: reading it must not loop 2^28 times.
    uint64_t words[] = {
        0,                                          // segment table: 1 segment (size below)
        (uint64_t{1} << 48) | (uint64_t{1} << 32),  // struct pointer: 1 data word, 1 pointer
        1,                                          // version 1
        1 | (uint64_t{7} << 32),                    // list pointer: inline composite, 0 words
        uint64_t{1} << 30,                          // tag: 2^28 elements of 0 words
    };
    uint32_t seg_words = 4;
    std::memcpy(reinterpret_cast<char*>(words) + 4, &seg_words, 4);
    std::string bytes(reinterpret_cast<const char*>(words), sizeof words);
    CHECK(contains(load_error(bytes), "[deserialize_graph] test.afg: "));
  }
}

TEST_CASE("tensor_io round trips every dtype and rejects bad tensors") {
  std::vector<tensor> samples = {
      tensor::from_vector<float>({1, -2.5f, 3e38f}),
      tensor::from_vector<double>({1e-300, -0.0}, {2, 1}),
      tensor::from_vector<int32_t>({-7}, {}),
      tensor::from_vector<int64_t>({int64_t{1} << 62, -1, 0, 5}, {2, 2}),
      tensor::from_vector<uint8_t>({0, 128, 255}),
      tensor::from_vector<bool>({true, false}),
      tensor::zeros(dtype::float64, {4, 0}),
      tensor::scalar<bool>(false),
  };
  for (auto& t : samples) {
    INFO(t.to_string());
    capnp::MallocMessageBuilder msg;
    auto b = msg.initRoot<schema::Tensor>();
    tensor_to_capnp(t, b);
    auto back = tensor_from_capnp(b.asReader(), "[test]");
    CHECK(back.equals(t));
    CHECK(reinterpret_cast<uintptr_t>(back.raw_data()) % tensor::alignment == 0);
  }
  CHECK(error_of([] {
          capnp::MallocMessageBuilder msg;
          tensor_to_capnp(tensor(), msg.initRoot<schema::Tensor>());
        }) == "[tensor_io] cannot serialize an empty tensor handle");
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Tensor>();
  b.setDtype(schema::DType::INT64);
  b.initShape(1).set(0, 2);
  b.initData(8);
  CHECK(error_of([&] { tensor_from_capnp(b.asReader(), "[checkpoint] ckpt: variable 'w'"); }) ==
        "[checkpoint] ckpt: variable 'w': tensor int64(2) needs 16 data bytes, got 8");
  CHECK(error_of([&] { tensor_from_capnp(b.asReader()); }) ==
        "[tensor_io]: tensor int64(2) needs 16 data bytes, got 8");
}

TEST_CASE("a while loop and its gradient save, load and run alike") {
  graph g;
  auto n = placeholder(g, dtype::int64, {}, "n");
  auto x = placeholder(g, dtype::float64, {2}, "x");
  auto outs =
      while_loop([&](const std::vector<output>& v) { return less(v[0], n); },
                 [&](const std::vector<output>& v) {
                   return std::vector<output>{v[0] + scalar<int64_t>(g, 1), tanh(v[1] * x)};
                 },
                 {scalar<int64_t>(g, 0), x}, {.parallel_iterations = 3, .max_iterations = 50});
  auto grad = gradients({reduce_sum(outs[1])}, {x})[0];
  auto loaded = deserialize_graph(serialize_graph(g), "loop");
  session a(g), b(*loaded);
  feed_list feeds{{n, tensor::scalar<int64_t>(5)},
                  {x, tensor::from_vector<double>({0.4, -0.3}, shape{2})}};
  feed_list loaded_feeds{{loaded->output_by_name("n"), feeds[0].second},
                         {loaded->output_by_name("x"), feeds[1].second}};
  auto want = a.run(feeds, {outs[1], grad});
  auto got = b.run(loaded_feeds,
                   {loaded->output_by_name(outs[1].name()), loaded->output_by_name(grad.name())});
  CHECK(got[0].to_vector<double>() == want[0].to_vector<double>());
  CHECK(got[1].to_vector<double>() == want[1].to_vector<double>());
  CHECK(loaded->loop_frames().size() == g.loop_frames().size());
  // max_iterations travels with the graph.
  auto e = error_of([&] {
    b.run({{loaded->output_by_name("n"), tensor::scalar<int64_t>(51)}, loaded_feeds[1]},
          {loaded->output_by_name(outs[1].name())});
  });
  CHECK(contains(e, "max_iterations=50"));
}

// A crafted node of op `op` on node `input`, with one text attribute.
schema::Node::Builder loop_node(crafted& c, unsigned i, const char* name, const char* op,
                                uint32_t input, const char* attr, const char* value) {
  auto n = c.identity(i, name, input);
  n.setOp(op);
  auto attrs = n.initAttrs(1);
  attrs[0].setName(attr);
  attrs[0].initValue().setString(value);
  return n;
}

TEST_CASE("a graph file with a malformed loop frame is refused") {
  {
    crafted c(2);
    c.placeholder(0, "p");
    c.identity(1, "exit", 0).setOp("exit");
    CHECK(contains(load_error(c.bytes()), "exit without an enter"));
  }
  {
    crafted c(4);
    c.placeholder(0, "p");
    loop_node(c, 1, "enter", "enter", 0, "frame", "L");
    loop_node(c, 2, "merge", "merge", 1, "frame", "L");
    loop_node(c, 3, "next", "next_iteration", 2, "merge", "nowhere");
    CHECK(contains(load_error(c.bytes()), "feeds no loop merge"));
  }
  {
    crafted c(3);
    c.placeholder(0, "p");
    loop_node(c, 1, "enter", "enter", 0, "frame", "L");
    auto add = c.node(2, "mixed", "add");
    auto in = add.initInputs(2);
    in[0].setNode(0);
    in[1].setNode(1);
    CHECK(contains(load_error(c.bytes()), "takes inputs from the step's frame and from loop 'L'"));
  }
}
