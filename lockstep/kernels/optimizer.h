#pragma once
// Optimizer updates over flat spans: element i of every buffer in a span belongs to the same
// parameter element, and a span may cover a whole parameter or any sub-range of one (a ZeRO shard
// of a bucket), so stepping a parameter in pieces gives bitwise the result of stepping it whole.
// The updates are torch.optim's single-tensor ones, with PyTorch's operation order and scalar casts
// (see optimizer.cpp). Both CPU backends run the same loops (oneDNN has no optimizer primitive);
// spans whose buffers are GPU memory (device cuda:N) run lockstep's CUDA kernels (kernels/cuda/
// optimizer.cu), queued on that device's current stream, with the same operation order and no
// fused multiply-adds, so GPU and CPU agree to the last bit. bf16 and f16 spans (every buffer of
// the span in that dtype: torch's states of 16-bit parameters) are updated in f32 arithmetic, each
// element widened and the results rounded back to nearest even: the f32 update of the widened
// values, as torch's fused optimizers and DeepSpeed's FusedAdam compute it.
//
// Thread-safety: a call may use the intra-op OpenMP threads; concurrent calls must not share
// buffers. Not collective.
#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "lockstep/tensor/device.h"
#include "lockstep/tensor/tensor.h"
#include "lockstep/util/dtype.h"

namespace lockstep::kernels {

/// torch.optim.SGD's hyper-parameters for one update.
struct SgdParams {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
  /// The momentum buffer holds nothing yet (torch: momentum_buffer is None): it becomes the
  /// gradient instead of being blended into. Ignored when momentum is 0.
  bool first_step = false;
  /// GPU spans only: device memory holding sgdScalars() of the step the kernels run (written by
  /// writeScalars), read when the kernels run instead of the values above; null: the values above.
  /// A CUDA graph's captured update reads each replay's own scalars so (optim::Optimizer's capture).
  /// The flags (maximize, nesterov, whether weight_decay and momentum are 0) still come from here.
  const double* device_scalars = nullptr;
};

/// What an SGD update reads besides its flags, in double, in this order: weight_decay, momentum,
/// 1 - dampening, -lr, first_step (1 or 0). The CPU loops and the GPU kernels cast each to the
/// element type, so both compute with the same numbers.
constexpr int kSgdScalars = 5;
std::array<double, kSgdScalars> sgdScalars(const SgdParams& params);

/// One SGD span: `numel` elements of `dtype` (f32, f64, bf16 or f16) in each buffer.
struct SgdSpan {
  void* param = nullptr;
  const void* grad = nullptr;
  /// Read and written when momentum != 0 (ValueError when null then); unused otherwise.
  void* momentum_buffer = nullptr;
  int64_t numel = 0;
  DType dtype = DType::f32;
  /// Where the buffers live: the host, or one GPU (then every pointer is that GPU's memory).
  Device device = Device::cpu();
};

/// One SGD update of the span: d = g + wd * p; buf = first ? d : momentum * buf + (1 - dampening)
/// * d; d = nesterov ? d + momentum * buf : buf; p -= lr * d (g negated first when maximize).
/// ValueError for a null buffer the options need, a negative numel; NotSupportedError for a dtype
/// that is not floating.
void sgdStep(const SgdSpan& span, const SgdParams& params);

/// torch.optim.Adam / AdamW's hyper-parameters for one update.
struct AdamParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// AdamW: p *= 1 - lr * weight_decay. Adam (false): weight_decay * p is added to the gradient.
  bool decoupled_weight_decay = false;
  bool amsgrad = false;
  bool maximize = false;
  /// Divide m by 1 - beta1^step and v by 1 - beta2^step (false: DeepSpeed FusedAdam's
  /// bias_correction=False, both taken as 1).
  bool bias_correction = true;
  /// This update's 1-based count, for the bias corrections 1 - beta^step.
  int64_t step = 1;
  /// Each gradient element is multiplied by float(grad_scale) as it is read, the gradient itself left
  /// as it is (torch's fused Adam's grad_scale; ZeRO's clipping coefficient folded into the step):
  /// bitwise the update of gradients scaled first by kernels::scaleAndCheckNonFinite. f32 host
  /// spans only when not 1 (NotSupportedError otherwise).
  double grad_scale = 1.0;
  /// GPU spans only: device memory holding adamScalars() of the step the kernels run, read instead
  /// of the values above (as SgdParams::device_scalars). The flags (maximize, amsgrad, decoupled,
  /// whether weight_decay is 0) still come from here.
  const double* device_scalars = nullptr;
};

/// What an Adam update reads besides its flags, in double, in this order: beta1, beta2, 1 - beta1,
/// 1 - beta2, weight_decay, 1 - lr * weight_decay, sqrt(1 - beta2^step), eps,
/// -lr / (1 - beta1^step) (without bias correction: 1 and -lr). The bias corrections are computed here, on
/// the host, for the CPU loops and the GPU kernels alike (std::pow's last bit is the host's, not the
/// device's).
constexpr int kAdamScalars = 9;
std::array<double, kAdamScalars> adamScalars(const AdamParams& params);

/// One Adam span: `numel` elements of `dtype` (f32, f64, bf16 or f16) in each buffer.
struct AdamSpan {
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  /// Read and written when amsgrad (ValueError when null then); unused otherwise.
  void* max_exp_avg_sq = nullptr;
  int64_t numel = 0;
  DType dtype = DType::f32;
  /// Where the buffers live: the host, or one GPU (then every pointer is that GPU's memory).
  Device device = Device::cpu();
  /// The dtype of exp_avg, exp_avg_sq and max_exp_avg_sq. Unset: `dtype`. f32 beside bf16 or f16
  /// parameter and gradient (DeepSpeedCPUAdam's fp32_optimizer_states), on the host only: the states
  /// then keep their f32 values, unrounded (NotSupportedError for other pairs or a GPU).
  std::optional<DType> state_dtype = std::nullopt;
  /// f32 host spans only: `numel` elements of copy_dtype (bf16 or f16) written with the updated
  /// parameter, rounded, in the same pass (DeepSpeedCPUAdam's adam_update_copy: ZeRO's f32 master
  /// weights into their 16-bit parameters), the same values a separate conversion writes.
  void* param_copy = nullptr;
  DType copy_dtype = DType::bf16;
};

/// One Adam/AdamW update of the span (torch's, with bias correction):
///   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g;
///   v_hat = amsgrad ? (vmax = max(vmax, v)) : v;
///   p -= lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
/// ValueError for a null buffer, a negative numel or step < 1; NotSupportedError for a dtype that
/// is not floating.
void adamStep(const AdamSpan& span, const AdamParams& params);

/// The same update of many spans (every parameter of a group; torch's foreach / fused
/// implementations): when every span lives on one GPU, a few launches for all of them (each
/// launch steps up to dozens of spans); otherwise sgdStep / adamStep span by span. The results
/// are those of the single-span calls. Errors as those calls, checked for every span before any
/// is stepped.
void sgdStepMany(std::span<const SgdSpan> spans, const SgdParams& params);
void adamStepMany(std::span<const AdamSpan> spans, const AdamParams& params);

/// Writes `values` into dst (f64, dense, at least values.size() elements): on a GPU by a kernel
/// queued on the device's current stream that carries the values in its parameters, so `values`
/// may be reused at once and the write is ordered before later work on that stream (never
/// captured by a CUDA graph being captured: call it outside capture). On the host, a copy.
/// ValueError for a dst of another dtype, a non-dense dst or one too small.
void writeScalars(const Tensor& dst, std::span<const double> values);

}  // namespace lockstep::kernels
