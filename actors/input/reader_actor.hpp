// A reader feeds a queue (ops/queue.hpp) with a dataset's batches from its
// own actor, so that loading overlaps the steps that dequeue them. It sends
// one batch at a time and waits for the queue's answer before gathering the
// next: the queue's capacity bounds how far it reads ahead.
#pragma once
#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "actors/input/dataset.hpp"
#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

class session;
class runtime;

struct ACTORFLOW_API reader_options {
  /// Stop after this many batches (-1: no limit).
  int64_t max_batches = -1;
  /// Stop on reaching this epoch, i.e. after epoch until_epoch - 1, counted
  /// from epoch 0 so that a resumed run stops where a fresh one would (-1: never).
  int64_t until_epoch = -1;
  /// On reaching a limit, close the queue: consumers drain it and then get
  /// its "closed and empty" error (TensorFlow's OutOfRange) instead of waiting.
  bool close_queue_at_end = true;
};

/// What a reader has done so far.
struct ACTORFLOW_API reader_report {
  int64_t batches = 0;               ///< batches the queue has accepted
  dataset_position position;         ///< the next batch it would send
  bool finished = false;             ///< its actor has ended: a limit, stop() or an error
  std::string error;                 ///< why it failed; empty when it did not
  error_code code = error_code::ok;  ///< its kind: cancelled when the queue was closed
};

/// Owns one reader actor; stops it when destroyed.
class ACTORFLOW_API batch_reader {
 public:
  /// Starts reading `data` at `start` into `queue` (a queue actor, e.g.
  /// session::queue_actor); `system` must outlive the reader. Batches must
  /// match the queue's components.
  /// When an enqueue fails (the queue is closed, a component does not match),
  /// the reader ends with the error in its report and closes the queue, so
  /// that consumers are not left waiting.
  batch_reader(caf::actor_system& system, std::shared_ptr<const dataset> data,
               dataset_position start, caf::actor queue, reader_options options = {});
  /// The same, for queue node `queue` of a session's graph. The reader keeps
  /// the session's runtime alive, so it may outlive the session.
  batch_reader(session& s, output queue, std::shared_ptr<const dataset> data,
               dataset_position start, reader_options options = {});
  ~batch_reader();
  batch_reader(const batch_reader&) = delete;
  batch_reader& operator=(const batch_reader&) = delete;

  /// Stops the reader, mid-epoch if need be, and waits for its actor to end.
  /// The queue stays open. A batch the reader had offered to a full queue may
  /// still land in it; report().position is the first batch not accepted.
  void stop();
  /// Waits until the reader has finished, at most `timeout`; true if it has.
  bool wait(std::chrono::milliseconds timeout) const;
  reader_report report() const;

  struct status;  // shared with the actor

 private:
  std::shared_ptr<runtime> runtime_;  // first: released last, after the actor handle
  std::shared_ptr<status> status_;
  caf::actor actor_;
};

}  // namespace actorflow
