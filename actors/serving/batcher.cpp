#include "actors/serving/batcher.hpp"

#include <caf/all.hpp>
#include <cstring>
#include <deque>
#include <vector>

#include "core/error.hpp"

namespace actorflow {

namespace {

// One request waiting for its batch.
struct batch_call {
  std::string signature;
  std::map<std::string, tensor> inputs;
  int64_t rows = 0;
  std::promise<std::map<std::string, tensor>> answer;
};
using batch_call_ptr = std::shared_ptr<batch_call>;

// Requests joined into one step.
struct formed_batch {
  std::string signature;
  std::vector<batch_call_ptr> calls;
  int64_t rows = 0;
};
using formed_batch_ptr = std::shared_ptr<formed_batch>;

}  // namespace
}  // namespace actorflow

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::batch_call_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::formed_batch_ptr)

namespace actorflow {

namespace {

using call_atom = caf::atom_constant<caf::atom("call")>;    // (batch_call_ptr)
using flush_atom = caf::atom_constant<caf::atom("flush")>;  // (key, batch number): a timeout
using batch_atom = caf::atom_constant<caf::atom("batch")>;  // (formed_batch_ptr) to a worker
using done_atom = caf::atom_constant<caf::atom("done")>;    // (worker) back to the batcher

void fail_calls(const std::vector<batch_call_ptr>& calls, const error& e) {
  for (auto& c : calls) c->answer.set_exception(std::make_exception_ptr(e));
}

// The requests' inputs joined along the first dim.
std::map<std::string, tensor> join_inputs(const formed_batch& batch) {
  if (batch.calls.size() == 1) return batch.calls.front()->inputs;
  std::map<std::string, tensor> joined;
  for (auto& [alias, first] : batch.calls.front()->inputs) {
    auto dims = first.dims();
    dims[0] = batch.rows;
    tensor out(first.type(), dims);
    auto* at = static_cast<char*>(out.raw_mutable_data());
    for (auto& c : batch.calls) {
      auto& part = c->inputs.at(alias);
      std::memcpy(at, part.raw_data(), part.size_bytes());
      at += part.size_bytes();
    }
    joined.emplace(alias, std::move(out));
  }
  return joined;
}

// Rows [first, first + rows) of `t`.
tensor rows_of(const tensor& t, int64_t first, int64_t rows, int64_t total) {
  auto dims = t.dims();
  dims[0] = rows;
  tensor out(t.type(), dims);
  size_t row_bytes = t.size_bytes() / static_cast<size_t>(total);
  std::memcpy(out.raw_mutable_data(),
              static_cast<const char*>(t.raw_data()) + row_bytes * static_cast<size_t>(first),
              row_bytes * static_cast<size_t>(rows));
  return out;
}

// Gives each request its rows of the batch's outputs.
void split_outputs(const formed_batch& batch, const std::map<std::string, tensor>& outputs) {
  if (batch.calls.size() == 1) {
    batch.calls.front()->answer.set_value(outputs);
    return;
  }
  for (auto& [alias, t] : outputs)
    if (t.rank() == 0 || t.dims()[0] != batch.rows)
      throw error("[batcher] output '" + alias + "' has shape " + t.dims().to_string() +
                      ", not one row per input row (" + std::to_string(batch.rows) +
                      "): its signature cannot be batched",
                  error_code::internal);
  int64_t first = 0;
  for (auto& c : batch.calls) {
    std::map<std::string, tensor> mine;
    for (auto& [alias, t] : outputs) mine.emplace(alias, rows_of(t, first, c->rows, batch.rows));
    first += c->rows;
    c->answer.set_value(std::move(mine));
  }
}

// A worker: runs one batch at a time on the model (blocking, hence detached).
caf::behavior batch_worker(caf::event_based_actor* self, std::shared_ptr<loaded_model> model,
                           serving_metrics* metrics, caf::actor parent) {
  return {[=](batch_atom, const formed_batch_ptr& batch) {
    metrics->record_batch(batch->rows);
    try {
      split_outputs(*batch, model->predict(batch->signature, join_inputs(*batch)));
    } catch (const error& e) {
      fail_calls(batch->calls, e);
    } catch (const std::exception& e) {
      fail_calls(batch->calls, error(std::string("[batcher] ") + e.what(), code_of(e)));
    }
    self->send(parent, done_atom::value, caf::actor_cast<caf::actor>(self));
  }};
}

// The key of requests that may share a batch: the signature and every
// input's shape past the first dim.
std::string batch_key(const batch_call& c) {
  std::string key = c.signature;
  for (auto& [alias, t] : c.inputs) {
    key += '\0' + alias + ':';
    for (int d = 1; d < t.rank(); ++d) key += std::to_string(t.dims()[d]) + ',';
  }
  return key;
}

struct batcher_state {
  struct open_batch {
    formed_batch_ptr batch;
    uint64_t number = 0;
  };
  std::map<std::string, open_batch> open;
  std::deque<formed_batch_ptr> waiting;  // formed, waiting for a worker
  std::vector<caf::actor> idle;
  uint64_t next_number = 0;
};

caf::behavior batcher_actor(caf::stateful_actor<batcher_state>* self,
                            std::shared_ptr<loaded_model> model, batching_options options,
                            serving_metrics* metrics) {
  for (int i = 0; i < std::max(1, options.num_batch_threads); ++i)
    self->state.idle.push_back(self->spawn<caf::detached + caf::linked>(
        batch_worker, model, metrics, caf::actor_cast<caf::actor>(self)));
  auto dispatch = [=] {
    auto& st = self->state;
    while (!st.idle.empty() && !st.waiting.empty()) {
      auto batch = st.waiting.front();
      st.waiting.pop_front();
      metrics->add_queue_depth(-static_cast<int64_t>(batch->calls.size()));
      self->send(st.idle.back(), batch_atom::value, batch);
      st.idle.pop_back();
    }
  };
  auto close = [=](const std::string& key) {
    auto& st = self->state;
    auto it = st.open.find(key);
    if (it == st.open.end()) return;
    auto batch = it->second.batch;
    st.open.erase(it);
    if (static_cast<int>(st.waiting.size()) >= options.max_enqueued_batches && st.idle.empty()) {
      metrics->add_queue_depth(-static_cast<int64_t>(batch->calls.size()));
      fail_calls(batch->calls, error("[batcher] the batch queue is full (" +
                                         std::to_string(options.max_enqueued_batches) +
                                         " batches wait for a thread): try again later",
                                     error_code::unavailable));
      return;
    }
    st.waiting.push_back(batch);
    dispatch();
  };
  return {
      [=](call_atom, const batch_call_ptr& call) {
        auto& st = self->state;
        metrics->add_queue_depth(1);
        auto key = batch_key(*call);
        auto it = st.open.find(key);
        if (it != st.open.end() && it->second.batch->rows + call->rows > options.max_batch_size) {
          close(key);
          it = st.open.end();
        }
        if (it == st.open.end()) {
          auto number = st.next_number++;
          auto batch = std::make_shared<formed_batch>();
          batch->signature = call->signature;
          it = st.open.emplace(key, batcher_state::open_batch{batch, number}).first;
          self->delayed_send(self, options.batch_timeout, flush_atom::value, key, number);
        }
        it->second.batch->calls.push_back(call);
        it->second.batch->rows += call->rows;
        // Full, or a thread idle with nothing waiting for it: run it now.
        // Under load the threads are busy and batches fill while they
        // work; an idle server answers without waiting out the timeout.
        if (it->second.batch->rows >= options.max_batch_size ||
            (!st.idle.empty() && st.waiting.empty()))
          close(key);
      },
      [=](flush_atom, const std::string& key, uint64_t number) {
        auto it = self->state.open.find(key);
        if (it != self->state.open.end() && it->second.number == number) close(key);
      },
      [=](done_atom, const caf::actor& worker) {
        self->state.idle.push_back(worker);
        dispatch();
      },
  };
}

}  // namespace

bool batchable(const signature_def& sig) {
  auto batched = [](const std::vector<signature_tensor>& side) {
    for (auto& t : side)
      if (t.dims.empty() || t.dims[0] != -1) return false;
    return !side.empty();
  };
  return batched(sig.inputs) && batched(sig.outputs);
}

struct batcher::actors {
  caf::actor batcher;
};

batcher::batcher(caf::actor_system& system, std::shared_ptr<loaded_model> model,
                 const batching_options& options, serving_metrics& metrics)
    : actors_(std::make_unique<actors>()) {
  actors_->batcher = system.spawn(batcher_actor, std::move(model), options, &metrics);
}

batcher::~batcher() { caf::anon_send_exit(actors_->batcher, caf::exit_reason::user_shutdown); }

std::future<std::map<std::string, tensor>> batcher::submit(const std::string& signature,
                                                           std::map<std::string, tensor> inputs) {
  auto call = std::make_shared<batch_call>();
  call->signature = signature;
  call->inputs = std::move(inputs);
  int64_t rows = -1;
  for (auto& [alias, t] : call->inputs) {
    if (t.rank() == 0) throw error("[batcher] input '" + alias + "' is a scalar: it has no rows");
    if (rows >= 0 && t.dims()[0] != rows)
      throw error("[batcher] the inputs' first dims differ: input '" + alias + "' has " +
                  std::to_string(t.dims()[0]) + " rows, another " + std::to_string(rows));
    rows = t.dims()[0];
  }
  call->rows = std::max<int64_t>(rows, 0);
  auto answer = call->answer.get_future();
  caf::anon_send(actors_->batcher, call_atom::value, call);
  return answer;
}

}  // namespace actorflow
