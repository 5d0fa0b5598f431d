#pragma once
// Device helpers for the per-channel kernels over [N, C, H, W] activations in any strides (NCHW,
// NHWC or other): the 4-d geometry, a linear walk in memory order, a block-wide f64 sum, and
// per-channel sums split over many blocks. .cu files only.
#include <algorithm>

#include "lockstep/tensor/cuda/device_types.cuh"
#include "lockstep/tensor/cuda/runtime.h"

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

// Per-channel sums of two quantities over each channel's n*h*w elements, in a fixed order (so
// deterministic). Term: `void operator()(int64_t c, int64_t j, double& a, double& b) const` adds
// element j of channel c's terms to a and b. Finish: `void operator()(int64_t c, double a, double b)
// const` receives the totals. Many blocks share a channel (partial sums, then a second kernel), and a
// channels-fastest tensor (NHWC) is read with a warp across 32 channels, so both layouts read
// memory coalesced.
template <typename Term>
__global__ void channelPartials(Geometry4d g, bool tiled, Term term, double* partial) {
  const int64_t count = g.n * g.h * g.w, channels = g.c, split = blockIdx.y, splits = gridDim.y;
  double a = 0, b = 0;
  if (tiled) {  // blockDim (32, 8): x across channels, y across elements
    __shared__ double sa[8][33], sb[8][33];
    const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
    if (c < channels) {
      for (int64_t j = split * 8 + threadIdx.y; j < count; j += 8 * splits) term(c, j, a, b);
    }
    sa[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < channels) {
      for (int r = 1; r < 8; ++r) {
        a += sa[r][threadIdx.x];
        b += sb[r][threadIdx.x];
      }
      partial[(split * 2) * channels + c] = a;
      partial[(split * 2 + 1) * channels + c] = b;
    }
  } else {  // blockDim (256): one channel, the block across its elements
    const int64_t c = blockIdx.x;
    for (int64_t j = split * blockDim.x + threadIdx.x; j < count; j += int64_t(blockDim.x) * splits)
      term(c, j, a, b);
    a = blockSum(a);
    b = blockSum(b);
    if (threadIdx.x == 0) {
      partial[(split * 2) * channels + c] = a;
      partial[(split * 2 + 1) * channels + c] = b;
    }
  }
}

template <typename Finish>
__global__ void channelFinish(const double* partial, int64_t splits, int64_t channels, Finish finish) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    double a = 0, b = 0;
    for (int64_t s = 0; s < splits; ++s) {
      a += partial[(s * 2) * channels + c];
      b += partial[(s * 2 + 1) * channels + c];
    }
    finish(c, a, b);
  }
}

/// Queues channelPartials and channelFinish on the current stream of device (partial sums in a
/// scratch tensor from the caching allocator). Nothing for C = 0.
template <typename Term, typename Finish>
void channelSums(const Geometry4d& g, const Term& term, const Finish& finish, const Device& device) {
  if (g.c == 0) return;
  const int64_t count = g.n * g.h * g.w;
  const bool tiled = g.sc == 1 && g.c > 1;
  const int64_t units = tiled ? (g.c + 31) / 32 : g.c;  // blocks per split
  const int64_t per_block = tiled ? 8 * 64 : 256 * 16;  // elements a block should at least sum
  const int64_t splits =
      std::clamp<int64_t>(count / per_block, 1, std::max<int64_t>(1, std::min<int64_t>(1024 / units, 65535)));
  Tensor partial = Tensor::empty({splits * 2 * g.c}, DType::f64, MemoryFormat::contiguous, device);
  cudaStream_t stream = ::lockstep::cuda::currentStream(device.index).handle();
  const dim3 grid(static_cast<unsigned>(units), static_cast<unsigned>(splits));
  const dim3 block = tiled ? dim3(32, 8) : dim3(256);
  double* p = static_cast<double*>(partial.devicePtr());
  channelPartials<Term><<<grid, block, 0, stream>>>(g, tiled, term, p);
  channelFinish<Finish>
      <<<::lockstep::cuda::blocksFor(g.c), ::lockstep::cuda::kBlock, 0, stream>>>(p, splits, g.c, finish);
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lockstep::kernels::cuda
