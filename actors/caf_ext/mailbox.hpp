// Messages put straight into an actor's mailbox, bypassing CAF's send().
//
// CAF 0.17's send() and anon_send() build a mailbox element and call the
// receiver's enqueue with the current execution unit; send() also puts a
// reference to the sender in it, which costs two atomic updates of the
// sender's count per message. The runtime's edge messages need no sender
// (nothing answers them), so they are built here without one (2567 -> 2546
// instructions per node firing), and the caller picks the execution unit:
// the one that decides where the receiver runs when the message makes it
// runnable (see actors/run/node_output.cpp, deliver).
#pragma once
// clang-format off: the version guard comes before the CAF headers it guards.
#include "actors/caf_ext/caf_version.hpp"
// clang-format on

#include <caf/abstract_actor.hpp>
#include <caf/execution_unit.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/message_id.hpp>
#include <utility>

namespace actorflow {

/// A message with no sender and no response id, for enqueue_direct and the
/// pinned enqueues below.
using direct_message = caf::mailbox_element_ptr;

/// Builds a direct_message holding `xs`.
template <class... Ts>
direct_message make_direct_message(Ts&&... xs) {
  return caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::forward<Ts>(xs)...);
}

/// Enqueues `message` to `target`. If that makes `target` runnable, `context`
/// schedules it: a worker runs it next on its own queue, null hands it to
/// CAF's scheduler (round robin, waking a sleeping worker).
inline void enqueue_direct(caf::abstract_actor* target, direct_message message,
                           caf::execution_unit* context) {
  target->enqueue(std::move(message), context);
}

/// Enqueues `message` to `target`; if that makes `target` runnable, this
/// worker runs it next, and no other worker steals it while they are busy.
/// Off the runtime's workers (a pool thread), CAF's scheduler places it.
/// Defined with the scheduler (actors/caf_ext/scheduler.cpp).
void enqueue_pinned(caf::abstract_actor* target, direct_message message);

/// The same, but pinned to the next worker, which is woken if asleep.
void enqueue_pinned_to_next_worker(caf::abstract_actor* target, direct_message message);

/// Enqueues `message` to `target`; if that makes `target` runnable, this
/// worker runs it after the jobs already in its queue, and no other worker
/// is woken for it (an idle one that is awake may steal it). Off the
/// runtime's workers, CAF's scheduler places it.
void enqueue_after_queued(caf::abstract_actor* target, direct_message message);

}  // namespace actorflow
