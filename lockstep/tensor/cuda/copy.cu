#include <algorithm>
#include <utility>
#include <vector>

#include "lockstep/tensor/cuda/copy.h"
#include "lockstep/tensor/cuda/device_types.cuh"
#include "lockstep/tensor/cuda/multi_tensor.cuh"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::cuda {

namespace {

// Casts V consecutive elements s[0..V) to d[0..V): one load and one store when V > 1.
template <typename D, typename S, int V>
__device__ __forceinline__ void castRun(D* __restrict__ d, const S* __restrict__ s) {
  if constexpr (V == 1) {
    *d = castTo<D>(*s);
  } else {
    const Pack<S, V> in = *reinterpret_cast<const Pack<S, V>*>(s);
    Pack<D, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = castTo<D>(in.v[k]);
    *reinterpret_cast<Pack<D, V>*>(d) = out;
  }
}

// n elements, V per access (both pointers aligned for it), the last n % V one at a time.
template <typename D, typename S, int V>
__global__ void castContiguous(D* __restrict__ d, const S* __restrict__ s, int64_t n) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                step = int64_t(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  for (int64_t w = first; w < packs; w += step) castRun<D, S, V>(d + w * V, s + w * V);
  for (int64_t i = packs * V + first; i < n; i += step) d[i] = castTo<D>(s[i]);
}

// The shape of a strided copy with adjacent dims merged where both sides keep them contiguous
// (stride[d] == stride[d + 1] * size[d + 1]) and size-1 dims dropped: a [B, T, H, D] <-> [B, H, T, D]
// transpose stays 4-d, a narrow of the last dim becomes 2-d.
struct CopyShape {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t dst[kMaxDims] = {};
  int64_t src[kMaxDims] = {};
};

CopyShape copyShapeOf(const Tensor& dst, const Tensor& src) {
  CopyShape c;
  for (int64_t k = 0; k < dst.dim(); ++k) {
    if (dst.size(k) == 1) continue;
    if (c.ndim > 0) {
      const int l = c.ndim - 1;
      if (c.dst[l] == dst.stride(k) * dst.size(k) && c.src[l] == src.stride(k) * src.size(k)) {
        c.size[l] *= dst.size(k);
        c.dst[l] = dst.stride(k);
        c.src[l] = src.stride(k);
        continue;
      }
    }
    c.size[c.ndim] = dst.size(k);
    c.dst[c.ndim] = dst.stride(k);
    c.src[c.ndim] = src.stride(k);
    ++c.ndim;
  }
  if (c.ndim == 0) {  // a single element
    c.ndim = 1;
    c.size[0] = 1;
    c.dst[0] = c.src[0] = 1;
  }
  return c;
}

// Whether a copy of c can move kPackOf<D, S> elements (16 bytes of the wider side) at once: the innermost dim
// contiguous on both sides, its size and every other stride multiples of the run, both pointers aligned to
// it.
template <typename D, typename S>
bool runs(const CopyShape& c, const D* d, const S* s) {
  constexpr int v = kPackOf<D, S>;
  const int l = c.ndim - 1;
  bool ok =
      c.dst[l] == 1 && c.src[l] == 1 && c.size[l] % v == 0 && packAligned<D, v>(d) && packAligned<S, v>(s);
  for (int k = 0; k < l && ok; ++k) ok = c.dst[k] % v == 0 && c.src[k] % v == 0;
  return ok;
}

// d[c's offset of i] = s[c's offset of i] for n elements, V consecutive ones per thread (the
// innermost dim's), the offsets from one division chain per V elements in index type I (32-bit
// when the copy has under 2^32 elements: 64-bit divisions cost several times more).
template <typename D, typename S, int V, typename I>
__global__ void castStrided(D* __restrict__ d, const S* __restrict__ s, CopyShape c, I n) {
  for (I i = (blockIdx.x * I(blockDim.x) + threadIdx.x) * V; i < n; i += I(gridDim.x) * blockDim.x * V) {
    I rest = i;
    int64_t od = 0, os = 0;
    for (int k = c.ndim - 1; k > 0; --k) {
      const I size = static_cast<I>(c.size[k]);
      const I j = rest % size;
      rest /= size;
      od += static_cast<int64_t>(j) * c.dst[k];
      os += static_cast<int64_t>(j) * c.src[k];
    }
    od += static_cast<int64_t>(rest) * c.dst[0];
    os += static_cast<int64_t>(rest) * c.src[0];
    castRun<D, S, V>(d + od, s + os);
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

// bufs = {dst, src} of a contiguous pair: element i cast.
template <typename D, typename S>
struct CastOp {
  static constexpr int kBuffers = 2;
  struct Values {};
  __device__ Values load() const { return {}; }
  __device__ void operator()(const Values&, void* const* b, int64_t i) const {
    static_cast<D*>(b[0])[i] = castTo<D>(static_cast<const S*>(b[1])[i]);
  }
};

}  // namespace

bool copyManyTakes(const Tensor& dst, const Tensor& src) {
  return dst.device() == src.device() && dst.isContiguous() && src.isContiguous() &&
         isFloating(dst.dtype()) && isFloating(src.dtype());
}

void copyMany(std::span<const Tensor> dst, std::span<const Tensor> src) {
  if (dst.empty()) return;
  const Device device = dst[0].device();
  for (size_t i = 0; i < dst.size(); ++i) {
    LOCKSTEP_ENFORCE(
        copyManyTakes(dst[i], src[i]) && dst[i].device() == device && dst[i].numel() == src[i].numel(),
        ValueError, "copyMany: ", dst[i].describe(), " <- ", src[i].describe(),
        " is not a contiguous floating pair on ", deviceName(device));
  }
  DeviceGuard guard(device.index);
  cudaStream_t stream = currentStream(device.index).handle();
  // One launch series per (destination, source) dtype pair present.
  std::vector<std::pair<DType, DType>> kinds;
  for (size_t i = 0; i < dst.size(); ++i) {
    const std::pair<DType, DType> kind{dst[i].dtype(), src[i].dtype()};
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  for (const auto& [dt, st] : kinds) {
    visitDeviceType(dt, [&](auto dtag) {
      visitDeviceType(st, [&](auto stag) {
        using D = decltype(dtag);
        using S = decltype(stag);
        if constexpr (!std::is_integral_v<D> && !std::is_integral_v<S>) {
          launchMany(CastOp<D, S>{}, stream, dst.size(), [&](size_t i) {
            if (dst[i].dtype() != dt || src[i].dtype() != st) return SpanRef<2>{};
            return SpanRef<2>{{dst[i].devicePtr(), src[i].devicePtr()}, dst[i].numel()};
          });
        }
      });
    });
  }
}

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
        constexpr int V = kPackOf<D, S>;
        if (packAligned<D, V>(d) && packAligned<S, V>(s)) {
          castContiguous<D, S, V><<<blocksFor((n + V - 1) / V), kBlock, 0, stream>>>(d, s, n);
        } else {
          castContiguous<D, S, 1><<<blocksFor(n), kBlock, 0, stream>>>(d, s, n);
        }
      } else if (channelsReorder(dst, src, batch, rows, cols)) {
        if (std::min(rows, cols) < 32 && n < (int64_t{1} << 31)) {
          transposeNarrow<D, S>
              <<<blocksFor(n), kBlock, 0, stream>>>(d, s, rows, cols, static_cast<uint32_t>(n));
        } else {
          const dim3 grid((cols + 31) / 32, (rows + 31) / 32, batch);
          transposeBatched<D, S><<<grid, dim3(32, 8), 0, stream>>>(d, s, rows, cols);
        }
      } else {
        const CopyShape c = copyShapeOf(dst, src);
        constexpr int V = kPackOf<D, S>;
        if (n >= (int64_t{1} << 31)) {  // 32-bit indices with room for the grid stride
          castStrided<D, S, 1, uint64_t>
              <<<blocksFor(n), kBlock, 0, stream>>>(d, s, c, static_cast<uint64_t>(n));
        } else if (runs(c, d, s)) {
          castStrided<D, S, V, uint32_t>
              <<<blocksFor(n / V), kBlock, 0, stream>>>(d, s, c, static_cast<uint32_t>(n));
        } else {
          castStrided<D, S, 1, uint32_t>
              <<<blocksFor(n), kBlock, 0, stream>>>(d, s, c, static_cast<uint32_t>(n));
        }
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
