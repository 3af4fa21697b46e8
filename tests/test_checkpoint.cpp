// Checkpoints (actors/checkpoint, schema/checkpoint_io): exact round trips of
// variables and their optimizer slots into a fresh session, the manager's
// keep-last-K and fallback, and hostile files (truncated, flipped, crafted)
// that must throw actorflow::error naming the file, never crash, and leave
// the session's variables as they were.
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <tuple>

#include "actors/checkpoint.hpp"
#include "ops/array.hpp"
#include "ops/op_util.hpp"
#include "ops/state.hpp"
#include "schema/checkpoint.capnp.h"
#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"
#include "schema/file_io.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::code_of_failure;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::mount_small_filesystem;
using actorflow::testing::temp_dir;
namespace fs = std::filesystem;

namespace {

// An update op standing in for an optimizer: sets the variable to its input
// and keeps two slots beside it, a copy of the input and a count of updates.
// It replaces slot tensors rather than writing them in place, as updates must
// when a snapshot may share them.
const op_registrar fill_op({
    .name = "checkpoint_test_fill",
    .num_inputs = 2,
    .infer = [](const shape_context& c) { return std::vector<tensor_spec>{c.inputs[0]}; },
    .update =
        [](variable_state& v, kernel_context& ctx) {
          v.value = ctx.inputs[0];
          v.slots["copy"] = ctx.inputs[0].clone();
          auto it = v.slots.find("count");
          int64_t n = it == v.slots.end() ? 0 : it->second.item<int64_t>();
          v.slots["count"] = tensor::scalar<int64_t>(n + 1);
          ctx.set_output(0, v.value);
        },
    .stateful = true,
    .summary = "checkpoint test: sets a variable and two slots",
    .not_differentiable = true,
});

output fill(const variable& v, output value) { return make_op("checkpoint_test_fill", {v, value}); }

std::vector<float> iota(int n, float start) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = start + 0.25f * static_cast<float>(i);
  return out;
}

// The test model: variables of several dtypes and shapes, two with slots.
// Built the same way twice, it gives two identical graphs.
struct model {
  variable w, big, global_step;
  operation init;
  std::vector<operation> updates;  // fill w and big; step += 1
  output step_inc;
};

model build(graph& g, shape w_shape = {3, 4}, bool extra_variable = false) {
  model m;
  m.w = make_variable(constant(g, tensor::zeros(dtype::float32, w_shape)), "w");
  m.big = make_variable(constant(g, tensor::from_vector<float>(iota(1000, 0))), "big");
  make_variable(scalar<double>(g, 2.5), "d");
  m.global_step = make_variable(scalar<int64_t>(g, 0), "global_step");
  make_variable(constant(g, tensor::from_vector<bool>({true, false, true, true})), "flags");
  make_variable(constant(g, tensor::from_vector<int32_t>({-1, 2, -3, 4}, {2, 2})), "counts");
  make_variable(constant(g, tensor::from_vector<uint8_t>({0, 255, 7})), "bytes");
  make_variable(constant(g, tensor::zeros(dtype::float32, {0, 3})), "empty");
  if (extra_variable) make_variable(scalar<float>(g, 1.0f), "extra");
  m.init = global_variables_initializer(g);
  if (w_shape == shape{3, 4}) {
    auto wf = fill(m.w, constant(g, tensor::from_vector<float>(iota(12, -3), {3, 4})));
    m.updates.push_back(operation(&g, wf.ref().node));
  }
  auto bf = fill(m.big, constant(g, tensor::from_vector<float>(iota(1000, 5))));
  m.updates.push_back(operation(&g, bf.ref().node));
  m.step_inc = assign_add(m.global_step, scalar<int64_t>(g, 1));
  m.updates.push_back(operation(&g, m.step_inc.ref().node));
  return m;
}

