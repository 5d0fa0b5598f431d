#pragma once
// Device helpers for the per-channel kernels over [N, C, H, W] activations in any strides (NCHW,
// NHWC or other): the 4-d geometry, a linear walk in memory order, and a block-wide f64 sum.
// .cu files only.
#include "lockstep/tensor/cuda/device_types.cuh"

namespace lockstep::kernels::cuda {

/// A 4-d tensor's sizes and strides (elements), with a walk order: NHWC order when nhwc (channels
/// fastest, as channels_last memory), NCHW otherwise.
struct Geometry4d {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;
  bool nhwc = false;

  static Geometry4d of(const Tensor& t, bool nhwc) {
    return {t.size(0),   t.size(1),   t.size(2),   t.size(3), t.stride(0),
            t.stride(1), t.stride(2), t.stride(3), nhwc};
  }
  __host__ __device__ int64_t numel() const { return n * c * h * w; }
  /// The logical indices of the i-th element in walk order.
  __device__ __forceinline__ void index(int64_t i, int64_t& ni, int64_t& ci, int64_t& hi, int64_t& wi) const {
    if (nhwc) {
      ci = i % c;
      i /= c;
      wi = i % w;
      i /= w;
      hi = i % h;
      ni = i / h;
    } else {
      wi = i % w;
      i /= w;
      hi = i % h;
      i /= h;
      ci = i % c;
      ni = i / c;
    }
  }
  __device__ __forceinline__ int64_t at(int64_t ni, int64_t ci, int64_t hi, int64_t wi) const {
    return ni * sn + ci * sc + hi * sh + wi * sw;
  }
  /// The channel and offset of the i-th element in walk order.
  __device__ __forceinline__ int64_t offset(int64_t i, int64_t* channel) const {
    int64_t ni, ci, hi, wi;
    if (nhwc) {
      ci = i % c;
      i /= c;
      wi = i % w;
      i /= w;
      hi = i % h;
      ni = i / h;
    } else {
      wi = i % w;
      i /= w;
      hi = i % h;
      i /= h;
      ci = i % c;
      ni = i / c;
    }
    *channel = ci;
    return ni * sn + ci * sc + hi * sh + wi * sw;
  }
  /// The offset of the j-th element (of n*h*w) of channel ch.
  __device__ __forceinline__ int64_t offsetIn(int64_t ch, int64_t j) const {
    const int64_t hw = h * w, ni = j / hw, r = j % hw;
    return ni * sn + ch * sc + (r / w) * sh + (r % w) * sw;
  }
};

/// The sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ double blockSum(double v) {
  __shared__ double partial[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  double total = 0;
  const int warps = (blockDim.x + 31) / 32;
  for (int i = 0; i < warps; ++i) total += partial[i];
  return total;
}

}  // namespace lockstep::kernels::cuda
