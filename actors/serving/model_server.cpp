#include "actors/serving/model_server.hpp"

#include <sys/stat.h>

#include <iostream>

#include "actors/run/runtime.hpp"
#include "core/error.hpp"

namespace actorflow {

struct model_server::servable {
  int64_t version = 0;
  std::shared_ptr<loaded_model> model;
  std::unique_ptr<batcher> batches;  // when batching is on
  ~servable() {
    batches.reset();  // its actors first: they hold the model
  }
};

namespace {

// What a version's files look like now: a failed version is tried again once
// this changes (its MODEL was missing and appeared, or was rewritten).
std::string stamp_of(const std::string& dir) {
  std::string stamp;
  for (auto name : {model_file_name, model_graph_file_name}) {
    struct stat st;
    std::string path = dir + "/" + std::string(name);
    if (::stat(path.c_str(), &st) == 0)
      stamp += std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
               std::to_string(st.st_mtim.tv_nsec) + ";";
    else
      stamp += "none;";
  }
  return stamp;
}

// Keeps a count of requests in flight while one is being answered.
struct in_flight_guard {
  std::atomic<int64_t>& count;
  explicit in_flight_guard(std::atomic<int64_t>& c) : count(c) { ++count; }
  ~in_flight_guard() { --count; }
};

std::map<std::string, tensor> filtered(std::map<std::string, tensor> outputs,
                                       const std::vector<std::string>& filter,
                                       const signature_def& sig) {
  if (filter.empty()) return outputs;
  std::map<std::string, tensor> out;
  for (auto& alias : filter) {
    auto it = outputs.find(alias);
    if (it == outputs.end())
      throw error("[predict] output_filter names '" + alias + "', not an output of signature '" +
                  sig.key + "'");
    out.insert(*it);
  }
  return out;
}

}  // namespace

const char* state_name(version_status::state s) {
  switch (s) {
    case version_status::state::unknown:
      return "UNKNOWN";
    case version_status::state::start:
      return "START";
    case version_status::state::loading:
      return "LOADING";
    case version_status::state::available:
      return "AVAILABLE";
    case version_status::state::unloading:
      return "UNLOADING";
    case version_status::state::end:
      return "END";
  }
  return "UNKNOWN";
}

model_server::model_server(model_server_options options)
    : options_(std::move(options)), metrics_(options_.name) {
  if (options_.name.empty()) throw error("[model_server] the model needs a name");
  if (options_.batching.enabled && options_.batching.max_batch_size < 1)
    throw error("[model_server] max_batch_size must be >= 1");
}

model_server::~model_server() {
  {
    std::lock_guard lock(watch_mutex_);
    stopping_ = true;
  }
  watch_wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  drain(std::chrono::seconds(30));
}

void model_server::log(const std::string& line) const {
  if (options_.log)
    options_.log(line);
  else
    std::cerr << line << std::endl;
}

void model_server::release_retired() {
  std::vector<std::shared_ptr<servable>> done;
  {
    std::lock_guard lock(mutex_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      if (it->use_count() == 1) {
        versions_[(*it)->version].st = version_status::state::end;
        done.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Unloaded here, on the caller's thread: never on a runtime thread that
  // answered a request (a session's teardown must not run on its own runtime).
  done.clear();
}

bool model_server::poll() {
  release_retired();
  auto served = serving_version();
  for (int64_t v : export_versions(options_.base_path)) {
    if (served && v <= *served) break;  // nothing newer loads: keep what serves
    std::string dir = options_.base_path + "/" + std::to_string(v);
    std::string stamp = stamp_of(dir);
    {
      std::lock_guard lock(mutex_);
      if (auto it = failed_stamps_.find(v); it != failed_stamps_.end() && it->second == stamp)
        continue;
      versions_[v] = {v, version_status::state::loading, error_code::ok, ""};
    }
    try {
      auto next = std::make_shared<servable>();
      next->version = v;
      next->model = load_model(dir, options_.rt);
      if (options_.batching.enabled) {
        auto rt = options_.rt ? options_.rt : runtime::shared();
        next->batches =
            std::make_unique<batcher>(rt->system(), next->model, options_.batching, metrics_);
      }
      std::shared_ptr<servable> old;
      {
        std::lock_guard lock(mutex_);
        old = std::exchange(current_, next);
        if (old) retired_.push_back(old);
        versions_[v] = {v, version_status::state::available, error_code::ok, ""};
        failed_stamps_.erase(v);
        if (old) versions_[old->version].st = version_status::state::unloading;
      }
      log("[serve] model '" + options_.name + "': serving version " + std::to_string(v) +
          (old ? " (version " + std::to_string(old->version) +
                     " finishes the requests it holds, then unloads)"
               : ""));
      return true;
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      failed_stamps_[v] = stamp;
      versions_[v] = {v, version_status::state::end, code_of(e), e.what()};
      log("[serve] model '" + options_.name + "': version " + std::to_string(v) +
          " failed to load, " +
          (current_ ? "still serving version " + std::to_string(current_->version)
                    : std::string("nothing served yet")) +
          ": " + e.what());
    }
  }
  return false;
}

void model_server::start_watching() {
  if (watcher_.joinable() || options_.poll_interval.count() <= 0) return;
  watcher_ = std::thread([this] {
    std::unique_lock lock(watch_mutex_);
    while (!stopping_) {
      watch_wake_.wait_for(lock, options_.poll_interval, [this] { return stopping_.load(); });
      if (stopping_) break;
      lock.unlock();
      try {
        poll();
      } catch (const std::exception& e) {
        log(std::string("[serve] watching ") + options_.base_path + ": " + e.what());
      }
      lock.lock();
    }
  });
}

std::optional<int64_t> model_server::serving_version() const {
  std::lock_guard lock(mutex_);
  if (!current_) return std::nullopt;
  return current_->version;
}

std::shared_ptr<model_server::servable> model_server::acquire(
    std::optional<int64_t> version) const {
  std::lock_guard lock(mutex_);
  if (!current_)
    throw error("[serve] model '" + options_.name + "' has no version loaded (looking in " +
                    options_.base_path + ")",
                error_code::unavailable);
  if (version && *version != current_->version)
    throw error("[serve] model '" + options_.name + "' has no version " + std::to_string(*version) +
                    " being served (it serves version " + std::to_string(current_->version) + ")",
                error_code::not_found);
  return current_;
}

void model_server::predict_then(const predict_request& request, predict_callback done) {
  if (stopping_) throw error("[serve] the server is stopping", error_code::cancelled);
  auto served = acquire(request.version);
  const signature_def* sig = &served->model->signature(request.signature);
  const bool batched = served->batches && batchable(*sig);
  // The unbatched step checks its own inputs as it starts; a batch's are
  // checked here, before they join others.
  if (batched) served->model->check_inputs(request.signature, request.inputs);
  ++in_flight_;
  // `served` is held until the answer: a version swapped out meanwhile
  // finishes this request (and is released by the watcher, not here).
  auto finish = [this, served, sig, filter = request.output_filter, done = std::move(done)](
                    std::map<std::string, tensor> outputs, std::exception_ptr failure) {
    predict_response response{served->version, sig->key, {}};
    if (!failure) {
      try {
        response.outputs = filtered(std::move(outputs), filter, *sig);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    done(std::move(response), failure);
    --in_flight_;
  };
  try {
    if (batched)
      served->batches->submit(sig->key, request.inputs, std::move(finish));
    else
      served->model->predict_then(sig->key, request.inputs, std::move(finish));
  } catch (...) {
    --in_flight_;
    throw;
  }
}

predict_response model_server::predict(const predict_request& request) {
  auto answer = std::make_shared<std::promise<predict_response>>();
  auto result = answer->get_future();
  predict_then(request, [answer](predict_response response, std::exception_ptr failure) {
    if (failure)
      answer->set_exception(failure);
    else
      answer->set_value(std::move(response));
  });
  if (result.wait_for(options_.request_timeout) != std::future_status::ready)
    throw error("[serve] no answer within " + std::to_string(options_.request_timeout.count()) +
                    " ms (the batch queue is long, or the model slow)",
                error_code::deadline_exceeded);
  return result.get();
}

std::pair<int64_t, std::vector<signature_def>> model_server::metadata(
    std::optional<int64_t> version) const {
  auto served = acquire(version);
  return {served->version, served->model->signatures()};
}

std::vector<version_status> model_server::status(std::optional<int64_t> version) const {
  std::lock_guard lock(mutex_);
  std::vector<version_status> out;
  for (auto it = versions_.rbegin(); it != versions_.rend(); ++it)
    if (!version || it->first == *version) out.push_back(it->second);
  if (version && out.empty())
    throw error(
        "[serve] model '" + options_.name + "' has never seen version " + std::to_string(*version),
        error_code::not_found);
  if (out.empty())
    throw error("[serve] model '" + options_.name + "' has no version yet (looking in " +
                    options_.base_path + ")",
                error_code::not_found);
  return out;
}

int64_t model_server::drain(std::chrono::milliseconds deadline) {
  stopping_ = true;
  auto until = std::chrono::steady_clock::now() + deadline;
  while (in_flight_ > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return in_flight_;
}

}  // namespace actorflow
