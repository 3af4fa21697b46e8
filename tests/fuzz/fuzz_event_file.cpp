// libFuzzer target: Event, Summary and GraphDef bytes from anywhere (an event
// file's records) must decode or throw actorflow::error, never crash or
// allocate from a length they claim.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DACTORFLOW_FUZZ=ON
//   ninja -C build-fuzz fuzz_event_file
//   ./build-fuzz/tests/fuzz/fuzz_event_file -max_total_time=60 -max_len=4096
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "schema/event_proto.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    actorflow::decode_event(bytes);
  } catch (const actorflow::error&) {
  }
  try {
    actorflow::decode_graph_def(bytes);
  } catch (const actorflow::error&) {
  }
  return 0;
}
