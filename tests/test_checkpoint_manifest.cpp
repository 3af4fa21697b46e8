// Cluster checkpoints (schema/checkpoint_manifest): the manifest's exact round
// trip; hostile manifest bytes (truncated, flipped, crafted past the checksum)
// that must throw "[load_manifest] ..." and never crash; shard files described
// and verified; the directory lock, across processes too; and the directory of
// checkpoints: listing, cleanup of saves that did not finish, rotation, and
// newest() skipping what does not verify, naming it.
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "schema/checkpoint.capnp.h"
#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::code_of_failure;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::temp_dir;
namespace fs = std::filesystem;

namespace {

checkpoint_manifest sample_manifest(int64_t step = 200) {
  checkpoint_manifest m;
  m.step = step;
  m.run_id = "run-7f3a";
  m.cluster = {{"ps", 2}, {"worker", 3}};
  m.shards = {{"/job:ps/task:0", "ps-0.afck", 1234, 0xdeadbeef},
              {"/job:ps/task:1", "ps-1.afck", 99, 7}};
  m.variables = {
      {"w", dtype::float32, {784, 10}, 0, {}},
      {"global_step", dtype::int64, {}, 1, {}},
      {"emb/part_0", dtype::float32, {51, 8}, 0, {"emb", 101, 2, 0, "div"}},
      {"emb/part_1", dtype::float32, {50, 8}, 1, {"emb", 101, 2, 1, "div"}},
  };
  m.pause_ms = 12.5;
  return m;
}

void check_same(const checkpoint_manifest& a, const checkpoint_manifest& b) {
  CHECK(a.step == b.step);
  CHECK(a.run_id == b.run_id);
  CHECK(a.cluster == b.cluster);
  CHECK(a.pause_ms == b.pause_ms);
  REQUIRE(a.shards.size() == b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i) {
    CHECK(a.shards[i].task == b.shards[i].task);
    CHECK(a.shards[i].file == b.shards[i].file);
    CHECK(a.shards[i].bytes == b.shards[i].bytes);
    CHECK(a.shards[i].crc32 == b.shards[i].crc32);
  }
  REQUIRE(a.variables.size() == b.variables.size());
  for (size_t i = 0; i < a.variables.size(); ++i) {
    auto &x = a.variables[i], &y = b.variables[i];
    CHECK(x.name == y.name);
    CHECK(x.type == y.type);
    CHECK(x.dims == y.dims);
    CHECK(x.shard == y.shard);
    CHECK(x.partition.of == y.partition.of);
    CHECK(x.partition.rows == y.partition.rows);
    CHECK(x.partition.count == y.partition.count);
    CHECK(x.partition.index == y.partition.index);
    CHECK(x.partition.strategy == y.partition.strategy);
  }
}

std::string load_error(const std::string& bytes) {
  return error_of([&] { deserialize_manifest(bytes, "crafted"); });
}

// The sample's message as a builder, changed by `edit` and framed with a
// valid header: what a writer without checks (or an attacker) could produce.
std::string crafted(const std::function<void(schema::Manifest::Builder)>& edit) {
  std::string payload = serialize_manifest(sample_manifest()).substr(32);
  auto words = kj::heapArray<capnp::word>(payload.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), payload.data(), payload.size());
  capnp::FlatArrayMessageReader reader(words);
  capnp::MallocMessageBuilder builder;
  builder.setRoot(reader.getRoot<schema::Manifest>());
  edit(builder.getRoot<schema::Manifest>());
  auto flat = capnp::messageToFlatArray(builder);
  return frame_manifest_payload({flat.asChars().begin(), flat.asChars().size()});
}

