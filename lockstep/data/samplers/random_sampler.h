#pragma once
#include "lockstep/data/samplers/sampler.h"

namespace lockstep::data {

/// A fresh random permutation of 0..n-1 each epoch, drawn from a generator seeded with
/// seed + epoch (as torch's DistributedSampler seeds its generator), so an epoch's order is
/// reproducible on resume and independent of how many epochs ran before.
/// Thread-safety: see Sampler.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> epochIndices(uint64_t epoch) const override;
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

}  // namespace lockstep::data
