#pragma once
// Adam and AdamW: torch.optim.Adam / AdamW's exact single-tensor update with bias correction.
//   Adam:  g += wd * p                 AdamW: p *= 1 - lr * wd
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//   v_hat = amsgrad ? (vmax = max(vmax, v)) : v
//   p -= lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
// Without bias correction (DeepSpeed FusedAdam's bias_correction=False) both corrections are 1:
//   p -= lr * m / (sqrt(v_hat) + eps)
// State: "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad only).
#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// Adam: L2 penalty added to the gradient. AdamW: decoupled decay (AdamW's default is 1e-2).
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
  /// Divide m and v by 1 - beta^t (torch's Adam always does; DeepSpeed's FusedAdam and
  /// DeepSpeedCPUAdam take bias_correction=False to skip it, as BERT's original optimizer did).
  bool bias_correction = true;
  /// bf16 and f16 parameters: keep exp_avg, exp_avg_sq (and max_exp_avg_sq) in f32 instead of the
  /// parameters' dtype (DeepSpeedCPUAdam's fp32_optimizer_states), stepped on the host only. No
  /// effect on f32 and f64 parameters.
  bool fp32_states = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Variable> params, const AdamOptions& options = {});
  void step() override;
  /// f32 host parameters in every group, no CUDA graph capture.
  bool stepsFused() const override;
  void stepFused(const FusedStepExtras& extras) override;
  std::vector<std::string> stateKeys(const HyperParams& options) const override;
  DType stateDType(const HyperParams& options, DType param) const override;

  static HyperParams toHyper(const AdamOptions& o);
  static AdamOptions fromHyper(const HyperParams& h);

 protected:
  Adam(std::string name, std::vector<Variable> params, const AdamOptions& options, bool decoupled);

 private:
  void stepWith(const FusedStepExtras* extras);
  bool decoupled_;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter); options.weight_decay defaults to 1e-2
/// when built from AdamWOptions.
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 1e-2; }
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Variable> params, const AdamWOptions& options = {});
};

}  // namespace lockstep::optim
