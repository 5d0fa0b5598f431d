#pragma once
// Column sums of per-element terms over the rows of an [m, n] problem (.cu files only): a norm's
// weight and bias gradients, computed straight from the row kernel's inputs instead of from [m, n]
// f32 buffers of the terms written and read back. A block of (32, kColumnRows) threads takes 32
// columns of a chunk of rows: each thread sums every kColumnRows-th row of the chunk for its column
// (a warp reads 32 adjacent elements of a row), the block adds its threads' sums in a fixed order
// into partial[chunk][j]; cuda::reduce then sums the chunks. The grid depends on (m, n) only, so
// the sums repeat bitwise.
#include <algorithm>
#include <array>

#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/reduce.h"

namespace lockstep::kernels::cuda {

constexpr int kColumnRows = 8;

/// K per-element terms of type A.
template <typename A, int K>
struct Terms {
  A v[K];
};

template <typename A, int K>
struct ColumnOutputs {
  A* p[K];  // [chunks, n] each, or nullptr when that sum is not wanted
};

/// term(r, j) -> Terms<A, K>: the K terms of element (r, j), j < n.
template <typename A, int K, typename Term>
__global__ void columnPartials(ColumnOutputs<A, K> out, int64_t m, int64_t n, int64_t chunk_rows, Term term) {
  __shared__ A sums[K][kColumnRows][33];
  const int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows, r1 = min(m, r0 + chunk_rows);
  Terms<A, K> s;
#pragma unroll
  for (int k = 0; k < K; ++k) s.v[k] = A(0);
  if (j < n) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) {
      const Terms<A, K> t = term(r, j);
#pragma unroll
      for (int k = 0; k < K; ++k) s.v[k] += t.v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) sums[k][threadIdx.y][threadIdx.x] = s.v[k];
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      A total = s.v[k];
      for (int y = 1; y < kColumnRows; ++y) total += sums[k][y][threadIdx.x];
      if (out.p[k]) out.p[k][int64_t(blockIdx.y) * n + j] = total;
    }
  }
}

/// Chunks of rows per column tile: about 1,024 blocks in all (a few waves on an H100's 132 SMs), at
/// least kColumnRows rows a chunk, at most 65,535 chunks (the grid's y limit).
inline int64_t columnChunks(int64_t m, int64_t n) {
  const int64_t tiles = (n + 31) / 32;
  const int64_t by_blocks = std::max<int64_t>(1, 1024 / tiles);
  const int64_t by_rows = std::max<int64_t>(1, (m + kColumnRows - 1) / kColumnRows);
  return std::min<int64_t>({by_blocks, by_rows, 65535});
}

/// The column sums [n] (dtype st, A's) of the K terms over m > 0 rows, the wanted ones only
/// (undefined otherwise), on like's device and stream.
template <typename A, int K, typename Term>
std::array<Tensor, K> columnSums(int64_t m, int64_t n, DType st, const Tensor& like, std::array<bool, K> want,
                                 Term term) {
  const int64_t chunks = columnChunks(m, n);
  std::array<Tensor, K> parts;
  ColumnOutputs<A, K> out{};
  for (int k = 0; k < K; ++k) {
    if (!want[k]) continue;
    parts[k] = emptyOn({chunks, n}, st, like);
    out.p[k] = static_cast<A*>(parts[k].devicePtr());
  }
  const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks));
  columnPartials<A, K>
      <<<grid, dim3(32, kColumnRows), 0, streamOf(like)>>>(out, m, n, (m + chunks - 1) / chunks, term);
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  std::array<Tensor, K> sums;
  for (int k = 0; k < K; ++k) {
    if (want[k]) sums[k] = cuda::reduce(ReduceOp::sum, parts[k], {0}, false);
  }
  return sums;
}

}  // namespace lockstep::kernels::cuda