// The raw words of the sample's one-segment message, to forge pointers in.
struct raw_message {
  std::vector<uint64_t> words;  // [0] the segment table, then the segment
  raw_message() {
    std::string payload = serialize_manifest(sample_manifest()).substr(32);
    words.resize(payload.size() / 8);
    std::memcpy(words.data(), payload.data(), payload.size());
    REQUIRE((words[0] & 0xffffffff) == 0);  // one segment
  }
  // The index of the word a pointer at `at` points to.
  size_t target(size_t at) const {
    auto offset = static_cast<int32_t>(static_cast<uint32_t>(words[at]) & ~3u) >> 2;
    return static_cast<size_t>(static_cast<int64_t>(at) + 1 + offset);
  }
  // The pointer to Manifest.variables: the root struct's fourth pointer.
  size_t variables_pointer() const {
    size_t root = target(1);
    size_t data_words = (words[1] >> 32) & 0xffff;
    return root + data_words + 3;
  }
  std::string framed() const {
    return frame_manifest_payload({reinterpret_cast<const char*>(words.data()), words.size() * 8});
  }
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_SUITE("checkpoint_manifest") {
  TEST_CASE("a manifest round-trips exactly, in memory and through a file") {
    auto m = sample_manifest();
    auto bytes = serialize_manifest(m);
    CHECK(bytes.compare(0, 8, std::string("AFMANI\0\0", 8)) == 0);
    check_same(deserialize_manifest(bytes, "memory"), m);

    // Unaligned bytes are read through a copy.
    std::string shifted = "x" + bytes;
    check_same(deserialize_manifest(std::string_view(shifted).substr(1), "shifted"), m);

    temp_dir dir("manifest");
    std::string path = dir / "MANIFEST";
    save_manifest(m, path);
    CHECK(read_file(path) == bytes);
    CHECK_FALSE(fs::exists(path + ".tmp"));
    auto loaded = load_manifest(path);
    check_same(loaded, m);
    REQUIRE(loaded.find("emb/part_1") != nullptr);
    CHECK(loaded.find("emb/part_1")->partition.index == 1);
    CHECK(loaded.find("emb/part_1")->partition.is_part());
    CHECK_FALSE(loaded.find("w")->partition.is_part());
    CHECK(loaded.find("emb") == nullptr);

    checkpoint_manifest empty;
    check_same(deserialize_manifest(serialize_manifest(empty), "empty"), empty);
  }

  TEST_CASE("a manifest cut at any length is reported as truncated") {
    auto bytes = serialize_manifest(sample_manifest());
    for (size_t n = 0; n < bytes.size(); ++n) {
      CAPTURE(n);
      auto e = error_of([&] { deserialize_manifest(bytes.substr(0, n), "cut"); });
      CHECK(contains(e, "[load_manifest] cut: "));
      CHECK((contains(e, "truncated") || contains(e, "empty file")));
      CHECK(code_of_failure([&] { deserialize_manifest(bytes.substr(0, n), "cut"); }) ==
            error_code::data_loss);
    }
    CHECK(contains(load_error(bytes + std::string(8, '\0')), "trailing data"));
  }

  TEST_CASE("every single flipped bit is detected") {
    auto bytes = serialize_manifest(sample_manifest());
    for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
      std::string flipped = bytes;
      flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
      CAPTURE(bit);
      auto e = load_error(flipped);
      CHECK(contains(e, "[load_manifest] crafted: "));
      if (bit >= 32 * 8) CHECK(contains(e, "checksum mismatch: the payload's CRC32"));
    }
  }

  TEST_CASE("another magic or format version is refused") {
    checkpoint_data data;
    data.global_step = 3;
    auto e = load_error(serialize_checkpoint(data));
    CHECK(contains(e, "not an actorflow manifest: it starts with 'AFCKPT"));

    auto bytes = serialize_manifest(sample_manifest());
    // A later version, with the header's checksum made right: only the version is wrong.
    std::string v2 = bytes;
    v2[8] = 2;
    uLong header_crc = crc32(0, reinterpret_cast<const Bytef*>(v2.data()), 28);
    for (int b = 0; b < 4; ++b) v2[28 + b] = static_cast<char>((header_crc >> (8 * b)) & 0xff);
    CHECK(contains(load_error(v2),
                   "unsupported manifest format version 2 (this build reads version 1)"));

    auto message_v7 = crafted([](schema::Manifest::Builder m) { m.setVersion(7); });
    CHECK(contains(load_error(message_v7), "unsupported manifest message version 7"));
  }

