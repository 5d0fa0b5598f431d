// Evaluation metrics on a GPU (kernels/metrics.h): the count of rows whose prediction is the target.
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/metrics.h"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = kBlock / 32;

// A warp per row: each lane keeps the first largest non-NaN value among its columns, then the
// lanes agree on the largest value and, among equal ones, the lowest column. That is the first
// column of the row's largest non-NaN value, which the CPU's sequential loop finds too, unless
// column 0 is NaN (the loop then never moves off it).
template <typename T>
__global__ void countCorrect(const T* __restrict__ logits, const int64_t* __restrict__ target, int64_t n,
                             int64_t c, unsigned long long* __restrict__ correct) {
  __shared__ unsigned long long counts[kWarpsPerBlock];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  unsigned long long mine = 0;
  for (int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + warp; r < n; r += warps) {
    const T* row = logits + r * c;
    float v = 0.0f;
    int64_t best = -1;  // none yet
    for (int64_t j = lane; j < c; j += 32) {
      const float x = castTo<float>(row[j]);
      if (x == x && (best < 0 || x > v)) {
        v = x;
        best = j;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int64_t ob = __shfl_xor_sync(0xffffffffu, best, o);
      if (ob >= 0 && (best < 0 || ov > v || (ov == v && ob < best))) {
        v = ov;
        best = ob;
      }
    }
    if (lane == 0) {
      const float first = c > 0 ? castTo<float>(row[0]) : 0.0f;
      if (best < 0 || first != first) best = 0;
      mine += best == target[r] ? 1 : 0;
    }
  }
  if (lane == 0) counts[warp] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long sum = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) sum += counts[w];
    if (sum) atomicAdd(correct, sum);  // integers: exact in any order
  }
}

}  // namespace

void countCorrectInto(const Tensor& logits, const Tensor& target, Tensor& correct) {
  const int64_t n = logits.size(0), c = logits.size(1);
  if (n == 0) return;
  ::lockstep::cuda::DeviceGuard guard(logits.device().index);
  const Tensor l = logits.contiguous();
  const Tensor t = target.contiguous();
  visitFloating("countCorrectInto", l.dtype(), [&](auto tag) {
    using T = decltype(tag);
    countCorrect<T><<<blocksFor(n * 32, 4096), kBlock, 0, streamOf(l)>>>(
        static_cast<const T*>(l.devicePtr()), static_cast<const int64_t*>(t.devicePtr()), n, c,
        static_cast<unsigned long long*>(correct.devicePtr()));
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace lockstep::kernels::cuda
