// The cpu backend's optimizer steps: SGD and Adam over flat spans, one branch-free loop per option
// combination, threaded over chunks (see kernels/dispatch.h). f32 and f64 spans are stepped as they
// are; bf16 and f16 ones a block at a time widened into f32, stepped by the f32 loop and rounded
// back (PyTorch's fused optimizers' and DeepSpeed FusedAdam's f32 arithmetic on 16-bit storage).
// Each loop is cloned for AVX-512 and AVX2 beside the baseline (picked at load time): element-wise
// IEEE arithmetic without FMA (this file is compiled with -ffp-contract=off), so the clones, the
// baseline and the GPU's kernels agree bitwise.
#include "lockstep/kernels/optimizer.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockstep/kernels/cpu/vector_math.h"
#include "lockstep/kernels/tables/optimizer.h"
#include "lockstep/tensor/convert.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

namespace {

// body(begin, end) over [0, n): split across the OpenMP threads when n is large and there are
// several, else one call on this thread (an OpenMP region costs more than a small update).
template <typename Body>
void forChunks(int64_t n, Body&& body) {
#ifdef _OPENMP
  if (n > 32768 && omp_get_max_threads() > 1) {
#pragma omp parallel
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      body(n * t / nt, n * (t + 1) / nt);
    }
    return;
  }
#endif
  body(int64_t{0}, n);
}

// fn(std::integral_constant<int, flags>{}) for 0 <= flags < 16: four run-time option flags become
// a template argument, so every combination gets its own branch-free (vectorizable) loop.
template <typename Fn>
void withFlags(int flags, Fn&& fn) {
  [&]<int... F>(std::integer_sequence<int, F...>) {
    ((flags == F ? fn(std::integral_constant<int, F>{}) : void()), ...);
  }
  (std::make_integer_sequence<int, 16>{});
}

// fn(T{}) for the span's element type (uint16_t for bf16 and f16, whose spans say which);
// NotSupportedError for anything else.
template <typename Fn>
void withFloating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f64:
      fn(double{});
      return;
    case DType::bf16:
    case DType::f16:
      fn(uint16_t{});
      return;
    default:
      throw NotSupportedError(std::string(op) + ": supports f32, f64, bf16 and f16 buffers, got " +
                              dtypeName(dtype));
  }
}

// A 16-bit span's buffers, kBlock elements at a time: widen(i, n) reads elements [i, i + n) of
// each 16-bit buffer into f32 scratch, narrow(i, n) rounds them back into those that the update
// writes (every buffer but the gradient, buffer 1); at(k) is buffer k's block in f32: the scratch,
// or for buffers that are f32 already (from `first_f32` on: f32 states) the buffer itself.
template <int K>
class Widened {
 public:
  static constexpr int64_t kBlock = 1024;
  Widened(std::array<void*, K> bufs, Convert16 convert, int first_f32 = K)
      : bufs_(bufs), convert_(convert), first_f32_(first_f32) {}
  void widen(int64_t i, int64_t n) {
    at_ = i;
    for (int k = 0; k < first_f32_; ++k)
      if (bufs_[k]) convert_.widen(static_cast<const uint16_t*>(bufs_[k]) + i, scratch_[k], n);
  }
  void narrow(int64_t i, int64_t n) {
    for (int k = 0; k < first_f32_; ++k)
      if (bufs_[k] && k != 1) convert_.narrow(scratch_[k], static_cast<uint16_t*>(bufs_[k]) + i, n);
  }
  float* at(int k) {
    if (!bufs_[k]) return nullptr;
    return k < first_f32_ ? scratch_[k] : static_cast<float*>(bufs_[k]) + at_;
  }

 private:
  std::array<void*, K> bufs_;
  Convert16 convert_;
  int first_f32_;
  int64_t at_ = 0;
  alignas(64) float scratch_[K][kBlock];
};

// ---- SGD ---------------------------------------------------------------------------------------

