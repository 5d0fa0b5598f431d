#pragma once
// Warp and block reductions (sum, max) for lockstep's CUDA kernels (.cu files only).
#include <cuda_runtime.h>

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

}  // namespace lockstep::kernels::cuda
