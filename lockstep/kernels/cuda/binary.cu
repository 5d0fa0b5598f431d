// Gradient accumulation and broadcasting add/sub/mul/div on a GPU (see elementwise.h).
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/elementwise.h"

namespace lockstep::kernels::cuda {

namespace {

struct BinaryFn {
  BinaryOp op;
  template <typename C>
  __device__ C operator()(C a, C b) const {
    switch (op) {
      case BinaryOp::add:
        return a + b;
      case BinaryOp::sub:
        return a - b;
      case BinaryOp::mul:
        return a * b;
      case BinaryOp::div:
        return a / b;
    }
    return a;
  }
};

template <typename C>
struct ScalarFn {
  BinaryOp op;
  C s;
  __device__ C operator()(C a) const { return BinaryFn{op}(a, s); }
};

// d = d + alpha * s, s of type S read in D's compute type; V elements per access (see mapFlat).
template <typename D, typename S, int V>
__global__ void addIntoFlat(D* __restrict__ d, const S* __restrict__ s, int64_t n, ComputeT<D> alpha) {
  using C = ComputeT<D>;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                step = int64_t(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  for (int64_t w = first; w < packs; w += step) {
    Pack<D, V> x = reinterpret_cast<const Pack<D, V>*>(d)[w];
    const Pack<S, V> y = reinterpret_cast<const Pack<S, V>*>(s)[w];
#pragma unroll
    for (int j = 0; j < V; ++j) x.v[j] = castTo<D>(castTo<C>(x.v[j]) + alpha * castTo<C>(y.v[j]));
    reinterpret_cast<Pack<D, V>*>(d)[w] = x;
  }
  for (int64_t i = packs * V + first; i < n; i += step)
    d[i] = castTo<D>(castTo<C>(d[i]) + alpha * castTo<C>(s[i]));
}

template <typename D, typename S>
__global__ void addIntoStrided(D* d, StridedIndexer dix, const S* s, StridedIndexer six, int64_t n,
                               ComputeT<D> alpha) {
  using C = ComputeT<D>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    D* p = d + dix.offset(i);
    *p = castTo<D>(castTo<C>(*p) + alpha * castTo<C>(s[six.offset(i)]));
  }
}

// The same sum over rows whose last dimension is contiguous in both tensors (a slice of a wider
// one: the q, k and v thirds of a fused projection's gradient): V elements per access and one offset
// computation per pack, the rows found by indexers over the leading dimensions. Element for element
// the arithmetic of addIntoStrided.
template <typename D, typename S, int V>
__global__ void addIntoRows(D* d, StridedIndexer drows, const S* s, StridedIndexer srows, int64_t rows,
                            int64_t cols, ComputeT<D> alpha) {
  using C = ComputeT<D>;
  const int64_t per_row = cols / V, packs = rows * per_row;
  for (int64_t w = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; w < packs;
       w += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = w / per_row, c = (w - r * per_row) * V;
    D* pd = d + drows.offset(r) + c;
    Pack<D, V> x = *reinterpret_cast<const Pack<D, V>*>(pd);
    const Pack<S, V> y = *reinterpret_cast<const Pack<S, V>*>(s + srows.offset(r) + c);
#pragma unroll
    for (int j = 0; j < V; ++j) x.v[j] = castTo<D>(castTo<C>(x.v[j]) + alpha * castTo<C>(y.v[j]));
    *reinterpret_cast<Pack<D, V>*>(pd) = x;
  }
}

// Whether t's rows (its last dimension) are contiguous and every row starts V-element aligned.
template <typename T, int V>
bool rowsPackable(const Tensor& t) {
  const Shape& st = t.strides();
  if (st.empty() || st.back() != 1 || t.shape().back() % V != 0 || !packAligned<T, V>(t.devicePtr()))
    return false;
  for (size_t k = 0; k + 1 < st.size(); ++k)
    if (st[k] % V != 0) return false;
  return true;
}

// y = w op n (n op w when the narrow operand comes first) over one dense layout: f32 w and y, a
// bf16/f16 n widened as it is read; V elements per access (see mapFlat).
template <typename N, int V>
__global__ void mixedFlat(float* __restrict__ y, const float* __restrict__ w, const N* __restrict__ n,
                          int64_t count, BinaryFn fn, bool narrow_first) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                step = int64_t(gridDim.x) * blockDim.x;
  const int64_t packs = count / V;
  for (int64_t k = first; k < packs; k += step) {
    const Pack<float, V> a = reinterpret_cast<const Pack<float, V>*>(w)[k];
    const Pack<N, V> b = reinterpret_cast<const Pack<N, V>*>(n)[k];
    Pack<float, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float x = castTo<float>(b.v[j]);
      r.v[j] = narrow_first ? fn(x, a.v[j]) : fn(a.v[j], x);
    }
    reinterpret_cast<Pack<float, V>*>(y)[k] = r;
  }
  for (int64_t i = packs * V + first; i < count; i += step) {
    const float x = castTo<float>(n[i]);
    y[i] = narrow_first ? fn(x, w[i]) : fn(w[i], x);
  }
}

