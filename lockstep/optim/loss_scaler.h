#pragma once
// Loss scaling: DeepSpeed's DynamicLossScaler and static LossScaler (torch.cuda.amp.GradScaler's
// role), as a state machine the training engine drives once per optimizer step.
//
// The semantics follow DeepSpeed exactly, from microsoft/DeepSpeed at commit
// 38327e07f6cd39b63418f60cedd1651b0be3e7c3 (2025-02-21):
//   deepspeed/runtime/fp16/loss_scaler.py   DynamicLossScaler.update_scale, LossScaler,
//                                           CreateLossScaler
//   deepspeed/runtime/constants.py          the "fp16" keys and their defaults (FP16_*)
//   deepspeed/runtime/config.py             get_loss_scale, get_initial_dynamic_scale,
//                                           get_dynamic_loss_scale_args (scale = 2**power)
// These are the scaler of DeepSpeed's ZeRO optimizers and FP16_UnfusedOptimizer. (Its fused
// FP16_Optimizer has its own _update_scale without hysteresis; lockstep follows
// DynamicLossScaler.) Two deliberate differences, both about bad input rather than behaviour:
// options DeepSpeed would accept and then misbehave on (a window of 0 divides by zero, a
// hysteresis of 0 never halves, an initial scale below min_loss_scale) are a ValueError here; and
// when "fp16" is given without any dynamic key DeepSpeed falls back to DynamicLossScaler's own
// defaults (2^32, hysteresis 1), while LossScalerOptions has one set of defaults, the config keys'.
#include <cstdint>

#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

/// DeepSpeed's "fp16" section keys and defaults (constants.py FP16_*).
struct LossScalerOptions {
  /// 0: dynamic scaling; > 0: this static scale, never changed.
  double loss_scale = 0.0;
  /// The dynamic scaler starts at 2^initial_scale_power. Integer in [-64, 64].
  int64_t initial_scale_power = 16;
  /// Clean (overflow-free) steps after which the dynamic scale is multiplied by scale_factor; >= 1.
  int64_t loss_scale_window = 1000;
  /// Overflows tolerated before the scale is divided (DeepSpeed's delayed_shift); >= 1.
  int64_t hysteresis = 2;
  /// Refill the hysteresis after every clean step (true) or only when the scale grows (false).
  bool consecutive_hysteresis = false;
  /// The dynamic scale never goes below this; > 0.
  double min_loss_scale = 1.0;
  /// Divisor on overflow and multiplier after loss_scale_window clean steps (DeepSpeed: 2, not a
  /// config key). > 1.
  double scale_factor = 2.0;
  /// An overflow that would need the scale below min_loss_scale when it already is there throws
  /// (DeepSpeed: "Current loss scale already at minimum"); false keeps it at the minimum.
  bool raise_error_at_min_scale = true;
};

/// ValueError naming the key when an option is out of range. Pure.
void validateLossScalerOptions(const LossScalerOptions& options);

class LossScaler {
 public:
  /// Validates options (validateLossScalerOptions).
  explicit LossScaler(const LossScalerOptions& options);

  const LossScalerOptions& options() const { return options_; }
  /// Whether the scale adapts (options.loss_scale == 0).
  bool dynamic() const { return options_.loss_scale == 0.0; }
  /// The current scale: what the loss is multiplied by before backward.
  double scale() const { return cur_scale_; }

  /// After each optimizer step's overflow check (the flag every rank agreed on), DeepSpeed's
  /// update_scale. Dynamic: on overflow, if hysteresis == 1 or the remaining hysteresis is 1 the
  /// scale becomes max(scale / scale_factor, min_loss_scale) (or Error when it already is
  /// min_loss_scale and raise_error_at_min_scale), else the remaining hysteresis drops by one; the
  /// step is remembered as the last overflow. Without overflow, consecutive_hysteresis refills the
  /// hysteresis; when (iteration - last overflow iteration) % loss_scale_window == 0 the scale is
  /// multiplied by scale_factor (and the hysteresis refilled when not consecutive). The iteration
  /// count then advances. Static: only the counters change.
  void update(bool overflow);

  /// update() calls so far (DeepSpeed's cur_iter).
  int64_t iteration() const { return cur_iter_; }
  /// The iteration of the last overflow; -1 before any (DeepSpeed's last_overflow_iter).
  int64_t lastOverflowIteration() const { return last_overflow_iter_; }
  /// Overflows still tolerated before the next division (DeepSpeed's cur_hysteresis).
  int64_t remainingHysteresis() const { return cur_hysteresis_; }
  /// update(true) calls so far: the optimizer steps skipped for an overflow.
  int64_t overflows() const { return overflows_; }

  /// {"dynamic", "cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis", "overflows"}:
  /// everything update() reads, so that a restored scaler continues bitwise.
  HyperParams stateDict() const;
  /// Restores a stateDict(); ValueError naming the key when one is missing or out of range, or
  /// when the state is of a dynamic scaler and this one is static (or the reverse).
  void loadStateDict(const HyperParams& state);

 private:
  LossScalerOptions options_;
  double cur_scale_;
  int64_t cur_iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  int64_t cur_hysteresis_;
  int64_t overflows_ = 0;
};

}  // namespace lockstep::optim
