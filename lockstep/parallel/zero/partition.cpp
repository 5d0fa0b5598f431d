#include "lockstep/parallel/zero/partition.h"

#include <algorithm>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

std::vector<int64_t> balancedSplit(int64_t n, int world, int first_long) {
  LOCKSTEP_ENFORCE(n >= 0, ValueError, "balancedSplit: element count ", n, " is negative");
  LOCKSTEP_ENFORCE(world >= 1, ValueError, "balancedSplit: world size ", world, " must be at least 1");
  LOCKSTEP_ENFORCE(first_long >= 0 && first_long < world, ValueError, "balancedSplit: first_long ",
                   first_long, " is outside [0, ", world, ")");
  const int64_t base = n / world, longer = n % world;
  std::vector<int64_t> bounds(static_cast<size_t>(world) + 1, 0);
  for (int r = 0; r < world; ++r) {
    const int64_t from_first = (r - first_long + world) % world;  // position in the rotation
    bounds[r + 1] = bounds[r] + base + (from_first < longer ? 1 : 0);
  }
  return bounds;
}

ZeroLayout makeZeroLayout(const std::vector<int64_t>& numels, const std::vector<std::vector<size_t>>& buckets,
                          int world) {
  LOCKSTEP_ENFORCE(world >= 1, ValueError, "ZeRO layout: world size ", world, " must be at least 1");
  std::vector<int> seen(numels.size(), 0);
  ZeroLayout layout;
  layout.world = world;
  layout.rank_numel.assign(world, 0);
  int next_long = 0;  // the rotation carries over buckets so the ranks' totals stay balanced
  for (const auto& members : buckets) {
    ZeroBucket b;
    for (size_t p : members) {
      LOCKSTEP_ENFORCE(p < numels.size(), ValueError, "ZeRO layout: parameter index ", p, " out of range (",
                       numels.size(), " parameters)");
      LOCKSTEP_ENFORCE(++seen[p] == 1, ValueError, "ZeRO layout: parameter ", p, " is in two buckets");
      b.params.push_back(p);
      b.param_offset.push_back(b.numel);
      b.numel += numels[p];
    }
    b.piece = balancedSplit(b.numel, world, next_long);
    next_long = static_cast<int>((next_long + b.numel % world) % world);
    for (int r = 0; r < world; ++r) {
      b.chunk = std::max(b.chunk, b.pieceSize(r));
      layout.rank_numel[r] += b.pieceSize(r);
    }
    layout.buckets.push_back(std::move(b));
  }
  for (size_t p = 0; p < numels.size(); ++p)
    LOCKSTEP_ENFORCE(seen[p] == 1, ValueError, "ZeRO layout: parameter ", p, " is in no bucket");
  return layout;
}

std::vector<ZeroSegment> segmentsIn(const ZeroBucket& bucket, int64_t begin, int64_t end) {
  std::vector<ZeroSegment> out;
  for (size_t i = 0; i < bucket.params.size(); ++i) {
    const int64_t p_begin = bucket.param_offset[i];
    const int64_t p_end = i + 1 < bucket.params.size() ? bucket.param_offset[i + 1] : bucket.numel;
    const int64_t lo = std::max(begin, p_begin), hi = std::min(end, p_end);
    if (lo >= hi) continue;
    out.push_back({bucket.params[i], lo - p_begin, lo, hi - lo});
  }
  return out;
}

}  // namespace lockstep::parallel
