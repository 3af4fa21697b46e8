// The device runner (after ggml's test-backend-ops): every forward case of the
// op table runs through a session on every device of one runtime - /cpu:0,
// /cpu:1, the accelerator stand-in and /gpu:N where there is a GPU - and each
// device's outputs must be the CPU kernel's, run directly as the harness runs
// it. A case's graph is a placeholder per input and one node of the op per
// device (device_scope), all fetched in one step. A node that placement moved
// elsewhere (a GPU without a kernel for the op or dtype) is skipped and
// counted; the CPU devices and the stand-in run every op that has a CPU kernel,
// so a skip there fails. Cases with a check (random ops) run it on each
// device's outputs; cases that expect an error must raise it on each device
// that runs the CPU kernels (a GPU kernel may validate less, and its notes say
// where).
#include <map>
#include <set>

#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "devices/cuda/gpu_kernel.hpp"
#include "ops/op_cases.hpp"
#include "ops/state.hpp"

namespace actorflow::testing {
namespace {

struct tally {
  int ran = 0;
  int errors = 0;  // of `ran`: cases that raised their expected error
  int skipped = 0;
};

// The CPU devices and the stand-in run the CPU registry's kernels: every op
// the runtime does not serve.
bool runs_every_op(const local_device& d) { return d.type == "cpu" || d.type == "stand_in"; }

std::string node_name_of(const local_device& d) {
  return "on_" + d.type + "_" + std::to_string(d.index);
}

// A case's graph: its inputs as placeholders, the op once per device.
struct case_graph {
  graph g;
  feed_list feeds;
  std::vector<int> nodes;  // by device
};

// Null when the graph rejects the case (the error in `why`). One device's
// node may be named as the op, as the harness's kernel is (errors name it).
std::unique_ptr<case_graph> build(const op_case& c, const std::vector<local_device>& devices,
                                  std::string& why, bool named_as_op = false) {
  auto cg = std::make_unique<case_graph>();
  std::vector<output> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    std::string name = "x";  // not "x" + ...: GCC 12 warns falsely (-Wrestrict)
    name += std::to_string(i);
    inputs.push_back(placeholder(cg->g, c.inputs[i].type(), c.inputs[i].dims(), name));
    cg->feeds.emplace_back(inputs.back(), c.inputs[i]);
  }
  try {
    for (auto& d : devices) {
      auto scope = cg->g.device_scope(d.name);
      cg->nodes.push_back(
          cg->g.add_node(c.op, inputs, c.attrs, named_as_op ? c.op : node_name_of(d)).id);
    }
  } catch (const error& e) {
    why = e.what();
    return nullptr;
  }
  return cg;
}

std::vector<output> outputs_of(case_graph& cg, int id) {
  std::vector<output> outs;
  for (size_t j = 0; j < cg.g.at(id).outputs.size(); ++j)
    outs.emplace_back(&cg.g, endpoint{id, static_cast<int>(j)});
  return outs;
}

// Where placement put node `name` ("" before it was placed).
std::string placed_on(const session& s, const std::string& name) {
  for (auto& e : s.placement_log())
    if (e.node == name) return e.device + " (" + e.reason + ")";
  return "";
}

bool placed_as_hinted(const session& s, const local_device& d, const std::string& name) {
  for (auto& e : s.placement_log())
    if (e.node == name) return e.device == d.name;
  return false;
}

void run_valid_case(const op_case& c, const std::shared_ptr<runtime>& rt,
                    std::map<std::string, tally>& tallies) {
  std::vector<tensor> want;
  try {
    want = run_kernel(c.op, c.inputs, c.attrs);
  } catch (const std::exception&) {
    return;  // the harness reports it
  }
  const auto& devices = rt->devices();
  std::string why;
  auto cg = build(c, devices, why);
  if (!cg) {
    FAIL_CHECK("the graph rejects a case the kernel runs: " << why);
    return;
  }
  std::vector<output> fetches;
  for (int id : cg->nodes)
    for (auto& o : outputs_of(*cg, id)) fetches.push_back(o);
  // An op without outputs (no_op) runs as a target.
  std::vector<operation> targets;
  if (fetches.empty())
    for (int id : cg->nodes) targets.emplace_back(&cg->g, id);
  session s(cg->g, rt);
  std::vector<tensor> got;
  try {
    got = s.run(cg->feeds, fetches, targets);
  } catch (const std::exception& e) {
    FAIL_CHECK("the step failed: " << e.what());
    return;
  }
  if (got.size() != want.size() * devices.size()) {
    FAIL_CHECK("the nodes have " << got.size() << " outputs, the kernel " << want.size());
    return;
  }
  size_t next = 0;
  for (size_t k = 0; k < devices.size(); ++k) {
    const auto& d = devices[k];
    std::vector<tensor> outs(got.begin() + static_cast<std::ptrdiff_t>(next),
                             got.begin() + static_cast<std::ptrdiff_t>(next + want.size()));
    next += want.size();
    if (!placed_as_hinted(s, d, node_name_of(d))) {
      CHECK_MESSAGE(!runs_every_op(d),
                    d.name << " did not run the op: placed on " << placed_on(s, node_name_of(d)));
      ++tallies[d.name].skipped;
      continue;
    }
    ++tallies[d.name].ran;
    INFO("on " << d.name);
    if (c.check) {
      c.check(outs);
      continue;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const double tol =
          c.device_tolerance > 0 ? c.device_tolerance : default_tolerance(want[i].type());
      auto diff = compare_tensors(outs[i], want[i], tol);
      CHECK_MESSAGE(diff.empty(), "output " << i << " against the CPU kernel's: " << diff);
    }
  }
}

// One graph per device, its node named as the op: some errors name the node.
void run_error_case(const op_case& c, const std::shared_ptr<runtime>& rt,
                    std::map<std::string, tally>& tallies, int& rejected_when_built) {
  for (auto& d : rt->devices()) {
    if (!runs_every_op(d)) {
      ++tallies[d.name].skipped;
      continue;
    }
    INFO("on " << d.name);
    std::string why;
    auto cg = build(c, {d}, why, true);
    if (!cg) {
      // Build-time validation is the same for every device: counted once.
      if (d.name == rt->devices().front().name) ++rejected_when_built;
      CHECK_MESSAGE(why.find(c.expect_error) != std::string::npos,
                    "the graph rejects the case with '" << why << "'");
      continue;
    }
    session s(cg->g, rt);
    std::string what;
    try {
      s.run(cg->feeds, outputs_of(*cg, cg->nodes[0]));
    } catch (const error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(placed_as_hinted(s, d, c.op), "placed on " << placed_on(s, c.op));
    CHECK_MESSAGE(what.find(c.expect_error) != std::string::npos,
                  "expected an error containing '" << c.expect_error << "', got '" << what << "'");
    ++tallies[d.name].ran;
    ++tallies[d.name].errors;
  }
}

// The dtype a GPU kernel is chosen by, for a case's inputs.
dtype key_type(const gpu::gpu_kernel_def& k, const op_case& c) {
  const auto i = static_cast<size_t>(k.type_input);
  if (i < c.inputs.size()) return c.inputs[i].type();
  auto it = c.attrs.find("dtype");
  return it != c.attrs.end() ? std::get<dtype>(it->second) : dtype::float32;
}

}  // namespace

TEST_CASE("every op case computes on every device what the CPU kernel does") {
  auto rt = std::make_shared<runtime>(
      runtime_options{.cpu_devices = 2, .gpus = -1, .stand_in_devices = 1});
  std::map<std::string, tally> tallies;
  for (auto& d : rt->devices()) tallies[d.name];
  int served = 0, rejected_when_built = 0;
  for (auto& c : op_cases()) {
    const op_def* def = op_registry::global().find(c.op);
    if (def && def->served_by_runtime()) {
      ++served;
      continue;
    }
    INFO("op '" << c.op << "' case: " << c.label);
    if (c.expect_error.empty())
      run_valid_case(c, rt, tallies);
    else
      run_error_case(c, rt, tallies, rejected_when_built);
  }
  std::string report = "device runner: " + std::to_string(op_cases().size()) + " cases";
  report += " (" + std::to_string(served) + " of ops the runtime serves, " +
            std::to_string(rejected_when_built) + " errors raised when the graph is built)";
  for (auto& [name, t] : tallies)
    report += "; " + name + ": " + std::to_string(t.ran) + " ran (" + std::to_string(t.errors) +
              " expected errors), " + std::to_string(t.skipped) + " skipped";
  MESSAGE(report);
  for (auto& d : rt->devices()) CHECK_MESSAGE(tallies[d.name].ran > 0, d.name << " ran no case");
}

TEST_CASE("every GPU kernel has cases of each dtype it takes") {
  for (auto* k : gpu::gpu_kernel_registry::global().all()) {
    if (k->update) continue;  // optimizer updates: tests/cuda/gpu_kernel_tests.cpp
    INFO("GPU kernel '" << k->op << "'");
    std::set<dtype> covered;
    for (auto& c : op_cases())
      if (c.op == k->op && c.expect_error.empty()) covered.insert(key_type(*k, c));
    CHECK_MESSAGE(!covered.empty(), "no cases");
    for (dtype t : k->types)
      CHECK_MESSAGE(covered.count(t), "no case for " << std::string(dtype_name(t)));
  }
}

}  // namespace actorflow::testing
