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
  batcher::answer_fn answer;
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

namespace actorflow {

namespace {

using call_atom = caf::atom_constant<caf::atom("call")>;    // (batch_call_ptr)
using flush_atom = caf::atom_constant<caf::atom("flush")>;  // (key, batch number): a timeout
using done_atom = caf::atom_constant<caf::atom("done")>;    // a batch's step ended

void fail_calls(const std::vector<batch_call_ptr>& calls, std::exception_ptr failure) {
  for (auto& c : calls) c->answer({}, failure);
}

void fail_calls(const std::vector<batch_call_ptr>& calls, const error& e) {
  fail_calls(calls, std::make_exception_ptr(e));
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
    batch.calls.front()->answer(outputs, nullptr);
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
    c->answer(std::move(mine), nullptr);
  }
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
    bool due = false;  // its timeout passed while every slot was busy
  };
  std::map<std::string, open_batch> open;
  std::deque<formed_batch_ptr> waiting;  // formed, waiting for a free slot
  int running = 0;                       // batches whose steps are in flight
  uint64_t next_number = 0;
  serving_metrics* metrics = nullptr;

  // The actor stopped (its batcher destroyed): what it still holds is
  // answered, so that no caller waits for it.
  ~batcher_state() {
    error stopped("[batcher] the model's batcher stopped (its version was unloaded)",
                  error_code::cancelled);
    for (auto& [key, b] : open) fail_calls(b.batch->calls, stopped);
    for (auto& b : waiting) fail_calls(b->calls, stopped);
    int64_t held = 0;
    for (auto& [key, b] : open) held += static_cast<int64_t>(b.batch->calls.size());
    for (auto& b : waiting) held += static_cast<int64_t>(b->calls.size());
    if (metrics) metrics->add_queue_depth(-held);
  }
};

// Starts `batch` as one step of the model; when it ends (on the runtime
// thread that ran it) each request gets its rows and the batcher hears of it.
void run_batch(caf::actor batcher, const std::shared_ptr<loaded_model>& model,
               serving_metrics* metrics, formed_batch_ptr batch) {
  metrics->record_batch(batch->rows);
  auto finished = [batcher, batch](std::map<std::string, tensor> outputs,
                                   std::exception_ptr failure) {
    if (failure) {
      fail_calls(batch->calls, failure);
    } else {
      try {
        split_outputs(*batch, outputs);
      } catch (...) {
        fail_calls(batch->calls, std::current_exception());
      }
    }
    caf::anon_send(batcher, done_atom::value);
  };
  try {
    model->predict_then(batch->signature, join_inputs(*batch), finished);
  } catch (...) {
    finished({}, std::current_exception());
  }
}

caf::behavior batcher_actor(caf::stateful_actor<batcher_state>* self,
                            std::shared_ptr<loaded_model> model, batching_options options,
                            serving_metrics* metrics) {
  self->state.metrics = metrics;
  const int slots = std::max(1, options.num_batch_threads);
  auto dispatch = [=] {
    auto& st = self->state;
    while (st.running < slots && !st.waiting.empty()) {
      auto batch = st.waiting.front();
      st.waiting.pop_front();
      metrics->add_queue_depth(-static_cast<int64_t>(batch->calls.size()));
      ++st.running;
      run_batch(caf::actor_cast<caf::actor>(self), model, metrics, batch);
    }
  };
  auto close = [=](const std::string& key) {
    auto& st = self->state;
    auto it = st.open.find(key);
    if (it == st.open.end()) return;
    auto batch = it->second.batch;
    st.open.erase(it);
    if (static_cast<int>(st.waiting.size()) >= options.max_enqueued_batches &&
        st.running >= slots) {
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
        // Full, or nothing running at all: run it now. An idle server
        // answers without waiting out the timeout; under load a batch is
        // running, and the next one fills (only a free slot is not enough:
        // steady arrivals would then run one by one, and a model whose
        // batches are cheaper per row would lose its capacity).
        if (it->second.batch->rows >= options.max_batch_size ||
            (options.run_when_idle && st.running == 0 && st.waiting.empty()))
          close(key);
      },
      [=](flush_atom, const std::string& key, uint64_t number) {
        auto& st = self->state;
        auto it = st.open.find(key);
        if (it == st.open.end() || it->second.number != number) return;
        // With every slot busy it could only wait in the queue: it goes on
        // filling instead, and runs when a slot frees.
        if (st.running < slots)
          close(key);
        else
          it->second.due = true;
      },
      [=](done_atom) {
        auto& st = self->state;
        --st.running;
        dispatch();
        if (st.running >= slots || !st.waiting.empty()) return;
        // The oldest batch whose timeout passed while it waited for a slot.
        const std::string* oldest = nullptr;
        uint64_t number = 0;
        for (auto& [key, open] : st.open)
          if (open.due && (!oldest || open.number < number)) {
            oldest = &key;
            number = open.number;
          }
        if (oldest) close(std::string(*oldest));
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

void batcher::submit(const std::string& signature, std::map<std::string, tensor> inputs,
                     answer_fn answer) {
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
  call->answer = std::move(answer);
  caf::anon_send(actors_->batcher, call_atom::value, call);
}

}  // namespace actorflow