void check_same(const std::map<std::string, variable_state>& a,
                const std::map<std::string, variable_state>& b) {
  REQUIRE(a.size() == b.size());
  for (auto& [name, state] : a) {
    CAPTURE(name);
    REQUIRE(b.count(name));
    auto& other = b.at(name);
    CHECK(state.value.equals(other.value));
    REQUIRE(state.slots.size() == other.slots.size());
    for (auto& [slot, value] : state.slots) {
      CAPTURE(slot);
      REQUIRE(other.slots.count(slot));
      CHECK(value.equals(other.slots.at(slot)));
    }
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A fresh directory per test case, removed at the end.
// A trained-looking session: initialized, then every update run twice.
void train(session& s, const model& m) {
  s.run({m.init});
  s.run(m.updates);
  s.run(m.updates);
}

// The payload of a checkpoint file, as a Cap'n Proto message.
kj::Array<capnp::word> payload_words(const std::string& file) {
  auto payload = file.substr(checkpoint_header_bytes);
  auto words = kj::heapArray<capnp::word>(payload.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), payload.data(), payload.size());
  return words;
}

std::string flat_bytes(capnp::MessageBuilder& msg) {
  auto words = capnp::messageToFlatArray(msg);
  auto chars = words.asChars();
  return std::string(chars.begin(), chars.size());
}

// Bitwise CRC32 (zlib's polynomial), to patch headers by hand.
uint32_t crc32_of(std::string_view bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_u32(std::string& s, size_t at, uint32_t v) {
  for (int b = 0; b < 4; ++b)
    s[at + static_cast<size_t>(b)] = static_cast<char>((v >> (8 * b)) & 0xff);
}

}  // namespace

TEST_CASE("variables and slots round trip into a fresh session of an identical graph") {
  temp_dir dir;
  graph g1;
  auto m1 = build(g1);
  session s1(g1);
  train(s1, m1);
  auto before = s1.snapshot_variables();
  REQUIRE(before.size() == 8);
  CHECK(before.at("w").slots.size() == 2);
  CHECK(before.at("big").slots.at("count").item<int64_t>() == 2);
  CHECK(before.at("global_step").value.item<int64_t>() == 2);

  // A tiny chunk size, so that every non-scalar tensor spans several chunks,
  // and one that splits elements.
  for (size_t chunk : {size_t{100}, size_t{7}, default_checkpoint_chunk_bytes}) {
    CAPTURE(chunk);
    auto path = dir / ("model_" + std::to_string(chunk) + ".afck");
    save_checkpoint(s1, path, 2, chunk);
    CHECK_FALSE(fs::exists(path + ".tmp"));

    graph g2;
    auto m2 = build(g2);
    session s2(g2);
    CHECK(restore_checkpoint(s2, path) == 2);
    check_same(before, s2.snapshot_variables());
    CHECK(s2.eval(m2.w).equals(before.at("w").value));
    // The restored slots are the ones the next update sees.
    s2.run(m2.updates);
    auto next = s2.snapshot_variables();
    CHECK(next.at("big").slots.at("count").item<int64_t>() == 3);
    CHECK(next.at("global_step").value.item<int64_t>() == 3);
  }

  // The bytes really are chunked: "big" (4000 bytes) in runs of 100.
  auto words = payload_words(read_bytes(dir / "model_100.afck"));
  capnp::FlatArrayMessageReader reader(words);
  auto root = reader.getRoot<schema::Checkpoint>();
  CHECK(root.getGlobalStep() == 2);
  bool found = false;
  for (auto v : root.getVariables())
    if (v.getName() == "big") {
      found = true;
      CHECK(v.getValue().getChunks().size() == 40);
      CHECK(v.getSlots().size() == 2);
    }
  CHECK(found);
}

TEST_CASE("bytes round trip at any alignment; bad chunk sizes and empty tensors are refused") {
  checkpoint_data data;
  data.global_step = -7;
  data.variables["a"].value = tensor::from_vector<double>({1.5, -2.25, 1e300});
  data.variables["a"].slots["m"] = tensor::scalar<int64_t>(INT64_MIN);
  data.variables["b/c"].value = tensor::scalar<float>(3.0f);
  auto bytes = serialize_checkpoint(data, 5);
  std::string shifted = "x" + bytes;
  for (std::string_view view : {std::string_view(bytes), std::string_view(shifted).substr(1)}) {
    auto back = deserialize_checkpoint(view, "mem");
    CHECK(back.global_step == -7);
    check_same(data.variables, back.variables);
  }

  CHECK(contains(error_of([&] { serialize_checkpoint(data, 0); }), "chunk size 0"));
  checkpoint_data bad;
  bad.variables["v"].value = tensor::scalar<float>(1);
  bad.variables["v"].slots["s"] = tensor();
  CHECK(contains(error_of([&] { serialize_checkpoint(bad); }),
                 "variable 'v' slot 's' is an empty tensor"));
  checkpoint_data unnamed;
  unnamed.variables[""].value = tensor::scalar<float>(1);
  CHECK(contains(error_of([&] { serialize_checkpoint(unnamed); }), "empty name"));
}

// A tensor of `n` elements whose bytes are 0 and 1 in a pattern set by
// `seed` (valid bools too).
tensor patterned(dtype type, int64_t n, int seed) {
  tensor t(type, shape{n});
  auto p = static_cast<unsigned char*>(t.raw_mutable_data());
  for (size_t i = 0; i < t.size_bytes(); ++i) p[i] = static_cast<unsigned char>((i * 7 + seed) % 2);
  return t;
}

uint64_t le_at(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int b = 0; b < n; ++b) v |= uint64_t{static_cast<unsigned char>(bytes[at + b])} << (8 * b);
  return v;
}

