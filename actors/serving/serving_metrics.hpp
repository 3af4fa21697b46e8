// A served model's counters and histograms, in Prometheus's text format at
// TensorFlow Serving's path (/monitoring/prometheus/metrics) and under its
// metric names:
//   :tensorflow:serving:request_count{model_name,version,API,entrypoint,status}
//   :tensorflow:serving:request_latency{model_name,API,entrypoint}  (µs)
//   :tensorflow:serving:batching_session:processed_batch_size{model_name}
//   :tensorflow:serving:batching_session:queue_depth{model_name}  (requests waiting)
// Thread-safe; a record costs one short lock.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/export.hpp"

namespace actorflow {

class ACTORFLOW_API serving_metrics {
 public:
  explicit serving_metrics(std::string model_name) : model_(std::move(model_name)) {}

  /// One request answered: `api` "predict", "metadata", "status";
  /// `entrypoint` "REST" or "GRPC"; `version` 0 when none was resolved.
  void record_request(const std::string& api, const std::string& entrypoint, int64_t version,
                      error_code status, double latency_us);
  /// One batch run: how many rows it held.
  void record_batch(int64_t rows);
  /// Requests waiting in the batcher, up or down by `delta`.
  void add_queue_depth(int64_t delta) { queue_depth_ += delta; }
  int64_t queue_depth() const { return queue_depth_; }

  /// Every metric in Prometheus's text exposition format (version 0.0.4).
  std::string prometheus_text() const;

 private:
  struct histogram {
    std::vector<uint64_t> counts;  // per bucket, not cumulative; the last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  static void observe(histogram& h, const std::vector<double>& bounds, double value);
  static void render(std::string& out, const std::string& name, const std::string& labels,
                     const histogram& h, const std::vector<double>& bounds);

  std::string model_;
  mutable std::mutex mutex_;
  // (API, entrypoint, version, status) -> count
  std::map<std::tuple<std::string, std::string, int64_t, std::string>, uint64_t> requests_;
  std::map<std::pair<std::string, std::string>, histogram> latency_;  // (API, entrypoint)
  histogram batch_sizes_;
  std::atomic<int64_t> queue_depth_{0};
};

}  // namespace actorflow
