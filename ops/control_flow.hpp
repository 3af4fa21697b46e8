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
// two branches share one switch per outside tensor. Loops (enter, exit,
// next_iteration) are not there yet.
#pragma once
#include <functional>
#include <vector>

#include "core/graph.hpp"

namespace actorflow {

/// {output 0: data when pred is false, output 1: data when pred is true}.
std::vector<output> switch_op(output data, output pred, const std::string& name = "");
/// {the first live input, int32 scalar: its index}. All inputs share a dtype.
std::vector<output> merge(const std::vector<output>& inputs, const std::string& name = "");

/// The outputs of `true_fn` when the scalar bool `pred` is true, else those
/// of `false_fn`; only the taken branch runs. Both branches must return as
/// many outputs, with the same dtypes; a dim the two disagree on is unknown
/// in the result. Tensors from outside that a branch uses are gated by a
/// switch; a stateful op (an update) or an output that depends on no gated
/// tensor (a constant) waits on the branch's pivot, so neither happens in
/// an untaken branch; constants themselves stay folded into their
/// consumers. Build-time errors name the cond ("[cond] ...").
std::vector<output> cond(output pred, const std::function<std::vector<output>()>& true_fn,
                         const std::function<std::vector<output>()>& false_fn,
                         const std::string& name = "cond");
/// For branches of one output each.
output cond(output pred, const std::function<output()>& true_fn,
            const std::function<output()>& false_fn, const std::string& name = "cond");

}  // namespace actorflow