// The casts of the scalars to T and the order of operations mirror PyTorch's _single_tensor_sgd,
// so f32 results agree with torch to rounding and f64 ones to ~1e-16. The options are template
// flags, so the loop has no branches and vectorizes.
template <typename T, bool kMaximize, bool kWd, bool kMomentum, bool kNesterov>
LOCKSTEP_VECTOR_CLONES_TEMPLATE void sgdLoop(T* __restrict p, const T* __restrict g, T* __restrict buf,
                                             int64_t begin, int64_t end,
                                             const std::array<double, kSgdScalars>& s) {
  const T wd = static_cast<T>(s[0]), mom = static_cast<T>(s[1]);
  const T damp = static_cast<T>(s[2]), neg_lr = static_cast<T>(s[3]);
  const bool first = s[4] != 0.0;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    T d = kMaximize ? -g[i] : g[i];
    if constexpr (kWd) d = d + wd * p[i];
    if constexpr (kMomentum) {
      const T later = buf[i] * mom + damp * d;
      const T b = first ? d : later;
      buf[i] = b;
      d = kNesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <typename T>
void sgdCpu(const SgdSpan& s, const SgdParams& o) {
  T* p = static_cast<T*>(s.param);
  const T* g = static_cast<const T*>(s.grad);
  T* buf = o.momentum != 0.0 ? static_cast<T*>(s.momentum_buffer) : nullptr;
  const int flags =
      (o.maximize ? 8 : 0) | (o.weight_decay != 0.0 ? 4 : 0) | (buf ? 2 : 0) | (o.nesterov ? 1 : 0);
  const auto scalars = sgdScalars(o);
  forChunks(s.numel, [&](int64_t b, int64_t e) {
    withFlags(flags, [&](auto f) {
      constexpr int F = decltype(f)::value;
      sgdLoop<T, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(p, g, buf, b, e, scalars);
    });
  });
}

template <>
void sgdCpu<uint16_t>(const SgdSpan& s, const SgdParams& o) {
  void* buf = o.momentum != 0.0 ? s.momentum_buffer : nullptr;
  const int flags =
      (o.maximize ? 8 : 0) | (o.weight_decay != 0.0 ? 4 : 0) | (buf ? 2 : 0) | (o.nesterov ? 1 : 0);
  const auto scalars = sgdScalars(o);
  const Convert16 convert = convert16(s.dtype == DType::bf16);
  forChunks(s.numel, [&](int64_t b, int64_t e) {
    Widened<3> w({s.param, const_cast<void*>(s.grad), buf}, convert);
    for (int64_t i = b; i < e; i += w.kBlock) {
      const int64_t n = std::min(w.kBlock, e - i);
      w.widen(i, n);
      withFlags(flags, [&](auto f) {
        constexpr int F = decltype(f)::value;
        sgdLoop<float, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(w.at(0), w.at(1), w.at(2), 0,
                                                                               n, scalars);
      });
      w.narrow(i, n);
    }
  });
}

// ---- Adam / AdamW ------------------------------------------------------------------------------

// Mirrors the operation order and scalar casts of PyTorch 1.13's _single_tensor_adam /
// _single_tensor_adamw (non-capturable path). The options are template flags, so the loop has no
// branches and vectorizes (a run-time flag per element kept it scalar: 4x slower).
template <typename T, bool kMaximize, bool kL2, bool kDecay, bool kAmsgrad>
LOCKSTEP_VECTOR_CLONES_TEMPLATE void adamLoop(T* __restrict p, const T* __restrict g, T* __restrict m,
                                              T* __restrict v, T* __restrict vmax, int64_t begin, int64_t end,
                                              const std::array<double, kAdamScalars>& s) {
  const T b1 = static_cast<T>(s[0]), b2 = static_cast<T>(s[1]);
  const T one_b1 = static_cast<T>(s[2]), one_b2 = static_cast<T>(s[3]);
  const T wd = static_cast<T>(s[4]), decay = static_cast<T>(s[5]);
  const T bc2_sqrt = static_cast<T>(s[6]), eps = static_cast<T>(s[7]);
  const T neg_step = static_cast<T>(s[8]);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    T gi = kMaximize ? -g[i] : g[i];
    T pi = p[i];
    if constexpr (kDecay) pi = pi * decay;
    if constexpr (kL2) gi = gi + wd * pi;
    const T mi = m[i] * b1 + one_b1 * gi;
    const T vi = v[i] * b2 + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T vh = vi;
    if constexpr (kAmsgrad) {
      vh = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vh;
    }
    const T denom = std::sqrt(vh) / bc2_sqrt + eps;
    p[i] = pi + neg_step * (mi / denom);
  }
}

// ZeRO's host step in one pass over memory (DeepSpeedCPUAdam's adam_update_copy): a block of
// gradients scaled into scratch (g * float(grad_scale), what the clipping pass wrote before), the
// block stepped, and its parameters rounded into param_copy while they are in cache. Bitwise the
// separate passes' results.
void adamFusedF32(const AdamSpan& sp, const AdamParams& o, int flags) {
  constexpr int64_t kBlock = 2048;
  float* p = static_cast<float*>(sp.param);
  const float* g = static_cast<const float*>(sp.grad);
  float* m = static_cast<float*>(sp.exp_avg);
  float* v = static_cast<float*>(sp.exp_avg_sq);
  float* vmax = o.amsgrad ? static_cast<float*>(sp.max_exp_avg_sq) : nullptr;
  auto* copy = static_cast<uint16_t*>(sp.param_copy);
  const Convert16 convert = convert16(sp.copy_dtype == DType::bf16);
  const auto s = adamScalars(o);
  const float scale = static_cast<float>(o.grad_scale);
  const bool scaled = o.grad_scale != 1.0;
  forChunks(sp.numel, [&](int64_t b, int64_t e) {
    alignas(64) float scratch[kBlock];
    for (int64_t i = b; i < e; i += kBlock) {
      const int64_t n = std::min(kBlock, e - i);
      const float* gi = g + i;
      if (scaled) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) scratch[j] = gi[j] * scale;
        gi = scratch;
      }
      withFlags(flags, [&](auto f) {
        constexpr int F = decltype(f)::value;
        adamLoop<float, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(
            p + i, gi, m + i, v + i, vmax ? vmax + i : nullptr, 0, n, s);
      });
      if (copy) convert.narrow(p + i, copy + i, n);
    }
  });
}

