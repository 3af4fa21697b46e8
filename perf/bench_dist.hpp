// Distributed-runtime benchmarks ("dist" group): real actorflow-node tasks on
// 127.0.0.1, started and reaped by the benchmark.
//
// - The TensorFlow paper's null-model step (OSDI 2016, section 6.2, the
//   synchronous replica microbenchmark): each worker reads one scalar
//   variable from each of 2 PS tasks, computes a trivial update and applies
//   it there; with 1 worker, and with 4 workers in lockstep (each its own
//   runtime: a distinct CAF node with its own TCP connections); beside the
//   round trip of a bare CAF message to a PS task.
// - A 64 MiB float32 tensor fed on the worker and consumed on a PS task,
//   beside a plain TCP loopback copy of the same bytes.
// - The 1-worker null step and the transfer again over mutual TLS.
// - Synchronous data-parallel training of the Fashion-MNIST MLP (Adam, batch
//   128 per worker): 2 workers (each its own CAF node) with every variable on
//   one PS task, beside the single-process MLP in the same run.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace actorflow::bench {

struct dist_figures {
  std::optional<double> null_step_ms_1w_2ps;
  std::optional<double> null_step_ms_4w_2ps;
  /// A bare CAF request and reply between the bench and a PS task: the floor
  /// under a null step, which needs two of them (start -> ps -> worker -> ps
  /// -> done).
  std::optional<double> caf_round_trip_ms;
  std::optional<double> transfer_gbps;  // 1e9 bytes per second
  /// The same float32 tensor with cluster_options::transfer_precision bfloat16
  /// (half the bytes on the wire; float32 bytes delivered per second).
  std::optional<double> transfer_gbps_bf16;
  /// The same two, with every connection over mutual TLS.
  std::optional<double> null_step_ms_1w_2ps_tls;
  std::optional<double> transfer_gbps_tls;
  /// The same two, with every process proving a cluster secret on each
  /// connection (a handshake when it opens, nothing per message).
  std::optional<double> null_step_ms_1w_2ps_secret;
  std::optional<double> transfer_gbps_secret;
  std::optional<double> tcp_gbps;
  /// Examples per second over both workers, and of one process alone.
  std::optional<double> dist_mlp_examples_per_s;
  std::optional<double> mlp_examples_per_s;
  /// Why figures are missing (one line each); empty when all were measured.
  std::vector<std::string> errors;
};

/// Runs the group; never throws: what cannot be measured is named in `errors`.
/// Every actorflow-node it starts is stopped and reaped before it returns.
dist_figures dist_benchmarks();

}  // namespace actorflow::bench
