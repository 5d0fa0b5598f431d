#pragma once
#include <memory>

#include "lockstep/data/samplers/sampler.h"

namespace lockstep::data {

struct BatchSamplerOptions {
  int64_t batch_size = 1;
  /// Drop the last batch when it would be smaller than batch_size.
  bool drop_last = false;
};

/// Groups a sampler's epoch order into batches (torch's BatchSampler). Its state counts batches:
/// position() batches of epoch() were consumed; the wrapped sampler is kept in step (its position
/// counts samples).
/// Thread-safety: epochBatches() is const and pure; the mutators must not race.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<Sampler> sampler, const BatchSamplerOptions& options);

  /// Batches per epoch: floor(n / b) with drop_last, ceil(n / b) otherwise.
  int64_t size() const;
  /// All batches of `epoch`, in order. Pure.
  std::vector<std::vector<int64_t>> epochBatches(uint64_t epoch) const;

  /// Also sets the wrapped sampler's epoch; rewinds to the start.
  void setEpoch(uint64_t epoch);
  uint64_t epoch() const { return sampler_->epoch(); }
  /// Batches of the current epoch consumed so far.
  int64_t position() const { return position_; }
  /// Marks n more batches consumed; ValueError past the end of the epoch.
  void advance(int64_t n);
  /// {epoch, batches consumed}.
  SamplerState state() const { return {sampler_->epoch(), position_}; }
  /// ValueError when the position is outside 0..size().
  void loadState(const SamplerState& state);

  const Sampler& sampler() const { return *sampler_; }
  const BatchSamplerOptions& options() const { return options_; }

 private:
  std::shared_ptr<Sampler> sampler_;
  BatchSamplerOptions options_;
  int64_t position_ = 0;

  int64_t samplesBefore(int64_t batches) const;
};

}  // namespace lockstep::data
