// libFuzzer target: checkpoint and cluster checkpoint manifest bytes from
// anywhere must load or throw actorflow::error. Any other exception escapes and is reported as a
// crash, as are sanitizer findings.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DACTORFLOW_FUZZ=ON
//   ninja -C build-fuzz fuzz_checkpoint
//   mkdir corpus && ./build-fuzz/tests/fuzz/fuzz_checkpoint --write-seeds corpus
//   ./build-fuzz/tests/fuzz/fuzz_checkpoint -max_total_time=60 corpus/
//
// The first input byte picks what the rest is. Its bit 0: clear, a whole file
// (header, checksums, payload); set, a payload that the target frames with a
// valid header, so that mutations reach the Cap'n Proto parser past the
// checksum. Its bit 1: clear, a checkpoint file; set, a manifest
// (schema/checkpoint_manifest.hpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "schema/checkpoint_io.hpp"
#include "schema/checkpoint_manifest.hpp"

namespace {

using namespace actorflow;

void write_manifest_seeds(const std::string& dir) {
  checkpoint_manifest m;
  m.step = 200;
  m.run_id = "run";
  m.cluster = {{"ps", 2}, {"worker", 1}};
  m.shards = {{"/job:ps/task:0", "ps-0.afck", 1234, 0xdeadbeef},
              {"/job:ps/task:1", "ps-1.afck", 99, 7}};
  m.variables = {{"w", dtype::float32, {784, 10}, 0, {}},
                 {"emb/part_0", dtype::float32, {3, 8}, 0, {"emb", 5, 2, 0, "mod"}},
                 {"emb/part_1", dtype::float32, {2, 8}, 1, {"emb", 5, 2, 1, "mod"}}};
  m.pause_ms = 3.5;
  std::string file = serialize_manifest(m);
  std::ofstream(dir + "/manifest_file", std::ios::binary) << '\2' << file;
  std::ofstream(dir + "/manifest_payload", std::ios::binary) << '\3' << file.substr(32);
}

void write_seeds(const std::string& dir) {
  auto save = [&](const checkpoint_data& data, size_t chunk, const std::string& name) {
    std::string file = serialize_checkpoint(data, chunk);
    std::ofstream(dir + "/file_" + name, std::ios::binary) << '\0' << file;
    std::ofstream(dir + "/payload_" + name, std::ios::binary)
        << '\1' << file.substr(checkpoint_header_bytes);
  };
  checkpoint_data empty;
  save(empty, default_checkpoint_chunk_bytes, "empty");

  checkpoint_data data;
  data.global_step = 1234;
  data.variables["w"].value = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  data.variables["w"].slots["adam/m"] = tensor::zeros(dtype::float32, {2, 3});
  data.variables["w"].slots["adam/t"] = tensor::scalar<int64_t>(7);
  data.variables["b"].value = tensor::from_vector<double>({0.5, -0.5});
  data.variables["global_step"].value = tensor::scalar<int64_t>(1234);
  data.variables["mask"].value = tensor::from_vector<bool>({true, false, true});
  data.variables["ids"].value = tensor::from_vector<int32_t>({1, -2});
  data.variables["raw"].value = tensor::from_vector<uint8_t>({0, 255});
  data.variables["none"].value = tensor::zeros(dtype::float32, {0, 4});
  save(data, default_checkpoint_chunk_bytes, "variables");
  save(data, 5, "variables_chunked");
  write_manifest_seeds(dir);
}

// Whatever manifest loads must save and load again, unchanged.
void check_manifest(std::string_view rest, bool framed) {
  std::string bytes = framed ? frame_manifest_payload(rest) : std::string(rest);
  checkpoint_manifest loaded;
  try {
    loaded = deserialize_manifest(bytes, "fuzz");
  } catch (const error&) {
    return;
  }
  std::string again = serialize_manifest(loaded);
  if (serialize_manifest(deserialize_manifest(again, "again")) != again) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i + 1 < *argc; ++i)
    if (std::strcmp((*argv)[i], "--write-seeds") == 0) {
      write_seeds((*argv)[i + 1]);
      std::exit(0);
    }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 2) {
    check_manifest(rest, data[0] & 1);
    return 0;
  }
  std::string bytes = data[0] & 1 ? actorflow::frame_checkpoint_payload(rest) : std::string(rest);
  try {
    auto loaded = actorflow::deserialize_checkpoint(bytes, "fuzz");
    // Whatever loads must save and load again, unchanged.
    auto again =
        actorflow::deserialize_checkpoint(actorflow::serialize_checkpoint(loaded, 3), "again");
    if (again.global_step != loaded.global_step ||
        again.variables.size() != loaded.variables.size())
      __builtin_trap();
    for (auto& [name, state] : loaded.variables) {
      auto& other = again.variables.at(name);
      if (!state.value.equals(other.value) || state.slots.size() != other.slots.size())
        __builtin_trap();
      for (auto& [slot, value] : state.slots)
        if (!value.equals(other.slots.at(slot))) __builtin_trap();
    }
  } catch (const actorflow::error&) {
  }
  return 0;
}
