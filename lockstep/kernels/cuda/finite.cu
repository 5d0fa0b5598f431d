// The found-inf check (and unscale) of loss scaling on a GPU: one pass, a device flag as result.
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/finite.h"

namespace lockstep::kernels::cuda {

namespace {

template <typename T>
__global__ void checkKernel(T* x, StridedIndexer ix, bool dense, int64_t n, ComputeT<T> factor, bool scale,
                            float* found) {
  using C = ComputeT<T>;
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    T* p = x + (dense ? i : ix.offset(i));
    C v = castTo<C>(*p);
    if (scale) {
      const T r = castTo<T>(v * factor);
      *p = r;
      v = castTo<C>(r);  // the stored value decides (a bf16 result can overflow where f32 would not)
    }
    bad = bad || !isfinite(v);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found = 1.0f;
}

}  // namespace

void checkNonFiniteInto(Tensor& x, double factor, bool scale, Tensor& found_inf) {
  checkSameDevice("checkNonFinite", x, found_inf);
  LOCKSTEP_ENFORCE(found_inf.numel() == 1 && found_inf.dtype() == DType::f32, ValueError,
                   "checkNonFinite: found_inf must be one f32 element, got ", found_inf.describe());
  const int64_t n = x.numel();
  if (n == 0) return;
  visitFloating("checkNonFinite", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool dense = x.isDense();
    checkKernel<T><<<blocksFor(n, 4096), kBlock, 0, streamOf(x)>>>(
        static_cast<T*>(x.devicePtr()), dense ? StridedIndexer{} : StridedIndexer::of(x.shape(), x.strides()),
        dense, n, static_cast<ComputeT<T>>(factor), scale, static_cast<float*>(found_inf.devicePtr()));
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace lockstep::kernels::cuda
