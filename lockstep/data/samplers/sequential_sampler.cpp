#include "lockstep/data/samplers/sequential_sampler.h"

#include <numeric>

#include "lockstep/util/error.h"

namespace lockstep::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  LOCKSTEP_ENFORCE(n >= 0, ValueError, "SequentialSampler: negative size ", n);
}

std::vector<int64_t> SequentialSampler::epochIndices(uint64_t) const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

}  // namespace lockstep::data
