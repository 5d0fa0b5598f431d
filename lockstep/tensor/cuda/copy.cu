#include <algorithm>

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

// A batch of matrix transposes with a cast: d[n][c][r] = s[n][r][c] for s's [rows, cols] matrices,
// through 32x32 tiles in shared memory so that both the reads and the writes are coalesced (blockDim
// (32, 8), grid (column tiles, row tiles, batch)). An NCHW <-> NHWC reorder is one of these: rows C
// and cols H*W per image, or the reverse.
template <typename D, typename S>
__global__ void transposeBatched(D* __restrict__ d, const S* __restrict__ s, uint32_t rows, uint32_t cols) {
  __shared__ S tile[32][33];
  const size_t base = size_t(blockIdx.z) * rows * cols;
  const uint32_t r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
  for (uint32_t k = threadIdx.y; k < 32; k += blockDim.y) {
    const uint32_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = s[base + size_t(r) * cols + c];
  }
  __syncthreads();
  for (uint32_t k = threadIdx.y; k < 32; k += blockDim.y) {
    const uint32_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) d[base + size_t(c) * rows + r] = castTo<D>(tile[threadIdx.x][k]);
  }
}

// The same transposes when a matrix side is under a tile (a conv weight's 3x3 plane: [C, 9] per
// output channel): a thread per destination element, writes coalesced, the reads' neighbours read by
// the neighbouring warps (so from cache). 32x32 tiles would leave most of each block idle there.
template <typename D, typename S>
__global__ void transposeNarrow(D* __restrict__ d, const S* __restrict__ s, uint32_t rows, uint32_t cols,
                                uint32_t total) {
  const uint32_t plane = rows * cols;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const uint32_t n = i / plane, rem = i - n * plane, c = rem / rows, r = rem - c * rows;
    d[i] = castTo<D>(s[n * plane + r * cols + c]);
  }
}

// The [rows, cols] matrices per image when src -> dst is an NCHW <-> NHWC reorder of dense 4-d
// tensors; false for any other copy.
bool channelsReorder(const Tensor& dst, const Tensor& src, uint32_t& batch, uint32_t& rows, uint32_t& cols) {
  if (dst.dim() != 4 || !dst.isDense() || !src.isDense()) return false;
  const int64_t n = dst.size(0), c = dst.size(1), hw = dst.size(2) * dst.size(3);
  // Grid limits: the batch in z (65,535), row tiles in y (65,535); 32-bit offsets within an image.
  if (n > 65535 || c * hw >= (int64_t{1} << 31) || std::max(c, hw) > int64_t{65535} * 32) return false;
  batch = static_cast<uint32_t>(n);
  if (src.isContiguous() && dst.isChannelsLast()) {
    rows = static_cast<uint32_t>(c);
    cols = static_cast<uint32_t>(hw);
    return true;
  }
  if (src.isChannelsLast() && dst.isContiguous()) {
    rows = static_cast<uint32_t>(hw);
    cols = static_cast<uint32_t>(c);
    return true;
  }
  return false;
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
      uint32_t batch = 0, rows = 0, cols = 0;
      if (same_block) {
        castContiguous<D, S><<<blocksFor(n), kBlock, 0, stream>>>(d, s, n);
      } else if (channelsReorder(dst, src, batch, rows, cols)) {
        if (std::min(rows, cols) < 32 && n < (int64_t{1} << 31)) {
          transposeNarrow<D, S>
              <<<blocksFor(n), kBlock, 0, stream>>>(d, s, rows, cols, static_cast<uint32_t>(n));
        } else {
          const dim3 grid((cols + 31) / 32, (rows + 31) / 32, batch);
          transposeBatched<D, S><<<grid, dim3(32, 8), 0, stream>>>(d, s, rows, cols);
        }
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