TEST_CASE("the bytes stay format version 1's; a saved file holds serialize_checkpoint's bytes") {
  checkpoint_data data;
  data.global_step = 42;
  data.variables["a"].value = tensor::from_vector<double>({1.5, -2.25, 1e300});
  data.variables["a"].slots["m"] = tensor::scalar<int64_t>(INT64_MIN);
  data.variables["b/c"].value = tensor::scalar<float>(3.0f);
  data.variables["odd"].value = patterned(dtype::uint8, 3, 1);
  data.variables["flag"].value = patterned(dtype::boolean, 13, 2);
  data.variables["empty"].value = tensor(dtype::float32, shape{0, 4});
  // The payload's length and CRC32 as the writer that copied every tensor
  // into the message wrote them: the splicing writer must give the same bytes.
  for (auto [chunk, length, crc] :
       {std::tuple{size_t{7}, 616u, 0x0ae72249u},
        std::tuple{default_checkpoint_chunk_bytes, 560u, 0xfa5468a0u}}) {
    CAPTURE(chunk);
    auto bytes = serialize_checkpoint(data, chunk);
    CHECK(le_at(bytes, 16, 8) == length);
    CHECK(le_at(bytes, 24, 4) == crc);
  }
  // Tensors over several chunks, beside small ones: the file (written
  // streaming, its header last) is the same bytes.
  data.variables["big"].value = patterned(dtype::float32, (int64_t{7} << 20) / 8 + 3, 3);
  data.variables["big"].slots["m"] = patterned(dtype::uint8, 1001, 4);
  temp_dir dir;
  for (size_t chunk : {size_t{100}, size_t{1} << 20, default_checkpoint_chunk_bytes}) {
    CAPTURE(chunk);
    save_checkpoint_file(data, dir / "same.afck", chunk);
    std::ifstream in(dir / "same.afck", std::ios::binary);
    std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(file == serialize_checkpoint(data, chunk));
    check_same(data.variables, load_checkpoint_file(dir / "same.afck").variables);
  }
}

