// libFuzzer target: graph bytes from anywhere must load or throw actorflow::error.
// Any other exception escapes and is reported as a crash, as are sanitizer findings.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DACTORFLOW_FUZZ=ON
//   ninja -C build-fuzz fuzz_graph_loader
//   mkdir corpus && ./build-fuzz/tests/fuzz/fuzz_graph_loader --write-seeds corpus
//   ./build-fuzz/tests/fuzz/fuzz_graph_loader -max_total_time=60 corpus/
// The seeds (serialized sample graphs) let the fuzzer start past the framing.
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "ops/state.hpp"
#include "schema/graph.capnp.h"
#include "schema/graph_io.hpp"

namespace {

// Writes a few valid graphs as seed inputs, so the fuzzer starts past the framing.
void write_seeds(const std::string& dir) {
  using namespace actorflow;
  auto save = [&](const graph& g, const std::string& name) {
    std::ofstream(dir + "/" + name, std::ios::binary) << serialize_graph(g);
  };
  {
    graph g;
    save(g, "empty");
  }
  {
    graph g;
    auto x = placeholder(g, dtype::float32, {-1, 3}, "x");
    identity(x, "y");
    save(g, "placeholder_identity");
  }
  {
    graph g;
    auto s = g.name_scope("scope");
    auto d = g.device_scope("/cpu:0");
    auto w = constant(g, tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}), "w");
    constant(g, tensor::from_vector<bool>({true, false}), "b");
    constant(g, tensor::zeros(dtype::int64, {0, 3}), "z");
    scalar<uint8_t>(g, 7);
    auto v = make_variable(w, "v");
    assign_add(v, w);
    auto init = global_variables_initializer(g);
    auto deps = g.control_dependencies({init});
    no_op(g, "after");
    save(g, "variables");
  }
  // One seed per registered op: three placeholders feeding a node of that op,
  // with a few common attributes. Most will not load (an attribute is missing
  // or has another name), but they put every op name in front of the fuzzer.
  for (const op_def* def : op_registry::global().all()) {
    capnp::MallocMessageBuilder msg;
    auto root = msg.initRoot<schema::Graph>();
    root.setVersion(schema::GRAPH_FORMAT_VERSION);
    auto nodes = root.initNodes(4);
    const char* names[] = {"x", "y", "s"};
    schema::DType types[] = {schema::DType::FLOAT32, schema::DType::INT32, schema::DType::FLOAT32};
    for (unsigned i = 0; i < 3; ++i) {
      nodes[i].setName(names[i]);
      nodes[i].setOp("placeholder");
      auto attrs = nodes[i].initAttrs(2);
      attrs[0].setName("dtype");
      attrs[0].initValue().setDtype(types[i]);
      attrs[1].setName("shape");
      auto dims = attrs[1].initValue().initInts(i == 2 ? 0 : 2);
      if (i != 2) {
        dims.set(0, 2);
        dims.set(1, 3);
      }
    }
    auto n = nodes[3];
    n.setName("n");
    n.setOp(def->name);
    int arity = def->num_inputs >= 0 ? def->num_inputs : std::max(def->min_inputs, 2);
    auto inputs = n.initInputs(static_cast<unsigned>(arity));
    for (int k = 0; k < arity; ++k) inputs[static_cast<unsigned>(k)].setNode(k == 1 ? 1 : 0);
    auto attrs = n.initAttrs(4);
    attrs[0].setName("axis");
    attrs[0].initValue().setInt(0);
    attrs[1].setName("dtype");
    attrs[1].initValue().setDtype(schema::DType::FLOAT32);
    attrs[2].setName("shape");
    attrs[2].initValue().initInts(1).set(0, 6);
    attrs[3].setName("value");
    auto t = attrs[3].initValue().initTensor();
    t.initShape(1).set(0, 2);
    t.initData(8);
    auto words = capnp::messageToFlatArray(msg);
    auto chars = words.asChars();
    std::ofstream(dir + "/op_" + def->name, std::ios::binary)
        .write(chars.begin(), static_cast<std::streamsize>(chars.size()));
  }
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
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto g = actorflow::deserialize_graph(bytes, "fuzz");
    // Whatever loads must be a graph that serializes and loads again.
    auto again = actorflow::serialize_graph(*g);
    auto g2 = actorflow::deserialize_graph(again, "fuzz-again");
    if (g2->size() != g->size()) __builtin_trap();
  } catch (const actorflow::error&) {
  }
  return 0;
}
