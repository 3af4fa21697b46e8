// TensorArray (TensorFlow's tf.TensorArray) as pure dataflow: an array is two
// tensors that flow through the graph, not a resource actor, so it can be a
// loop variable, cross a process boundary like any tensor, and be
// differentiated by the ordinary gradient driver:
//   data     [capacity, element dims...]  the elements, dense
//   written  bool [capacity]              which indices hold a value
// Every op takes the array in and, if it changes it, gives a new one out
// (write, scatter); nothing is shared behind the graph's back. A write whose
// incoming buffers no one else holds writes them in place, so a chain of
// writes (a loop filling an array) costs O(element) per write, not O(array).
// Any other holder of a version (a fetch, a read that has not run yet, a
// folded constant) makes the write copy it first. The gradients hold no
// forward data where the capacity is known at build time; a dynamic array of
// unknown capacity makes them hold written (a copy of bools per write).
//
// The ops: tensor_array_write, _scatter (data, written, index(es), value) ->
// (data, written); tensor_array_read, _gather (data, written, index(es)) ->
// value; tensor_array_stack, _size (data, written); tensor_array_unstack
// (value) -> (data, written); and tensor_array_clear_rows, a helper of the
// gradients. Errors name the array (attr array_name, else the node).
//
// Where actorflow differs from TensorFlow (graph-mode TensorArrayV3):
// - Element shape and dtype are fixed when the array is made: make_tensor_array
//   needs a fully defined element shape (TF may infer it from the first write).
// - A dynamic_size array grows its capacity geometrically; its size is still
//   TF's: max(initial size, highest written index + 1).
// - Reads may repeat (TF's clear_after_read=false); there is no
//   multiple_writes_aggregate: a second write to an index always fails.
// - read, gather and stack of an index below the size that was never
//   written give zeros of the element shape, as TF V3 does when it knows the
//   element shape (here it always does); an index at or past the size fails.
// - unstack_to_tensor_array makes a new array; TF's unstack writes into an
//   existing one (use scatter with indices 0..n-1 for that).
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// A tensor array as it flows through a graph: its two tensors plus what the
/// builder knows of it. Values, cheap to copy; each write gives a new one.
struct ACTORFLOW_API tensor_array {
  output data;     ///< [capacity, element dims...]
  output written;  ///< bool [capacity]
  /// Writes past the end grow the array (else they fail).
  bool dynamic_size = false;
  /// For a dynamic array: the size it was made with (size() is at least this).
  int64_t initial_size = 0;
  /// Named in errors; nodes are named "<name>/write" and so on.
  std::string name = "tensor_array";

  /// The element spec: data's dtype, and data's dims after the first.
  dtype element_type() const { return data.type(); }
  shape element_shape() const;

  /// Writes value (of the element shape) at the int32/int64 scalar index.
  /// Fails at run time for a negative index, an index written before, or
  /// (fixed size) an index past the end.
  tensor_array write(output index, output value) const;
  /// The element at index (zeros if it was never written); fails for an
  /// index that is negative or not below the size.
  output read(output index) const;
  /// All elements, [size, element dims...]; zeros where one was never written.
  output stack() const;
  /// The size as an int32 scalar: the capacity of a fixed array; for a dynamic
  /// one max(initial_size, highest written index + 1).
  output size() const;
  /// The elements at indices [k]: [k, element dims...].
  output gather(output indices) const;
  /// Writes value [k, element dims...] at indices [k], with write's checks
  /// (an index repeated within indices is a second write, too).
  tensor_array scatter(output indices, output value) const;
  /// The same array over other tensors: for the outputs of a while loop that
  /// carried data and written as loop variables.
  tensor_array with(output new_data, output new_written) const;
};

/// An array of `size` elements of `element_shape` (fully defined) and `type`,
/// none written yet: data is zeros, written all false.
ACTORFLOW_API tensor_array make_tensor_array(graph& g, dtype type, int64_t size,
                                             shape element_shape, bool dynamic_size = false,
                                             const std::string& name = "tensor_array");

/// A fixed-size array holding the rows of value [n, element dims...], all
/// written. data is value itself: no copy.
ACTORFLOW_API tensor_array unstack_to_tensor_array(output value, const std::string& name = "");

/// Gradient helper: {x [m, elem...] with the rows at indices (int scalar or
/// [k], not negative) zeroed, truncated or zero-padded along dim 0 to like's
/// dim 0 (only like's shape is used); those rows of x, as a gather takes
/// them, zero for an index past x}. The gradient of a write for the array and for the value, in one
/// op so that the clearing may happen in place. The op also takes just (x, indices) with an attr
/// `rows` (the gradients use that where the capacity is static, so as not to hold the forward
/// array).
ACTORFLOW_API std::pair<output, output> tensor_array_clear_rows(output x, output indices,
                                                                output like,
                                                                const std::string& name = "");

}  // namespace actorflow
