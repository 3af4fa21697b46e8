// Higher-order functions over the rows of a tensor, TensorFlow's tf.map_fn
// and tf.scan, built from while_loop and tensor arrays: they run as one loop
// (not n copies of fn in the graph) and differentiate through it.
//
// Where actorflow differs from TensorFlow:
// - elems is one tensor (no nested structures), and its first dim must be
//   known when the graph is built.
// - fn's result must have a fully defined shape: map_fn's is elems' row
//   spec unless `result` says otherwise (TF's fn_output_signature), scan's
//   is the initializer's. A result that differs fails at build time.
// - scan always takes an initializer and runs forward (no reverse).
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

struct ACTORFLOW_API map_options {
  /// How many rows fn may work on at once (while_loop's parallel_iterations).
  int64_t parallel_iterations = 10;
  /// map_fn: the dtype and shape of fn's result; unset: those of a row of elems.
  std::optional<tensor_spec> result;
  std::string name = "map";
};

/// [fn(elems[0]), ..., fn(elems[n-1])] stacked: [n, result dims...].
ACTORFLOW_API output map_fn(const std::function<output(output)>& fn, output elems,
                            const map_options& o = {});

/// acc[0] = fn(initializer, elems[0]), acc[t] = fn(acc[t-1], elems[t]);
/// returns every acc stacked: [n, initializer dims...].
ACTORFLOW_API output scan(const std::function<output(output, output)>& fn, output elems,
                          output initializer, map_options o = {.name = "scan"});

}  // namespace actorflow
