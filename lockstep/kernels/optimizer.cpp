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

#include "lockstep/kernels/cuda/optimizer.h"
#include "lockstep/kernels/cuda/words.h"
#include "lockstep/kernels/dispatch.h"
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

// fn(T{}) for the span's element type; NotSupportedError for anything but f32/f64.
template <typename Fn>
void withFloating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f64:
      fn(double{});
      return;
    default:
      throw NotSupportedError(std::string(op) + ": supports f32 and f64 buffers, got " + dtypeName(dtype));
  }
}

void checkSpan(const char* op, const void* param, const void* grad, int64_t numel, DType dtype) {
  LOCKSTEP_ENFORCE(numel >= 0, ValueError, op, ": negative element count ", numel);
  LOCKSTEP_ENFORCE(dtype == DType::f32 || dtype == DType::f64, NotSupportedError, op,
                   ": supports f32 and f64 buffers, got ", dtypeName(dtype));
  LOCKSTEP_ENFORCE(numel == 0 || (param && grad), ValueError, op, ": null parameter or gradient buffer for ",
                   numel, " elements");
}

// ---- SGD ---------------------------------------------------------------------------------------

// The casts of the scalars to T and the order of operations mirror PyTorch's _single_tensor_sgd,
// so f32 results agree with torch to rounding and f64 ones to ~1e-16. The options are template
// flags, so the loop has no branches and vectorizes.
template <typename T, bool kMaximize, bool kWd, bool kMomentum, bool kNesterov>
void sgdLoop(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t begin, int64_t end,
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

// ---- Adam / AdamW ------------------------------------------------------------------------------

// Mirrors the operation order and scalar casts of PyTorch 1.13's _single_tensor_adam /
// _single_tensor_adamw (non-capturable path). The options are template flags, so the loop has no
// branches and vectorizes (a run-time flag per element kept it scalar: 4x slower).
template <typename T, bool kMaximize, bool kL2, bool kDecay, bool kAmsgrad>
void adamLoop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
              int64_t begin, int64_t end, const std::array<double, kAdamScalars>& s) {
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
  forChunks(sp.numel, [&](int64_t b, int64_t e) {
    withFlags(flags, [&](auto f) {
      constexpr int F = decltype(f)::value;
      adamLoop<T, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(p, g, m, v, vmax, b, e, s);
    });
  });
}

void checkSgd(const SgdSpan& span, const SgdParams& params) {
  checkSpan("sgdStep", span.param, span.grad, span.numel, span.dtype);
  LOCKSTEP_ENFORCE(span.numel == 0 || params.momentum == 0.0 || span.momentum_buffer, ValueError,
                   "sgdStep: momentum ", params.momentum, " needs a momentum buffer, got null");
}

void checkAdam(const AdamSpan& span, const AdamParams& params) {
  checkSpan("adamStep", span.param, span.grad, span.numel, span.dtype);
  LOCKSTEP_ENFORCE(params.step >= 1, ValueError,
                   "adamStep: step must be >= 1 (the update's 1-based count), got ", params.step);
  LOCKSTEP_ENFORCE(span.numel == 0 || (span.exp_avg && span.exp_avg_sq), ValueError,
                   "adamStep: null exp_avg or exp_avg_sq buffer for ", span.numel, " elements");
  LOCKSTEP_ENFORCE(span.numel == 0 || !params.amsgrad || span.max_exp_avg_sq, ValueError,
                   "adamStep: amsgrad needs a max_exp_avg_sq buffer, got null");
}

// The GPU every span lives on, or the host when they are on the host or on several devices.
template <typename Span>
Device oneGpu(std::span<const Span> spans) {
  if (spans.empty() || !spans[0].device.isCuda()) return Device::cpu();
  for (const Span& s : spans) {
    if (s.device != spans[0].device) return Device::cpu();
  }
  return spans[0].device;
}

}  // namespace

std::array<double, kSgdScalars> sgdScalars(const SgdParams& o) {
  return {o.weight_decay, o.momentum, 1.0 - o.dampening, -o.lr, o.first_step ? 1.0 : 0.0};
}

std::array<double, kAdamScalars> adamScalars(const AdamParams& o) {
  const double t = static_cast<double>(o.step);
  const double step_size = o.lr / (1.0 - std::pow(o.beta1, t));
  return {o.beta1,
          o.beta2,
          1.0 - o.beta1,
          1.0 - o.beta2,
          o.weight_decay,
          1.0 - o.lr * o.weight_decay,
          std::sqrt(1.0 - std::pow(o.beta2, t)),
          o.eps,
          -step_size};
}

void writeScalars(const Tensor& dst, std::span<const double> values) {
  LOCKSTEP_ENFORCE(
      dst.dtype() == DType::f64 && dst.isDense() && dst.numel() >= static_cast<int64_t>(values.size()),
      ValueError, "writeScalars: needs a dense f64 tensor of at least ", values.size(), " elements, got ",
      dst.describe());
  if (values.empty()) return;
#if LOCKSTEP_WITH_CUDA
  if (dst.isCuda()) {
    // As 64-bit words (bit_cast): the device stores the host's doubles bit for bit.
    std::vector<uint64_t> words(values.size());
    std::transform(values.begin(), values.end(), words.begin(),
                   [](double v) { return std::bit_cast<uint64_t>(v); });
    cuda::writeWords(static_cast<uint64_t*>(dst.devicePtr()), words, dst.device());
    return;
  }
#endif
  std::copy(values.begin(), values.end(), static_cast<double*>(dst.dataPtr()));
}

void sgdStep(const SgdSpan& span, const SgdParams& params) {
  checkSgd(span, params);
  if (span.numel == 0) return;
  LOCKSTEP_ON_CUDA(span.device, cuda::sgdStep(span, params));
  // oneDNN has no optimizer primitive: both CPU backends run lockstep's loops (GPU spans went to
  // kernels/cuda/ above; the switch has no default, so a new Backend must say what it does).
  switch (backendFor(span.dtype)) {
    case Backend::onednn:
    case Backend::reference:
      withFloating(span.dtype, "sgdStep", [&](auto tag) { sgdCpu<decltype(tag)>(span, params); });
      return;
  }
}

void adamStep(const AdamSpan& span, const AdamParams& params) {
  checkAdam(span, params);
  if (span.numel == 0) return;
  LOCKSTEP_ON_CUDA(span.device, cuda::adamStep(span, params));
  switch (backendFor(span.dtype)) {
    case Backend::onednn:
    case Backend::reference:
      withFloating(span.dtype, "adamStep", [&](auto tag) { adamCpu<decltype(tag)>(span, params); });
      return;
  }
}

void sgdStepMany(std::span<const SgdSpan> spans, const SgdParams& params) {
  for (const SgdSpan& s : spans) checkSgd(s, params);
  LOCKSTEP_ON_CUDA(oneGpu(spans), cuda::sgdStepMany(spans, params));
  for (const SgdSpan& s : spans) sgdStep(s, params);
}

void adamStepMany(std::span<const AdamSpan> spans, const AdamParams& params) {
  for (const AdamSpan& s : spans) checkAdam(s, params);
  LOCKSTEP_ON_CUDA(oneGpu(spans), cuda::adamStepMany(spans, params));
  for (const AdamSpan& s : spans) adamStep(s, params);
}

}  // namespace lockstep::kernels
