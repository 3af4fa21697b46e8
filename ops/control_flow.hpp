// Dynamic control flow: the primitives switch and merge, and cond built from
// them (TensorFlow's design: the OSDI paper, section 3.4).
//
// switch(data, pred) sends `data` to output 1 when the scalar bool `pred` is
// true, else to output 0; the other output carries a dead value. A node with
// a dead input does not run and passes dead values on; merge passes on the
// first live input of a step (and its index), or a dead value when all are
// dead. So only the taken branch of a cond runs its kernels and its updates.
//
// As in TensorFlow, a fetch that is dead (a value of the untaken branch)
// fails its step with an error naming it, and a dead target simply did not
// run. Differences: the outputs of a cond's branches (and a merge's inputs)
// must agree in rank, where TensorFlow would give an unknown rank; a cond's
// two branches share one switch per outside tensor.
//
// Loops follow TensorFlow's primitives: enter (into a named frame, as a
// loop variable or a loop invariant), a loop merge (the loop variable's
// value at iteration 0 from its enter, then from its next_iteration),
// switch on the loop's predicate (the body's input when true, the exit's
// when false), next_iteration (back to the merge, one iteration on), exit
// (out of the frame). The back edge is an attribute of next_iteration that
// names its merge, so the graph stays in topological order. An exit also
// gives how many iterations its loop ran (output 1, int64). A fetch of a
// value inside a loop is refused: fetch the loop's outputs.
//
// Gradients of loops (ops/control_flow_grad.cpp) differ from TensorFlow's in
// one place: a loop invariant used only as the right operand of matmuls (a
// recurrent kernel) is not accumulated per iteration; every iteration's
// left operand and output gradient are gathered, and the gradient is one
// product after the backward loop. The value is the same up to rounding.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// {output 0: data when pred is false, output 1: data when pred is true}.
ACTORFLOW_API std::vector<output> switch_op(output data, output pred, const std::string& name = "");
/// {the first live input, int32 scalar: its index}. All inputs share a dtype.
ACTORFLOW_API std::vector<output> merge(const std::vector<output>& inputs,
                                        const std::string& name = "");

/// The outputs of `true_fn` when the scalar bool `pred` is true, else those
/// of `false_fn`; only the taken branch runs. Both branches must return as
/// many outputs, with the same dtypes; a dim the two disagree on is unknown
/// in the result. Tensors from outside that a branch uses are gated by a
/// switch, constants too (as TensorFlow's are); a stateful op (an update) or
/// an output that depends on no gated tensor (a constant made in the branch)
/// waits on the branch's pivot, so neither happens in an untaken branch.
/// Gradients reach every input either branch reads: zeros for one that only
/// the untaken branch reads. Build-time errors name the cond ("[cond] ...").
ACTORFLOW_API std::vector<output> cond(output pred,
                                       const std::function<std::vector<output>()>& true_fn,
                                       const std::function<std::vector<output>()>& false_fn,
                                       const std::string& name = "cond");
struct ACTORFLOW_API while_options {
  /// How many iterations may run at once (each loop variable at most this
  /// many iterations ahead of the slowest).
  int64_t parallel_iterations = 10;
  /// 0: no bound. Otherwise an iteration past it fails the step with an error
  /// naming the loop (TensorFlow's maximum_iterations stops the loop quietly
  /// instead: here a runaway loop is a bug to report, not a result).
  int64_t max_iterations = 0;
  /// Empty, or one per loop variable: the shapes it may take (unknown dims
  /// may change from one iteration to the next). By default its entry shape.
  std::vector<shape> shape_invariants;
  std::string name = "while";
};

using loop_cond_fn = std::function<output(const std::vector<output>&)>;
using loop_body_fn = std::function<std::vector<output>(const std::vector<output>&)>;

/// Runs `body_fn` on the loop variables while `cond_fn` (a scalar bool) holds,
/// and returns their last values (TensorFlow's while_loop). Iterations run as
/// messages tagged with the loop's frame and iteration, several at once (up
/// to parallel_iterations). Tensors from outside that the body or condition
/// use enter the loop once per run of it, as loop invariants; variables may
/// be read and updated inside. Build-time errors name the loop:
/// "[while_loop] 'name': ...". The body's values keep their loop variable's
/// dtype and fit its shape invariant.
ACTORFLOW_API std::vector<output> while_loop(const loop_cond_fn& cond_fn,
                                             const loop_body_fn& body_fn,
                                             const std::vector<output>& loop_vars,
                                             const while_options& options = {});

/// For branches of one output each.
ACTORFLOW_API output cond(output pred, const std::function<output()>& true_fn,
                          const std::function<output()>& false_fn,
                          const std::string& name = "cond");

}  // namespace actorflow
