#pragma once
// Device-side helpers shared by lockstep's CUDA kernels (.cu files only): the element types behind
// DType, conversions through float/double, a strided-offset indexer and the launch geometry.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep::cuda {

/// The CUDA element type of each dtype: the host's, except __nv_bfloat16 and __half for bf16 and f16.
template <DType D>
struct DeviceType : HostType<D> {};
template <>
struct DeviceType<DType::bf16> {
  using type = __nv_bfloat16;
};
template <>
struct DeviceType<DType::f16> {
  using type = __half;
};

/// Calls fn(T{}) with the CUDA element type of t (float, double, __nv_bfloat16, __half, int32_t,
/// int64_t, uint8_t).
template <typename Fn>
decltype(auto) visitDeviceType(DType t, Fn&& fn) {
  return visitDTypeAs<DeviceType>(t, std::forward<Fn>(fn));
}

/// Value casts as the host's castValue does them: 16-bit floats go through float (round to nearest
/// even), the rest are static_casts.
template <typename D, typename S>
__device__ __forceinline__ D castTo(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, __nv_bfloat16> || std::is_same_v<S, __half>) {
    return castTo<D>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

constexpr int kMaxDims = 8;

/// V elements of T moved as one access (vector loads and stores of up to 16 bytes).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// Elements per 16-byte access of the wider of two element types (a flat kernel's vector width).
template <typename A, typename B = A>
constexpr int kPackOf = static_cast<int>(16 / (sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B)));

/// Whether p is aligned for Pack<T, V> accesses.
template <typename T, int V>
__host__ __device__ inline bool packAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0;
}

/// Element offsets of a strided tensor from a row-major linear index (up to kMaxDims dims).
struct StridedIndexer {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  /// NotSupportedError past kMaxDims dimensions.
  static StridedIndexer of(const Shape& shape, const Shape& strides);
  __device__ __forceinline__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      off += i * strides[d];
    }
    return off;
  }
};

inline StridedIndexer StridedIndexer::of(const Shape& shape, const Shape& strides) {
  LOCKSTEP_ENFORCE(static_cast<int>(shape.size()) <= kMaxDims, NotSupportedError,
                   "CUDA kernels take tensors of at most ", kMaxDims, " dimensions, got ", shape.size());
  StridedIndexer ix;
  ix.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < ix.ndim; ++d) {
    ix.sizes[d] = shape[d];
    ix.strides[d] = strides[d];
  }
  return ix;
}

constexpr int kBlock = 256;
/// Blocks for n elements at kBlock threads, each thread striding over the rest (grid-stride loops).
inline unsigned blocksFor(int64_t n, int64_t max_blocks = 65536) {
  int64_t b = (n + kBlock - 1) / kBlock;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

/// t's device memory as T* (T const for an input), or nullptr for an undefined optional operand.
template <typename T>
T* devicePtrOrNull(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.devicePtr()) : nullptr;
}

}  // namespace lockstep::cuda
