#pragma once
// DistributedBatchSampler with Paddle's semantics (paddle.io.DistributedBatchSampler), as a Sampler
// whose index order, cut into batches of batch_size (BatchSampler / DataLoader with the same
// batch_size and drop_last), gives this rank's batches:
//  1. order = 0..n-1, padded to total = ceil(n / R) * R by appending its own first entries
//     (Paddle pads BEFORE shuffling, torch after);
//  2. shuffle: order = order permuted by randomPermutation(total, seed + epoch) (Paddle uses
//     numpy's RandomState(epoch); the permutation differs, the structure does not);
//  3. with R > 1, rank r takes whole batches in turn: order[r*b .. r*b+b), order[r*b + R*b ..), ...
//     and of the trailing (total mod (R*b)) entries, the r-th equal share.
// Every rank gets ceil(n / R) indices; the ranks' shares are disjoint except for the padding.
#include "lockstep/data/samplers/sampler.h"

namespace lockstep::data {

struct DistributedBatchSamplerOptions {
  int64_t batch_size = 1;
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = false;
  uint64_t seed = 0;
};

class DistributedBatchSampler : public Sampler {
 public:
  DistributedBatchSampler(int64_t n, const DistributedBatchSamplerOptions& options);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> epochIndices(uint64_t epoch) const override;
  const DistributedBatchSamplerOptions& options() const { return options_; }

 private:
  int64_t n_;
  DistributedBatchSamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace lockstep::data