template <typename T>
void adamCpu(const AdamSpan& sp, const AdamParams& o) {
  T* p = static_cast<T*>(sp.param);
  const T* g = static_cast<const T*>(sp.grad);
  T* m = static_cast<T*>(sp.exp_avg);
  T* v = static_cast<T*>(sp.exp_avg_sq);
  T* vmax = o.amsgrad ? static_cast<T*>(sp.max_exp_avg_sq) : nullptr;
  const auto s = adamScalars(o);
  const bool decoupled = o.decoupled_weight_decay;
  const bool l2 = !decoupled && o.weight_decay != 0.0, decay = decoupled && o.weight_decay != 0.0;
  const int flags = (o.maximize ? 8 : 0) | (l2 ? 4 : 0) | (decay ? 2 : 0) | (vmax ? 1 : 0);
  if constexpr (std::is_same_v<T, float>) {
    if (o.grad_scale != 1.0 || sp.param_copy) return adamFusedF32(sp, o, flags);
  }
  forChunks(sp.numel, [&](int64_t b, int64_t e) {
    withFlags(flags, [&](auto f) {
      constexpr int F = decltype(f)::value;
      adamLoop<T, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(p, g, m, v, vmax, b, e, s);
    });
  });
}

template <>
void adamCpu<uint16_t>(const AdamSpan& sp, const AdamParams& o) {
  const auto s = adamScalars(o);
  const bool decoupled = o.decoupled_weight_decay;
  const bool l2 = !decoupled && o.weight_decay != 0.0, decay = decoupled && o.weight_decay != 0.0;
  void* vmax = o.amsgrad ? sp.max_exp_avg_sq : nullptr;
  const int flags = (o.maximize ? 8 : 0) | (l2 ? 4 : 0) | (decay ? 2 : 0) | (vmax ? 1 : 0);
  const Convert16 convert = convert16(sp.dtype == DType::bf16);
  forChunks(sp.numel, [&](int64_t b, int64_t e) {
    // f32 states (DeepSpeedCPUAdam's fp32_optimizer_states) are stepped in place, never rounded.
    const bool f32_states = sp.state_dtype == DType::f32;
    Widened<5> w({sp.param, const_cast<void*>(sp.grad), sp.exp_avg, sp.exp_avg_sq, vmax}, convert,
                 f32_states ? 2 : 5);
    for (int64_t i = b; i < e; i += w.kBlock) {
      const int64_t n = std::min(w.kBlock, e - i);
      w.widen(i, n);
      withFlags(flags, [&](auto f) {
        constexpr int F = decltype(f)::value;
        adamLoop<float, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(w.at(0), w.at(1), w.at(2),
                                                                                w.at(3), w.at(4), 0, n, s);
      });
      w.narrow(i, n);
    }
  });
}

}  // namespace

namespace cpu {

namespace {

void sgdStep(const SgdSpan& span, const SgdParams& params) {
  withFloating(span.dtype, "sgdStep", [&](auto tag) { sgdCpu<decltype(tag)>(span, params); });
}

void adamStep(const AdamSpan& span, const AdamParams& params) {
  withFloating(span.dtype, "adamStep", [&](auto tag) { adamCpu<decltype(tag)>(span, params); });
}

}  // namespace

// oneDNN has no optimizer primitive: with LOCKSTEP_KERNELS=reference too, these loops run.
const OptimizerKernels kOptimizer{.sgdStep = &sgdStep, .adamStep = &adamStep};

}  // namespace cpu

}  // namespace lockstep::kernels
