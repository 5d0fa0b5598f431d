#include "lockstep/data/samplers/distributed_sampler.h"

#include <numeric>

#include "lockstep/util/error.h"

namespace lockstep::data {

DistributedSampler::DistributedSampler(int64_t n, const DistributedSamplerOptions& options)
    : n_(n), options_(options) {
  LOCKSTEP_ENFORCE(n >= 0, ValueError, "DistributedSampler: negative dataset size ", n);
  LOCKSTEP_ENFORCE(options.num_replicas >= 1, ValueError,
                   "DistributedSampler: num_replicas must be >= 1, got ", options.num_replicas);
  LOCKSTEP_ENFORCE(options.rank >= 0 && options.rank < options.num_replicas, ValueError,
                   "DistributedSampler: invalid rank ", options.rank, ", rank should be in the interval [0, ",
                   options.num_replicas - 1, "]");
  const int64_t r = options.num_replicas;
  // torch: drop_last and len % R != 0 -> ceil((len - R) / R), which equals floor(len / R).
  num_samples_ = options.drop_last ? n / r : (n + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::epochIndices(uint64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = randomPermutation(n_, options_.seed + epoch);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = totalSize();
  if (total > n_) {
    LOCKSTEP_CHECK(n_ > 0);
    // Pad with the order's own head, cycling when the padding is longer than the data.
    for (int64_t i = n_; i < total; ++i) order.push_back(order[static_cast<size_t>((i - n_) % n_)]);
  } else {
    order.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = options_.rank; i < total; i += options_.num_replicas)
    mine.push_back(order[static_cast<size_t>(i)]);
  LOCKSTEP_CHECK(static_cast<int64_t>(mine.size()) == num_samples_, mine.size(), " vs ", num_samples_);
  return mine;
}

}  // namespace lockstep::data
