#include "lockstep/kernels/cuda/channel.cuh"
#include "lockstep/kernels/cuda/channel.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

template <typename T>
__global__ void biasRelu(T* y, Geometry4d g, const T* bias, bool relu) {
  const int64_t n = g.numel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c;
    const int64_t at = g.offset(i, &c);
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    A v = rt::castTo<A>(y[at]);
    if (bias) v += rt::castTo<A>(bias[c]);
    y[at] = rt::castTo<T>(relu && v < A(0) ? A(0) : v);  // NaN stays NaN, as torch.relu
  }
}

template <typename T>
struct SumTerm {
  const T* x;
  Geometry4d g;
  __device__ void operator()(int64_t c, int64_t j, double& a, double&) const {
    a += rt::castTo<double>(x[g.offsetIn(c, j)]);
  }
};

template <typename T>
struct StoreSum {
  T* out;
  __device__ void operator()(int64_t c, double a, double) const { out[c] = rt::castTo<T>(a); }
};

}  // namespace

void addChannelBias(const Tensor& y, const Tensor& bias, bool relu) {
  if (y.numel() == 0 || (!bias.defined() && !relu)) return;
  const Tensor b = bias.defined() ? bias.contiguous() : bias;
  const Geometry4d g = Geometry4d::of(y, y.isChannelsLast());
  cudaStream_t stream = rt::currentStream(y.device().index).handle();
  rt::visitDeviceType(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __nv_bfloat16> ||
                  std::is_same_v<T, __half>) {
      biasRelu<T><<<rt::blocksFor(y.numel()), rt::kBlock, 0, stream>>>(
          static_cast<T*>(y.devicePtr()), g, b.defined() ? static_cast<const T*>(b.devicePtr()) : nullptr,
          relu);
    }
  });
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

Tensor sumPerChannel(const Tensor& x) {
  Tensor out = Tensor::empty({x.size(1)}, x.dtype(), MemoryFormat::contiguous, x.device());
  const Geometry4d g = Geometry4d::of(x, false);
  rt::visitDeviceType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __nv_bfloat16> ||
                  std::is_same_v<T, __half>) {
      channelSums(g, SumTerm<T>{static_cast<const T*>(x.devicePtr()), g},
                  StoreSum<T>{static_cast<T*>(out.devicePtr())}, x.device());
    }
  });
  return out;
}

}  // namespace lockstep::kernels::cuda