TEST_CASE(
    "a file written around the page cache holds the same bytes at every block and staging edge") {
  temp_dir dir;
  auto path = dir / "direct.bin";
  std::string source(size_t{17} << 20, '\0');
  std::mt19937 rng(7);
  for (auto& c : source) c = static_cast<char>(rng());
  constexpr size_t staged = size_t{8} << 20;
  for (size_t length : {size_t{0}, size_t{1}, size_t{4063}, size_t{4064}, size_t{4065},
                        size_t{8192}, staged - 32, staged - 31, staged + 5000, source.size()}) {
    for (bool direct : {true, false}) {
      CAPTURE(length);
      CAPTURE(direct);
      // The payload in uneven pieces, the header (32 bytes) made last.
      std::vector<std::string_view> payload;
      for (size_t at = 0, step = 1; at < length; at += step, step = step * 3 + 1)
        payload.push_back(std::string_view(source).substr(at, std::min(step, length - at)));
      std::string header = "header:" + std::to_string(length);
      header.resize(32, '.');
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      REQUIRE(fd >= 0);
      write_header_and_payload(
          fd, 32, payload, [&] { return header; }, "test: ", write_pace(), direct);
      ::close(fd);
      std::ifstream in(path, std::ios::binary);
      std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(file.size() == 32 + length);
      CHECK(file == header + source.substr(0, length));
    }
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  CHECK(contains(error_of([&] {
                   write_header_and_payload(
                       fd, 0, {}, [] { return ""; }, "t: ");
                 }),
                 "a header of 0 bytes"));
  ::close(fd);
}

TEST_CASE("a saved file's size and CRC32, as the saver reports them, are the file's") {
  temp_dir dir;
  checkpoint_data data;
  data.global_step = 9;
  data.variables["w"].value = patterned(dtype::float32, (int64_t{9} << 20) / 4 + 11, 5);
  data.variables["w"].slots["m"] = patterned(dtype::uint8, 4097, 6);
  auto written = save_checkpoint_file(data, dir / "w.afck");
  auto read_back = describe_file(dir / "w.afck");
  CHECK(written.bytes == read_back.bytes);
  CHECK(written.crc32 == read_back.crc32);
  // Paced at 40 MiB/s, the 9 MiB take at least 0.2 s, and the file is the same.
  auto start = std::chrono::steady_clock::now();
  auto paced = save_checkpoint_file(data, dir / "paced.afck", default_checkpoint_chunk_bytes,
                                    40.0 * (1 << 20));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(200));
  CHECK(paced.crc32 == written.crc32);
}

TEST_CASE("a full disk fails the save naming the file, and leaves the last checkpoint as it was" *
          doctest::test_suite("small_filesystem")) {
  // A 4 MiB file system of this process's own (a mount namespace of its
  // own: the mount goes away with the process, however it ends).
  temp_dir dir;
  auto small = dir / "small";
  fs::create_directories(small);
  if (!mount_small_filesystem(small, "4m")) return;
  graph g;
  make_variable(fill(g, {int64_t{640} << 10}, 0.5), "w");  // 2.5 MiB: two do not fit
  make_variable(fill(g, {4}, 1.0), "v");
  session s(g);
  s.run({global_variables_initializer(g)});
  checkpoint_manager manager(small, 5);
  CHECK(manager.save(s, 1) == small + "/ckpt-1.afck");
  for (bool background : {false, true}) {
    CAPTURE(background);
    auto save = [&] {
      if (background)
        manager.start_save(s, 2).get();
      else
        manager.save(s, 2);
    };
    auto e = error_of(save);
    CHECK_MESSAGE(contains(e, "[save_checkpoint] " + small + "/ckpt-2.afck"), e);
    CHECK_MESSAGE(contains(e, "No space left on device"), e);
    CHECK(code_of_failure(save) == error_code::resource_exhausted);
    CHECK_FALSE(fs::exists(small + "/ckpt-2.afck"));
    CHECK_FALSE(fs::exists(small + "/ckpt-2.afck.tmp"));
    std::vector<std::string> errors;
    auto last = manager.load_latest(errors);
    REQUIRE(last.has_value());
    CHECK(last->global_step == 1);
    CHECK(errors.empty());
  }
  ::umount2(small.c_str(), MNT_DETACH);
}

