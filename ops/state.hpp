// Graph sources and state: placeholders, constants, variables and their updates,
// identity and no_op.
#pragma once
#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// A value fed at run time. Dims may be unknown (-1).
ACTORFLOW_API output placeholder(graph& g, dtype type, shape dims, const std::string& name = "");
ACTORFLOW_API output constant(graph& g, tensor value, const std::string& name = "");
template <class T>
output scalar(graph& g, T value, const std::string& name = "") {
  return constant(g, tensor::scalar<T>(value), name);
}
ACTORFLOW_API output identity(output x, const std::string& name = "");
/// x in the forward pass; no gradient flows back through it.
ACTORFLOW_API output stop_gradient(output x, const std::string& name = "");
/// Does nothing; with control dependencies it groups operations.
ACTORFLOW_API operation no_op(graph& g, const std::string& name = "");
/// Groups operations: the returned op runs after all of them.
ACTORFLOW_API operation group(graph& g, const std::vector<operation>& ops,
                              const std::string& name = "");

/// A mutable tensor owned by a variable actor; reading it yields its current value.
/// `initial` (shape must match) becomes its initializer.
class ACTORFLOW_API variable {
 public:
  variable() = default;
  variable(output value, operation initializer) : value_(value), initializer_(initializer) {}
  /// The current value (each step reads it afresh, as soon as the step starts).
  output value() const { return value_; }
  /// A new read node: made under control_dependencies, it reads after them.
  output read(const std::string& name = "") const;
  operator output() const { return value_; }
  operation initializer() const { return initializer_; }
  const std::string& name() const { return value_.node().name; }
  dtype type() const { return value_.type(); }
  const actorflow::shape& dims() const { return value_.dims(); }

 private:
  output value_;
  operation initializer_;
};

ACTORFLOW_API variable make_variable(output initial, const std::string& name = "");
/// A variable with no initializer: it must be assigned (or restored) before it is read.
ACTORFLOW_API variable make_variable(graph& g, dtype type, shape dims,
                                     const std::string& name = "");
/// The same with extra node attributes (a part of a partitioned variable
/// says where its rows sit, for restores into another split).
ACTORFLOW_API variable make_variable(output initial, const std::string& name, attr_map extra);
/// Sets the variable; the output is the new value.
ACTORFLOW_API output assign(const variable& v, output value, const std::string& name = "");
/// Adds to the variable in place; the output is the new value.
ACTORFLOW_API output assign_add(const variable& v, output delta, const std::string& name = "");
ACTORFLOW_API output assign_sub(const variable& v, output delta, const std::string& name = "");
/// v = v * decay + value * (1 - decay) in place, for float variables (Keras's
/// moving-average update, v -= (v - value) * (1 - decay)); the output is the
/// new value.
ACTORFLOW_API output assign_moving_average(const variable& v, output value, double decay,
                                           const std::string& name = "");
/// True once the variable is set (initialized, assigned or restored); never
/// fails, unlike reading it.
ACTORFLOW_API output is_variable_initialized(const variable& v, const std::string& name = "");
/// Runs every variable initializer in the graph.
ACTORFLOW_API operation global_variables_initializer(graph& g, const std::string& name = "init");
/// True once every variable that global_variables_initializer sets (as the
/// graph is now) is set. A worker that is not the chief waits for it before
/// its first step: the chief's initializer sets the variables in no
/// particular order, so seeing one of them set says nothing of the others.
/// Variables without an initializer (a worker's own local step) are left out.
ACTORFLOW_API output global_variables_initialized(graph& g, const std::string& name = "ready");

/// One variable's initializer beside whether the variable is set.
struct ACTORFLOW_API variable_initializer {
  std::string variable;  ///< the variable's name
  output is_set;
  operation init;
};
/// Every variable that global_variables_initializer sets (as the graph is
/// now), each with its own initializer: a chief whose ps task came back
/// without its shard sets only what that task lost, not every variable.
ACTORFLOW_API std::vector<variable_initializer> variable_initializers(
    graph& g, const std::string& name = "is_set");

}  // namespace actorflow
