#include "lockstep/data/samplers/batch_sampler.h"

#include <algorithm>

#include "lockstep/util/error.h"

namespace lockstep::data {

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, const BatchSamplerOptions& options)
    : sampler_(std::move(sampler)), options_(options) {
  LOCKSTEP_ENFORCE(sampler_ != nullptr, ValueError, "BatchSampler needs a sampler");
  LOCKSTEP_ENFORCE(options.batch_size >= 1, ValueError, "BatchSampler: batch_size must be >= 1, got ",
                   options.batch_size);
  // Align with a sampler that was already advanced (a restored state), rounding down to a batch.
  position_ = sampler_->position() / options_.batch_size;
}

int64_t BatchSampler::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<std::vector<int64_t>> BatchSampler::epochBatches(uint64_t epoch) const {
  const std::vector<int64_t> order = sampler_->epochIndices(epoch);
  const int64_t count = size(), b = options_.batch_size, n = static_cast<int64_t>(order.size());
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t lo = k * b, hi = std::min(n, lo + b);
    batches.emplace_back(order.begin() + lo, order.begin() + hi);
  }
  return batches;
}

int64_t BatchSampler::samplesBefore(int64_t batches) const {
  return std::min(sampler_->size(), batches * options_.batch_size);
}

void BatchSampler::setEpoch(uint64_t epoch) {
  sampler_->setEpoch(epoch);
  position_ = 0;
}

void BatchSampler::advance(int64_t n) {
  LOCKSTEP_ENFORCE(n >= 0 && position_ + n <= size(), ValueError, "BatchSampler: cannot advance by ", n,
                   " batches from position ", position_, " in an epoch of ", size(), " batches");
  position_ += n;
  sampler_->loadState({sampler_->epoch(), samplesBefore(position_)});
}

void BatchSampler::loadState(const SamplerState& state) {
  LOCKSTEP_ENFORCE(state.position >= 0 && state.position <= size(), ValueError,
                   "BatchSampler: saved position ", state.position, " is outside 0..", size(),
                   " batches (was the dataset, batch size or world size changed?)");
  sampler_->loadState({state.epoch, samplesBefore(state.position)});
  position_ = state.position;
}

}  // namespace lockstep::data
