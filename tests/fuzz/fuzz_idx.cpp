// libFuzzer target: IDX bytes from anywhere (plain or gzip) must load or throw
// actorflow::error, never crash. read_idx takes a path, so each input goes
// through a private temporary file.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DACTORFLOW_FUZZ=ON
//   ninja -C build-fuzz fuzz_idx
//   ./build-fuzz/tests/fuzz/fuzz_idx -max_total_time=60 -max_len=4096
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "actors/input/idx_reader.hpp"
#include "core/error.hpp"

namespace {

const std::string& scratch_path() {
  static const std::string path = "/tmp/actorflow-fuzz-idx-" + std::to_string(getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(scratch_path().c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    auto t = actorflow::read_idx(scratch_path());
    // A tensor that loads is whole: touching its last byte must be safe.
    if (t.num_elements() > 0) {
      volatile auto last = static_cast<const unsigned char*>(t.raw_data())[t.size_bytes() - 1];
      (void)last;
    }
  } catch (const actorflow::error&) {
  }
  return 0;
}
