#pragma once
// Which gradients travel together. Pure functions, unit-tested without processes.
#include <cstddef>
#include <vector>

#include "lockstep/util/dtype.h"

namespace lockstep::parallel {

struct BucketAssignmentOptions {
  size_t first_bucket_bytes = 1u << 20;  // small first bucket: its allreduce starts early
  size_t bucket_bytes = 25u << 20;       // bucket_cap_mb, 25 by default as in PyTorch
};

/// Groups parameters (given in registration order by byte size and dtype) into buckets, walking
/// them in REVERSE registration order — roughly the order backward produces their gradients — and
/// closing a bucket once it holds at least the cap (the first bucket's cap is first_bucket_bytes).
/// Buckets hold one dtype each. Returns the buckets in launch order, each listing parameter
/// indices in the order they were added. Deterministic: every rank computes the same result.
std::vector<std::vector<size_t>> assignBuckets(const std::vector<size_t>& param_bytes,
                                               const std::vector<DType>& dtypes,
                                               const BucketAssignmentOptions& opts = {});

}  // namespace lockstep::parallel
