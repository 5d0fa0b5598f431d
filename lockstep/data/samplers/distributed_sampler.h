#pragma once
// DistributedSampler with exactly torch.utils.data.DistributedSampler's index math (see
// docs/data.md for a worked example).
#include "lockstep/data/samplers/sampler.h"

namespace lockstep::data {

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;  // world size
  int64_t rank = 0;          // 0 <= rank < num_replicas
  bool shuffle = true;
  uint64_t seed = 0;  // must be the same on every rank
  bool drop_last = false;
};

/// Rank `rank`'s share of a dataset of n samples:
///  1. order = randomPermutation(n, seed + epoch) if shuffle, else 0..n-1;
///  2. without drop_last: pad order to total = ceil(n / R) * R by appending its own first
///     (total - n) entries (repeating the order as often as needed when total - n > n);
///     with drop_last: cut order to total = floor(n / R) * R;
///  3. this rank takes order[rank], order[rank + R], order[rank + 2R], ... (total / R indices).
/// Every rank gets the same count; the ranks' shares are disjoint except for the padding.
/// Thread-safety: see Sampler. Not collective: each rank computes its share alone.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, const DistributedSamplerOptions& options);

  /// Indices per rank per epoch: ceil(n / R), or floor(n / R) with drop_last.
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> epochIndices(uint64_t epoch) const override;
  /// total_size = size() * num_replicas.
  int64_t totalSize() const { return num_samples_ * options_.num_replicas; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t n_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace lockstep::data
