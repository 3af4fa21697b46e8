// Queues (TensorFlow's FIFOQueue): a queue is a resource node, like a
// variable, served by a queue actor that the session spawns for it. Its ops
// take the queue as input 0 and are sent to that actor, so enqueues and
// dequeues of one queue are serialized without locks; a dequeue on an empty
// queue (an enqueue on a full one) answers when an element (a free slot) comes.
#pragma once
#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// What a queue holds: one spec per component (dims may be unknown, -1), and
/// how many elements fit before an enqueue waits.
struct ACTORFLOW_API queue_spec {
  std::vector<tensor_spec> components;
  int64_t capacity = 0;
};

/// A FIFO queue of elements, each a tuple of tensors of the given dtypes and
/// shapes; `capacity` >= 1. The output is the queue's reference: it feeds the
/// queue ops, and fetching it is an error.
ACTORFLOW_API output fifo_queue(graph& g, const std::vector<dtype>& types,
                                const std::vector<shape>& shapes, int64_t capacity,
                                const std::string& name = "");
/// Appends one element; waits while the queue is full. Fails once the queue is closed.
ACTORFLOW_API operation queue_enqueue(output queue, const std::vector<output>& components,
                                      const std::string& name = "");
/// Removes the oldest element, one output per component; waits while the queue
/// is empty. Once the queue is closed, the remaining elements drain, then a
/// dequeue fails with "... is closed and empty" (TensorFlow's OutOfRange).
ACTORFLOW_API std::vector<output> queue_dequeue(output queue, const std::string& name = "");
/// Closes the queue: later enqueues fail, and so do dequeues once it is empty
/// (dequeues waiting on it fail at once). Enqueues waiting for space still land
/// unless `cancel_pending_enqueues`, which fails them.
ACTORFLOW_API operation queue_close(output queue, bool cancel_pending_enqueues = false,
                                    const std::string& name = "");
/// The number of elements in the queue (int32 scalar).
ACTORFLOW_API output queue_size(output queue, const std::string& name = "");

/// The spec stored in the attributes of a fifo_queue node (or of an op on it);
/// `op` names the caller in errors.
ACTORFLOW_API queue_spec queue_spec_of(const attr_map& attrs, const std::string& op);
/// Checks one element against the spec; the error names the queue, the
/// component and what differs.
ACTORFLOW_API void check_queue_element(const queue_spec& spec,
                                       const std::vector<tensor>& components,
                                       const std::string& queue_name);

}  // namespace actorflow
