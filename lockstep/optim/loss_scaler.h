#pragma once
// Loss scaling: DeepSpeed's DynamicLossScaler and static LossScaler (torch.cuda.amp.GradScaler's
// role), as a state machine the training engine drives once per optimizer step.
//
// The semantics follow DeepSpeed 0.19 (the PyPI release of late 2026) exactly:
//   deepspeed/runtime/fp16/loss_scaler.py   DynamicLossScaler.update_scale (ZeRO stages 1-3),
//                                           LossScaler, CreateLossScaler
//   deepspeed/runtime/fp16/fused_optimizer.py, unfused_optimizer.py
//                                           FP16_Optimizer._update_scale (ZeRO stage 0: no
//                                           hysteresis, every overflow divides, never an error)
//   deepspeed/runtime/precision_config.py   the "fp16" keys and their defaults
// Both grow the scale after loss_scale_window clean steps counted from the step after the last
// overflow (stable_interval = cur_iter - last_overflow_iter - 1 > 0 and a multiple of the window;
// DeepSpeed before 2025 counted one step fewer). One deliberate difference, about bad input
// rather than behaviour: options DeepSpeed would accept and then misbehave on (a hysteresis of 0
// never halves, an initial scale below min_loss_scale) are a ValueError here.
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
  /// DynamicLossScaler's argument, not a config key (DeepSpeed's config refuses it).
  bool raise_error_at_min_scale = true;
  /// DeepSpeed's FP16_Optimizer (what its engine scales with at ZeRO stage 0) instead of
  /// DynamicLossScaler (ZeRO stages 1-3): every overflow divides the scale (hysteresis and
  /// consecutive_hysteresis play no part) down to min_loss_scale, and an overflow there is no
  /// error. The engine sets it from its ZeRO stage.
  bool fp16_optimizer = false;
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
  /// update_scale. Dynamic: on overflow, if hysteresis == 1 or the remaining hysteresis is 1 (or
  /// always, with fp16_optimizer) the scale becomes max(scale / scale_factor, min_loss_scale) (or
  /// Error when it already is min_loss_scale and raise_error_at_min_scale, without
  /// fp16_optimizer), else the remaining hysteresis drops by one; the step is remembered as the
  /// last overflow. Without overflow, consecutive_hysteresis refills the hysteresis; when
  /// s = iteration - last overflow iteration - 1 is positive and a multiple of loss_scale_window,
  /// the scale is multiplied by scale_factor (and the hysteresis refilled when not consecutive).
  /// The iteration count then advances. Static: only the counters change.
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
