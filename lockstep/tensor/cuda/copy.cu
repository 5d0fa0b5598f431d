#include "lockstep/tensor/cuda/copy.h"
#include "lockstep/tensor/cuda/device_types.cuh"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::cuda {

namespace {

template <typename D, typename S>
__global__ void castContiguous(D* __restrict__ d, const S* __restrict__ s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    d[i] = castTo<D>(s[i]);
  }
}

template <typename D, typename S>
__global__ void castStrided(D* __restrict__ d, StridedIndexer di, const S* __restrict__ s, StridedIndexer si,
                            int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    d[di.offset(i)] = castTo<D>(s[si.offset(i)]);
  }
}

template <typename T>
__global__ void fillStrided(T* __restrict__ d, StridedIndexer di, T v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    d[di.offset(i)] = v;
  }
}

template <typename T>
__global__ void fillContiguous(T* __restrict__ d, T v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    d[i] = v;
  }
}

}  // namespace

void copyStrided(const Tensor& dst, const Tensor& src) {
  LOCKSTEP_ENFORCE(dst.device() == src.device(), ValueError, "copyStrided: ", dst.describe(), " and ",
                   src.describe(), " are on different devices");
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = currentStream(dst.device().index).handle();
  const bool same_block = dst.strides() == src.strides() && dst.isDense();
  if (same_block && dst.dtype() == src.dtype()) {
    LOCKSTEP_CUDA_CHECK(
        cudaMemcpyAsync(dst.devicePtr(), src.devicePtr(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  visitDeviceType(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visitDeviceType(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.devicePtr());
      const S* s = static_cast<const S*>(src.devicePtr());
      if (same_block) {
        castContiguous<D, S><<<blocksFor(n), kBlock, 0, stream>>>(d, s, n);
      } else {
        castStrided<D, S>
            <<<blocksFor(n), kBlock, 0, stream>>>(d, StridedIndexer::of(dst.shape(), dst.strides()), s,
                                                  StridedIndexer::of(src.shape(), src.strides()), n);
      }
    });
  });
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

void fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = currentStream(dst.device().index).handle();
  if (value == 0.0 && dst.isDense()) {
    LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(dst.devicePtr(), 0, dst.nbytes(), stream));
    return;
  }
  visitDeviceType(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = [&] {
      if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16_rn(static_cast<float>(value));
      else if constexpr (std::is_same_v<T, __half>)
        return __float2half_rn(static_cast<float>(value));
      else
        return static_cast<T>(value);
    }();
    T* d = static_cast<T*>(dst.devicePtr());
    if (dst.isDense()) {
      fillContiguous<T><<<blocksFor(n), kBlock, 0, stream>>>(d, v, n);
    } else {
      fillStrided<T>
          <<<blocksFor(n), kBlock, 0, stream>>>(d, StridedIndexer::of(dst.shape(), dst.strides()), v, n);
    }
  });
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lockstep::cuda
