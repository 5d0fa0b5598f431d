// Dropout on a GPU with the host's Philox mask (kernels/dropout.h's dropoutKeepsBelow, compiled for
// the device too), so a GPU run drops exactly the elements a CPU run would.
#include "lockstep/kernels/cuda/dropout.h"
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/dropout.h"

namespace lockstep::kernels::cuda {

namespace {

template <typename T>
__global__ void forwardKernel(T* __restrict__ y, uint8_t* __restrict__ mask, const T* __restrict__ x,
                              int64_t n, PhiloxState philox, uint64_t threshold, ComputeT<T> scale) {
  const PhiloxState at = philox.resolved();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = dropoutKeepsBelow(at.offset + static_cast<uint64_t>(i), at.key, threshold);
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? castTo<T>(castTo<ComputeT<T>>(x[i]) * scale) : castTo<T>(0.0f);
  }
}

template <typename T>
__global__ void backwardKernel(T* __restrict__ gx, const T* __restrict__ gy, const uint8_t* __restrict__ mask,
                               int64_t n, ComputeT<T> scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    gx[i] = mask[i] ? castTo<T>(castTo<ComputeT<T>>(gy[i]) * scale) : castTo<T>(0.0f);
  }
}

double scaleFor(double p) { return p >= 1.0 ? 0.0 : 1.0 / (1.0 - p); }

}  // namespace

std::pair<Tensor, Tensor> dropoutForward(const Tensor& x0, double p, const PhiloxState& philox) {
  const Tensor x = x0.contiguous();  // row-major order numbers the draws
  Tensor y = Tensor::empty(x.shape(), x.dtype(), MemoryFormat::contiguous, x.device());
  Tensor mask = Tensor::empty(x.shape(), DType::u8, MemoryFormat::contiguous, x.device());
  const int64_t n = x.numel();
  if (n == 0) return {y, mask};
  visitFloating("dropout", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forwardKernel<T><<<blocksFor(n), kBlock, 0, streamOf(x)>>>(
        static_cast<T*>(y.devicePtr()), static_cast<uint8_t*>(mask.devicePtr()),
        static_cast<const T*>(x.devicePtr()), n, philox, dropoutThreshold(1.0 - p),
        static_cast<ComputeT<T>>(scaleFor(p)));
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  return {y, mask};
}

Tensor dropoutBackward(const Tensor& gy0, const Tensor& mask0, double p) {
  checkSameDevice("dropout backward", gy0, mask0);
  const Tensor gy = gy0.contiguous(), mask = mask0.contiguous();
  Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), MemoryFormat::contiguous, gy.device());
  const int64_t n = gy.numel();
  if (n == 0) return gx;
  visitFloating("dropout backward", gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backwardKernel<T><<<blocksFor(n), kBlock, 0, streamOf(gy)>>>(
        static_cast<T*>(gx.devicePtr()), static_cast<const T*>(gy.devicePtr()),
        static_cast<const uint8_t*>(mask.devicePtr()), n, static_cast<ComputeT<T>>(scaleFor(p)));
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  return gx;
}

}  // namespace lockstep::kernels::cuda