  TEST_CASE("crafted fields past the checksum are rejected with what is wrong") {
    struct bad_case {
      const char* expect;
      std::function<void(schema::Manifest::Builder)> edit;
    };
    const std::vector<bad_case> cases = {
        {"shard 0's file '../x' is not a plain file name",
         [](auto m) { m.getShards()[0].setFile("../x"); }},
        {"shard 1's file 'a/b' is not a plain file name",
         [](auto m) { m.getShards()[1].setFile("a/b"); }},
        {"shard 0's file '.' is not a plain file name",
         [](auto m) { m.getShards()[0].setFile("."); }},
        {"shard 0's file '..' is not a plain file name",
         [](auto m) { m.getShards()[0].setFile(".."); }},
        {"shard 0's file has an empty name", [](auto m) { m.getShards()[0].setFile(""); }},
        {"shard 1: file 'ps-0.afck' appears twice",
         [](auto m) { m.getShards()[1].setFile("ps-0.afck"); }},
        {"shard 1: task '/job:ps/task:0' appears twice",
         [](auto m) { m.getShards()[1].setTask("/job:ps/task:0"); }},
        {"variable 1 ('w') appears twice", [](auto m) { m.getVariables()[1].setName("w"); }},
        {"variable 0 has an empty name", [](auto m) { m.getVariables()[0].setName(""); }},
        {"variable 1 ('global_step'): shard 2 is out of range (2 shards)",
         [](auto m) { m.getVariables()[1].setShard(2); }},
        {"variable 0 ('w'): shape", [](auto m) { m.getVariables()[0].getShape().set(1, -3); }},
        {"invalid dtype value 200",
         [](auto m) { m.getVariables()[0].setDtype(static_cast<schema::DType>(200)); }},
        {"part 2 of 'emb': index not in [0, 2)",
         [](auto m) { m.getVariables()[3].getPartition().setIndex(2); }},
        {"part -1 of 'emb': index not in [0, 2)",
         [](auto m) { m.getVariables()[3].getPartition().setIndex(-1); }},
        {"part 0 of 'emb' appears twice",
         [](auto m) { m.getVariables()[3].getPartition().setIndex(0); }},
        {"has strategy 'zigzag' (must be div or mod)",
         [](auto m) { m.getVariables()[2].getPartition().setStrategy("zigzag"); }},
        {"variable 3 ('emb/part_1') says 'emb' has 100 rows in 2 parts (div), 'emb/part_0' says "
         "101 rows in 2 parts (div)",
         [](auto m) { m.getVariables()[3].getPartition().setRows(100); }},
        {"the 2 parts of 'emb' hold 100 rows, not its 101",
         [](auto m) { m.getVariables()[3].getShape().set(0, 49); }},
        {"is not a part of a variable (no 'of') but has partition fields",
         [](auto m) { m.getVariables()[0].getPartition().setCount(3); }},
        {"cluster job 'ps' has 0 tasks (must be >= 1)",
         [](auto m) { m.getCluster()[0].setTasks(0); }},
        {"cluster job 'ps' appears twice", [](auto m) { m.getCluster()[1].setName("ps"); }},
        {"step -5 is negative", [](auto m) { m.setStep(-5); }},
        {"is not a finite number >= 0", [](auto m) { m.setPauseMs(-1); }},
    };
    for (auto& c : cases) {
      CAPTURE(c.expect);
      auto e = load_error(crafted(c.edit));
      CHECK(contains(e, "[load_manifest] crafted: "));
      CHECK(contains(e, c.expect));
      CHECK(code_of_failure([&] { deserialize_manifest(crafted(c.edit), "crafted"); }) ==
            error_code::data_loss);
    }
    // The untouched sample passes, so each case fails for its own edit.
    CHECK(load_error(crafted([](auto) {})).empty());
  }

