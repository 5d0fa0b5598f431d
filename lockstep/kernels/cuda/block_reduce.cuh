#pragma once
// Warp and block reductions (sum, max) for lockstep's CUDA kernels (.cu files only).
#include <cuda_runtime.h>

#include <algorithm>

#include "lockstep/tensor/cuda/device_types.cuh"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

template <typename A>
__device__ __forceinline__ A warpSum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename A>
__device__ __forceinline__ A warpMax(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v || w != w ? w : v;  // NaN wins, as in torch.max
  }
  return v;
}

/// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every
/// thread. shm: 32 elements of scratch; the call synchronises the block and may be repeated.
template <typename A>
__device__ __forceinline__ A blockSum(A v, A* shm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warpSum(v);
  __syncthreads();  // shm may still be read by a previous call
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  v = lane < warps ? shm[lane] : A(0);
  return warpSum(v);
}

/// The maximum of v over the block (as blockSum); identity is the caller's lowest value.
template <typename A>
__device__ __forceinline__ A blockMax(A v, A* shm, A lowest) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  v = lane < warps ? shm[lane] : lowest;
  return warpMax(v);
}

/// Rows reduced by a group of threads: a warp (G = 32, blockDim.x / 32 rows per block) or the whole
/// block (G = 0). Loops over rows from first() by stride() are uniform within the group.
template <int G>
struct RowGroup {
  static constexpr bool kWarp = G == 32;
  __device__ static int64_t first() {
    return kWarp ? blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32 : blockIdx.x;
  }
  __device__ static int64_t stride() { return kWarp ? int64_t(gridDim.x) * (blockDim.x / 32) : gridDim.x; }
  __device__ static int lane() { return kWarp ? threadIdx.x % 32 : threadIdx.x; }
  __device__ static int width() { return kWarp ? 32 : blockDim.x; }
  template <typename A>
  __device__ static A sum(A v, A* shm) {
    if constexpr (kWarp)
      return warpSum(v);
    else
      return blockSum(v, shm);
  }
  template <typename A>
  __device__ static A max(A v, A* shm, A lowest) {
    if constexpr (kWarp)
      return warpMax(v);
    else
      return blockMax(v, shm, lowest);
  }
};

/// Rows of at most this many elements get a warp each, longer ones a block.
constexpr int64_t kWarpRowLimit = 1024;

/// A row-reduction kernel on a warp per row (short rows) or a block per row.
template <typename ByWarp, typename ByBlock>
void launchRowGroups(int64_t m, int64_t c, cudaStream_t stream, ByWarp&& by_warp, ByBlock&& by_block) {
  if (c <= kWarpRowLimit)
    by_warp(::lockstep::cuda::blocksFor(m * 32), stream);
  else
    by_block(static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(m, 1), 65535)), stream);
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lockstep::kernels::cuda
