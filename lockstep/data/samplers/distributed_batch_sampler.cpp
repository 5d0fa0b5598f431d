#include "lockstep/data/samplers/distributed_batch_sampler.h"

#include "lockstep/util/error.h"

namespace lockstep::data {

DistributedBatchSampler::DistributedBatchSampler(int64_t n, const DistributedBatchSamplerOptions& o)
    : n_(n), options_(o) {
  LOCKSTEP_ENFORCE(n >= 0, ValueError, "DistributedBatchSampler: dataset size ", n, " is negative");
  LOCKSTEP_ENFORCE(o.batch_size >= 1, ValueError, "DistributedBatchSampler: batch_size must be >= 1, got ",
                   o.batch_size);
  LOCKSTEP_ENFORCE(o.num_replicas >= 1, ValueError,
                   "DistributedBatchSampler: num_replicas must be >= 1, got ", o.num_replicas);
  LOCKSTEP_ENFORCE(o.rank >= 0 && o.rank < o.num_replicas, ValueError, "DistributedBatchSampler: rank ",
                   o.rank, " is outside 0..", o.num_replicas - 1);
  num_samples_ = (n + o.num_replicas - 1) / o.num_replicas;
}

std::vector<int64_t> DistributedBatchSampler::epochIndices(uint64_t epoch) const {
  const int64_t R = options_.num_replicas, b = options_.batch_size, total = num_samples_ * R;
  std::vector<int64_t> order(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) order[i] = n_ > 0 ? i % n_ : 0;
  if (options_.shuffle && total > 0) {
    std::vector<int64_t> perm = randomPermutation(total, options_.seed + epoch);
    std::vector<int64_t> shuffled(order.size());
    for (int64_t i = 0; i < total; ++i) shuffled[i] = order[perm[i]];
    order.swap(shuffled);
  }
  if (R == 1) return order;
  const int64_t last = total % (b * R);
  const int64_t last_local = last / R;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = options_.rank * b; i < total - last; i += b * R) {
    out.insert(out.end(), order.begin() + i, order.begin() + i + b);
  }
  const int64_t tail = total - last + options_.rank * last_local;
  out.insert(out.end(), order.begin() + tail, order.begin() + tail + last_local);
  return out;
}

}  // namespace lockstep::data