  TEST_CASE("a manifest that would not load is never written") {
    temp_dir dir("manifest_write");
    std::string path = dir / "MANIFEST";
    auto m = sample_manifest();
    m.variables[2].partition.index = 5;
    auto e = error_of([&] { save_manifest(m, path); });
    CHECK(contains(e, "[save_checkpoint] " + path + ": "));
    CHECK(contains(e, "part 5 of 'emb': index not in [0, 2)"));
    CHECK_FALSE(fs::exists(path));
    CHECK_FALSE(fs::exists(path + ".tmp"));

    m = sample_manifest();
    m.shards[0].file = "../escape";
    CHECK(contains(error_of([&] { serialize_manifest(m); }), "not a plain file name"));
    m = sample_manifest();
    m.variables[0].dims = {-1, 3};
    CHECK(contains(error_of([&] { serialize_manifest(m); }), "variable 0 ('w'): shape"));
  }

  TEST_CASE("huge list lengths in a crafted payload are refused without allocating them") {
    {
      // The variables list's tag claims 2^30 - 1 elements in the words of 4.
      raw_message raw;
      size_t tag = raw.target(raw.variables_pointer());
      raw.words[tag] = (raw.words[tag] & ~uint64_t{0xffffffff}) | (uint64_t{0x3fffffff} << 2);
      auto e = load_error(raw.framed());
      CHECK(contains(e, "[load_manifest] crafted: malformed Cap'n Proto message"));
    }
    {
      // 2^30 - 1 elements of zero size take no words at all: only the
      // traversal limit, set from the payload's size, stops them.
      raw_message raw;
      size_t pointer = raw.variables_pointer(), tag = raw.target(pointer);
      raw.words[pointer] &= uint64_t{0x7ffffffff};  // the list's word count: 0
      raw.words[tag] = uint64_t{0x3fffffff} << 2;   // that many structs of 0 data, 0 pointers
      auto e = load_error(raw.framed());
      CHECK(contains(e, "[load_manifest] crafted: malformed Cap'n Proto message"));
    }
  }

  TEST_CASE("describe_file gives a file's size and CRC32, read in blocks") {
    temp_dir dir("describe");
    write_file(dir / "hello", "hello");
    auto d = describe_file(dir / "hello");
    CHECK(d.file == "hello");
    CHECK(d.task.empty());
    CHECK(d.bytes == 5);
    CHECK(d.crc32 == 0x3610a686);  // zlib's crc32("hello")

    write_file(dir / "empty", "");
    CHECK(describe_file(dir / "empty").bytes == 0);
    CHECK(describe_file(dir / "empty").crc32 == 0);

    // Larger than one read block: the CRC continues across blocks.
    std::string big(9 << 20, '\0');
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
    write_file(dir / "big", big);
    auto b = describe_file(dir / "big");
    CHECK(b.bytes == big.size());
    write_file(dir / "big_copy", big);
    CHECK(describe_file(dir / "big_copy").crc32 == b.crc32);
    big[big.size() - 1] ^= 1;
    write_file(dir / "big_changed", big);
    CHECK(describe_file(dir / "big_changed").crc32 != b.crc32);

    std::string missing = dir / "missing";
    auto e = error_of([&] { describe_file(missing); });
    CHECK(contains(e, "[save_checkpoint] " + missing + ": cannot open"));
    CHECK(code_of_failure([&] { describe_file(missing); }) == error_code::not_found);
    CHECK(contains(error_of([&] { describe_file(dir.path.string()); }), "not a regular file"));
  }

