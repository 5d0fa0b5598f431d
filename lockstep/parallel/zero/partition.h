#pragma once
// How ZeRO splits the flat parameter space across ranks. Pure functions, unit-tested without
// processes; every rank computes the same layout.
//
// Parameters are grouped into buckets (assignBuckets, in the order backward produces their
// gradients); a bucket is a flat range of its parameters' elements, one after the other. Each
// bucket is split into `world` contiguous pieces whose sizes differ by at most one; which ranks
// get the longer pieces rotates from bucket to bucket, so that every rank's total (the sum of its
// pieces) also differs from any other rank's by at most one element, whatever the world size and
// the parameter count. Rank r owns piece r of every bucket: its optimizer states (stage 1) and its
// reduced gradients (stage 2) are those elements only.
//
// Collectives need equal counts per rank: a bucket travels as `world` blocks of `chunk` elements
// (its longest piece), piece r at block r, the tail of shorter blocks padding.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::parallel {

/// Boundaries of `world` contiguous pieces of n elements: result[r]..result[r+1] is piece r. The
/// n % world longer pieces go to ranks first_long, first_long + 1, ... (mod world). ValueError for
/// n < 0, world < 1 or first_long outside [0, world).
std::vector<int64_t> balancedSplit(int64_t n, int world, int first_long = 0);

/// A run of one parameter's elements inside a bucket.
struct ZeroSegment {
  size_t param = 0;           // index into the parameter list the layout was built from
  int64_t param_offset = 0;   // first element within the parameter (flat)
  int64_t bucket_offset = 0;  // first element within the bucket's flat range
  int64_t numel = 0;
};

struct ZeroBucket {
  /// Parameters in bucket order; param_offset[i] is where params[i] starts in the bucket.
  std::vector<size_t> params;
  std::vector<int64_t> param_offset;
  int64_t numel = 0;
  /// world + 1 boundaries: rank r owns [piece[r], piece[r + 1]).
  std::vector<int64_t> piece;
  /// The longest piece: the per-rank block of the bucket's collectives.
  int64_t chunk = 0;

  int64_t pieceSize(int rank) const { return piece[rank + 1] - piece[rank]; }
};

struct ZeroLayout {
  int world = 1;
  std::vector<ZeroBucket> buckets;
  /// Elements each rank owns (sum of its pieces).
  std::vector<int64_t> rank_numel;
};

/// The layout of parameters with these element counts over `world` ranks, grouped by `buckets`
/// (parameter indices per bucket, as assignBuckets returns; every parameter exactly once).
/// ValueError when a parameter is missing or repeated, or world < 1.
ZeroLayout makeZeroLayout(const std::vector<int64_t>& numels, const std::vector<std::vector<size_t>>& buckets,
                          int world);

/// The runs of parameter elements that fall in [begin, end) of bucket b's flat range, in order.
std::vector<ZeroSegment> segmentsIn(const ZeroBucket& bucket, int64_t begin, int64_t end);

}  // namespace lockstep::parallel
