#pragma once
// The element-wise launch machinery of lockstep's CUDA kernels (.cu files only): one kernel maps N
// same-dtype operands to one result through a functor that computes in float (double for f64; the
// integer type itself for integers) and rounds on store, as the CPU kernels do. Operands that share
// the result's dense layout run as one flat loop; any other strides (broadcast views included) go
// through StridedIndexer.
#include <array>
#include <type_traits>

#include "lockstep/kernels/dispatch.h"
#include "lockstep/tensor/cuda/device_types.cuh"
#include "lockstep/tensor/cuda/runtime.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

using ::lockstep::cuda::blocksFor;
using ::lockstep::cuda::castTo;
using ::lockstep::cuda::devicePtrOrNull;
using ::lockstep::cuda::kBlock;
using ::lockstep::cuda::kPackOf;
using ::lockstep::cuda::Pack;
using ::lockstep::cuda::packAligned;
using ::lockstep::cuda::StridedIndexer;
using ::lockstep::cuda::visitDeviceType;

/// The type a kernel computes an element of T in: double for f64, float for f32/bf16/f16, T for
/// integers.
template <typename T>
using ComputeT = std::conditional_t<std::is_same_v<T, double>, double,
                                    std::conditional_t<std::is_integral_v<T>, T, float>>;

/// The stream kernels for t's device queue on.
inline cudaStream_t streamOf(const Tensor& t) {
  return ::lockstep::cuda::currentStream(t.device().index).handle();
}

/// The dtype of per-row statistics (mean, variance, rstd, logsumexp) of inputs of dtype t: f32, or
/// f64 for f64, as on the CPU.
inline DType statsDType(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

/// A contiguous tensor of the given shape and dtype on like's device.
inline Tensor emptyOn(const Shape& shape, DType t, const Tensor& like) {
  return Tensor::empty(shape, t, MemoryFormat::contiguous, like.device());
}

/// ValueError unless a and b live on the same device, naming the op and both tensors.
inline void checkSameDevice(const char* op, const Tensor& a, const Tensor& b) {
  LOCKSTEP_ENFORCE(a.device() == b.device(), ValueError, op, ": operands on different devices, ",
                   a.describe(), " on ", deviceName(a.device()), " and ", b.describe(), " on ",
                   deviceName(b.device()), "; move one with to(device) first");
}

// Device math on float or double (the global overloads CUDA provides).
template <typename C>
__device__ __forceinline__ C dExp(C v) {
  if constexpr (std::is_same_v<C, double>)
    return ::exp(v);
  else
    return ::expf(v);
}
template <typename C>
__device__ __forceinline__ C dLog(C v) {
  if constexpr (std::is_same_v<C, double>)
    return ::log(v);
  else
    return ::logf(v);
}
/// a + b rounded once and never fused with the product that made a or b (an FMA would round
/// differently from a separate add): accumulation stores that must equal addInto's.
template <typename C>
__device__ __forceinline__ C dAddRn(C a, C b) {
  if constexpr (std::is_same_v<C, double>)
    return __dadd_rn(a, b);
  else
    return __fadd_rn(a, b);
}
template <typename C>
__device__ __forceinline__ C dSqrt(C v) {
  if constexpr (std::is_same_v<C, double>)
    return ::sqrt(v);
  else
    return ::sqrtf(v);
}
template <typename C>
__device__ __forceinline__ C dPow(C v, C p) {
  if constexpr (std::is_same_v<C, double>)
    return ::pow(v, p);
  else
    return ::powf(v, p);
}
template <typename C>
__device__ __forceinline__ C dTanh(C v) {
  if constexpr (std::is_same_v<C, double>)
    return ::tanh(v);
  else
    return ::tanhf(v);
}
template <typename C>
__device__ __forceinline__ C dErf(C v) {
  if constexpr (std::is_same_v<C, double>)
    return ::erf(v);
  else
    return ::erff(v);
}

template <typename T, int N>
struct Inputs {
  const T* p[N];
  StridedIndexer ix[N];
};

template <typename C, int N, typename Fn>
__device__ __forceinline__ C applyFn(const Fn& fn, const C (&v)[N]) {
  if constexpr (N == 1)
    return fn(v[0]);
  else if constexpr (N == 2)
    return fn(v[0], v[1]);
  else
    return fn(v[0], v[1], v[2]);
}

// Dense and in the same layout: V elements per thread per access (16 bytes when every pointer is
// aligned for it, else 1), the last n % V one at a time.
template <typename T, int N, int V, typename Fn>
__global__ void mapFlat(T* __restrict__ out, Inputs<T, N> in, int64_t n, Fn fn) {
  using C = ComputeT<T>;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                step = int64_t(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  for (int64_t w = first; w < packs; w += step) {
    Pack<T, V> x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = reinterpret_cast<const Pack<T, V>*>(in.p[k])[w];
    Pack<T, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      C v[N];
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = castTo<C>(x[k].v[j]);
      y.v[j] = castTo<T>(applyFn<C, N>(fn, v));
    }
    reinterpret_cast<Pack<T, V>*>(out)[w] = y;
  }
  for (int64_t i = packs * V + first; i < n; i += step) {
    C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = castTo<C>(in.p[k][i]);
    out[i] = castTo<T>(applyFn<C, N>(fn, v));
  }
}

template <typename T, int N, typename Fn>
__global__ void mapStrided(T* out, StridedIndexer oix, Inputs<T, N> in, int64_t n, Fn fn) {
  using C = ComputeT<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = castTo<C>(in.p[k][in.ix[k].offset(i)]);
    out[oix.offset(i)] = castTo<T>(applyFn<C, N>(fn, v));
  }
}

