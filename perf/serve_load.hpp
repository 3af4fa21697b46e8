// A load generator for servers: closed loop (c clients, each sending its next
// request when its last is answered) and open loop (requests at a fixed
// rate, each timed from when it was due, so a server that falls behind is
// charged for the wait it causes, not only for its service time).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace actorflow::bench {

/// Sends one request and waits for its answer: true when it succeeded.
using send_fn = std::function<bool()>;
/// Makes a client (its own connection) for one sending thread.
using client_factory = std::function<send_fn()>;

struct load_result {
  std::vector<double> latencies_us;  ///< of the requests that succeeded
  int64_t failures = 0;
  double seconds = 0;
  /// The q-quantile (0..1) of the latencies; 0 when there are none.
  double quantile_us(double q) const;
  double qps() const { return seconds > 0 ? double(latencies_us.size()) / seconds : 0; }
};

/// `concurrency` threads, each with a client, sending back to back for `seconds`.
load_result closed_loop(const client_factory& make, int concurrency, double seconds);

/// Requests due at `rate` per second for `seconds`, spread over `workers`
/// threads (each sends the k-th request of its share at its due time, or at
/// once when late); a latency counts from the due time.
load_result open_loop(const client_factory& make, double rate, double seconds, int workers);

/// Starts one request; `done(ok)` is called when it is answered, on any
/// thread (a client's asynchronous API).
using async_send_fn = std::function<void(std::function<void(bool ok)> done)>;

/// Requests due at `rate` per second for `seconds`, each started at its due
/// time by one thread through `send` (no thread waits for an answer, so the
/// generator's own threads add no queue); a latency counts from the due
/// time. Waits up to `drain` for the last answers.
load_result open_loop_async(const async_send_fn& send, double rate, double seconds,
                            double drain = 30);

}  // namespace actorflow::bench
