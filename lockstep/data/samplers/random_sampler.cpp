#include "lockstep/data/samplers/random_sampler.h"

#include "lockstep/util/error.h"

namespace lockstep::data {

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  LOCKSTEP_ENFORCE(n >= 0, ValueError, "RandomSampler: negative size ", n);
}

std::vector<int64_t> RandomSampler::epochIndices(uint64_t epoch) const {
  return randomPermutation(n_, seed_ + epoch);
}

}  // namespace lockstep::data