TEST_CASE("saving names uninitialized variables; restoring checks every variable, all or nothing") {
  temp_dir dir;
  graph g1;
  auto m1 = build(g1);
  session s1(g1);
  auto path = dir / "ckpt.afck";
  // Nothing initialized yet: every variable is named.
  auto e = error_of([&] { save_checkpoint(s1, path, 0); });
  CHECK(contains(e, "[save_checkpoint] " + path));
  CHECK(contains(e, "'w'"));
  CHECK(contains(e, "'empty'"));
  CHECK(contains(e, "not initialized"));
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  train(s1, m1);
  save_checkpoint(s1, path, 2);

  SUBCASE("a variable of another shape") {
    graph g2;
    auto m2 = build(g2, {4, 3});
    session s2(g2);
    e = error_of([&] { restore_checkpoint(s2, path); });
    CHECK(contains(e, "[restore_checkpoint] " + path));
    CHECK(contains(e, "variable 'w' is float32(4,3) in the graph but float32(3,4)"));
    CHECK(contains(e, "nothing was restored"));
    // Nothing changed: the other variables are still uninitialized.
    CHECK(contains(error_of([&] { s2.eval(m2.big); }), "read before it was initialized"));
  }
  SUBCASE("a variable missing from the checkpoint") {
    graph g2;
    auto m2 = build(g2, {3, 4}, /*extra_variable=*/true);
    session s2(g2);
    s2.run({m2.init});
    e = error_of([&] { restore_checkpoint(s2, path); });
    CHECK(contains(e, "[restore_checkpoint] " + path));
    CHECK(contains(e, "no value for variable 'extra'"));
    // Nothing changed: the initial values are still there.
    CHECK(s2.eval(m2.big).to_vector<float>() == iota(1000, 0));
    CHECK(s2.snapshot_variables().at("big").slots.empty());
  }
  SUBCASE("restore_variables reports every problem at once") {
    graph g2;
    build(g2, {3, 4}, true);
    session s2(g2);
    auto states = s1.snapshot_variables();
    states["d"].value = tensor::scalar<float>(2.5f);
    e = error_of([&] { s2.restore_variables(states); });
    CHECK(contains(e, "no value for variable 'extra'"));
    CHECK(contains(e, "variable 'd' is float64() in the graph but float32()"));
  }
}

