#include "actors/serving/serving_metrics.hpp"

#include <algorithm>
#include <cstdio>

namespace actorflow {

namespace {

// Latency buckets in µs: 10 µs to 10 s, three per decade (TF Serving's run
// from 10 µs upward too).
const std::vector<double>& latency_bounds() {
  static const std::vector<double> bounds = [] {
    std::vector<double> b;
    for (double decade = 10; decade <= 1e7; decade *= 10)
      for (double step : {1.0, 2.5, 5.0}) b.push_back(decade * step);
    return b;
  }();
  return bounds;
}

const std::vector<double>& batch_bounds() {
  static const std::vector<double> bounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return bounds;
}

// A label value escaped as the text format requires.
std::string escaped(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

}  // namespace

void serving_metrics::observe(histogram& h, const std::vector<double>& bounds, double value) {
  if (h.counts.empty()) h.counts.assign(bounds.size() + 1, 0);
  auto at = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  ++h.counts[static_cast<size_t>(at)];
  h.sum += value;
  ++h.count;
}

void serving_metrics::record_request(const std::string& api, const std::string& entrypoint,
                                     int64_t version, error_code status, double latency_us) {
  std::lock_guard lock(mutex_);
  ++requests_[{api, entrypoint, version, error_code_name(status)}];
  observe(latency_[{api, entrypoint}], latency_bounds(), latency_us);
}

void serving_metrics::record_batch(int64_t rows) {
  std::lock_guard lock(mutex_);
  observe(batch_sizes_, batch_bounds(), static_cast<double>(rows));
}

void serving_metrics::render(std::string& out, const std::string& name, const std::string& labels,
                             const histogram& h, const std::vector<double>& bounds) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += h.counts.empty() ? 0 : h.counts[i];
    std::string le = i < bounds.size() ? number(bounds[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(h.sum) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(h.count) + "\n";
}

std::string serving_metrics::prometheus_text() const {
  std::lock_guard lock(mutex_);
  std::string model = "model_name=\"" + escaped(model_) + "\"";
  std::string out;
  out += "# HELP :tensorflow:serving:request_count Requests answered, by outcome.\n";
  out += "# TYPE :tensorflow:serving:request_count counter\n";
  for (auto& [key, count] : requests_) {
    auto& [api, entrypoint, version, status] = key;
    out += ":tensorflow:serving:request_count{" + model + ",version=\"" + std::to_string(version) +
           "\",API=\"" + escaped(api) + "\",entrypoint=\"" + escaped(entrypoint) + "\",status=\"" +
           status + "\"} " + std::to_string(count) + "\n";
  }
  out += "# HELP :tensorflow:serving:request_latency Time to answer a request, in microseconds.\n";
  out += "# TYPE :tensorflow:serving:request_latency histogram\n";
  for (auto& [key, h] : latency_)
    render(out, ":tensorflow:serving:request_latency",
           model + ",API=\"" + escaped(key.first) + "\",entrypoint=\"" + escaped(key.second) + "\"",
           h, latency_bounds());
  out += "# HELP :tensorflow:serving:batching_session:processed_batch_size Rows per batch run.\n";
  out += "# TYPE :tensorflow:serving:batching_session:processed_batch_size histogram\n";
  render(out, ":tensorflow:serving:batching_session:processed_batch_size", model, batch_sizes_,
         batch_bounds());
  out += "# HELP :tensorflow:serving:batching_session:queue_depth Requests waiting for a batch.\n";
  out += "# TYPE :tensorflow:serving:batching_session:queue_depth gauge\n";
  out += ":tensorflow:serving:batching_session:queue_depth{" + model + "} " +
         std::to_string(queue_depth_.load()) + "\n";
  return out;
}

}  // namespace actorflow
