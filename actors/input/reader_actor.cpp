#include "actors/input/reader_actor.hpp"

#include <condition_variable>
#include <mutex>

#include "actors/run/messages.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"

namespace actorflow {

// The report, written by the actor and read by the owner's thread.
struct batch_reader::status {
  mutable std::mutex mutex;
  mutable std::condition_variable finished_cv;
  reader_report report;

  void accepted(dataset_position next) {
    std::lock_guard<std::mutex> lock(mutex);
    ++report.batches;
    report.position = next;
  }
  void set_error(std::string what, error_code code) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!report.error.empty()) return;
    report.error = std::move(what);
    report.code = code;
  }
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      report.finished = true;
    }
    finished_cv.notify_all();
  }
};

namespace {

using start_atom = caf::atom_constant<caf::atom("start")>;

class reader_actor : public caf::event_based_actor {
 public:
  reader_actor(caf::actor_config& cfg, std::shared_ptr<const dataset> data, dataset_position start,
               caf::actor queue, reader_options options,
               std::shared_ptr<batch_reader::status> status)
      : caf::event_based_actor(cfg),
        data_(std::move(data)),
        position_(start),
        queue_(std::move(queue)),
        options_(options),
        status_(std::move(status)) {}

  caf::behavior make_behavior() override {
    // However the actor ends (a limit, an error, stop()), the owner hears of it.
    attach_functor([status = status_](const caf::error&) { status->finish(); });
    send(this, start_atom::value);
    return {[this](start_atom) { send_next(); }};  // then everything arrives as responses
  }

 private:
  bool limit_reached() const {
    return (options_.max_batches >= 0 && sent_ >= options_.max_batches) ||
           (options_.until_epoch >= 0 && position_.epoch >= options_.until_epoch);
  }

  void send_next() {
    if (limit_reached()) {
      if (options_.close_queue_at_end) anon_send(queue_, close_atom::value, false);
      return quit();
    }
    std::vector<tensor> batch;
    try {
      batch = data_->batch(position_);
    } catch (const std::exception& e) {
      return fail(e.what(), code_of(e));
    }
    request(queue_, caf::infinite, enqueue_atom::value, std::move(batch))
        .then(
            [this](update_result& r) {
              if (!r.ok()) return fail("enqueue failed: " + r.error, r.code);
              ++sent_;
              position_ = data_->next(position_);
              status_->accepted(position_);
              send_next();
            },
            [this](caf::error& e) {
              fail("the queue actor failed: " + caf::to_string(e), error_code::unavailable);
            });
  }

  // Consumers must not wait for batches that will never come.
  void fail(const std::string& what, error_code code) {
    status_->set_error("[reader] " + what, code);
    anon_send(queue_, close_atom::value, false);
    quit();
  }

  std::shared_ptr<const dataset> data_;
  dataset_position position_;
  caf::actor queue_;
  reader_options options_;
  std::shared_ptr<batch_reader::status> status_;
  int64_t sent_ = 0;
};

}  // namespace

batch_reader::batch_reader(caf::actor_system& system, std::shared_ptr<const dataset> data,
                           dataset_position start, caf::actor queue, reader_options options)
    : status_(std::make_shared<status>()) {
  if (!data) fail("reader", "no dataset");
  if (!queue) fail("reader", "no queue actor");
  status_->report.position = start;
  actor_ = system.spawn<reader_actor>(std::move(data), start, std::move(queue), options, status_);
}

batch_reader::batch_reader(session& s, output queue, std::shared_ptr<const dataset> data,
                           dataset_position start, reader_options options)
    : batch_reader(s.rt().system(), std::move(data), start, s.queue_actor(queue), options) {
  runtime_ = s.shared_rt();
}

batch_reader::~batch_reader() { stop(); }

void batch_reader::stop() {
  if (!actor_) return;
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
  actor_ = nullptr;
  // The actor never blocks, so it handles the exit at once and this wait is short.
  std::unique_lock<std::mutex> lock(status_->mutex);
  status_->finished_cv.wait(lock, [&] { return status_->report.finished; });
}

bool batch_reader::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(status_->mutex);
  return status_->finished_cv.wait_for(lock, timeout, [&] { return status_->report.finished; });
}

reader_report batch_reader::report() const {
  std::lock_guard<std::mutex> lock(status_->mutex);
  return status_->report;
}

}  // namespace actorflow
