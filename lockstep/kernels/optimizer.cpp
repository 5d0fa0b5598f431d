#include "lockstep/kernels/optimizer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "lockstep/kernels/cuda/words.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/optimizer.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

namespace {

// The kernels step f32 and f64 spans as they are, bf16 and f16 ones in f32 arithmetic.
const Backends<OptimizerKernels> kBackends{.cpu = &cpu::kOptimizer,
                                           .cuda = LOCKSTEP_CUDA_TABLE(cuda::kOptimizer)};

void checkSpan(const char* op, const void* param, const void* grad, int64_t numel, DType dtype) {
  LOCKSTEP_ENFORCE(numel >= 0, ValueError, op, ": negative element count ", numel);
  LOCKSTEP_ENFORCE(isFloating(dtype), NotSupportedError, op,
                   ": supports f32, f64, bf16 and f16 buffers, got ", dtypeName(dtype));
  LOCKSTEP_ENFORCE(numel == 0 || (param && grad), ValueError, op, ": null parameter or gradient buffer for ",
                   numel, " elements");
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
  if (params.grad_scale != 1.0 || span.param_copy) {
    LOCKSTEP_ENFORCE(
        span.dtype == DType::f32 && !span.device.isCuda(), NotSupportedError,
        "adamStep: a grad_scale or a parameter copy is for f32 host spans (ZeRO's host step), got ",
        dtypeName(span.dtype), " on ", deviceName(span.device));
    LOCKSTEP_ENFORCE(!span.param_copy || span.copy_dtype == DType::bf16 || span.copy_dtype == DType::f16,
                     ValueError, "adamStep: a parameter copy is bf16 or f16, got ",
                     dtypeName(span.copy_dtype));
  }
  if (span.state_dtype && *span.state_dtype != span.dtype) {
    LOCKSTEP_ENFORCE(
        *span.state_dtype == DType::f32 && (span.dtype == DType::bf16 || span.dtype == DType::f16),
        NotSupportedError, "adamStep: states of dtype ", dtypeName(*span.state_dtype), " beside ",
        dtypeName(span.dtype),
        " parameters; the states take the parameters' dtype, or f32 beside bf16 or f16");
    LOCKSTEP_ENFORCE(
        !span.device.isCuda(), NotSupportedError,
        "adamStep: f32 states beside 16-bit parameters are stepped on the host only (ZeRO-Offload's "
        "CPU Adam), got ",
        deviceName(span.device));
  }
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
  const double step_size = o.bias_correction ? o.lr / (1.0 - std::pow(o.beta1, t)) : o.lr;
  return {o.beta1,
          o.beta2,
          1.0 - o.beta1,
          1.0 - o.beta2,
          o.weight_decay,
          1.0 - o.lr * o.weight_decay,
          o.bias_correction ? std::sqrt(1.0 - std::pow(o.beta2, t)) : 1.0,
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
  dispatchAsIs<&OptimizerKernels::sgdStep>(kBackends, {span.device, span.dtype}, span, params);
}

void adamStep(const AdamSpan& span, const AdamParams& params) {
  checkAdam(span, params);
  if (span.numel == 0) return;
  dispatchAsIs<&OptimizerKernels::adamStep>(kBackends, {span.device, span.dtype}, span, params);
}

// Spans on one GPU take its fused multi-span kernel; host spans, or spans on several devices, step
// one by one, each on its own device.
void sgdStepMany(std::span<const SgdSpan> spans, const SgdParams& params) {
  for (const SgdSpan& s : spans) checkSgd(s, params);
  if (const Device gpu = oneGpu(spans); gpu.isCuda()) {
    return dispatchAsIs<&OptimizerKernels::sgdStepMany>(kBackends, {gpu, spans[0].dtype}, spans, params);
  }
  for (const SgdSpan& s : spans) sgdStep(s, params);
}

void adamStepMany(std::span<const AdamSpan> spans, const AdamParams& params) {
  for (const AdamSpan& s : spans) checkAdam(s, params);
  if (const Device gpu = oneGpu(spans); gpu.isCuda()) {
    return dispatchAsIs<&OptimizerKernels::adamStepMany>(kBackends, {gpu, spans[0].dtype}, spans, params);
  }
  for (const AdamSpan& s : spans) adamStep(s, params);
}

}  // namespace lockstep::kernels