  TEST_CASE("verify_shard names the file and says what differs, with both values") {
    temp_dir dir("verify");
    write_file(dir / "ps-0.afck", "hello");
    auto good = describe_file(dir / "ps-0.afck");
    CHECK(error_of([&] { verify_shard(dir.path.string(), good); }).empty());

    auto missing = good;
    missing.file = "ps-9.afck";
    auto e = error_of([&] { verify_shard(dir.path.string(), missing); });
    CHECK(contains(e, "[load_checkpoint] " + (dir / "ps-9.afck") + ": the shard is missing"));

    auto longer = good;
    longer.bytes = 6;
    e = error_of([&] { verify_shard(dir.path.string(), longer); });
    CHECK(contains(e, "[load_checkpoint] " + (dir / "ps-0.afck") + ": "));
    CHECK(contains(e, "size mismatch: the file holds 5 bytes, the manifest says 6"));

    write_file(dir / "ps-0.afck", "jello");  // same size, other bytes
    e = error_of([&] { verify_shard(dir.path.string(), good); });
    CHECK(contains(e, "CRC32 mismatch: the file's is "));
    CHECK(contains(e, "the manifest says 0x3610a686"));
    CHECK(code_of_failure([&] { verify_shard(dir.path.string(), good); }) == error_code::data_loss);

    auto escaping = good;
    escaping.file = "../ps-0.afck";
    CHECK(contains(error_of([&] { verify_shard(dir.path.string(), escaping); }),
                   "not a plain file name"));
  }

  TEST_CASE("directory_lock: one holder at a time, released with the object") {
    temp_dir dir("lock");
    std::string locked = dir / "run";  // made by the lock
    {
      directory_lock lock(locked);
      CHECK(fs::is_directory(locked));
      CHECK(read_file(locked + "/LOCK") == std::to_string(::getpid()) + "\n");
      // flock belongs to an open file description: a second open in this
      // process conflicts as another process's would.
      auto e = error_of([&] { directory_lock again(locked); });
      CHECK(contains(e, "[checkpoint_manager] " + locked + ": another process (pid " +
                            std::to_string(::getpid()) + ") holds " + locked + "/LOCK"));
      CHECK(code_of_failure([&] { directory_lock again(locked); }) ==
            error_code::failed_precondition);
      // The failed attempts left the holder's pid in place.
      CHECK(read_file(locked + "/LOCK") == std::to_string(::getpid()) + "\n");
    }
    CHECK(error_of([&] { directory_lock again(locked); }).empty());
  }

  TEST_CASE("directory_lock: a child process's lock, and its release when the child is killed") {
    temp_dir dir("lock_child");
    std::string locked = dir.path.string();
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Only the lock and a byte saying it is held; the parent kills us.
      ::close(ready[0]);
      try {
        directory_lock lock(locked);
        char one = '1';
        if (::write(ready[1], &one, 1) != 1) ::_exit(2);
        for (;;) ::pause();
      } catch (...) {
        ::_exit(1);
      }
    }
    ::close(ready[1]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
    auto e = error_of([&] { directory_lock mine(locked); });
    CHECK(contains(e, "another process (pid " + std::to_string(child) + ") holds"));

    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(error_of([&] { directory_lock mine(locked); }).empty());
  }
}

namespace {

// A checkpoint of `step` saved the way the tasks and the chief do: each
// shard file in the prepared directory, then the manifest committed.
checkpoint_manifest save_step(const cluster_checkpoint_directory& d, int64_t step) {
  std::string path = d.prepare_step(step);
  checkpoint_manifest m;
  m.step = step;
  m.run_id = "run";
  m.cluster = {{"ps", 2}};
  for (int task = 0; task < 2; ++task) {
    std::string name = "/job:ps/task:" + std::to_string(task);
    std::string file = path + "/" + shard_file_name(name);
    write_file(file, "shard " + std::to_string(task) + " of step " + std::to_string(step));
    auto shard = describe_file(file);
    shard.task = name;
    m.shards.push_back(shard);
    m.variables.push_back(
        {std::string("v").append(std::to_string(task)), dtype::float32, {2}, uint32_t(task), {}});
  }
  d.commit(m);
  return m;
}

std::vector<int64_t> steps_of(const std::vector<cluster_checkpoint_directory::entry>& entries) {
  std::vector<int64_t> out;
  for (auto& e : entries) out.push_back(e.step);
  return out;
}

}  // namespace

