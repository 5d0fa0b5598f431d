#include "lockstep/optim/loss_scaler.h"

#include <cmath>

#include "lockstep/util/error.h"

namespace lockstep::optim {

void validateLossScalerOptions(const LossScalerOptions& o) {
  LOCKSTEP_ENFORCE(std::isfinite(o.loss_scale) && o.loss_scale >= 0.0, ValueError,
                   "loss_scale=", o.loss_scale,
                   " must be a finite number >= 0 (0: dynamic loss scaling, > 0: that static scale)");
  LOCKSTEP_ENFORCE(o.initial_scale_power >= -64 && o.initial_scale_power <= 64, ValueError,
                   "initial_scale_power=", o.initial_scale_power,
                   " must be in [-64, 64] (the scale starts at 2^power)");
  LOCKSTEP_ENFORCE(o.loss_scale_window >= 1, ValueError, "loss_scale_window=", o.loss_scale_window,
                   " must be at least 1 (clean steps before the scale grows)");
  LOCKSTEP_ENFORCE(o.hysteresis >= 1, ValueError, "hysteresis=", o.hysteresis,
                   " must be at least 1 (overflows before the scale shrinks; 1: at the first)");
  LOCKSTEP_ENFORCE(std::isfinite(o.min_loss_scale) && o.min_loss_scale > 0.0, ValueError,
                   "min_loss_scale=", o.min_loss_scale, " must be a finite number > 0");
  LOCKSTEP_ENFORCE(std::isfinite(o.scale_factor) && o.scale_factor > 1.0, ValueError,
                   "scale_factor=", o.scale_factor, " must be a finite number > 1");
  if (o.loss_scale == 0.0) {
    const double initial = std::ldexp(1.0, static_cast<int>(o.initial_scale_power));
    LOCKSTEP_ENFORCE(initial >= o.min_loss_scale, ValueError, "initial_scale_power=", o.initial_scale_power,
                     " gives an initial scale of ", initial, ", below min_loss_scale=", o.min_loss_scale,
                     "; raise initial_scale_power or lower min_loss_scale");
  }
}

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options), cur_hysteresis_(options.hysteresis) {
  validateLossScalerOptions(options_);
  cur_scale_ =
      dynamic() ? std::ldexp(1.0, static_cast<int>(options_.initial_scale_power)) : options_.loss_scale;
}

void LossScaler::update(bool overflow) {
  if (overflow) ++overflows_;
  if (!dynamic()) {
    // DeepSpeed's static LossScaler.update_scale does nothing; the iteration is counted here only
    // so that iteration() means the same for both kinds.
    ++cur_iter_;
    if (overflow) last_overflow_iter_ = cur_iter_ - 1;
    return;
  }
  // DynamicLossScaler.update_scale (FP16_Optimizer._update_scale with fp16_optimizer), line for line.
  const LossScalerOptions& o = options_;
  if (overflow) {
    if (o.fp16_optimizer) {
      cur_scale_ = std::max(cur_scale_ / o.scale_factor, o.min_loss_scale);
    } else if (o.hysteresis == 1 || cur_hysteresis_ == 1) {
      LOCKSTEP_ENFORCE(!(cur_scale_ == o.min_loss_scale && o.raise_error_at_min_scale), Error,
                       "loss scaling: the gradients overflowed at the minimum loss scale ", cur_scale_,
                       " (min_loss_scale), which cannot decrease any more; the run diverges. Lower "
                       "fp16.min_loss_scale or the learning rate");
      cur_scale_ = std::max(cur_scale_ / o.scale_factor, o.min_loss_scale);
    } else {
      --cur_hysteresis_;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (o.consecutive_hysteresis && !o.fp16_optimizer) cur_hysteresis_ = o.hysteresis;
    const int64_t stable = cur_iter_ - last_overflow_iter_ - 1;
    if (stable > 0 && stable % o.loss_scale_window == 0) {
      if (!o.consecutive_hysteresis && !o.fp16_optimizer) cur_hysteresis_ = o.hysteresis;
      cur_scale_ *= o.scale_factor;
    }
  }
  ++cur_iter_;
}

HyperParams LossScaler::stateDict() const {
  return {{"dynamic", dynamic()},
          {"cur_scale", cur_scale_},
          {"cur_iter", cur_iter_},
          {"last_overflow_iter", last_overflow_iter_},
          {"cur_hysteresis", cur_hysteresis_},
          {"overflows", overflows_}};
}

namespace {
const HyperValue& entry(const HyperParams& h, const char* key) {
  auto it = h.find(key);
  LOCKSTEP_ENFORCE(it != h.end(), ValueError, "LossScaler.loadStateDict: the state has no '", key, "'");
  return it->second;
}

int64_t integer(const HyperParams& h, const char* key) {
  const HyperValue& v = entry(h, key);
  LOCKSTEP_ENFORCE(std::holds_alternative<int64_t>(v), ValueError, "LossScaler.loadStateDict: '", key,
                   "' must be an integer");
  return std::get<int64_t>(v);
}
}  // namespace

void LossScaler::loadStateDict(const HyperParams& state) {
  const HyperValue& dyn = entry(state, "dynamic");
  LOCKSTEP_ENFORCE(std::holds_alternative<bool>(dyn), ValueError,
                   "LossScaler.loadStateDict: 'dynamic' must be a bool");
  LOCKSTEP_ENFORCE(std::get<bool>(dyn) == dynamic(), ValueError,
                   "LossScaler.loadStateDict: the state is of a ", std::get<bool>(dyn) ? "dynamic" : "static",
                   " loss scaler but this one is ",
                   dynamic() ? "dynamic (loss_scale=0)" : "static (loss_scale>0)");
  const double scale = std::visit([](auto v) { return static_cast<double>(v); }, entry(state, "cur_scale"));
  const int64_t iter = integer(state, "cur_iter");
  const int64_t last = integer(state, "last_overflow_iter");
  const int64_t hyst = integer(state, "cur_hysteresis");
  const int64_t overflows = integer(state, "overflows");
  LOCKSTEP_ENFORCE(std::isfinite(scale) && scale > 0.0, ValueError,
                   "LossScaler.loadStateDict: cur_scale=", scale, " must be a finite number > 0");
  LOCKSTEP_ENFORCE(dynamic() || scale == options_.loss_scale, ValueError,
                   "LossScaler.loadStateDict: cur_scale=", scale,
                   " differs from this static scaler's loss_scale=", options_.loss_scale);
  LOCKSTEP_ENFORCE(iter >= 0, ValueError, "LossScaler.loadStateDict: cur_iter=", iter, " must be >= 0");
  LOCKSTEP_ENFORCE(last == -1 || (last >= 0 && last < iter), ValueError,
                   "LossScaler.loadStateDict: last_overflow_iter=", last,
                   " must be -1 or in [0, cur_iter=", iter, ")");
  LOCKSTEP_ENFORCE(hyst >= 1 && hyst <= options_.hysteresis, ValueError,
                   "LossScaler.loadStateDict: cur_hysteresis=", hyst,
                   " must be in [1, hysteresis=", options_.hysteresis, "]");
  LOCKSTEP_ENFORCE(overflows >= 0 && overflows <= iter, ValueError,
                   "LossScaler.loadStateDict: overflows=", overflows, " must be in [0, cur_iter=", iter, "]");
  cur_scale_ = scale;
  cur_iter_ = iter;
  last_overflow_iter_ = last;
  cur_hysteresis_ = hyst;
  overflows_ = overflows;
}

}  // namespace lockstep::optim
