#include "actors/input/dataset.hpp"

#include <cstring>
#include <numeric>
#include <random>

namespace actorflow {

namespace {

// SplitMix64's finalizer: spreads (seed, epoch) over the generator's seed
// space, so neighbouring epochs get unrelated orders.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform draw in [0, n) without modulo bias. mt19937_64's output is fixed
// by the standard, unlike std::uniform_int_distribution's, so an order is the
// same on every platform and library.
uint64_t draw_below(std::mt19937_64& rng, uint64_t n) {
  uint64_t threshold = (0 - n) % n;  // 2^64 mod n: the biased low values
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

}  // namespace

dataset::dataset(std::vector<tensor> components, dataset_options options)
    : components_(std::move(components)), options_(options) {
  if (components_.empty()) fail("dataset", "needs at least one component");
  for (size_t i = 0; i < components_.size(); ++i) {
    auto& t = components_[i];
    if (!t.valid() || t.rank() < 1)
      fail("dataset", "component " + std::to_string(i) + " must be a tensor of rank >= 1");
    if (t.dims()[0] != components_[0].dims()[0])
      fail("dataset", "component " + std::to_string(i) + " has " + std::to_string(t.dims()[0]) +
                          " examples, component 0 has " + std::to_string(components_[0].dims()[0]));
    row_bytes_.push_back(t.dims()[0] ? t.size_bytes() / static_cast<size_t>(t.dims()[0]) : 0);
  }
  num_examples_ = components_[0].dims()[0];
  if (options_.batch_size < 1)
    fail("dataset", "batch_size must be at least 1, got " + std::to_string(options_.batch_size));
  batches_per_epoch_ = options_.drop_remainder
                           ? num_examples_ / options_.batch_size
                           : (num_examples_ + options_.batch_size - 1) / options_.batch_size;
  if (batches_per_epoch_ == 0)
    fail("dataset", std::to_string(num_examples_) + " examples make no batch of " +
                        std::to_string(options_.batch_size));
}

std::vector<dtype> dataset::batch_types() const {
  std::vector<dtype> types;
  for (auto& t : components_) types.push_back(t.type());
  return types;
}

std::vector<shape> dataset::batch_shapes() const {
  bool short_batches = !options_.drop_remainder && num_examples_ % options_.batch_size != 0;
  std::vector<shape> shapes;
  for (auto& t : components_) {
    auto dims = t.dims().dims();
    dims[0] = short_batches ? shape::unknown : options_.batch_size;
    shapes.emplace_back(std::move(dims));
  }
  return shapes;
}

std::vector<int64_t> dataset::order(int64_t epoch) const {
  std::vector<int64_t> idx(static_cast<size_t>(num_examples_));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  if (!options_.shuffle) return idx;
  std::mt19937_64 rng(mix(options_.seed ^ mix(static_cast<uint64_t>(epoch))));
  for (size_t i = idx.size(); i > 1; --i)  // Fisher-Yates
    std::swap(idx[i - 1], idx[draw_below(rng, i)]);
  return idx;
}

std::shared_ptr<const std::vector<int64_t>> dataset::order_cached(int64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_epoch_ == epoch) return cached_order_;
  }
  // Computed outside the lock: two threads may both compute it, harmlessly.
  auto fresh = std::make_shared<const std::vector<int64_t>>(order(epoch));
  std::lock_guard<std::mutex> lock(mutex_);
  cached_epoch_ = epoch;
  cached_order_ = fresh;
  return fresh;
}

void dataset::check_position(dataset_position pos) const {
  if (pos.epoch < 0 || pos.batch < 0 || pos.batch >= batches_per_epoch_)
    fail("dataset", "position (epoch " + std::to_string(pos.epoch) + ", batch " +
                        std::to_string(pos.batch) + ") is outside 0.." +
                        std::to_string(batches_per_epoch_ - 1) + " batches per epoch");
}

std::vector<tensor> dataset::batch(dataset_position pos) const {
  check_position(pos);
  auto order = order_cached(pos.epoch);
  int64_t first = pos.batch * options_.batch_size;
  int64_t rows = std::min(options_.batch_size, num_examples_ - first);
  std::vector<tensor> out;
  for (size_t c = 0; c < components_.size(); ++c) {
    auto dims = components_[c].dims().dims();
    dims[0] = rows;
    tensor t(components_[c].type(), shape(std::move(dims)));
    auto src = static_cast<const char*>(components_[c].raw_data());
    auto dst = static_cast<char*>(t.raw_mutable_data());
    size_t row = row_bytes_[c];
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + static_cast<size_t>(r) * row,
                  src + static_cast<size_t>((*order)[static_cast<size_t>(first + r)]) * row, row);
    out.push_back(std::move(t));
  }
  return out;
}

dataset_position dataset::next(dataset_position pos) const {
  check_position(pos);
  if (pos.batch + 1 < batches_per_epoch_) return {pos.epoch, pos.batch + 1};
  return {pos.epoch + 1, 0};
}

dataset_position dataset::position_at_step(int64_t step) const {
  if (step < 0) fail("dataset", "step must be >= 0, got " + std::to_string(step));
  return {step / batches_per_epoch_, step % batches_per_epoch_};
}

int64_t dataset::step_at(dataset_position pos) const {
  check_position(pos);
  return pos.epoch * batches_per_epoch_ + pos.batch;
}

}  // namespace actorflow