TEST_SUITE("checkpoint_manifest") {
  TEST_CASE("shard_file_name: job and task index, and nothing that leaves the directory") {
    CHECK(shard_file_name("/job:ps/task:1") == "ps-1.afck");
    CHECK(shard_file_name("/job:worker/task:12") == "worker-12.afck");
    CHECK(contains(error_of([] { shard_file_name("/job:../task:1"); }),
                   "[checkpoint_manager] shard_file_name: '/job:../task:1': the job name"));
    CHECK(contains(error_of([] { shard_file_name("/job:a.b/task:1"); }), "the job name"));
    CHECK(contains(error_of([] { shard_file_name("/job:ps"); }), "/job:<job>/task:<index>"));
    CHECK(contains(error_of([] { shard_file_name("/job:ps/task:0/cpu:0"); }),
                   "/job:<job>/task:<index>"));
    CHECK(contains(error_of([] { shard_file_name("ps"); }), "[device]"));
  }

  TEST_CASE("list: ckpt-<step> directories newest first, complete or not, other names ignored") {
    temp_dir dir("cluster_list");
    cluster_checkpoint_directory d(dir / "ckpts");
    CHECK(d.list().empty());  // not made yet
    CHECK(d.keep_last() == 5);
    CHECK(contains(error_of([&] { cluster_checkpoint_directory(dir / "x", 0); }), "keep_last"));

    save_step(d, 10);
    save_step(d, 30);
    d.prepare_step(40);  // a save that has not finished
    write_file(dir / "ckpts/ckpt-20", "the user's file, not a checkpoint directory");
    write_file(dir / "ckpts/notes.txt", "");
    write_file(dir / "ckpts/ckpt-15.afck", "");
    fs::create_directory(dir / "ckpts/ckpt-007");
    fs::create_directory(dir / "ckpts/ckpt-x");

    auto entries = d.list();
    CHECK(steps_of(entries) == std::vector<int64_t>{40, 30, 20, 10});
    CHECK_FALSE(entries[0].complete);
    CHECK(entries[0].problem == "no MANIFEST (a save that did not finish)");
    CHECK(entries[0].path == dir / "ckpts/ckpt-40");
    CHECK(entries[1].complete);
    CHECK(entries[1].problem.empty());
    CHECK_FALSE(entries[2].complete);
    CHECK(entries[2].problem == "not a directory");
    CHECK(entries[3].complete);
  }

  TEST_CASE("prepare_step empties a leftover directory and refuses to replace a file") {
    temp_dir dir("cluster_prepare");
    cluster_checkpoint_directory d(dir.path.string());
    std::string path = d.prepare_step(7);
    CHECK(path == dir / "ckpt-7");
    write_file(path + "/ps-0.afck", "stale");
    CHECK(d.prepare_step(7) == path);
    CHECK(fs::is_empty(path));

    write_file(dir / "ckpt-8", "keep me");
    CHECK(contains(error_of([&] { d.prepare_step(8); }), "is not a directory"));
    CHECK(read_file(dir / "ckpt-8") == "keep me");
    CHECK(contains(error_of([&] { d.prepare_step(-1); }), "step must be >= 0"));

    auto m = sample_manifest(9);
    CHECK(contains(error_of([&] { d.commit(m); }), "prepare_step(9) makes it"));
  }

  TEST_CASE("commit removes older saves that did not finish, never user files") {
    temp_dir dir("cluster_cleanup");
    cluster_checkpoint_directory d(dir.path.string());
    d.prepare_step(5);
    write_file(dir / "ckpt-5/ps-0.afck", "stale shard");
    d.prepare_step(30);  // newer than the commit below: left alone
    write_file(dir / "ckpt-3", "user file");
    fs::create_directory(dir / "ckpt-03");
    // A link to the user's directory, named like a checkpoint: never followed.
    temp_dir user("user_files");
    write_file(user / "precious", "data");
    fs::create_directory_symlink(user.path, dir / "ckpt-4");
    auto manifest_path = d.commit(save_step(d, 20));
    CHECK(manifest_path == dir / "ckpt-20/MANIFEST");
    CHECK_FALSE(fs::exists(dir / "ckpt-5"));
    CHECK(fs::is_directory(dir / "ckpt-30"));
    CHECK(read_file(dir / "ckpt-3") == "user file");
    CHECK(fs::is_directory(dir / "ckpt-03"));
    CHECK(read_file(user / "precious") == "data");
    CHECK(fs::is_symlink(dir / "ckpt-4"));
    CHECK(steps_of(d.list()) == std::vector<int64_t>{30, 20, 4, 3});
  }

  TEST_CASE("commit keeps the newest keep_last complete checkpoints") {
    temp_dir dir("cluster_rotate");
    cluster_checkpoint_directory d(dir.path.string(), 2);
    for (int64_t step : {100, 200, 300, 400}) save_step(d, step);
    CHECK(steps_of(d.list()) == std::vector<int64_t>{400, 300});
    CHECK(fs::exists(dir / "ckpt-300/ps-1.afck"));
    CHECK_FALSE(fs::exists(dir / "ckpt-200"));
    CHECK_FALSE(fs::exists(dir / "ckpt-100"));
  }

  TEST_CASE("newest skips incomplete, corrupted and unverifiable checkpoints, naming each") {
    temp_dir dir("cluster_newest");
    cluster_checkpoint_directory d(dir.path.string());
    std::vector<std::string> skipped;
    CHECK_FALSE(d.newest(skipped).has_value());
    CHECK(skipped.empty());

    for (int64_t step : {1, 2, 3, 4}) save_step(d, step);
    d.prepare_step(5);  // unfinished

    // Step 4: one flipped byte in its manifest.
    std::string manifest4 = read_file(dir / "ckpt-4/MANIFEST");
    manifest4[manifest4.size() - 3] ^= 0x10;
    write_file(dir / "ckpt-4/MANIFEST", manifest4);
    // Step 3: a shard gone.
    fs::remove(dir / "ckpt-3/ps-1.afck");
    // Step 2: a shard changed after the commit.
    write_file(dir / "ckpt-2/ps-0.afck", "shard 0 of step 2?");

    auto found = d.newest(skipped);
    REQUIRE(found.has_value());
    CHECK(found->first.step == 1);
    CHECK(found->first.path == dir / "ckpt-1");
    CHECK(found->first.complete);
    CHECK(found->second.step == 1);
    CHECK(found->second.shards.size() == 2);
    REQUIRE(skipped.size() == 4);
    CHECK(contains(skipped[0], dir / "ckpt-5"));
    CHECK(contains(skipped[0], "no MANIFEST"));
    CHECK(contains(skipped[1], "[load_manifest] " + (dir / "ckpt-4/MANIFEST")));
    CHECK(contains(skipped[1], "checksum mismatch"));
    CHECK(contains(skipped[2], "[load_checkpoint] " + (dir / "ckpt-3/ps-1.afck")));
    CHECK(contains(skipped[2], "missing"));
    CHECK(contains(skipped[3], dir / "ckpt-2/ps-0.afck"));
    CHECK(contains(skipped[3], "size mismatch"));
  }

  TEST_CASE("a manifest in another step's directory is not that step's checkpoint") {
    temp_dir dir("cluster_misplaced");
    cluster_checkpoint_directory d(dir.path.string());
    save_step(d, 6);
    d.prepare_step(9);
    fs::copy_file(dir / "ckpt-6/MANIFEST", dir / "ckpt-9/MANIFEST");
    auto entries = d.list();
    REQUIRE(entries.size() == 2);
    CHECK_FALSE(entries[0].complete);
    CHECK(entries[0].problem == "its MANIFEST is of step 6");
    std::vector<std::string> skipped;
    auto found = d.newest(skipped);
    REQUIRE(found.has_value());
    CHECK(found->first.step == 6);
    CHECK(skipped.size() == 1);
  }
}