template <typename D, typename S>
void addIntoTyped(const Tensor& dst, const Tensor& src, double alpha) {
  const int64_t n = dst.numel();
  D* d = static_cast<D*>(dst.devicePtr());
  const S* s = static_cast<const S*>(src.devicePtr());
  const auto a = static_cast<ComputeT<D>>(alpha);
  if (dst.isDense() && dst.strides() == src.strides()) {
    constexpr int V = kPackOf<D, S>;
    if (packAligned<D, V>(d) && packAligned<S, V>(s)) {
      addIntoFlat<D, S, V><<<blocksFor((n + V - 1) / V), kBlock, 0, streamOf(dst)>>>(d, s, n, a);
    } else {
      addIntoFlat<D, S, 1><<<blocksFor(n), kBlock, 0, streamOf(dst)>>>(d, s, n, a);
    }
  } else if (constexpr int V = kPackOf<D, S>; rowsPackable<D, V>(dst) && rowsPackable<S, V>(src)) {
    const Shape lead(dst.shape().begin(), dst.shape().end() - 1);
    const int64_t cols = dst.shape().back(), rows = n / cols;
    addIntoRows<D, S, V><<<blocksFor(n / V), kBlock, 0, streamOf(dst)>>>(
        d, StridedIndexer::of(lead, Shape(dst.strides().begin(), dst.strides().end() - 1)), s,
        StridedIndexer::of(lead, Shape(src.strides().begin(), src.strides().end() - 1)), rows, cols, a);
  } else {
    addIntoStrided<D, S>
        <<<blocksFor(n), kBlock, 0, streamOf(dst)>>>(d, StridedIndexer::of(dst.shape(), dst.strides()), s,
                                                     StridedIndexer::of(src.shape(), src.strides()), n, a);
  }
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void addInto(Tensor& dst, const Tensor& src, double alpha) {
  checkSameDevice("addInto", dst, src);
  if (dst.numel() == 0) return;
  visitFloating("addInto", dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    if (src.dtype() == dst.dtype()) {
      addIntoTyped<D, D>(dst, src, alpha);
    } else if constexpr (std::is_same_v<D, double>) {
      addIntoTyped<D, D>(dst, src.to(DType::f64), alpha);
    } else {
      if constexpr (std::is_same_v<D, float>) {
        // A 16-bit source into f32 read as it is: widened exactly, as its f32 copy would be, without
        // the copy (autocast's gradients added into f32 ones, the chunked attention's dQ).
        if (src.dtype() == DType::bf16) return addIntoTyped<D, __nv_bfloat16>(dst, src, alpha);
        if (src.dtype() == DType::f16) return addIntoTyped<D, __half>(dst, src, alpha);
      }
      // As the CPU: a source of another dtype is accumulated in f32 (an f64 source rounded once).
      addIntoTyped<D, float>(dst, src.dtype() == DType::f32 ? src : src.to(DType::f32), alpha);
    }
  });
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  checkSameDevice(binaryOpName(op), a, b);
  const Shape out_shape = checkBinary(op, a, b);
  // The result keeps an operand's dense layout when that operand has the result's shape (as the CPU).
  const bool a_full = a.shape() == out_shape && a.isDense();
  Tensor y = a_full ? Tensor::emptyLike(a)
             : b.shape() == out_shape && b.isDense()
                 ? Tensor::emptyLike(b)
                 : Tensor::empty(out_shape, a.dtype(), MemoryFormat::contiguous, a.device());
  const std::array<Tensor, 2> in{a.expand(out_shape), b.expand(out_shape)};
  visitDeviceType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launchMap<T, 2>(y, in, BinaryFn{op});
  });
  return y;
}

Tensor binaryMixed(BinaryOp op, const Tensor& a, const Tensor& b) {
  checkSameDevice(binaryOpName(op), a, b);
  const bool narrow_first = a.dtype() != DType::f32;
  const Tensor& wide = narrow_first ? b : a;
  const Tensor& narrow = narrow_first ? a : b;
  Tensor y = Tensor::emptyStrided(wide.shape(), wide.strides(), DType::f32, wide.device());
  const int64_t n = y.numel();
  if (n == 0) return y;
  auto launch = [&](auto ntag) {
    using N = decltype(ntag);
    constexpr int V = kPackOf<float>;
    float* py = static_cast<float*>(y.devicePtr());
    const float* pw = static_cast<const float*>(wide.devicePtr());
    const N* pn = static_cast<const N*>(narrow.devicePtr());
    if (packAligned<float, V>(py) && packAligned<float, V>(pw) && packAligned<N, V>(pn)) {
      mixedFlat<N, V>
          <<<blocksFor((n + V - 1) / V), kBlock, 0, streamOf(y)>>>(py, pw, pn, n, BinaryFn{op}, narrow_first);
    } else {
      mixedFlat<N, 1><<<blocksFor(n), kBlock, 0, streamOf(y)>>>(py, pw, pn, n, BinaryFn{op}, narrow_first);
    }
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  };
  if (narrow.dtype() == DType::bf16) {
    launch(__nv_bfloat16{});
  } else {
    launch(__half{});
  }
  return y;
}

namespace {
// v times a factor read from device memory (a 0-d tensor of element type F), in C as the host's
// factor would be after its cast to C.
template <typename C, typename F>
struct DeviceFactorFn {
  const F* factor;
  __device__ C operator()(C v) const { return v * castTo<C>(*factor); }
};
}  // namespace

void scaleInPlaceBy(Tensor& x, const Tensor& factor) {
  checkSameDevice("scaleInPlace", x, factor);
  visitFloating("scaleInPlace", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    visitFloating("scaleInPlace factor", factor.dtype(), [&](auto ftag) {
      using F = decltype(ftag);
      launchMap<T, 1>(x, {x}, DeviceFactorFn<C, F>{static_cast<const F*>(factor.devicePtr())});
    });
  });
}

Tensor binaryScalar(BinaryOp op, const Tensor& a, double s) {
  Tensor y = Tensor::emptyLike(a);
  visitDeviceType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    launchMap<T, 1>(y, {a}, ScalarFn<C>{op, static_cast<C>(s)});
  });
  return y;
}

}  // namespace lockstep::kernels::cuda