TEST_CASE("truncated, flipped and foreign files are errors naming the file") {
  temp_dir dir;
  graph g;
  auto v = make_variable(constant(g, tensor::from_vector<float>({1, 2})), "v");
  session s(g);
  s.run({v.initializer()});
  auto path = dir / "small.afck";
  save_checkpoint(s, path, 5);
  const std::string good = read_bytes(path);
  REQUIRE(good.size() > checkpoint_header_bytes);

  graph g2;
  auto v2 = make_variable(g2, dtype::float32, {2}, "v");
  session s2(g2);
  auto bad = dir / "bad.afck";
  auto restore_error = [&](const std::string& bytes) {
    write_bytes(bad, bytes);
    return error_of([&] { restore_checkpoint(s2, bad); });
  };

  for (size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    auto e = restore_error(good.substr(0, n));
    CHECK(contains(e, "[load_checkpoint] " + bad + ": "));
    CHECK(contains(e, n == 0 ? "empty file" : "truncated"));
  }
  for (size_t i = 0; i < good.size(); ++i) {
    CAPTURE(i);
    auto flipped = good;
    flipped[i] = static_cast<char>(flipped[i] ^ (1 << (i % 8)));
    auto e = restore_error(flipped);
    CHECK(contains(e, "[load_checkpoint] " + bad + ": "));
    CHECK(contains(e, i < 8 ? "not an actorflow checkpoint"
                            : (i < checkpoint_header_bytes ? "header checksum mismatch"
                                                           : "checksum mismatch: the payload")));
  }
  CHECK(contains(restore_error("GARBAGE!" + good.substr(8)), "not an actorflow checkpoint"));
  CHECK(contains(restore_error(good + std::string(8, '\0')),
                 "8 bytes of trailing data after the payload"));
  CHECK(contains(error_of([&] { restore_checkpoint(s2, dir / "missing.afck"); }),
                 dir / "missing.afck" + ": cannot open"));
  CHECK(contains(error_of([&] { restore_checkpoint(s2, dir.path.string()); }),
                 "a directory without a MANIFEST, so not a checkpoint"));

  // A header from another version, with a correct header checksum.
  auto newer = good;
  put_u32(newer, 8, 2);
  put_u32(newer, 28, crc32_of(std::string_view(newer).substr(0, 28)));
  CHECK(contains(restore_error(newer), "unsupported checkpoint format version 2"));

  // After all that, nothing was restored; the good file still is.
  CHECK(contains(error_of([&] { s2.eval(v2); }), "read before it was initialized"));
  CHECK(restore_checkpoint(s2, path) == 5);
  CHECK(s2.eval(v2).to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("hand-crafted payloads with valid checksums are rejected with clear errors") {
  // One variable "v": float32 (2), in one chunk; `edit` spoils one thing.
  auto crafted = [](const std::function<void(schema::Checkpoint::Builder)>& edit) {
    capnp::MallocMessageBuilder msg;
    auto root = msg.initRoot<schema::Checkpoint>();
    root.setVersion(checkpoint_format_version);
    root.setGlobalStep(1);
    auto v = root.initVariables(1)[0];
    v.setName("v");
    auto t = v.initValue();
    t.setDtype(schema::DType::FLOAT32);
    t.initShape(1).set(0, 2);
    t.initChunks(1).init(0, 8);
    edit(root);
    auto bytes = frame_checkpoint_payload(flat_bytes(msg));
    return error_of([&] { deserialize_checkpoint(bytes, "crafted"); });
  };
  auto value = [](schema::Checkpoint::Builder r) { return r.getVariables()[0].getValue(); };
  auto scalar_int64 = [](schema::ChunkedTensor::Builder t) {
    t.setDtype(schema::DType::INT64);
    t.initChunks(1).init(0, 8);
  };

  CHECK(crafted([](auto) {}).empty());
  CHECK(contains(crafted([](auto r) { r.setVersion(9); }),
                 "unsupported checkpoint message version 9"));
  CHECK(contains(crafted([](auto r) { r.getVariables()[0].setName(""); }),
                 "[deserialize_checkpoint] crafted: variable 0 has an empty name"));
  CHECK(
      contains(crafted([](auto r) { r.getVariables()[0].setName(capnp::Text::Reader("a\0b", 3)); }),
               "NUL byte"));
  CHECK(contains(crafted([&](auto r) { value(r).initChunks(2).init(0, 7); }),
                 "variable 0 ('v') value: float32(2) needs 8 bytes, its 2 chunks hold 7"));
  CHECK(contains(crafted([&](auto r) { value(r).getShape().set(0, -2); }), "negative dim -2"));
  CHECK(contains(crafted([&](auto r) {
                   auto dims = value(r).initShape(2);
                   dims.set(0, int64_t{1} << 40);
                   dims.set(1, int64_t{1} << 40);
                 }),
                 "is larger than"));
  CHECK(contains(crafted([&](auto r) { value(r).setDtype(static_cast<schema::DType>(99)); }),
                 "invalid dtype value 99"));
  CHECK(contains(crafted([&](auto r) {
                   value(r).setDtype(schema::DType::BOOLEAN);
                   value(r).getShape().set(0, 8);
                   value(r).getChunks()[0][3] = 2;
                 }),
                 "bool element 3 has byte value 2"));
  CHECK(contains(crafted([&](auto r) {
                   auto vars = r.initVariables(2);
                   for (unsigned i = 0; i < 2; ++i) {
                     vars[i].setName("twice");
                     scalar_int64(vars[i].initValue());
                   }
                 }),
                 "variable 1 ('twice') appears twice"));
  CHECK(contains(crafted([&](auto r) {
                   auto slots = r.getVariables()[0].initSlots(2);
                   for (unsigned i = 0; i < 2; ++i) {
                     slots[i].setName("m");
                     scalar_int64(slots[i].initValue());
                   }
                 }),
                 "slot 1 ('m') appears twice"));
  // A valid message followed by junk inside the checksummed payload.
  capnp::MallocMessageBuilder msg;
  msg.initRoot<schema::Checkpoint>().setVersion(checkpoint_format_version);
  auto junk = frame_checkpoint_payload(flat_bytes(msg) + std::string(16, '\0'));
  CHECK(contains(error_of([&] { deserialize_checkpoint(junk, "junk"); }),
                 "16 bytes of trailing data"));
  CHECK(contains(error_of([&] { deserialize_checkpoint(frame_checkpoint_payload(""), "none"); }),
                 "the payload is empty"));
  CHECK(contains(
      error_of([&] { deserialize_checkpoint(frame_checkpoint_payload("1234567"), "odd"); }),
      "not a multiple of 8"));
}

TEST_CASE("corrupted payloads behind valid checksums load or throw, never crash") {
  checkpoint_data data;
  data.global_step = 3;
  data.variables["w"].value = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  data.variables["w"].slots["m"] = tensor::from_vector<bool>({true, false});
  data.variables["s"].value = tensor::scalar<int64_t>(9);
  auto file = serialize_checkpoint(data, 8);
  auto payload = file.substr(checkpoint_header_bytes);
  std::mt19937 rng(42);
  int loaded = 0, rejected = 0;
  auto attempt = [&](const std::string& p) {
    try {
      deserialize_checkpoint(frame_checkpoint_payload(p), "mutated");
      ++loaded;
    } catch (const error&) {
      ++rejected;
    }
  };
  for (size_t i = 0; i < payload.size(); ++i) {
    auto p = payload;
    p[i] = static_cast<char>(p[i] ^ (1 << (rng() % 8)));
    attempt(p);
    p[i] = static_cast<char>(rng());
    attempt(p);
  }
  for (int k = 0; k < 300; ++k) {
    std::string p(8 * (rng() % 40), '\0');
    for (auto& c : p) c = static_cast<char>(rng());
    attempt(p);
  }
  CHECK(loaded + rejected == static_cast<int>(2 * payload.size()) + 300);
  CHECK(rejected > 0);
}

TEST_CASE("checkpoint_manager keeps the last K and falls back past corrupt files") {
  temp_dir dir;
  auto ckpt_dir = dir / "run";
  graph g;
  auto m = build(g);
  session s(g);
  s.run({m.init});
  checkpoint_manager manager(ckpt_dir, 3);
  CHECK(manager.list().empty());  // no directory yet
  CHECK_FALSE(manager.restore_latest(s).restored);

  for (int64_t step = 1; step <= 5; ++step) {
    s.run(m.updates);
    auto path = manager.save(s, step * 10);
    CHECK(path == ckpt_dir + "/ckpt-" + std::to_string(step * 10) + ".afck");
  }
  auto list = manager.list();
  REQUIRE(list.size() == 3);
  CHECK(list[0].step == 50);
  CHECK(list[1].step == 40);
  CHECK(list[2].step == 30);
  CHECK_FALSE(fs::exists(ckpt_dir + "/ckpt-10.afck"));
  CHECK_FALSE(fs::exists(ckpt_dir + "/ckpt-20.afck"));

  // A crash mid-write leaves only a temporary file, which is ignored; so are
  // files of other names.
  write_bytes(ckpt_dir + "/ckpt-60.afck.tmp", read_bytes(list[0].path).substr(0, 100));
  write_bytes(ckpt_dir + "/ckpt-x.afck", "junk");
  write_bytes(ckpt_dir + "/notes.txt", "junk");
  CHECK(manager.list().size() == 3);

  graph g2;
  auto m2 = build(g2);
  SUBCASE("the newest restores") {
    session s2(g2);
    auto r = manager.restore_latest(s2);
    CHECK(r.restored);
    CHECK(r.step == 50);
    CHECK(r.path == list[0].path);
    CHECK(r.errors.empty());
    CHECK(s2.eval(m2.global_step).item<int64_t>() == 5);
  }
  SUBCASE("a corrupt newest falls back to the one before") {
    auto bytes = read_bytes(list[0].path);
    bytes[bytes.size() / 2] ^= 0x10;
    write_bytes(list[0].path, bytes);
    auto truncated = read_bytes(list[1].path);
    write_bytes(list[1].path, truncated.substr(0, truncated.size() - 3));
    session s2(g2);
    auto r = manager.restore_latest(s2);
    CHECK(r.restored);
    CHECK(r.step == 30);
    CHECK(r.path == list[2].path);
    REQUIRE(r.errors.size() == 2);
    CHECK(contains(r.errors[0], list[0].path + ": checksum mismatch"));
    CHECK(contains(r.errors[1], list[1].path + ": truncated"));
    CHECK(s2.eval(m2.global_step).item<int64_t>() == 3);
    // Saving again keeps the new file even though corrupt ones have higher steps.
    checkpoint_manager one(ckpt_dir, 1);
    auto kept = one.save(s2, 31);
    REQUIRE(one.list().size() == 1);
    CHECK(one.list()[0].path == kept);
  }
  SUBCASE("all corrupt: nothing restored, every file named") {
    for (auto& e : list) write_bytes(e.path, "AFCKPT");
    session s2(g2);
    auto r = manager.restore_latest(s2);
    CHECK_FALSE(r.restored);
    REQUIRE(r.errors.size() == 3);
    for (size_t i = 0; i < 3; ++i) CHECK(contains(r.errors[i], list[i].path));
  }
  SUBCASE("a checkpoint that does not fit the graph is an error, not a fallback") {
    graph g3;
    build(g3, {3, 4}, true);
    session s3(g3);
    auto e = error_of([&] { manager.restore_latest(s3); });
    CHECK(contains(e, list[0].path));
    CHECK(contains(e, "'extra'"));
  }

  CHECK(contains(error_of([&] { checkpoint_manager none(ckpt_dir, 0); }), "keep_last"));
  CHECK(contains(error_of([&] { manager.save(s, -1); }), "step must be >= 0"));
}

TEST_CASE("a new checkpoint_manager deletes the temporaries of killed saves, and only those") {
  temp_dir dir;
  auto ckpt_dir = dir / "run";
  graph g;
  auto m = build(g);
  session s(g);
  s.run({m.init});
  checkpoint_manager(ckpt_dir, 3).save(s, 10);
  // What a save killed between its write and its rename leaves, and files
  // that are not a save's temporaries.
  write_bytes(ckpt_dir + "/ckpt-20.afck.tmp", "half a checkpoint");
  write_bytes(ckpt_dir + "/notes.tmp", "the user's");
  write_bytes(ckpt_dir + "/ckpt-x.afck.tmp", "not ours either");
  checkpoint_manager manager(ckpt_dir, 3);
  CHECK_FALSE(fs::exists(ckpt_dir + "/ckpt-20.afck.tmp"));
  CHECK(fs::exists(ckpt_dir + "/notes.tmp"));
  CHECK(fs::exists(ckpt_dir + "/ckpt-x.afck.tmp"));
  REQUIRE(manager.list().size() == 1);
  CHECK(manager.list()[0].step == 10);
  // A missing directory is not an error: it is made on the first save.
  CHECK_NOTHROW(checkpoint_manager(dir / "not-yet", 3));
}

TEST_CASE("a directory named like a checkpoint is an error naming it, not skipped") {
  temp_dir dir;
  auto ckpt_dir = dir / "run";
  graph g;
  auto m = build(g);
  session s(g);
  s.run({m.init});
  checkpoint_manager manager(ckpt_dir, 3);
  manager.save(s, 10);
  fs::create_directories(ckpt_dir + "/ckpt-20.afck");
  auto e = error_of([&] { manager.list(); });
  CHECK(contains(e, "[checkpoint_manager]"));
  CHECK(contains(e, ckpt_dir + "/ckpt-20.afck' is not a regular file"));
  CHECK(contains(error_of([&] { manager.restore_latest(s); }), "ckpt-20.afck"));
}
