// The task server: the one actor a cluster task publishes on its port. Clients
// (workers' sessions) register graph partitions with it; it builds each into
// an executable whose actors live in this process and share the task's
// resource table, so every worker's partition updates the same variables.
//
// Protocol (message atoms in actors/run/messages.hpp; every request answered):
//   hello                                   -> task name
//   register, owner, graph bytes, feeds, fetches, targets
//                                           -> (id, coordinator, recv names, recv actors)
//   connect, id, send names, recv actors    -> true
//   release, id                             -> (nothing)
//   snapprep, id, hold ms                   -> number of variables frozen
//   snapcommit, id, step dir, step, bytes/s -> manifest fragment of the shard written
//                                              (at most bytes/s; 0: no limit)
//   snapabort, id                           -> (nothing; the variables thaw)
//   restprep, id, step dir, targets         -> number of variables staged
//   restcommit, id                          -> true (the staged values set)
//   restabort, id                           -> (nothing; the staged values dropped)
//   ping                                    -> task name
// Authentication is the connection's, not the server's: with a cluster
// secret, a peer reaches this actor only through a connection on which it
// proved the secret (actors/caf_ext/guarded_connection.hpp), with TLS only with a
// certificate the cluster CA signed. A partition lives until its owner (the
// registering client's actor) releases it or goes down. No message stops
// the server: unknown ones are dropped, errors sent to it and exceptions in
// a handler are logged.
#pragma once
#include <caf/all.hpp>
#include <string>

#include "actors/run/runtime.hpp"

namespace actorflow {

struct task_server_options {
  std::string task;  // "/job:ps/task:0"
};

/// Spawns the server (a detached actor: a restore reads files on its thread).
caf::actor spawn_task_server(runtime& rt, const task_server_options& options);

/// The text of a CAF error, without CAF's decoration when it carries one.
std::string error_text(const caf::error& e);
/// The kind of a CAF error from a request to another task: no answer, or a
/// receiver that is gone, is unavailable (retrying may help); a task's
/// refusal (its text says why) invalid_argument.
error_code error_code_of(const caf::error& e);

}  // namespace actorflow
