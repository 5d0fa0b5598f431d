// SGD and Adam/AdamW updates of flat spans on a GPU, one span per launch or many spans per launch
// (multi-tensor apply, tensor/cuda/multi_tensor.cuh: each block steps one chunk of one span).
// Every operation is rounded on its own (the __f*_rn / __d*_rn intrinsics keep nvcc from fusing
// multiply-adds) and in the CPU loops' order, with the CPU's double scalars (kernels::sgdScalars /
// adamScalars, computed on the host) cast to the element type as the CPU casts them, so the results
// equal the CPU's (kernels/cpu/optimizer.cpp) bit for bit, whether the scalars come in the kernel's
// parameters or from device memory. bf16 and f16 spans are stepped in f32 arithmetic, each element
// widened on load and rounded to nearest even on store, as the CPU's blocks of widened elements are.
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "lockstep/kernels/cuda/optimizer.h"
#include "lockstep/tensor/cuda/device_types.cuh"
#include "lockstep/tensor/cuda/multi_tensor.cuh"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

namespace {

using ::lockstep::cuda::blocksFor;
using ::lockstep::cuda::castTo;
using ::lockstep::cuda::kBlock;

__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float root(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double root(double a) { return __dsqrt_rn(a); }

// An update's double scalars (kernels::sgdScalars / adamScalars): from device memory when `device`
// is set (a captured update reads each replay's own), else the values carried in the parameters.
template <size_t N>
struct Scalars {
  const double* device;
  double value[N];
  __device__ double operator[](int i) const { return device ? device[i] : value[i]; }
};

template <size_t N>
Scalars<N> scalarsOf(const std::array<double, N>& values, const double* device) {
  Scalars<N> s{device, {}};
  for (size_t i = 0; i < N; ++i) s.value[i] = values[i];
  return s;
}

// The arithmetic type of a span of element type E: E itself, f32 for the 16-bit floats.
template <typename E>
using MathOf = std::conditional_t<std::is_same_v<E, double>, double, float>;

// b = {param, grad, momentum_buffer} of element type E; the CPU's sgdLoop for element i in T.
// load() casts the scalars to T once per thread, as the CPU loop casts them once per call (double
// -> T rounds to nearest on both).
template <typename E, typename T = MathOf<E>>
struct SgdOp {
  static constexpr int kBuffers = 3;
  Scalars<kSgdScalars> s;
  bool maximize, has_wd, has_momentum, nesterov;
  struct Values {
    T wd, mom, damp, neg_lr;
    bool first;
  };
  __device__ Values load() const {
    return {static_cast<T>(s[0]), static_cast<T>(s[1]), static_cast<T>(s[2]), static_cast<T>(s[3]),
            s[4] != 0.0};
  }
  __device__ void operator()(const Values& c, void* const* b, int64_t i) const {
    E* p = static_cast<E*>(b[0]);
    const T gi = castTo<T>(static_cast<const E*>(b[1])[i]);
    const T pi = castTo<T>(p[i]);
    T d = maximize ? -gi : gi;
    if (has_wd) d = add(d, mul(c.wd, pi));
    if (has_momentum) {
      E* buf = static_cast<E*>(b[2]);
      const T v = c.first ? d : add(mul(castTo<T>(buf[i]), c.mom), mul(c.damp, d));
      buf[i] = castTo<E>(v);
      d = nesterov ? add(d, mul(c.mom, v)) : v;
    }
    p[i] = castTo<E>(add(pi, mul(c.neg_lr, d)));
  }
};

// b = {param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq} of element type E; the CPU's adamLoop
// for element i in T.
template <typename E, typename T = MathOf<E>>
struct AdamOp {
  static constexpr int kBuffers = 5;
  Scalars<kAdamScalars> s;
  bool maximize, l2, decoupled, amsgrad;
  struct Values {
    T b1, b2, one_b1, one_b2, wd, decay, bc2_sqrt, eps, neg_step;
  };
  __device__ Values load() const {
    return {static_cast<T>(s[0]), static_cast<T>(s[1]), static_cast<T>(s[2]),
            static_cast<T>(s[3]), static_cast<T>(s[4]), static_cast<T>(s[5]),
            static_cast<T>(s[6]), static_cast<T>(s[7]), static_cast<T>(s[8])};
  }
  __device__ void operator()(const Values& c, void* const* b, int64_t i) const {
    E* p = static_cast<E*>(b[0]);
    E* m = static_cast<E*>(b[2]);
    E* v = static_cast<E*>(b[3]);
    const T g = castTo<T>(static_cast<const E*>(b[1])[i]);
    T gi = maximize ? -g : g;
    T pi = castTo<T>(p[i]);
    if (decoupled) pi = mul(pi, c.decay);
    if (l2) gi = add(gi, mul(c.wd, pi));
    const T mi = add(mul(castTo<T>(m[i]), c.b1), mul(c.one_b1, gi));
    const T vi = add(mul(castTo<T>(v[i]), c.b2), mul(mul(c.one_b2, gi), gi));
    m[i] = castTo<E>(mi);
    v[i] = castTo<E>(vi);
    // As the CPU's loop over a widened block: amsgrad's max and the update read the unrounded v;
    // only what is stored is rounded.
    T vh = vi;
    if (amsgrad) {
      E* vmax = static_cast<E*>(b[4]);
      const T old = castTo<T>(vmax[i]);
      vh = old > vi ? old : vi;
      vmax[i] = castTo<E>(vh);
    }
    const T denom = add(div(root(vh), c.bc2_sqrt), c.eps);
    p[i] = castTo<E>(add(pi, mul(c.neg_step, div(mi, denom))));
  }
};

template <typename Op>
__global__ void stepOne(Op op, std::array<void*, Op::kBuffers> bufs, int64_t n) {
  const typename Op::Values c = op.load();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    op(c, bufs.data(), i);
  }
}

cudaStream_t streamFor(const Device& d) { return ::lockstep::cuda::currentStream(d.index).handle(); }

template <typename Op>
void launchOne(const Op& op, const std::array<void*, Op::kBuffers>& bufs, int64_t n, const Device& device) {
  if (n == 0) return;
  ::lockstep::cuda::DeviceGuard guard(device.index);
  stepOne<Op><<<blocksFor(n), kBlock, 0, streamFor(device)>>>(op, bufs, n);
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

// Steps the spans of dtype `dtype` (all on `device`) with op, many per launch.
template <typename Op, typename Span, typename BufsOf>
void launchMany(const Op& op, std::span<const Span> spans, DType dtype, const Device& device,
                BufsOf&& bufs_of) {
  ::lockstep::cuda::DeviceGuard guard(device.index);
  ::lockstep::cuda::launchMany(op, streamFor(device), spans.size(), [&](size_t i) {
    const Span& s = spans[i];
    return s.dtype == dtype ? ::lockstep::cuda::SpanRef<Op::kBuffers>{bufs_of(s), s.numel}
                            : ::lockstep::cuda::SpanRef<Op::kBuffers>{};
  });
}

template <typename E>
SgdOp<E> sgdOp(const SgdParams& o) {
  return SgdOp<E>{scalarsOf(sgdScalars(o), o.device_scalars), o.maximize, o.weight_decay != 0.0,
                  o.momentum != 0.0, o.nesterov};
}

template <typename E>
AdamOp<E> adamOp(const AdamParams& o) {
  const bool decoupled = o.decoupled_weight_decay && o.weight_decay != 0.0;
  const bool l2 = !o.decoupled_weight_decay && o.weight_decay != 0.0;
  return AdamOp<E>{scalarsOf(adamScalars(o), o.device_scalars), o.maximize, l2, decoupled, o.amsgrad};
}

std::array<void*, 3> sgdBufs(const SgdSpan& s) {
  return {s.param, const_cast<void*>(s.grad), s.momentum_buffer};
}
std::array<void*, 5> adamBufs(const AdamSpan& s) {
  return {s.param, const_cast<void*>(s.grad), s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq};
}

// fn(E{}) with the span's CUDA element type (the entry points admit only the floating ones).
template <typename Fn>
void withSpanType(DType t, Fn&& fn) {
  ::lockstep::cuda::visitDeviceType(t, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (std::is_floating_point_v<E> || std::is_same_v<E, __nv_bfloat16> ||
                  std::is_same_v<E, __half>)
      fn(E{});
  });
}

}  // namespace

void sgdStep(const SgdSpan& span, const SgdParams& params) {
  withSpanType(span.dtype, [&](auto tag) {
    launchOne(sgdOp<decltype(tag)>(params), sgdBufs(span), span.numel, span.device);
  });
}

void adamStep(const AdamSpan& span, const AdamParams& params) {
  withSpanType(span.dtype, [&](auto tag) {
    launchOne(adamOp<decltype(tag)>(params), adamBufs(span), span.numel, span.device);
  });
}

// One launch series per dtype among the spans.
void sgdStepMany(std::span<const SgdSpan> spans, const SgdParams& params) {
  if (spans.empty()) return;
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    withSpanType(
        t, [&](auto tag) { launchMany(sgdOp<decltype(tag)>(params), spans, t, spans[0].device, sgdBufs); });
  }
}

void adamStepMany(std::span<const AdamSpan> spans, const AdamParams& params) {
  if (spans.empty()) return;
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    withSpanType(
        t, [&](auto tag) { launchMany(adamOp<decltype(tag)>(params), spans, t, spans[0].device, adamBufs); });
  }
}

}  // namespace lockstep::kernels::cuda