/// out[i] = fn(in[0][i], ...) over out's shape; the inputs have out's dtype, device and shape (any
/// strides, stride-0 broadcast views included). out may alias an input element for element
/// (in-place updates). Queued on out's device's current stream; no host synchronisation.
template <typename T, int N, typename Fn>
void launchMap(const Tensor& out, const std::array<Tensor, N>& in, const Fn& fn) {
  const int64_t n = out.numel();
  if (n == 0) return;
  Inputs<T, N> args{};
  bool flat = out.isDense();
  for (int k = 0; k < N; ++k) {
    args.p[k] = static_cast<const T*>(in[k].devicePtr());
    flat = flat && in[k].strides() == out.strides();
  }
  T* o = static_cast<T*>(out.devicePtr());
  cudaStream_t stream = streamOf(out);
  if (flat) {
    constexpr int V = kPackOf<T>;
    bool aligned = packAligned<T, V>(o);
    for (int k = 0; k < N; ++k) aligned = aligned && packAligned<T, V>(args.p[k]);
    if (aligned) {
      mapFlat<T, N, V, Fn><<<blocksFor((n + V - 1) / V), kBlock, 0, stream>>>(o, args, n, fn);
    } else {
      mapFlat<T, N, 1, Fn><<<blocksFor(n), kBlock, 0, stream>>>(o, args, n, fn);
    }
  } else {
    for (int k = 0; k < N; ++k) args.ix[k] = StridedIndexer::of(in[k].shape(), in[k].strides());
    mapStrided<T, N, Fn>
        <<<blocksFor(n), kBlock, 0, stream>>>(o, StridedIndexer::of(out.shape(), out.strides()), args, n, fn);
  }
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

/// fn(O{}) for the output (or incoming gradient) dtype t of a normalisation whose input x has element
/// type T and dtype x_dtype: T itself, or bf16/f16 for an f32 x (autocast's LayerNorm or RMSNorm
/// before a lower-precision op). False for any other pair (the caller casts).
/// Whether visitNarrowOf takes dtype t for an x of x_dtype (the caller casts otherwise).
inline bool narrowReadable(DType t, DType x_dtype) {
  return t == x_dtype || (x_dtype == DType::f32 && isLowPrecision(t));
}

template <typename T, typename Fn>
bool visitNarrowOf(DType t, DType x_dtype, Fn&& fn) {
  if (t == x_dtype) {
    fn(T{});
    return true;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (t == DType::bf16) {
      fn(__nv_bfloat16{});
      return true;
    }
    if (t == DType::f16) {
      fn(__half{});
      return true;
    }
  }
  return false;
}
/// Calls fn(T{}) for the floating element types (f32, f64, bf16, f16); NotSupportedError naming
/// the op and dtype otherwise.
template <typename Fn>
decltype(auto) visitFloating(const char* op, DType t, Fn&& fn) {
  LOCKSTEP_ENFORCE(isFloating(t), NotSupportedError, op, " on a GPU takes f32, f64, bf16 or f16, got ",
                   dtypeName(t));
  switch (t) {
    case DType::f64:
      return fn(double{});
    case DType::bf16:
      return fn(__nv_bfloat16{});
    case DType::f16:
      return fn(__half{});
    default:
      return fn(float{});
  }
}

}  // namespace lockstep::kernels::cuda
