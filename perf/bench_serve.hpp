// The serving group (`actorflow-bench --only serve`): actorflow-serve, a
// separate process of this build, serving the Fashion-MNIST MLP and CNN
// (exported with export_model), driven by the load generator of
// perf/serve_load.hpp over TensorFlow Serving's gRPC and REST APIs, beside
// the in-process loaded_model::predict of the same export in the same run
// (the floor a server adds its costs to). Every request is one image.
//
// Keys (the MLP's; the CNN's the same with the prefix cnn_):
//   inprocess_p50_us, inprocess_p99_us
//   serve_{grpc,rest}_{p50,p99}_us_c{1,8,64}[_batched]   closed loop, c clients
//   serve_qps_c{1,8,64}[_batched] (gRPC), serve_rest_qps_c{...}[_batched]
//   serve_grpc_{p50,p99}_us_open80   open loop at 80% of the batched peak
//                                    (gRPC's asynchronous client: one thread sends)
//   serve_swap_failed_requests, serve_swap_p99_ratio   a version swapped in
//                                                      under c8 load
#pragma once
#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

struct serve_bench_options {
  /// Seconds of each closed-loop measurement.
  double seconds = 2.0;
  /// Measure the CNN too (its steps are longer: the group takes twice as long).
  bool cnn = true;
};

void add_serve_rows(const add_row_fn& add_row, const serve_bench_options& options);

}  // namespace actorflow::bench
