#pragma once
#include "lockstep/data/samplers/sampler.h"

namespace lockstep::data {

/// 0, 1, ..., n-1 every epoch (torch's SequentialSampler). Thread-safety: see Sampler.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> epochIndices(uint64_t epoch) const override;

 private:
  int64_t n_;
};

}  // namespace lockstep::data
