#pragma once
// Shared by the CUDA loss kernels (.cu only): reducing per-row losses to a 0-d result on the device,
// the per-row gradient scale of a reduced loss, and the NaN a bad target gives.
#include <limits>

#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/elementwise.cuh"

namespace lockstep::kernels::cuda {

constexpr int kFinishBlock = 1024;

// out[0] = sum(per) / divisor, or / the number of rows whose target is not ignore_index.
template <typename Out>
__global__ void finishSum(Out* out, const double* __restrict__ per, int64_t n,
                          const int64_t* __restrict__ target, int64_t ignore_index, double divisor) {
  __shared__ double shm[32];
  double s = 0, kept = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    s += per[i];
    if (target) kept += target[i] != ignore_index;
  }
  s = blockSum(s, shm);
  if (target) kept = blockSum(kept, shm);
  if (threadIdx.x == 0) out[0] = castTo<Out>(s / (target ? kept : divisor));
}

// scale[0] = g[0] for sum, g[0] / (rows kept) for mean.
template <typename A>
__global__ void rowScale(A* scale, const A* g, const int64_t* __restrict__ target, int64_t n,
                         int64_t ignore_index, bool mean) {
  __shared__ double shm[32];
  double kept = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) kept += target[i] != ignore_index;
  kept = blockSum(kept, shm);
  if (threadIdx.x == 0) scale[0] = mean ? A(g[0] / A(kept)) : g[0];
}

template <typename A>
__device__ __forceinline__ A nanOf() {
  return std::numeric_limits<A>::quiet_NaN();
}

inline Tensor f64Scratch(int64_t n, const Tensor& like) {
  return Tensor::empty({n}, DType::f64, MemoryFormat::contiguous, like.device());
}

// The loss of rows per[] reduced into a 0-d tensor of dtype (target given: mean over kept rows).
template <typename T>
Tensor finish(const Tensor& per, DType dtype, const int64_t* target, int64_t ignore_index, double divisor) {
  Tensor out = Tensor::empty({}, dtype, MemoryFormat::contiguous, per.device());
  finishSum<T><<<1, kFinishBlock, 0, streamOf(per)>>>(static_cast<T*>(out.devicePtr()),
                                                      static_cast<const double*>(per.devicePtr()),
                                                      per.numel(), target, ignore_index, divisor);
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  return out;
}

}  // namespace lockstep::kernels::cuda
