#include "lockstep/parallel/ddp/bucket_assignment.h"

#include <algorithm>
#include <map>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

std::vector<std::vector<size_t>> assignBuckets(const std::vector<size_t>& param_bytes,
                                               const std::vector<DType>& dtypes,
                                               const BucketAssignmentOptions& opts) {
  LOCKSTEP_ENFORCE(param_bytes.size() == dtypes.size(), ValueError, "assignBuckets: ", param_bytes.size(),
                   " sizes but ", dtypes.size(), " dtypes");
  LOCKSTEP_ENFORCE(opts.bucket_bytes > 0 && opts.first_bucket_bytes > 0, ValueError,
                   "bucket caps must be positive");
  std::vector<std::vector<size_t>> closed;
  struct Open {
    std::vector<size_t> params;
    size_t bytes = 0;
  };
  std::map<DType, Open> open;  // one open bucket per dtype
  for (size_t k = param_bytes.size(); k-- > 0;) {
    Open& b = open[dtypes[k]];
    b.params.push_back(k);
    b.bytes += param_bytes[k];
    size_t cap = closed.empty() ? opts.first_bucket_bytes : opts.bucket_bytes;
    if (b.bytes >= cap) {
      closed.push_back(std::move(b.params));
      b = Open();
    }
  }
  // Leftover open buckets, ordered by when their first gradient becomes ready.
  std::vector<std::vector<size_t>> rest;
  for (auto& [dt, b] : open) {
    if (!b.params.empty()) rest.push_back(std::move(b.params));
  }
  std::sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.front() > b.front(); });
  for (auto& r : rest) closed.push_back(std::move(r));
  return closed;
}

}  // namespace lockstep::parallel
